#!/usr/bin/env python3
"""Prints the service-vs-echo table (markdown) from service_vs_echo.sh's JSON files.

usage: summarize_service_bench.py OUT_DIR

OUT_DIR holds one repetition's JSON files, or one folder per repetition
(r1, r2, ...): then each repetition's table is printed, and the median of
each row's ratio over the repetitions (every ratio is taken within one
repetition, echo and normsvc run back to back).
"""
import json
import pathlib
import statistics
import sys

# (label, normsvc run, echo run, bar); a label with ", 1 in flight" compares
# p50 latencies, the others req/s (bytes/s in the same proportion).
BAR_ROWS = [
    ("1x4096 fp32, 64 in flight", "normsvc_1x4096_c64", "echo_1x4096_c64",
     ">= 0.80 of echo req/s, p99 <= 3 ms"),
    ("16x4096 fp32, 64 in flight", "normsvc_16x4096_c64", "echo_16x4096_c64",
     ">= 0.80 of echo bytes/s"),
    ("1x4096 fp32, 1 in flight", "normsvc_1x4096_c1", "echo_1x4096_c1", "p50 <= 1.3x echo p50"),
    ("1x4096 fp32, registered gamma/beta, 64 in flight", "normsvc_1x4096r_c64",
     "echo_1x4096r_c64", "(the same bars, requests of the tensor alone)"),
    ("16x4096 fp32, registered gamma/beta, 64 in flight", "normsvc_16x4096r_c64",
     "echo_16x4096r_c64", "(the same bars, requests of the tensor alone)"),
    # The idle spin's diagnostic run: off (its default, -1, turns it on where
    # the process may use 8 or more CPUs); runs made while it was off by
    # default measured it on instead.
    ("1x4096 fp32, 1 in flight, --idle_spin_us=500", "normsvc_spin_1x4096_c1", "echo_1x4096_c1",
     "(diagnostic)"),
    ("1x4096 fp32, 1 in flight, --idle_spin_us=0", "normsvc_nospin_1x4096_c1", "echo_1x4096_c1",
     "(diagnostic)"),
    ("1x4096 fp32, 64 in flight, every response verified", "normsvc_1x4096_c64_verified",
     "echo_1x4096_c64", "(correctness: 0 wrong)"),
    ("16x4096 fp32, 64 in flight, every response verified", "normsvc_16x4096_c64_verified",
     "echo_16x4096_c64", "(correctness: 0 wrong)"),
]
OPTIONAL = {"normsvc_1x4096r_c64", "normsvc_16x4096r_c64", "normsvc_spin_1x4096_c1",
            "normsvc_nospin_1x4096_c1"}


def load(directory, name):
    path = directory / f"{name}.json"
    if not path.exists():
        return None
    return json.loads(path.read_text())["measured"]


def ratio(label, service, echo):
    if ", 1 in flight" in label:
        # The latency rows: the ratio of the medians (their bar's measure).
        return service["latency_ms"]["p50"] / echo["latency_ms"]["p50"]
    return service["req_per_s"] / echo["req_per_s"] if echo["req_per_s"] else float("nan")


def row(label, service, echo, bar):
    if service is None or echo is None:
        return f"| {label} | missing | missing | | {bar} |"
    return (f"| {label} | {service['req_per_s']:,.0f} req/s, {service['gb_per_s']:.2f} GB/s, "
            f"p50 {service['latency_ms']['p50']:.3f} ms, p99 {service['latency_ms']['p99']:.3f} ms, "
            f"{service['errors']} errors, {service.get('verify_failures', 0)} wrong | "
            f"{echo['req_per_s']:,.0f} req/s, {echo['gb_per_s']:.2f} GB/s, "
            f"p50 {echo['latency_ms']['p50']:.3f} ms, p99 {echo['latency_ms']['p99']:.3f} ms | "
            f"{ratio(label, service, echo):.2f} | {bar} |")


def batching(directory):
    """The default batcher's req/s over --max_batch_rows 1's, or None."""
    batched = load(directory, "normsvc_1x4096_c64")
    unbatched = load(directory, "normsvc_rows1_1x4096_c64")
    if batched and unbatched and unbatched["req_per_s"]:
        return batched["req_per_s"], unbatched["req_per_s"]
    return None


def table(directory):
    print("| load | normsvc | echo (same bytes) | normsvc / echo | bar |")
    print("| --- | --- | --- | --- | --- |")
    for label, service, echo, bar in BAR_ROWS:
        if service in OPTIONAL and load(directory, service) is None:
            continue
        print(row(label, load(directory, service), load(directory, echo), bar))
    pair = batching(directory)
    if pair:
        print(f"\nBatching: {pair[0]:,.0f} req/s with the default batcher against "
              f"{pair[1]:,.0f} req/s with --max_batch_rows 1 "
              f"({pair[0] / pair[1]:.1f}x; bar >= 10x).")


def medians(repetitions):
    print(f"### Median over {len(repetitions)} repetitions\n")
    print("| load | normsvc / echo, each repetition | median | bar |")
    print("| --- | --- | ---: | --- |")
    for label, service, echo, bar in BAR_ROWS:
        if bar.startswith("(correctness"):
            continue  # their point is "0 wrong", in each repetition's table
        ratios = []
        for directory in repetitions:
            s, e = load(directory, service), load(directory, echo)
            if s is not None and e is not None:
                ratios.append(ratio(label, s, e))
        if ratios:
            each = " / ".join(f"{r:.2f}" for r in ratios)
            print(f"| {label} | {each} | {statistics.median(ratios):.2f} | {bar} |")
    factors = [p[0] / p[1] for p in (batching(d) for d in repetitions) if p]
    if factors:
        each = " / ".join(f"{f:.1f}x" for f in factors)
        print(f"| batching: default against --max_batch_rows 1 | {each} | "
              f"{statistics.median(factors):.1f}x | >= 10x |")


def main():
    directory = pathlib.Path(sys.argv[1])
    repetitions = sorted((d for d in directory.glob("r[0-9]*") if d.is_dir()),
                         key=lambda d: int(d.name[1:]))
    if not repetitions:
        table(directory)
        return
    for d in repetitions:
        print(f"### Repetition {d.name[1:]}\n")
        table(d)
        print()
    medians(repetitions)


if __name__ == "__main__":
    main()
