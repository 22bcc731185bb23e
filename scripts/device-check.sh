#!/usr/bin/env bash
# scripts/device-check.sh — the prepared GPU check for package cuda.
#
# Here (no GPU needed; needs the CUDA toolkit, scripts/install-cuda.sh):
#   bash scripts/device-check.sh prepare
# builds the test binaries of ./cuda and ./benchmarks with -tags troupecuda
# (stripped) into out/devcheck/, with the PTX (also embedded in the binaries),
# the PyTorch anchor script and this script. Then, on the GPU machine, with
# out/devcheck carried along (the device tool's carry: ["out/devcheck"]):
#   bash scripts/device-check.sh run
# runs, in order and within eight minutes:
#   1. nvidia-smi;
#   2. the correctness tests of package cuda: every kernel against package
#      tensor's CPU kernels or a float64 reference, the device transformer
#      block against a CPU mirror, package tensor's Dense-level API on device
#      tensors through cuda.DenseBackend against the CPU backend
#      (TestDeviceDenseBackend*), and nn's fused ops and optimizers on device
#      tensors against the host (TestDeviceNNDispatch);
#   3. the GPU benchmarks (GEMM 1024–8192 FP32/TF32, attention, decode, the
#      block training step, the Dense-level dispatch);
#   4. when PyTorch with CUDA is importable, benchmarks/compare/cuda.py with
#      the same shapes on the same GPU (GEMM through cuBLAS, attention
#      through scaled_dot_product_attention, the block step), printing
#      troupe/PyTorch ratios;
#   5. one line for each item of the check that has no device code yet
#      (bf16 GEMM, the pretrained-model generation and LoRA GRPO step), so
#      that their absence is in the results rather than silently missing.
# Everything goes to $OUT/results.txt (OUT defaults to out/devcheck/results).
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
dc=out/devcheck
TAG=troupecuda

prepare() {
	set -e
	mkdir -p "$dc"
	export CGO_LDFLAGS="${CGO_LDFLAGS:--L/usr/lib/x86_64-linux-gnu/stubs -L/usr/local/cuda/lib64/stubs}"
	go vet -tags "$TAG" ./cuda ./benchmarks ./device ./cmd/troupe
	go test -tags "$TAG" -c -ldflags='-s -w' -o "$dc/cuda.test" ./cuda
	go test -tags "$TAG" -c -ldflags='-s -w' -o "$dc/benchmarks.test" ./benchmarks
	# (The tagged cmd/troupe is not carried: with it out/devcheck exceeds the
	# device tool's 64 MiB carry; make test-cuda-build checks that it links
	# the device backend.)
	rm -f "$dc/troupe"
	mkdir -p "$dc/ptx"
	cp cuda/kernels/*.ptx "$dc/ptx/"
	cp benchmarks/compare/cuda.py scripts/device-check.sh "$dc/"
	git rev-parse HEAD >"$dc/commit" 2>/dev/null || true
	du -sh "$dc"
	if [ "$(du -sm "$dc" | cut -f1)" -gt 62 ]; then
		echo "out/devcheck is over the device tool's 64 MiB carry" >&2
		exit 1
	fi
	echo "prepared $dc; on the GPU machine: bash scripts/device-check.sh run  (carry out/devcheck)"
}

run() {
	OUT="${OUT:-$root/$dc/results}"
	mkdir -p "$OUT"
	res="$OUT/results.txt"
	: >"$res"
	log() { echo "$@" | tee -a "$res"; }
	start=$(date +%s)
	log "== troupe device check, commit $(cat "$dc/commit" 2>/dev/null), $(date -u)"
	{ nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv 2>&1 || nvidia-smi 2>&1; } | tee -a "$res"
	log "== correctness: cuda.test (package cuda, -tags $TAG): every kernel against the CPU reference"
	(cd cuda && timeout 200 "../$dc/cuda.test" -test.v -test.count=1 -test.timeout=190s 2>&1) |
		grep -v '^=== RUN' | tee "$OUT/tests.txt" | tee -a "$res"
	log "tests exit: ${PIPESTATUS[0]}"
	# The tensor.Backend tests (cuda.DenseBackend) are part of the run above;
	# count them so that their absence (or a skip) is visible.
	log "DenseBackend tests: $(grep -cE -- '--- PASS: TestDeviceDenseBackend' "$OUT/tests.txt") passed," \
		"$(grep -cE -- '--- FAIL: TestDeviceDenseBackend' "$OUT/tests.txt") failed," \
		"$(grep -cE -- '--- SKIP: TestDeviceDenseBackend' "$OUT/tests.txt") skipped (of 3)"
	log "nn dispatch test: $(grep -oE -- '--- (PASS|FAIL|SKIP): TestDeviceNNDispatch' "$OUT/tests.txt" || echo 'did not run')"
	log "== benchmarks: benchmarks.test -bench CUDA"
	(cd benchmarks && timeout 170 "../$dc/benchmarks.test" -test.run='^$' -test.bench=CUDA -test.benchtime=0.5s -test.timeout=165s 2>&1) |
		tee "$OUT/bench.txt" | tee -a "$res"
	log "benchmarks exit: ${PIPESTATUS[0]}"
	left=$((470 - ($(date +%s) - start)))
	if [ "$left" -lt 30 ]; then
		log "== PyTorch comparison skipped: only ${left}s left of the ten minutes"
	elif python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
		log "== PyTorch CUDA anchor (benchmarks/compare/cuda.py), ${left}s left"
		timeout "$((left - 5))" python3 "$dc/cuda.py" --go-bench "$OUT/bench.txt" 2>&1 | tee -a "$res"
	else
		log "== PyTorch comparison skipped: python3 cannot import torch with CUDA on this machine"
	fi
	log "== not implemented on the device yet (nothing to measure):"
	log "   GEMM bf16 vs cuBLAS: package cuda has FP32 and TF32 GEMM kernels only (no bf16 kernel)"
	log "   attention and block step vs PyTorch eager: cuda.py compares with scaled_dot_product_attention, not an eager (matmul+softmax) composition"
	log "   generation tokens/s at the Qwen2.5-0.5B shape vs PyTorch: the pretrained models (nn/hf) and nn's KV-cache decode run on the CPU only"
	log "   LoRA GRPO step at the Qwen2.5-0.5B shape: nn's self-attention, rotary embedding and CopyMix ops have no device implementation"
	log "== done in $(($(date +%s) - start))s"
}

case "${1:-prepare}" in
prepare) prepare ;;
run) run ;;
*) echo "usage: $0 [prepare|run]" >&2; exit 2 ;;
esac
