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

list=/etc/apt/sources.list.d/troupe-nonfree.list
if ! grep -rqs 'non-free' --exclude="$(basename "$list")" /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null; then
	# Match the Signed-By of the existing deb822 source, or apt refuses
	# the list ("Conflicting values set for option Signed-By").
	opt=""
	key=/usr/share/keyrings/debian-archive-keyring.gpg
	[ -f "$key" ] && opt="[signed-by=$key] "
	echo "deb ${opt}http://deb.debian.org/debian bookworm contrib non-free" >"$list"
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends nvidia-cuda-toolkit nvidia-cuda-dev >/dev/null
have_cuda && echo "install-cuda: installed $(nvcc --version | tail -n 1)"
