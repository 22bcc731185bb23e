"""PyTorch CUDA side of troupe's GPU benchmarks (benchmarks/cuda_test.go).

Runs the same work as BenchmarkCUDAGemm, BenchmarkCUDAAttention,
BenchmarkCUDAAttentionDecode and BenchmarkCUDABlockStep on the GPU with PyTorch (cuBLAS, PyTorch's SDPA
kernels, eager modules + AdamW), timed with CUDA events, and, given the Go
benchmark output (--go-bench FILE, the text `go test -bench CUDA` prints),
prints one table: key, troupe, PyTorch, unit, ratio (> 1: troupe is faster).

    python3 benchmarks/compare/cuda.py --go-bench bench.txt

scripts/device-check.sh runs it after the Go benchmarks. All in float32;
"tf32" rows let PyTorch use TF32 tensor cores, like troupe's TF32 GEMM.
"""
import argparse
import math
import re
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


def timed(fn, min_ms=300.0, max_iters=2000):
    """Mean milliseconds per call of fn, after warm-up, measured with events."""
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    iters = 1
    while True:
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        ms = start.elapsed_time(end)
        if ms >= min_ms or iters >= max_iters:
            return ms / iters
        iters = min(max_iters, max(iters * 2, int(iters * min_ms / max(ms, 1e-3))))


def gemm(results):
    for mode in ("fp32", "tf32"):
        torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
        for n in (1024, 2048, 4096, 8192):
            g = torch.Generator(device="cuda").manual_seed(1)
            a = torch.randn(n, n, device="cuda", generator=g)
            b = torch.randn(n, n, device="cuda", generator=g)
            c = torch.empty(n, n, device="cuda")
            ms = timed(lambda: torch.matmul(a, b, out=c))
            results[f"BenchmarkCUDAGemm/{mode}/{n}"] = (2 * n**3 / (ms / 1e3) / 1e12, "TFLOP/s")
    torch.backends.cuda.matmul.allow_tf32 = False


def attention(results):
    B, H, D = 4, 16, 64
    for T in (512, 1024, 2048, 4096):
        g = torch.Generator(device="cuda").manual_seed(1)
        q, k, v, do = (torch.randn(B, H, T, D, device="cuda", generator=g) for _ in range(4))
        for x in (q, k, v):
            x.requires_grad_(True)
        flops = 2 * 2 * B * H * T * T * D / 2

        def fwd():
            with torch.no_grad():
                F.scaled_dot_product_attention(q, k, v, is_causal=True)

        def fwdbwd():
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            o.backward(do)

        ms = timed(fwd)
        results[f"BenchmarkCUDAAttention/fwd/T{T}"] = (flops / (ms / 1e3) / 1e12, "TFLOP/s")
        ms = timed(fwdbwd)
        results[f"BenchmarkCUDAAttention/fwdbwd/T{T}"] = (3.5 * flops / (ms / 1e3) / 1e12, "TFLOP/s")


def decode(results):
    B, H, D = 16, 12, 64
    for L in (128, 1024, 4096):
        g = torch.Generator(device="cuda").manual_seed(1)
        k, v = (torch.randn(B, H, L, D, device="cuda", generator=g) for _ in range(2))
        q = torch.randn(B, H, 1, D, device="cuda", generator=g)

        def step():
            with torch.no_grad():
                F.scaled_dot_product_attention(q, k, v)

        ms = timed(step)
        results[f"BenchmarkCUDAAttentionDecode/L{L}"] = (B / (ms / 1e3), "tokens/s")


class Block(nn.Module):
    """The same causal pre-LN block as cuda.Block."""

    def __init__(self, D, H):
        super().__init__()
        self.H = H
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.o = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.w1, self.w2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.H, D // self.H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(B, T, D))
        return x + self.w2(F.gelu(self.w1(self.ln2(x)), approximate="tanh"))


def block(results):
    for B, T, D, H in ((8, 64, 128, 4), (16, 512, 768, 12)):
        torch.manual_seed(1)
        m = Block(D, H).cuda()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-4, weight_decay=0.01)
        x = torch.randn(B, T, D, device="cuda")
        dy = torch.randn(B, T, D, device="cuda")

        def step():
            opt.zero_grad(set_to_none=True)
            m(x).backward(dy)
            opt.step()

        ms = timed(step)
        results[f"BenchmarkCUDABlockStep/B{B}_T{T}_D{D}_H{H}"] = (ms, "ms/step")


BENCH_RE = re.compile(r"^(BenchmarkCUDA\S+?)(?:-\d+)?\s+\d+\s+(.*)$")


def parse_go(path):
    """Go benchmark lines → {key: {unit: value}}."""
    out = {}
    with open(path) as f:
        for line in f:
            m = BENCH_RE.match(line.strip())
            if not m:
                continue
            fields = m.group(2).split()
            vals = {}
            for i in range(0, len(fields) - 1, 2):
                try:
                    vals[fields[i + 1]] = float(fields[i])
                except ValueError:
                    pass
            out[m.group(1)] = vals
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--go-bench", help="output of go test -bench CUDA (troupe side)")
    ap.add_argument("--only", default="gemm,attention,decode,block")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("cuda.py: PyTorch has no CUDA device")
    print(f"# PyTorch {torch.__version__}, {torch.cuda.get_device_name()}")
    results = {}
    for name in args.only.split(","):
        {"gemm": gemm, "attention": attention, "decode": decode, "block": block}[name](results)
    go = parse_go(args.go_bench) if args.go_bench else {}
    print(f"{'benchmark':48s} {'troupe':>10s} {'pytorch':>10s} {'unit':8s} {'ratio':>7s}")
    for key, (val, unit) in results.items():
        t = go.get(key, {}).get(unit)
        if t is None:
            print(f"{key:48s} {'-':>10s} {val:10.3f} {unit:8s} {'-':>7s}")
            continue
        ratio = val / t if unit.startswith("ms") else t / val
        print(f"{key:48s} {t:10.3f} {val:10.3f} {unit:8s} {ratio:7.2f}")
    print("# ratio > 1: troupe faster (throughput ratio, or PyTorch time / troupe time)")


if __name__ == "__main__":
    main()
