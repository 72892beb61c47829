#!/usr/bin/env python3
"""Where a kernel's warps wait, from Nsight Compute's per-instruction export.

Reads the CSV that

  ncu --section SourceCounters --section WarpStateStats --page source \
      --print-source sass --csv ... > kernel.csv

writes for one profiled launch, and prints: the warp instructions executed
and the warp-state samples, the five largest stall reasons, the opcodes by
share of instructions and of samples, and the instructions with the most
samples with their two largest stall reasons (the index is the row in the
SASS listing, so neighbouring rows show what a stalled instruction waits
for: a load right before its first consumer is a load that nothing hides).

usage: sass_summary.py KERNEL.csv [TOP]   (TOP: instructions listed, default 12)
"""
import collections
import csv
import sys


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) >= 2 else 2
    top = int(argv[2]) if len(argv) > 2 else 12
    with open(argv[1], newline="") as f:
        lines = f.readlines()
    header_at = [i for i, line in enumerate(lines) if line.startswith('"Address"')]
    if not header_at:
        print(f"sass_summary: {argv[1]} has no per-instruction table", file=sys.stderr)
        return 1
    rows = list(csv.reader(lines[header_at[0]:]))
    header, rows = rows[0], rows[1:]
    executed = header.index("Instructions Executed")
    source = header.index("Source")
    samples = header.index("Warp Stall Sampling (All Samples)")
    stalls = [i for i, h in enumerate(header) if h.startswith("stall_") and "Not Issued" not in h]

    def count(row, i):
        return int(row[i] or 0)

    total = sum(count(r, executed) for r in rows) or 1
    sampled = sum(count(r, samples) for r in rows) or 1
    reasons = collections.Counter()
    for r in rows:
        for i in stalls:
            reasons[header[i][len("stall_"):]] += count(r, i)
    print(f"{argv[1]}: {total} warp instructions, {sampled} samples; stalls: "
          + ", ".join(f"{k} {v / sampled:.0%}" for k, v in reasons.most_common(5)))
    by_op = collections.Counter()
    by_op_samples = collections.Counter()
    for r in rows:
        words = r[source].split()
        if not words:
            continue
        op = (words[1] if words[0].startswith("@") and len(words) > 1 else words[0]).split(".")[0]
        by_op[op] += count(r, executed)
        by_op_samples[op] += count(r, samples)
    print("opcodes (instructions / samples): "
          + ", ".join(f"{k} {v / total:.0%}/{by_op_samples[k] / sampled:.0%}"
                      for k, v in by_op.most_common(12)))
    hottest = sorted(range(len(rows)), key=lambda k: -count(rows[k], samples))[:top]
    for k in sorted(hottest):
        r = rows[k]
        why = sorted(((count(r, i), header[i][len("stall_"):]) for i in stalls), reverse=True)[:2]
        print(f"  {k:5d} {r[source].strip()[:60]:60s} executed {r[executed]:>8s} "
              f"samples {r[samples]:>5s} " + ", ".join(f"{n} {w}" for n, w in why))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
