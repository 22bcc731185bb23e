#!/usr/bin/env bash
# Makes sure Debian's Chromium and a font are installed: the dashboard's
# browser test (`make test-browser`, TROUPE_BROWSER=1) drives Chromium
# headless through the DevTools protocol, and its screenshot needs a font to
# draw text with.
#
# Idempotent: exits 0 at once when `chromium --version` runs and fontconfig
# lists a font; otherwise installs Debian's chromium, fonts-dejavu-core and
# fontconfig (scripts/lib/apt.sh).
#
# Exit codes: 0 ok (already present or installed); 2 apt-get is missing or
# root rights are unavailable; 3 the install failed.
set -uo pipefail
. "$(dirname "$0")/lib/apt.sh"

say() { echo "install-browser-deps: $*" >&2; }

have() {
	command -v chromium >/dev/null 2>&1 && chromium --version >/dev/null 2>&1 &&
		command -v fc-list >/dev/null 2>&1 && [ -n "$(fc-list 2>/dev/null | head -n 1)" ]
}

if have; then
	say "ok: $(chromium --version 2>/dev/null) already installed"
	exit 0
fi
apt_install chromium fonts-dejavu-core fontconfig || exit $?
if ! have; then
	say "chromium installed but 'chromium --version' or fc-list still fails"
	exit 3
fi
say "ok: installed $(chromium --version 2>/dev/null)"
