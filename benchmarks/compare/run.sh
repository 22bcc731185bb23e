#!/usr/bin/env bash
# benchmarks/compare/run.sh — troupe against the PyTorch CPU anchor, side by
# side in one run. `make bench-compare` runs it.
#
# 1. Installs Debian's python3-torch and libopenblas0-pthread with apt-get if
#    /usr/bin/python3 cannot import torch (idempotent, noninteractive).
# 2. For each topic (see README.md; gemm for now), runs troupe's Go
#    benchmarks named Benchmark<Topic>/troupe/<key>/t<threads> and the topic's
#    PyTorch script <topic>.py with the same shapes and thread counts,
#    REPEAT times alternating, and prints one table per topic with medians:
#    shape, threads, troupe, PyTorch, ratio (> 1: troupe is faster).
#
# Environment: THREADS (default "1 $(nproc)"), REPEAT (default 3),
# BENCHTIME (Go -benchtime, default 300ms), TOPICS (default "gemm").
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"

PY=/usr/bin/python3
GO="${GO:-go}"
THREADS="${THREADS:-1 $(nproc)}"
THREADS="$(echo $THREADS | tr ' ' '\n' | sort -nu | tr '\n' ' ')"
REPEAT="${REPEAT:-3}"
BENCHTIME="${BENCHTIME:-300ms}"
TOPICS="${TOPICS:-gemm}"

if ! "$PY" -c 'import torch' >/dev/null 2>&1; then
	echo "== installing the PyTorch anchor: python3-torch libopenblas0-pthread (apt-get)"
	SUDO=""
	if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
	export DEBIAN_FRONTEND=noninteractive
	$SUDO apt-get update -qq
	$SUDO apt-get install -y -qq python3-torch libopenblas0-pthread >/dev/null
	"$PY" -c 'import torch' || { echo "torch still not importable from $PY" >&2; exit 1; }
fi

# Topic table: topic name -> Go benchmark regexp (the troupe side).
declare -A GOBENCH=(
	[gemm]='^BenchmarkGemm$/^troupe$/'
)

echo "== OPENBLAS_CORETYPE=SkylakeX is set for the PyTorch commands only: OpenBLAS"
echo "   0.3.21 misdetects this CPU (AMD Zen 5, AVX-512) as Prescott and would fall"
echo "   back to SSE3 kernels; SkylakeX selects its AVX-512 kernels, the core this"
echo "   CPU really is. troupe's Go benchmarks run without it."
echo "== threads: $THREADS; repeats: $REPEAT (medians reported); Go -benchtime $BENCHTIME"
echo "== CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for topic in $TOPICS; do
	re="${GOBENCH[$topic]:?unknown topic $topic (add it to GOBENCH in run.sh)}"
	"$GO" test -c -o "$tmp/bench.test" ./benchmarks
	for r in $(seq 1 "$REPEAT"); do
		for t in $THREADS; do
			# Benchmarks set their own thread counts from the /t<threads> name;
			# -cpu only fixes the -N suffix.
			(cd benchmarks && "$tmp/bench.test" -test.run '^$' -test.bench "${re}.*/t${t}\$" \
				-test.benchtime "$BENCHTIME" -test.cpu "$(nproc)") >>"$tmp/go-$topic.txt"
		done
		OPENBLAS_CORETYPE=SkylakeX "$PY" "$here/$topic.py" --threads $THREADS >>"$tmp/py-$topic.txt"
	done
	echo
	echo "== $topic"
	"$PY" "$here/table.py" "$tmp/go-$topic.txt" "$tmp/py-$topic.txt"
done
