#!/usr/bin/env bash
# fetch-data.sh — fetch the real data of examples/finance-risk into data/ at
# the repository root (gitignored). Pinned versions, sha256-verified,
# idempotent: files already present with the right checksum are kept, and
# nothing is installed on the system.
#
#   data/finance-risk/credit-g.arff   Statlog German Credit (1,000 applicants),
#       from the Debian package weka 3.6.14-3 (bookworm/main), file
#       /usr/share/doc/weka/examples/credit-g.arff, via `apt-get download`
#       and `dpkg-deb -x` into a temporary folder.
#   data/finance-risk/sp500-2000.csv  daily S&P 500 prices 2000-01-03..2020-04-17,
#       from the npm package vega-datasets 3.2.1, via `npm pack`.
#
# Needs: bash, sha256sum, tar; apt-get + dpkg-deb (Debian/Ubuntu) for the
# credit data, npm for the market data. When a tool is missing the script
# says which and how to get it, and exits with status 3. Exit status 2 means
# a download failed (no network?); 1 means a checksum mismatch.
#
# Usage: examples/finance-risk/fetch-data.sh [DATA_DIR]   (default: <repo>/data)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
data="${1:-$root/data}/finance-risk"
mkdir -p "$data"

# go test runs packages in parallel, and several call this script at once on
# a clean clone: serialise them on a lock in the data folder.
if command -v flock >/dev/null 2>&1; then
	exec 9>"$data/.lock"
	flock 9
fi

WEKA_VERSION=3.6.14-3
WEKA_DEB=weka_${WEKA_VERSION}_all.deb
WEKA_DEB_SHA256=58ea5ec3b42ca9719be5756d1bd64ebed0e69d16d6fffa200b3cebf4ccccab16
CREDIT_SHA256=bd94085134e4eb845c96b34c93ed65a223f89d089bacb273ef96f57509ce0bed
VEGA_VERSION=3.2.1
VEGA_TGZ=vega-datasets-${VEGA_VERSION}.tgz
VEGA_TGZ_SHA256=6f72fda460a9863fae5fcb32f85bcd49e1761fdea6dc6cf9f4962472881cc5a3
SP500_SHA256=9409e9342d0657c747324e4cfabce8a8c7f663bc485b95a3378f36b0a160f8c8

ok() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }
need() {
	command -v "$1" >/dev/null 2>&1 && return 0
	echo "fetch-data: '$1' not found. $2" >&2
	exit 3
}
verify() {
	local got
	got="$(sha256sum "$1" | cut -d' ' -f1)"
	if [ "$got" != "$2" ]; then
		echo "fetch-data: sha256 mismatch for $1: got $got, want $2" >&2
		exit 1
	fi
}

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
need sha256sum "Install coreutils."

# --- credit: Debian weka package -------------------------------------------
if ok "$data/credit-g.arff" "$CREDIT_SHA256"; then
	echo "fetch-data: credit-g.arff present, sha256 ok"
else
	need apt-get "The credit data comes from the Debian package weka=$WEKA_VERSION; on a non-Debian system download $WEKA_DEB from a Debian mirror (pool/main/w/weka/) into $data and rerun."
	need dpkg-deb "Install dpkg (apt-get install dpkg) or extract $WEKA_DEB with 'ar x' and 'tar' by hand."
	if ! ok "$data/$WEKA_DEB" "$WEKA_DEB_SHA256"; then
		echo "fetch-data: apt-get download weka=$WEKA_VERSION"
		got=0
		(cd "$tmp" && apt-get download "weka=$WEKA_VERSION") >"$tmp/apt.log" 2>&1 && got=1
		if [ $got = 0 ]; then
			# A broken extra source (for instance a list without Signed-By that
			# conflicts with debian.sources) makes apt refuse every command.
			# Retry with the standard Debian sources only, using the existing
			# package lists; the system configuration is not changed.
			mkdir -p "$tmp/sources"
			[ -s /etc/apt/sources.list.d/debian.sources ] && cp /etc/apt/sources.list.d/debian.sources "$tmp/sources/debian.sources"
			[ -s /etc/apt/sources.list ] && cp /etc/apt/sources.list "$tmp/sources/system.list"
			(cd "$tmp" && apt-get -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$tmp/sources" \
				download "weka=$WEKA_VERSION") >>"$tmp/apt.log" 2>&1 && got=1
		fi
		if [ $got = 0 ]; then
			# The package lists may be stale or missing: refresh them once.
			echo "fetch-data: apt-get download failed; trying apt-get update first"
			if apt-get update >>"$tmp/apt.log" 2>&1 || apt-get -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$tmp/sources" update >>"$tmp/apt.log" 2>&1; then
				(cd "$tmp" && apt-get download "weka=$WEKA_VERSION") >>"$tmp/apt.log" 2>&1 && got=1 ||
					{ (cd "$tmp" && apt-get -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$tmp/sources" download "weka=$WEKA_VERSION") >>"$tmp/apt.log" 2>&1 && got=1; } || true
			fi
		fi
		if [ $got = 0 ]; then
			cat "$tmp/apt.log" >&2
			echo "fetch-data: could not download weka=$WEKA_VERSION (network or apt sources; apt-get update needs root)" >&2
			exit 2
		fi
		verify "$tmp/$WEKA_DEB" "$WEKA_DEB_SHA256"
		mv "$tmp/$WEKA_DEB" "$data/$WEKA_DEB"
	fi
	mkdir -p "$tmp/weka"
	dpkg-deb -x "$data/$WEKA_DEB" "$tmp/weka"
	src="$tmp/weka/usr/share/doc/weka/examples/credit-g.arff"
	[ -f "$src" ] || { [ -f "$src.gz" ] && gzip -dc "$src.gz" >"$src"; }
	verify "$src" "$CREDIT_SHA256"
	cp "$src" "$data/credit-g.arff"
	echo "fetch-data: wrote $data/credit-g.arff"
fi

# --- market: npm vega-datasets ---------------------------------------------
if ok "$data/sp500-2000.csv" "$SP500_SHA256"; then
	echo "fetch-data: sp500-2000.csv present, sha256 ok"
else
	need tar "Install tar."
	if ! ok "$data/$VEGA_TGZ" "$VEGA_TGZ_SHA256"; then
		need npm "Install Node.js/npm (apt-get install npm), or fetch https://registry.npmjs.org/vega-datasets/-/$VEGA_TGZ into $data and rerun."
		echo "fetch-data: npm pack vega-datasets@$VEGA_VERSION"
		if ! (cd "$tmp" && npm pack --silent "vega-datasets@$VEGA_VERSION") >"$tmp/npm.log" 2>&1; then
			cat "$tmp/npm.log" >&2
			echo "fetch-data: could not download vega-datasets@$VEGA_VERSION (network?)" >&2
			exit 2
		fi
		verify "$tmp/$VEGA_TGZ" "$VEGA_TGZ_SHA256"
		mv "$tmp/$VEGA_TGZ" "$data/$VEGA_TGZ"
	fi
	tar -xzf "$data/$VEGA_TGZ" -C "$tmp" package/data/sp500-2000.csv
	verify "$tmp/package/data/sp500-2000.csv" "$SP500_SHA256"
	cp "$tmp/package/data/sp500-2000.csv" "$data/sp500-2000.csv"
	echo "fetch-data: wrote $data/sp500-2000.csv"
fi
