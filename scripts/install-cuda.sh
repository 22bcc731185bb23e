#!/usr/bin/env bash
# Installs the CUDA 11.8 toolkit from Debian bookworm's non-free component
# (nvcc, cuda.h, the libcuda stub) when it is missing. Idempotent: does
# nothing when nvcc and cuda.h are already there. Needs root (CI runs as root).
# It is enough to compile, vet and link the troupecuda build tag and to run the PTX
# freshness test; it does not need (or install) a GPU driver.
set -euo pipefail

have_cuda() {
	command -v nvcc >/dev/null 2>&1 && { [ -f /usr/include/cuda.h ] || [ -f /usr/local/cuda/include/cuda.h ]; }
}

if have_cuda; then
	echo "install-cuda: nvcc and cuda.h present, nothing to do"
	exit 0
fi

if [ "$(id -u)" != 0 ]; then
	echo "install-cuda: not root; cannot install CUDA (troupecuda tag checks will be skipped)" >&2
	exit 0
fi

# CUDA is in Debian's non-free component: add contrib and non-free to the
# machine's own Debian source (its mirror, suite and key), whichever form it
# is written in, rather than naming a mirror here.
list=/etc/apt/sources.list.d/troupe-nonfree.list
if ! grep -rqs 'non-free' --exclude="$(basename "$list")" /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null; then
	uri="" suite="" key=""
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] || continue
		# the first stanza whose suite has no "-": the main archive
		read -r uri suite key < <(awk '
			/^URIs:/ {u=$2} /^Suites:/ {s=$2} /^Signed-By:/ {k=$2}
			/^$/ {if (u != "" && s !~ /-/) {print u, s, k; done = 1; exit} u = s = k = ""}
			END {if (!done && u != "" && s !~ /-/) print u, s, k}' "$f") || true
		[ -n "$uri" ] && break
	done
	if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
		read -r uri suite < <(awk '$1 == "deb" && $0 !~ /security/ {for (i = 2; i <= NF; i++) if ($i !~ /^\[/) {print $i, $(i+1); exit}}' /etc/apt/sources.list) || true
	fi
	if [ -z "$uri" ] || [ -z "$suite" ]; then
		echo "install-cuda: no Debian apt source found to add non-free to; install nvidia-cuda-toolkit by hand" >&2
		exit 1
	fi
	# The same Signed-By as the existing source, or apt refuses the list
	# ("Conflicting values set for option Signed-By").
	opt=""
	[ -n "$key" ] && [ -f "$key" ] && opt="[signed-by=$key] "
	echo "deb ${opt}${uri} ${suite} contrib non-free" >"$list"
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends nvidia-cuda-toolkit nvidia-cuda-dev >/dev/null
have_cuda && echo "install-cuda: installed $(nvcc --version | tail -n 1)"
