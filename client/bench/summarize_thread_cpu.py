#!/usr/bin/env python3
"""Prints thread_cpu.sh's table: req/s, latency and the server's CPU per request by thread group.

usage: summarize_thread_cpu.py OUT_DIR CLOCK_TICKS_PER_SECOND
The CPU of a run (warm-up included) is divided by every request answered in
it (normload's totals, warm-up included).
"""
import json
import pathlib
import sys


def ticks(path):
    groups = {}
    for line in path.read_text().splitlines():
        name, value = line.rsplit(" ", 1)
        groups[name] = int(value)
    return groups


def main():
    directory = pathlib.Path(sys.argv[1])
    tick_us = 1e6 / float(sys.argv[2])
    runs = sorted(p.stem for p in directory.glob("*.c*.json"))
    print("| run | req/s | GB/s | p50 ms | p99 ms | server CPU us/request | by thread group (us/request) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for run in runs:
        report = json.loads((directory / f"{run}.json").read_text())
        measured = report["measured"]
        answered = report["totals"]["ok"]
        before = ticks(directory / f"{run}.t0")
        after = ticks(directory / f"{run}.t1")
        per_group = {name: (after[name] - before.get(name, 0)) * tick_us / answered
                     for name in after if answered}
        shown = ", ".join(f"{name} {us:.0f}" for name, us in
                          sorted(per_group.items(), key=lambda item: -item[1]) if us >= 0.5)
        print(f"| {run} | {measured['req_per_s']:,.0f} | {measured['gb_per_s']:.2f} | "
              f"{measured['latency_ms']['p50']:.3f} | "
              f"{measured['latency_ms']['p99']:.3f} | {sum(per_group.values()):.0f} | {shown} |")


if __name__ == "__main__":
    main()
