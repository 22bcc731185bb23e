#!/usr/bin/env bash
# Makes sure iproute2's ip is installed: bus's network-namespace cluster test
# (TROUPE_NETNS=1, `make test-netns`) builds its hosts from `ip netns`, veth
# pairs and a bridge.
#
# Idempotent: exits 0 at once when `ip netns list` runs; otherwise installs
# Debian's iproute2 (scripts/lib/apt.sh).
#
# Exit codes: 0 ok (already present or installed); 2 apt-get is missing or
# root rights are unavailable; 3 the install failed.
set -uo pipefail
. "$(dirname "$0")/lib/apt.sh"

say() { echo "install-netns-deps: $*" >&2; }

have() { command -v ip >/dev/null 2>&1 && ip netns list >/dev/null 2>&1; }

if have; then
	say "ok: $(ip -V 2>&1) already installed"
	exit 0
fi
apt_install iproute2 || exit $?
if ! have; then
	say "iproute2 installed but 'ip netns' still does not work"
	exit 3
fi
say "ok: installed $(ip -V 2>&1)"
