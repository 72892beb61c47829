#!/usr/bin/env python3
"""Prints thread_cpu.sh's table: req/s, latency, the server's CPU per request by thread group,
its context switches per request, the host's busy cores and what the rest of the host (the
load generator, mostly) spent per request.

usage: summarize_thread_cpu.py OUT_DIR CLOCK_TICKS_PER_SECOND
The CPU and the switches of a run (warm-up included) are divided by every
request answered in it (normload's totals, warm-up included). Snapshots
written before context switches were recorded ("NAME TICKS" lines) give
no switch figures; runs without host snapshots (.s0/.s1) give no host figures,
and a folder without host_cpus counts the CPUs of the machine summarizing it.
"""
import json
import os
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


def host_ticks(path):
    """(busy, total) clock ticks of the host's first /proc/stat line; busy excludes idle and
    iowait."""
    fields = [int(v) for v in path.read_text().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


def host_figures(directory, run, cpus, tick_us, answered, server_us):
    """'busy cores | rest us/request' for the run, or 'n/a | n/a' without snapshots."""
    start, end = directory / f"{run}.s0", directory / f"{run}.s1"
    if not (start.exists() and end.exists()) or not answered:
        return "n/a | n/a"
    (busy0, total0), (busy1, total1) = host_ticks(start), host_ticks(end)
    if total1 <= total0:
        return "n/a | n/a"
    busy_cores = cpus * (busy1 - busy0) / (total1 - total0)
    rest_us = (busy1 - busy0) * tick_us / answered - server_us
    return f"{busy_cores:.1f} of {cpus} | {rest_us:.0f}"


def main():
    directory = pathlib.Path(sys.argv[1])
    tick_us = 1e6 / float(sys.argv[2])
    runs = sorted(p.stem for p in directory.glob("*.c*.json"))
    # The CPUs of the host that ran the loads (thread_cpu.sh records them),
    # not of the one summarizing.
    cpus_file = directory / "host_cpus"
    cpus = int(cpus_file.read_text()) if cpus_file.exists() else os.cpu_count()
    print("| run | req/s | GB/s | p50 ms | p99 ms | server CPU us/request | by thread group (us/request) "
          "| context switches/request (voluntary + involuntary) | host busy cores "
          "| rest of the host us/request |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |")
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
        server_us = sum(per_group.values())
        print(f"| {run} | {measured['req_per_s']:,.0f} | {measured['gb_per_s']:.2f} | "
              f"{measured['latency_ms']['p50']:.3f} | "
              f"{measured['latency_ms']['p99']:.3f} | {server_us:.0f} | {shown} | {switches} | "
              f"{host_figures(directory, run, cpus, tick_us, answered, server_us)} |")


if __name__ == "__main__":
    main()
