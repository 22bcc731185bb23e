#!/usr/bin/env bash
# Compiles every CUDA source cuda/kernels/*.cu to PTX with nvcc.
#   scripts/ptx.sh            writes cuda/kernels/NAME.ptx (what `make ptx` runs)
#   scripts/ptx.sh OUTDIR     writes OUTDIR/NAME.ptx (what the freshness test runs)
# The virtual architecture comes from the source's first line
# ("// troupe:arch compute_XY"). nvcc runs inside cuda/kernels with relative
# file names and fixed flags, so its output depends only on the sources and the
# nvcc version (recorded in each PTX header).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
kdir="$root/cuda/kernels"
out="${1:-$kdir}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
NVCC="${NVCC:-nvcc}"
cd "$kdir"
pids=()
for src in *.cu; do
	arch="$(sed -n '1s|^// troupe:arch \(compute_[0-9]*\)$|\1|p' "$src")"
	if [ -z "$arch" ]; then
		echo "ptx.sh: $src: first line must be '// troupe:arch compute_XY'" >&2
		exit 1
	fi
	"$NVCC" -ptx -arch="$arch" -O3 -std=c++14 -I. -o "$out/${src%.cu}.ptx" "$src" &
	pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
exit $status
