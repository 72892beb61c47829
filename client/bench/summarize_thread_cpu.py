#!/usr/bin/env python3
"""Prints thread_cpu.sh's table: req/s, latency, the server's CPU per request by thread group,
and its context switches per request.

usage: summarize_thread_cpu.py OUT_DIR CLOCK_TICKS_PER_SECOND
The CPU and the switches of a run (warm-up included) are divided by every
request answered in it (normload's totals, warm-up included). Snapshots
written before context switches were recorded ("NAME TICKS" lines) give
no switch figures.
"""
import json
import pathlib
import sys


def snapshot(path):
    """{group: (ticks, voluntary switches, involuntary switches)}; switches None when absent."""
    groups = {}
    for line in path.read_text().splitlines():
        fields = line.split(" ")
        if len(fields) >= 4:
            groups[fields[0]] = (int(fields[1]), int(fields[2]), int(fields[3]))
        else:
            groups[fields[0]] = (int(fields[1]), None, None)
    return groups


def main():
    directory = pathlib.Path(sys.argv[1])
    tick_us = 1e6 / float(sys.argv[2])
    runs = sorted(p.stem for p in directory.glob("*.c*.json"))
    print("| run | req/s | GB/s | p50 ms | p99 ms | server CPU us/request | by thread group (us/request) "
          "| context switches/request (voluntary + involuntary) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: |")
    for run in runs:
        report = json.loads((directory / f"{run}.json").read_text())
        measured = report["measured"]
        answered = report["totals"]["ok"]
        before = snapshot(directory / f"{run}.t0")
        after = snapshot(directory / f"{run}.t1")
        # Per group: ticks, voluntary and involuntary switches during the run
        # (switches None in snapshots that lack them).
        spent = {name: [None if a is None else a - (b or 0)
                        for a, b in zip(value, before.get(name, (0, 0, 0)))]
                 for name, value in after.items()}
        per_group = {name: d[0] * tick_us / answered for name, d in spent.items() if answered}
        switches = "n/a"
        if answered and all(d[1] is not None for d in spent.values()):
            switches = f"{sum(d[1] + d[2] for d in spent.values()) / answered:.2f}"
        shown = ", ".join(f"{name} {us:.0f}" for name, us in
                          sorted(per_group.items(), key=lambda item: -item[1]) if us >= 0.5)
        print(f"| {run} | {measured['req_per_s']:,.0f} | {measured['gb_per_s']:.2f} | "
              f"{measured['latency_ms']['p50']:.3f} | "
              f"{measured['latency_ms']['p99']:.3f} | {sum(per_group.values()):.0f} | {shown} | "
              f"{switches} |")


if __name__ == "__main__":
    main()
