#!/usr/bin/env python3
"""Prints kserve_sweep.sh's comparison (markdown): per shape and concurrency,
perf_analyzer (KServe v2 ModelInfer) against normload (normsvc.v1 Normalize)
on the same server: requests/s, p50 and p99 in milliseconds.

usage: summarize_kserve_sweep.py OUT_DIR
perf_analyzer's CSV (-f) gives Inferences/Second (one per request: the
models have max_batch_size 0) and latencies in microseconds; normload's
sweep CSV gives req_per_s and latencies in milliseconds.
"""
import csv
import pathlib
import re
import sys


def read_csv(path):
    if not path.exists():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def cell(value, digits):
    return "missing" if value is None else f"{value:,.{digits}f}"


def shapes(directory):
    found = set()
    for path in directory.glob("*_*x*.csv"):
        match = re.search(r"_(\d+x\d+)\.csv$", path.name)
        if match:
            found.add(match.group(1))
    return sorted(found, key=lambda s: [int(n) for n in s.split("x")])


def table(directory, shape):
    pa = {int(r["Concurrency"]): r for r in read_csv(directory / f"perf_analyzer_{shape}.csv")}
    nl = {int(r["concurrency"]): r for r in read_csv(directory / f"normload_{shape}.csv")}
    lines = [f"### {shape} fp32 LayerNorm (GAMMA and BETA inline)", "",
             "| concurrency | perf_analyzer req/s | p50 ms | p99 ms | normload req/s | p50 ms "
             "| p99 ms | perf_analyzer / normload req/s |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for c in sorted(set(pa) | set(nl)):
        p, n = pa.get(c), nl.get(c)
        p_rate = float(p["Inferences/Second"]) if p else None
        p50 = float(p["p50 latency"]) / 1000 if p else None
        p99 = float(p["p99 latency"]) / 1000 if p else None
        n_rate = float(n["req_per_s"]) if n else None
        n50 = float(n["p50_ms"]) if n else None
        n99 = float(n["p99_ms"]) if n else None
        ratio = f"{p_rate / n_rate:.2f}" if p_rate and n_rate else ""
        mark = " (unstable)" if (directory / f"pa_{shape}_c{c}.unstable").exists() else ""
        errors = f" ({n['errors']} errors)" if n and n.get("errors") not in (None, "", "0") else ""
        lines.append(f"| {c} | {cell(p_rate, 0)}{mark} | {cell(p50, 3)} | {cell(p99, 3)} "
                     f"| {cell(n_rate, 0)}{errors} | {cell(n50, 3)} | {cell(n99, 3)} | {ratio} |")
    return "\n".join(lines)


def main():
    directory = pathlib.Path(sys.argv[1])
    run = directory / "run.txt"
    if run.exists():
        print("\n".join(f"- {line}" for line in run.read_text().splitlines()))
        print()
    found = shapes(directory)
    if not found:
        print("no perf_analyzer_*.csv or normload_*.csv in", directory)
        return 1
    print("\n\n".join(table(directory, shape) for shape in found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
