"""Joins troupe's Go benchmark output with a PyTorch script's rows.

usage: table.py GO_OUTPUT PY_OUTPUT

GO_OUTPUT holds `go test -bench` lines for benchmarks named
Benchmark<Topic>/troupe/<key>/t<threads>[-N] reporting a metric (for example
GFLOP/s or ms/step); PY_OUTPUT holds tab-separated lines
key, threads, value, unit. Repeated measurements of one (key, threads) are
reduced to their median. The ratio is troupe/PyTorch for rates (units ending
in /s) and PyTorch/troupe for times, so > 1 always means troupe is faster.
"""
import re
import statistics
import sys
from collections import defaultdict

BENCH = re.compile(r"^Benchmark\w+/troupe/([^/\s]+)/t(\d+)(?:-\d+)?\s+\d+\s+(.*)$")
METRIC = re.compile(r"([-+0-9.eE]+)\s+(\S+)")


def main():
    go_path, py_path = sys.argv[1], sys.argv[2]
    ours, theirs, units, order = defaultdict(list), defaultdict(list), {}, []
    with open(py_path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 4:
                continue
            key = (parts[0], int(parts[1]))
            if key not in theirs:
                order.append(key)
            theirs[key].append(float(parts[2]))
            units[key] = parts[3]
    with open(go_path) as f:
        for line in f:
            m = BENCH.match(line.strip())
            if not m:
                continue
            key = (m.group(1), int(m.group(2)))
            for val, unit in METRIC.findall(m.group(3)):
                if unit == units.get(key):
                    ours[key].append(float(val))
    print(f"{'shape':<18} {'threads':>7} {'troupe':>12} {'PyTorch':>12} {'ratio':>7}  unit (n runs)")
    for key in order:
        unit = units[key]
        t = statistics.median(theirs[key])
        if not ours[key]:
            print(f"{key[0]:<18} {key[1]:>7} {'-':>12} {t:>12.2f} {'-':>7}  {unit}")
            continue
        o = statistics.median(ours[key])
        ratio = o / t if unit.endswith("/s") else t / o
        print(f"{key[0]:<18} {key[1]:>7} {o:>12.2f} {t:>12.2f} {ratio:>7.2f}  {unit} ({len(ours[key])}/{len(theirs[key])})")


if __name__ == "__main__":
    main()
