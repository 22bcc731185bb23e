"""GEMM topic of benchmarks/compare: troupe's BenchmarkGemm against
torch.matmul (OpenBLAS sgemm) on float32 CPU tensors.

For each repeat, thread count and shape it runs the Go benchmarks
BenchmarkGemm/{troupe,gonum}/<key>/t<threads> and then times torch.matmul
with torch.set_num_threads(threads), so each pair sees the same load. The
key is MxKxN: A is M×K, B is K×N (benchmarks/gemm_test.go uses the same
names).

usage: gemm.py --go-test BINARY --pkg-dir DIR [--threads 1 2] [--repeat 3]
(GEMM_SHAPES=512x512x512,... restricts the shapes.)
"""
import argparse
import os

import torch

from common import describe, go_bench, pt_row, set_threads, torch_rate

SQUARE = [64, 128, 256, 512, 1024]
# Transformer feed-forward: (B·T)×D times D×4D with B·T = 512.
TRANSFORMER = [(512, 128, 512), (512, 256, 1024)]


def shapes():
    """All shapes, or those named in GEMM_SHAPES (e.g. "512x512x512,512x128x512")."""
    all_shapes = [(n, n, n) for n in SQUARE] + TRANSFORMER
    want = os.environ.get("GEMM_SHAPES")
    if not want:
        return all_shapes
    names = set(want.split(","))
    return [s for s in all_shapes if "%dx%dx%d" % s in names]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--go-test", required=True)
    ap.add_argument("--pkg-dir", required=True)
    ap.add_argument("--threads", type=int, nargs="+", default=[1])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--benchtime", default="300ms")
    args = ap.parse_args()
    g = torch.Generator().manual_seed(1)
    print(describe(), flush=True)
    for _ in range(args.repeat):
        for t in args.threads:
            for m, k, n in shapes():
                key = f"{m}x{k}x{n}"
                impls = "troupe" if n >= 1024 and k >= 1024 else "(troupe|gonum)"
                go_bench(args.go_test, f"^BenchmarkGemm$/^{impls}$/^{key}$/^t{t}$",
                         args.benchtime, args.pkg_dir)
                set_threads(t)
                a = torch.rand(m, k, generator=g)
                b = torch.rand(k, n, generator=g)
                c = torch.empty(m, n)
                wall, cpu = torch_rate(lambda: torch.matmul(a, b, out=c), 2.0 * m * n * k)
                pt_row(key, t, wall / 1e9, "GFLOP/s")
                pt_row(key, t, cpu / 1e9, "GFLOP/cpu-s")


if __name__ == "__main__":
    main()
