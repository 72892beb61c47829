#!/usr/bin/env python3
"""Prints the service-vs-echo table (markdown) from service_vs_echo.sh's JSON files."""
import json
import pathlib
import sys


def load(directory, name):
    path = directory / f"{name}.json"
    if not path.exists():
        return None
    return json.loads(path.read_text())["measured"]


def row(label, service, echo, bar):
    if service is None or echo is None:
        return f"| {label} | missing | missing | | | {bar} |"
    ratio = service["req_per_s"] / echo["req_per_s"] if echo["req_per_s"] else float("nan")
    if ", 1 in flight" in label:
        # The latency rows: the ratio of the medians (their bar's measure).
        ratio = service["latency_ms"]["p50"] / echo["latency_ms"]["p50"]
    return (f"| {label} | {service['req_per_s']:,.0f} req/s, {service['gb_per_s']:.2f} GB/s, "
            f"p50 {service['latency_ms']['p50']:.3f} ms, p99 {service['latency_ms']['p99']:.3f} ms, "
            f"{service['errors']} errors, {service.get('verify_failures', 0)} wrong | "
            f"{echo['req_per_s']:,.0f} req/s, {echo['gb_per_s']:.2f} GB/s, "
            f"p50 {echo['latency_ms']['p50']:.3f} ms, p99 {echo['latency_ms']['p99']:.3f} ms | "
            f"{ratio:.2f} | {bar} |")


def main():
    directory = pathlib.Path(sys.argv[1])
    print("| load | normsvc | echo (same bytes) | normsvc / echo | bar |")
    print("| --- | --- | --- | --- | --- |")
    print(row("1x4096 fp32, 64 in flight", load(directory, "normsvc_1x4096_c64"),
              load(directory, "echo_1x4096_c64"), ">= 0.80 of echo req/s, p99 <= 3 ms"))
    print(row("16x4096 fp32, 64 in flight", load(directory, "normsvc_16x4096_c64"),
              load(directory, "echo_16x4096_c64"), ">= 0.80 of echo bytes/s"))
    print(row("1x4096 fp32, 1 in flight", load(directory, "normsvc_1x4096_c1"),
              load(directory, "echo_1x4096_c1"), "p50 <= 1.3x echo p50"))
    for name, label in (("1x4096r_c64", "1x4096 fp32, registered gamma/beta, 64 in flight"),
                        ("16x4096r_c64", "16x4096 fp32, registered gamma/beta, 64 in flight")):
        if load(directory, f"normsvc_{name}") is not None:
            print(row(label, load(directory, f"normsvc_{name}"), load(directory, f"echo_{name}"),
                      "(the same bars, requests of the tensor alone)"))
    # The idle spin's diagnostic run: off (its default, -1, turns it on where
    # the process may use 8 or more CPUs); runs made while it was off by
    # default measured it on instead.
    for name, label in (("normsvc_spin_1x4096_c1", "--idle_spin_us=500"),
                        ("normsvc_nospin_1x4096_c1", "--idle_spin_us=0")):
        if load(directory, name) is not None:
            print(row(f"1x4096 fp32, 1 in flight, {label}", load(directory, name),
                      load(directory, "echo_1x4096_c1"), "(diagnostic)"))
    print(row("1x4096 fp32, 64 in flight, every response verified",
              load(directory, "normsvc_1x4096_c64_verified"), load(directory, "echo_1x4096_c64"),
              "(correctness: 0 wrong)"))
    print(row("16x4096 fp32, 64 in flight, every response verified",
              load(directory, "normsvc_16x4096_c64_verified"), load(directory, "echo_16x4096_c64"),
              "(correctness: 0 wrong)"))
    batched = load(directory, "normsvc_1x4096_c64")
    unbatched = load(directory, "normsvc_rows1_1x4096_c64")
    if batched and unbatched and unbatched["req_per_s"]:
        print(f"\nBatching: {batched['req_per_s']:,.0f} req/s with the default batcher against "
              f"{unbatched['req_per_s']:,.0f} req/s with --max_batch_rows 1 "
              f"({batched['req_per_s'] / unbatched['req_per_s']:.1f}x; bar >= 10x).")


if __name__ == "__main__":
    main()
