"""Shared helpers for the benchmarks/compare topic scripts.

A topic script measures troupe (by running the compiled Go benchmark binary
for one key and thread count) and PyTorch (in-process) alternately, shape by
shape, so both sides see the same machine load, and prints tab-separated
rows that table.py joins:

    GO <go test -bench output line>
    PT <key> <threads> <value> <unit>
"""
import ctypes
import os
import subprocess
import sys
import time

import torch


def _openblas():
    """The OpenBLAS library torch loaded (through libblas.so.3), or None."""
    with open("/proc/self/maps") as f:
        paths = sorted({l.split()[-1] for l in f if "libopenblas" in l})
    if not paths:
        return None
    lib = ctypes.CDLL(paths[0])
    lib.openblas_get_corename.restype = ctypes.c_char_p
    return lib


def set_threads(threads):
    """Sets PyTorch's thread count and OpenBLAS's: torch.set_num_threads does
    not reach Debian's OpenBLAS, which otherwise runs on every core even for
    the single-thread rows."""
    torch.set_num_threads(threads)
    ob = _openblas()
    if ob is not None:
        ob.openblas_set_num_threads(threads)
        got = ob.openblas_get_num_threads()
        if got != threads:
            sys.exit(f"OpenBLAS runs {got} threads, wanted {threads}")


def describe():
    """One line naming the BLAS torch uses and the core OpenBLAS selected."""
    torch.matmul(torch.ones(2, 2), torch.ones(2, 2))
    ob = _openblas()
    if ob is None:
        return "# torch %s, BLAS: not OpenBLAS" % torch.__version__
    return "# torch %s, OpenBLAS core %s (OPENBLAS_CORETYPE=%s)" % (
        torch.__version__, ob.openblas_get_corename().decode(),
        os.environ.get("OPENBLAS_CORETYPE", "unset"))


def go_bench(binary, regex, benchtime, pkg_dir):
    """Runs one Go benchmark selection and prints its result lines as GO rows.

    OPENBLAS_CORETYPE is removed from the Go process's environment: it is set
    for the PyTorch side only.
    """
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    out = subprocess.run(
        [binary, "-test.run", "^$", "-test.bench", regex, "-test.benchtime", benchtime],
        cwd=pkg_dir, env=env, check=True, capture_output=True, text=True,
    ).stdout
    for line in out.splitlines():
        if line.startswith("Benchmark"):
            print("GO\t" + line, flush=True)


def torch_rate(fn, work, min_time=0.3, repeats=3):
    """Median rates of fn() over repeats windows of about min_time: work per
    wall-clock second and work per second of CPU time the process used
    (time.process_time, all threads), like the Go side's GFLOP/s and
    GFLOP/cpu-s."""
    fn()
    iters, dt = 1, 0.0
    while True:
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        dt = time.perf_counter() - t0
        if dt >= min_time / 4:
            break
        iters *= 2
    iters = max(1, int(iters * min_time / repeats / dt))
    wall, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(iters):
            fn()
        wall.append(work * iters / (time.perf_counter() - t0))
        cpu.append(work * iters / max(time.process_time() - c0, 1e-9))
    wall.sort()
    cpu.sort()
    return wall[len(wall) // 2], cpu[len(cpu) // 2]


def pt_row(key, threads, value, unit):
    print(f"PT\t{key}\t{threads}\t{value:.4g}\t{unit}", flush=True)
