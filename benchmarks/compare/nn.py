#!/usr/bin/python3
"""PyTorch CPU anchor for troupe's nn benchmarks (benchmarks/nn_test.go).

Same shapes and the same computations, one thread:
  block   pre-LN transformer block training step (fwd + bwd + AdamW),
          B=8, T=64, D=128, 4 heads, GELU (tanh) MLP of 4D, loss sum(r*y)
  lm      small LM supervised step: vocab 256, 4 layers, D=128, 4 heads,
          learned positions, B=8, T=64, mean cross-entropy, AdamW
  lstm    one-layer LSTM fwd + bwd, B=32, T=32, input = hidden = 128
  gen     greedy generation with a KV cache, 16-token prompts, 16 new
          tokens, batch 1 and 16 (tokens/s)

Usage (the OpenBLAS core type is set for the PyTorch process only):
  OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 benchmarks/compare/nn.py [--with-go | --go-test BIN]
(--go-test uses a prebuilt `go test -c ./benchmarks` binary, as run.sh does.)

With --with-go it also runs the Go benchmarks (GOMAXPROCS=1, without
OPENBLAS_CORETYPE) and prints troupe / plain Gorgonia / PyTorch side by side
with ratios.
"""
import math
import os
import re
import statistics
import subprocess
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch
import torch.nn.functional as F

torch.set_num_threads(1)
torch.manual_seed(0)


class Block(torch.nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.ln1 = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.out = torch.nn.Linear(d, d)
        self.ln2 = torch.nn.LayerNorm(d)
        self.fc1 = torch.nn.Linear(d, 4 * d)
        self.fc2 = torch.nn.Linear(4 * d, d)

    def attn(self, x, cache=None):
        b, t, d = x.shape
        h, dh = self.h, d // self.h
        q, k, v = self.qkv(x).split(d, dim=2)
        q = q.view(b, t, h, dh).transpose(1, 2)
        k = k.view(b, t, h, dh).transpose(1, 2)
        v = v.view(b, t, h, dh).transpose(1, 2)
        if cache is not None:
            if "k" in cache:
                k = torch.cat([cache["k"], k], dim=2)
                v = torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k, v
        tk = k.shape[2]
        s = (q @ k.transpose(-1, -2)) / math.sqrt(dh)
        mask = torch.ones(t, tk, dtype=torch.bool).triu(tk - t + 1)
        s = s.masked_fill(mask, float("-inf"))
        o = torch.softmax(s, dim=-1) @ v
        return self.out(o.transpose(1, 2).reshape(b, t, d))

    def forward(self, x, cache=None):
        x = x + self.attn(self.ln1(x), cache)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class LM(torch.nn.Module):
    def __init__(self, vocab, d, layers, heads, maxlen):
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, d)
        self.pos = torch.nn.Embedding(maxlen, d)
        self.blocks = torch.nn.ModuleList([Block(d, heads) for _ in range(layers)])
        self.ln_f = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab, bias=False)

    def forward(self, ids, pos0=0, caches=None):
        t = ids.shape[1]
        x = self.tok(ids) + self.pos(torch.arange(pos0, pos0 + t))
        for i, b in enumerate(self.blocks):
            x = b(x, None if caches is None else caches[i])
        return self.head(self.ln_f(x))


CPU = {}


def timeit(fn, iters, warmup=3, key=None):
    """Median wall seconds per call; the mean CPU seconds per call (process
    time, the fairer measure on a loaded machine) goes to CPU[key]."""
    for _ in range(warmup):
        fn()
    ts = []
    c0 = time.process_time()
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    if key:
        CPU[key] = (time.process_time() - c0) / iters
    return statistics.median(ts)


def bench_block(iters):
    B, T, D, H = 8, 64, 128, 4
    m = Block(D, H)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, weight_decay=0.01)
    x = torch.randn(B, T, D)
    r = torch.randn(B, T, D)

    def step():
        opt.zero_grad(set_to_none=True)
        (m(x) * r).sum().backward()
        opt.step()

    return timeit(step, iters, key='block') * 1e3


def bench_lm(iters):
    B, T = 8, 64
    m = LM(256, 128, 4, 4, 64)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, weight_decay=0.01)
    seq = torch.randint(0, 256, (B, T + 1))

    def step():
        opt.zero_grad(set_to_none=True)
        logits = m(seq[:, :-1])
        F.cross_entropy(logits.reshape(-1, 256), seq[:, 1:].reshape(-1)).backward()
        opt.step()

    return timeit(step, iters, key='lm') * 1e3


def bench_lstm(iters):
    B, T, H = 32, 32, 128
    m = torch.nn.LSTM(H, H, batch_first=True)
    x = torch.randn(B, T, H)
    r = torch.randn(B, T, H)

    def step():
        m.zero_grad(set_to_none=True)
        out, _ = m(x)
        (out * r).sum().backward()

    return timeit(step, iters, key='lstm') * 1e3


def bench_gen(batch, iters):
    m = LM(256, 128, 4, 4, 64).eval()
    prompts = torch.randint(0, 256, (batch, 16))

    @torch.no_grad()
    def gen():
        caches = [dict() for _ in m.blocks]
        logits = m(prompts, 0, caches)
        tok = logits[:, -1].argmax(-1, keepdim=True)
        for i in range(15):
            logits = m(tok, 16 + i, caches)
            tok = logits[:, -1].argmax(-1, keepdim=True)

    return batch * 16 / timeit(gen, iters, key=f'gen{batch}')


def go_results():
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    env["GOMAXPROCS"] = "1"
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    if "--go-test" in sys.argv:  # a prebuilt `go test -c ./benchmarks` binary (run.sh)
        binary = sys.argv[sys.argv.index("--go-test") + 1]
        cmd = [binary, "-test.run", "^$", "-test.bench", "^BenchmarkNN", "-test.benchtime", "10x"]
        cwd = os.path.join(root, "benchmarks")
    else:
        cmd = ["go", "test", "./benchmarks", "-run", "^$", "-bench", "^BenchmarkNN", "-benchtime", "10x"]
        cwd = root
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=True).stdout
    res = {}
    for line in out.splitlines():
        mm = re.match(r"(BenchmarkNN\S+?)(-\d+)?\s+\d+\s+\d+ ns/op(.*)", line)
        if mm:
            res[mm.group(1)] = {u: float(v) for v, u in re.findall(r"([\d.e+]+) (\S+)", mm.group(3))}
    return res, out


def main():
    iters = 20
    torch_res = {
        "block": bench_block(iters),
        "lm": bench_lm(10),
        "lstm": bench_lstm(iters),
        "gen1": bench_gen(1, 10),
        "gen16": bench_gen(16, 10),
    }
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")
    print(f"pytorch block step      {torch_res['block']:8.2f} ms   cpu {CPU['block']*1e3:8.2f} ms")
    print(f"pytorch LM step         {torch_res['lm']:8.2f} ms   cpu {CPU['lm']*1e3:8.2f} ms")
    print(f"pytorch LSTM fwd+bwd    {torch_res['lstm']:8.2f} ms   cpu {CPU['lstm']*1e3:8.2f} ms")
    print(f"pytorch gen batch=1     {torch_res['gen1']:8.1f} tokens/s   cpu {16/CPU['gen1']:8.1f} tokens/cpu-s")
    print(f"pytorch gen batch=16    {torch_res['gen16']:8.1f} tokens/s   cpu {256/CPU['gen16']:8.1f} tokens/cpu-s")
    if "--with-go" not in sys.argv and "--go-test" not in sys.argv:
        return
    go, raw = go_results()
    rows = [
        ("block step (ms)", "block", "BenchmarkNNBlockStep", False),
        ("LM step (ms)", "lm", "BenchmarkNNLMStep", False),
        ("LSTM fwd+bwd (ms)", "lstm", "BenchmarkNNLSTM", False),
        ("gen batch=1 (tok/s)", "gen1", "BenchmarkNNGenerate/%s/batch=1", True),
        ("gen batch=16 (tok/s)", "gen16", "BenchmarkNNGenerate/%s/batch=16", True),
    ]
    nan = float("nan")
    for kind in ("cpu", "wall"):
        print()
        print(f"{kind} time ({'process CPU time per step' if kind == 'cpu' else 'wall clock'}; one thread each)")
        print(f"{'benchmark':24s} {'troupe':>10s} {'gorgonia':>10s} {'pytorch':>10s} {'troupe speed-up vs torch':>26s} {'vs gorgonia':>12s}")
        for name, tk, bench, higher in rows:
            if higher:
                tr, gr = bench % "troupe-kvcache", bench % "gorgonia-recompute"
                unit = "tokens/cpu-s" if kind == "cpu" else "tokens/s"
                batch = 1 if tk == "gen1" else 16
                p = batch * 16 / CPU[tk] if kind == "cpu" else torch_res[tk]
            else:
                tr, gr = bench + "/troupe", bench + "/gorgonia"
                unit = "cpu-ms/step" if kind == "cpu" else "ms/step"
                p = CPU[tk] * 1e3 if kind == "cpu" else torch_res[tk]
            t = go.get(tr, {}).get(unit, nan)
            g = go.get(gr, {}).get(unit, nan)
            ratio, rg = (t / p, t / g) if higher else (p / t, g / t)
            print(f"{name:24s} {t:10.2f} {g:10.2f} {p:10.2f} {ratio:25.2f}x {rg:11.2f}x")
    print()
    print(raw)


if __name__ == "__main__":
    main()
