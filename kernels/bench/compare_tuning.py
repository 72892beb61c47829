#!/usr/bin/env python3
"""Runs norm_bench once per forward tuning (kernels/src/forward_tuning.h) in
one session and prints, per shape, each tuning's ratio to the copy of the
same bytes measured in its own run, and its time against the untuned run.

    python3 kernels/bench/compare_tuning.py --bench PATH/norm_bench \\
        --lib PATH/lib --out OUT_DIR [--tunings none,prefetch,ring,ring+prefetch]
        [--bench-args "--forward-only"]

Writes OUT_DIR/tuning_<name>.json (switches joined by '-') (norm_bench's JSON) and OUT_DIR/tuning.md.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys


def run(bench, lib, tuning, out_dir, extra):
    path = os.path.join(out_dir, f"tuning_{tuning.replace(',', '-')}.json")
    env = dict(os.environ)
    if lib:
        env["LD_LIBRARY_PATH"] = lib
    cmd = [bench, "--json", path, "--tuning", tuning] + extra
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    with open(path) as f:
        return json.load(f)


def key(rec):
    return (rec["kind"], rec["op"], rec["dtype"], rec["rows"], rec["hidden"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bench", required=True)
    parser.add_argument("--lib", default="")
    parser.add_argument("--out", required=True)
    parser.add_argument("--tunings", default="none,prefetch,ring,ring+prefetch",
                        help="comma-separated; '+' joins switches of one tuning")
    parser.add_argument("--bench-args", default="--forward-only")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    tunings = [t.replace("+", ",") for t in args.tunings.split(",")]
    results = {t: run(args.bench, args.lib, t, args.out, shlex.split(args.bench_args))
               for t in tunings}
    base = {key(r): r for r in results[tunings[0]]["records"]}
    names = [t.replace(",", "+") for t in tunings]
    lines = ["| kind | op | dtype | rows x H | " + " | ".join(f"{n} / copy" for n in names) +
             " | " + " | ".join(f"{n} time vs {names[0]}" for n in names[1:]) + " |",
             "| --- | --- | --- | --- | " + " | ".join("---:" for _ in names) + " | " +
             " | ".join("---:" for _ in names[1:]) + " |"]
    for k, rec in base.items():
        ratios, speed = [], []
        for t in tunings:
            other = {key(r): r for r in results[t]["records"]}.get(k)
            ratios.append(f"{other['ratio_to_copy']:.3f}" if other else "-")
            if t != tunings[0]:
                speed.append(f"{other['micros'] / rec['micros']:.3f}" if other else "-")
        lines.append(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} x {k[4]} | " + " | ".join(ratios) +
                     " | " + " | ".join(speed) + " |")
    table = "\n".join(lines)
    print(table)
    with open(os.path.join(args.out, "tuning.md"), "w") as f:
        f.write(f"device: {results[tunings[0]]['device']}\n\n{table}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
