#!/usr/bin/env bash
# Makes sure Debian's Chromium and a font are installed: the dashboard's
# browser test (`make test-browser`, TROUPE_BROWSER=1) drives Chromium
# headless through the DevTools protocol, and its screenshot needs a font to
# draw text with.
#
# Idempotent: exits 0 at once when `chromium --version` runs and fontconfig
# lists a font. Otherwise installs Debian's chromium, fonts-dejavu-core and
# fontconfig packages with apt-get from this machine's configured sources
# (noninteractive, without recommends; through sudo when not root), running
# `apt-get update` once if the first install attempt fails (stale or empty
# package lists).
#
# Exit codes: 0 ok (already present or installed); 2 apt-get is missing or
# root rights are unavailable; 3 the install failed.
set -uo pipefail

say() { echo "install-browser-deps: $*" >&2; }

have() {
	command -v chromium >/dev/null 2>&1 && chromium --version >/dev/null 2>&1 &&
		command -v fc-list >/dev/null 2>&1 && [ -n "$(fc-list 2>/dev/null | head -n 1)" ]
}

if have; then
	say "ok: $(chromium --version 2>/dev/null) already installed"
	exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
	say "chromium is missing and apt-get too: install Chromium by hand"
	exit 2
fi
SUDO=()
if [ "$(id -u)" -ne 0 ]; then
	if ! command -v sudo >/dev/null 2>&1; then
		say "chromium is missing; installing needs root and sudo is missing"
		exit 2
	fi
	SUDO=(sudo -n)
fi
export DEBIAN_FRONTEND=noninteractive
install() { "${SUDO[@]}" apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core fontconfig; }
if ! install; then
	say "first install attempt failed; running apt-get update and retrying"
	"${SUDO[@]}" apt-get update -qq && install || { say "apt-get install chromium fonts-dejavu-core failed"; exit 3; }
fi
if ! have; then
	say "chromium installed but 'chromium --version' or fc-list still fails"
	exit 3
fi
say "ok: installed $(chromium --version 2>/dev/null)"
