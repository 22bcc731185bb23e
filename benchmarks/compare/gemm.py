"""PyTorch side of the GEMM comparison (benchmarks/compare/run.sh).

Times torch.matmul on float32 CPU tensors for the shapes of troupe's
BenchmarkGemm (benchmarks/gemm_test.go) and prints one line per shape and
thread count: key, threads, GFLOP/s, unit (tab-separated). The key is
MxKxN: A is M×K, B is K×N, as in the Go benchmark names.
"""
import argparse
import time

import torch

SQUARE = [64, 128, 256, 512, 1024]
# Transformer feed-forward: (B·T)×D times D×4D with B·T = 512.
TRANSFORMER = [(512, 128, 512), (512, 256, 1024)]


def shapes():
    return [(n, n, n) for n in SQUARE] + TRANSFORMER


def gflops(m, k, n, threads, min_time=0.3, repeats=5):
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(1)
    a = torch.rand(m, k, generator=g, dtype=torch.float32)
    b = torch.rand(k, n, generator=g, dtype=torch.float32)
    c = torch.empty(m, n, dtype=torch.float32)
    torch.matmul(a, b, out=c)
    # Find an iteration count that takes about min_time, then take the best
    # of a few medians-free windows (the same shape as Go's b.Loop timing).
    iters = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(iters):
            torch.matmul(a, b, out=c)
        dt = time.perf_counter() - t0
        if dt >= min_time / 4:
            break
        iters *= 2
    iters = max(1, int(iters * min_time / 4 / dt))
    rates = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(iters):
            torch.matmul(a, b, out=c)
        dt = time.perf_counter() - t0
        rates.append(2.0 * m * n * k * iters / dt / 1e9)
    rates.sort()
    return rates[len(rates) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, nargs="+", default=[1])
    args = ap.parse_args()
    for t in args.threads:
        for m, k, n in shapes():
            print(f"{m}x{k}x{n}\t{t}\t{gflops(m, k, n, t):.2f}\tGFLOP/s", flush=True)


if __name__ == "__main__":
    main()
