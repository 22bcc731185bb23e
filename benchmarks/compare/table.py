"""Joins troupe's Go benchmark output with a PyTorch script's rows.

usage: table.py ROWS

ROWS holds lines "GO\t<go test -bench line>" and "PT\t<key>\t<threads>\t<value>\t<unit>"
(see common.py). The GO lines are `go test -bench` lines for benchmarks named
Benchmark<Topic>/<impl>/<key>/t<threads>[-N] reporting a metric (for example
GFLOP/s or ms/step); impl "troupe" is ours, any other impl (e.g. "gonum") is
shown as an extra column with troupe's ratio to it. The PT lines are
PyTorch's measurements. Repeated measurements of one
(impl, key, threads) are reduced to their median. Ratios are troupe/other for
rates (GFLOP/s, tokens/s) and other/troupe for times (ms/step), so > 1 always means
troupe is faster.
"""
import re
import statistics
import sys
from collections import defaultdict

BENCH = re.compile(r"^Benchmark\w+/([\w.+-]+)/([^/\s]+)/t(\d+)(?:-\d+)?\s+\d+\s+(.*)$")
METRIC = re.compile(r"([-+0-9.eE]+)\s+(\S+)")


TIME_UNITS = {"ns", "us", "µs", "ms", "s", "min"}


def ratio(ours, other, unit):
    """ours/other for rates (GFLOP/s, GFLOP/cpu-s, tokens/s), other/ours for
    times (ms/step), so > 1 means troupe is faster."""
    if unit.split("/")[0] in TIME_UNITS:
        return other / ours
    return ours / other


def main():
    with open(sys.argv[1]) as f:
        lines = f.read().splitlines()
    torch, units, order = defaultdict(list), {}, []
    go = defaultdict(lambda: defaultdict(list))  # impl -> key -> values
    for line in lines:
            if line.startswith("# "):
                print(line[2:])
            if not line.startswith("PT\t"):
                continue
            parts = line.split("\t")[1:]
            if len(parts) != 4:
                continue
            key = (parts[0], int(parts[1]), parts[3])
            if key not in torch:
                order.append(key)
            torch[key].append(float(parts[2]))
            units[key] = parts[3]
    for line in lines:
            if not line.startswith("GO\t"):
                continue
            m = BENCH.match(line[3:].strip())
            if not m:
                continue
            for val, unit in METRIC.findall(m.group(4)):
                key = (m.group(2), int(m.group(3)), unit)
                if key in units:
                    go[m.group(1)][key].append(float(val))
    others = sorted(i for i in go if i != "troupe")
    head = f"{'shape':<16} {'threads':>7} {'troupe':>9} {'PyTorch':>9} {'ratio':>6}"
    for o in others:
        head += f" {o:>9} {'ratio':>6}"
    print(head + "  unit (runs)")
    med = lambda xs: statistics.median(xs) if xs else None
    first = {k: i for i, k in enumerate(order)}
    for key in sorted(order, key=lambda k: (k[2], k[1], first[k])):
        unit = units[key]
        t = med(torch[key])
        ours = med(go["troupe"].get(key, []))
        row = f"{key[0]:<16} {key[1]:>7} "
        row += f"{ours:>9.2f}" if ours else f"{'-':>9}"
        row += f" {t:>9.2f} "
        row += f"{ratio(ours, t, unit):>6.2f}" if ours else f"{'-':>6}"
        for o in others:
            v = med(go[o].get(key, []))
            row += f" {v:>9.2f} {ratio(ours, v, unit):>6.1f}" if v and ours else f" {'-':>9} {'-':>6}"
        print(row + f"  {unit} ({len(go['troupe'].get(key, []))}/{len(torch[key])})")


if __name__ == "__main__":
    main()
