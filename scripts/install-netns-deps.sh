#!/usr/bin/env bash
# Makes sure iproute2's ip is installed: bus's network-namespace cluster test
# (TROUPE_NETNS=1, `make test-netns`) builds its hosts from `ip netns`, veth
# pairs and a bridge.
#
# Idempotent: exits 0 at once when `ip netns list` runs. Otherwise installs
# Debian's iproute2 with apt-get (noninteractive, without recommends; through
# sudo when not root), running `apt-get update` once if the first install
# attempt fails (stale or empty package lists).
#
# Exit codes: 0 ok (already present or installed); 2 apt-get is missing or
# root rights are unavailable; 3 the install failed.
set -uo pipefail

say() { echo "install-netns-deps: $*" >&2; }

have() { command -v ip >/dev/null 2>&1 && ip netns list >/dev/null 2>&1; }

if have; then
	say "ok: $(ip -V 2>&1) already installed"
	exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
	say "iproute2's ip is missing and apt-get too: install iproute2 by hand"
	exit 2
fi
SUDO=()
if [ "$(id -u)" -ne 0 ]; then
	if ! command -v sudo >/dev/null 2>&1; then
		say "iproute2's ip is missing; installing needs root and sudo is missing"
		exit 2
	fi
	SUDO=(sudo -n)
fi
export DEBIAN_FRONTEND=noninteractive
install() { "${SUDO[@]}" apt-get install -y -qq --no-install-recommends iproute2; }
if ! install; then
	say "first install attempt failed; running apt-get update and retrying"
	"${SUDO[@]}" apt-get update -qq && install || { say "apt-get install iproute2 failed"; exit 3; }
fi
if ! have; then
	say "iproute2 installed but 'ip netns' still does not work"
	exit 3
fi
say "ok: installed $(ip -V 2>&1)"
