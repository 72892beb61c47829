#!/usr/bin/env python3
"""Prints flag_ab.sh's table (markdown): for each flag set and load, the
ratio to the echo of the same repetition (req/s at 64 in flight; p50
latency at 1 in flight, where lower is better), each repetition's and the
median.

usage: summarize_flag_ab.py OUT_DIR   (holding variants.txt and r1, r2, ...)
"""
import json
import pathlib
import statistics
import sys

LOADS = [("1x4096, 64 in flight: req/s / echo", "1x4096_c64", "throughput"),
         ("16x4096, 64 in flight: req/s / echo", "16x4096_c64", "throughput"),
         ("1x4096, 1 in flight: p50 / echo p50", "1x4096_c1", "latency")]


def measured(directory, name):
    path = directory / f"{name}.json"
    return json.loads(path.read_text())["measured"] if path.exists() else None


def ratio(service, echo, kind):
    if service is None or echo is None:
        return None
    if kind == "latency":
        return service["latency_ms"]["p50"] / echo["latency_ms"]["p50"]
    return service["req_per_s"] / echo["req_per_s"] if echo["req_per_s"] else None


def main():
    root = pathlib.Path(sys.argv[1])
    variants = (root / "variants.txt").read_text().split("\n")[:-1]
    reps = sorted((d for d in root.iterdir() if d.is_dir() and d.name[1:].isdigit()),
                  key=lambda d: int(d.name[1:]))
    print("| flags | load | each repetition | median | normsvc (median) |")
    print("| --- | --- | --- | ---: | ---: |")
    for i, flags in enumerate(variants):
        for label, load, kind in LOADS:
            ratios, values = [], []
            for rep in reps:
                service = measured(rep, f"v{i}_{load}")
                ratios.append(ratio(service, measured(rep, f"echo_{load}"), kind))
                if service is not None:
                    values.append(service["latency_ms"]["p50"] if kind == "latency"
                                  else service["req_per_s"])
            known = [r for r in ratios if r is not None]
            each = " / ".join("missing" if r is None else f"{r:.2f}" for r in ratios)
            median = f"{statistics.median(known):.2f}" if known else "missing"
            unit = " ms" if kind == "latency" else " req/s"
            value = f"{statistics.median(values):,.3f}{unit}" if kind == "latency" and values \
                else (f"{statistics.median(values):,.0f}{unit}" if values else "missing")
            print(f"| `{flags or '(defaults)'}` | {label} | {each} | {median} | {value} |")


if __name__ == "__main__":
    main()
