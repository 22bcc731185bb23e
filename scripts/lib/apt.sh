# Sourced by the install-*-deps scripts: apt_install installs Debian
# packages with apt-get (noninteractive, without recommends; through sudo
# when not root), running `apt-get update` once if the first attempt fails
# (stale or empty package lists). It returns 2 when apt-get or root rights
# are missing and 3 when the install fails, saying why on stderr through
# the caller's say function.
apt_install() {
	if ! command -v apt-get >/dev/null 2>&1; then
		say "apt-get is missing: install $* by hand"
		return 2
	fi
	local sudo=()
	if [ "$(id -u)" -ne 0 ]; then
		if ! command -v sudo >/dev/null 2>&1; then
			say "installing $* needs root and sudo is missing"
			return 2
		fi
		sudo=(sudo -n)
	fi
	export DEBIAN_FRONTEND=noninteractive
	if "${sudo[@]}" apt-get install -y -qq --no-install-recommends "$@"; then
		return 0
	fi
	say "install failed; running apt-get update once and retrying"
	if ! "${sudo[@]}" apt-get update -qq; then
		say "apt-get update failed (no network or no package mirror?)"
		return 3
	fi
	if ! "${sudo[@]}" apt-get install -y -qq --no-install-recommends "$@"; then
		say "apt-get install $* failed after apt-get update"
		return 3
	fi
}
