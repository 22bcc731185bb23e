#!/usr/bin/env bash
# benchmarks/compare/run.sh — troupe against the PyTorch CPU anchor, side by
# side in one run. `make bench-compare` runs it. See README.md.
#
# 1. Installs Debian's python3-torch and libopenblas0-pthread with apt-get if
#    /usr/bin/python3 cannot import torch (idempotent, noninteractive).
# 2. Builds the Go benchmark binary once; for each topic runs
#    benchmarks/compare/<topic>.py, which alternates troupe's Go benchmarks
#    and the same work in PyTorch (same shapes, same thread counts) REPEAT
#    times, and prints one table of medians per topic: shape, threads,
#    troupe, PyTorch, ratio (> 1: troupe is faster), plus any other Go
#    implementation measured beside troupe (gonum for GEMM).
#
# Environment: THREADS (default "1 $(nproc)"), REPEAT (default 3),
# BENCHTIME (Go -benchtime, default 1s), TOPICS (default "gemm");
# GEMM_SHAPES=512x512x512,... restricts the gemm topic to those shapes;
# HF=1 adds topic hf (pretrained-decoder decode and LoRA at Qwen2.5-0.5B
# shapes, one thread; minutes, so off by default; HF_REPEAT, default 1,
# replaces REPEAT for it).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"

PY=/usr/bin/python3
GO="${GO:-go}"
THREADS="${THREADS:-1 $(nproc)}"
THREADS="$(echo $THREADS | tr ' ' '\n' | sort -nu | tr '\n' ' ')"
REPEAT="${REPEAT:-3}"
BENCHTIME="${BENCHTIME:-1s}"
TOPICS="${TOPICS:-gemm}"
if [ "${HF:-0}" != 0 ]; then TOPICS="$TOPICS hf"; fi

# Without libopenblas0-pthread, Debian's torch runs on the reference BLAS,
# an order of magnitude slower: no anchor at all.
if ! "$PY" -c 'import torch' >/dev/null 2>&1 || ! ls /usr/lib/*/libopenblas.so.0 >/dev/null 2>&1; then
	echo "== installing the PyTorch anchor: python3-torch libopenblas0-pthread (apt-get)"
	SUDO=""
	if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
	export DEBIAN_FRONTEND=noninteractive
	$SUDO apt-get update -qq
	$SUDO apt-get install -y -qq --no-install-recommends python3-torch libopenblas0-pthread >/dev/null
	"$PY" -c 'import torch' || { echo "torch still not importable from $PY" >&2; exit 1; }
fi

detected="$("$PY" -c 'import torch, ctypes
p = sorted({l.split()[-1] for l in open("/proc/self/maps") if "libopenblas" in l})
if p:
    lib = ctypes.CDLL(p[0]); lib.openblas_get_corename.restype = ctypes.c_char_p
    print(lib.openblas_get_corename().decode())
else:
    print("(no OpenBLAS loaded)")' 2>/dev/null || echo unknown)"
# SkylakeX kernels need AVX-512: on a CPU without it they die of SIGILL, and
# OpenBLAS's own choice stands.
CORETYPE=()
if grep -qw avx512f /proc/cpuinfo; then
	CORETYPE=(OPENBLAS_CORETYPE=SkylakeX)
	echo "== OPENBLAS_CORETYPE=SkylakeX is set for the PyTorch side only: on this CPU (AMD"
	echo "   Zen 5, AVX-512) OpenBLAS 0.3.21 does not recognise the core (it reports"
	echo "   '$detected' here without the variable; Prescott on some of these VMs) and"
	echo "   would skip its AVX-512 kernels; SkylakeX selects them, the core this CPU"
	echo "   really is. troupe's Go benchmarks run without it (removed from their env)."
else
	echo "== no AVX-512 on this CPU: OpenBLAS keeps the core it detects ('$detected')"
fi
echo "== threads: $THREADS; repeats: $REPEAT alternating troupe/PyTorch per shape (medians"
echo "   reported); Go -benchtime $BENCHTIME"
echo "== CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$GO" test -c -o "$tmp/bench.test" ./benchmarks
for topic in $TOPICS; do
	[ -f "$here/$topic.py" ] || { echo "unknown topic $topic (no $here/$topic.py)" >&2; exit 2; }
	env "${CORETYPE[@]}" "$PY" "$here/$topic.py" --go-test "$tmp/bench.test" \
		--pkg-dir "$root/benchmarks" --threads $THREADS --repeat "$REPEAT" \
		--benchtime "$BENCHTIME" >"$tmp/$topic.txt"
	# KEEP=<prefix> keeps the raw rows as <prefix>.<topic>.txt.
	if [ -n "${KEEP:-}" ]; then cp "$tmp/$topic.txt" "$KEEP.$topic.txt"; fi
	echo
	echo "== $topic"
	"$PY" "$here/table.py" "$tmp/$topic.txt"
done

# ---- nn (added by the nn helper) -------------------------------------------
# Transformer block / small LM training steps, LSTM fwd+bwd and KV-cache
# generation: troupe vs the same graphs in plain Gorgonia vs PyTorch, one
# thread each, CPU-time and wall-clock tables. NN=0 skips it.
if [ "${NN:-1}" != 0 ]; then
	echo
	echo "== nn (benchmarks/compare/nn.py; Go side GOMAXPROCS=1, -benchtime 10x)"
	env "${CORETYPE[@]}" "$PY" "$here/nn.py" --go-test "$tmp/bench.test"
fi
