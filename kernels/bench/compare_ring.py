#!/usr/bin/env python3
"""Runs norm_bench once per ring policy (kernels/src/ring_policy.h) in one
session and prints, per shape, each policy's ratio to the copy of the same
bytes measured in its own run, and its time against the first policy's.

    python3 kernels/bench/compare_ring.py --bench PATH/norm_bench \\
        --lib PATH/lib --out OUT_DIR [--policies off,two-block-clusters,every-plan]
        [--bench-args "--forward-only"]

Writes OUT_DIR/ring_<policy>.json (norm_bench's JSON) and OUT_DIR/ring.md.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys


def run(bench, lib, policy, out_dir, extra):
    path = os.path.join(out_dir, f"ring_{policy}.json")
    env = dict(os.environ)
    if lib:
        env["LD_LIBRARY_PATH"] = lib
    cmd = [bench, "--json", path, "--ring", policy] + extra
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
    parser.add_argument("--policies", default="off,two-block-clusters,every-plan",
                        help="comma-separated --ring values")
    parser.add_argument("--bench-args", default="--forward-only")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    policies = args.policies.split(",")
    results = {t: run(args.bench, args.lib, t, args.out, shlex.split(args.bench_args))
               for t in policies}
    base = {key(r): r for r in results[policies[0]]["records"]}
    names = policies
    lines = ["| kind | op | dtype | rows x H | " + " | ".join(f"{n} / copy" for n in names) +
             " | " + " | ".join(f"{n} time vs {names[0]}" for n in names[1:]) + " |",
             "| --- | --- | --- | --- | " + " | ".join("---:" for _ in names) + " | " +
             " | ".join("---:" for _ in names[1:]) + " |"]
    for k, rec in base.items():
        ratios, speed = [], []
        for t in policies:
            other = {key(r): r for r in results[t]["records"]}.get(k)
            ratios.append(f"{other['ratio_to_copy']:.3f}" if other else "-")
            if t != policies[0]:
                speed.append(f"{other['micros'] / rec['micros']:.3f}" if other else "-")
        lines.append(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} x {k[4]} | " + " | ".join(ratios) +
                     " | " + " | ".join(speed) + " |")
    table = "\n".join(lines)
    print(table)
    with open(os.path.join(args.out, "ring.md"), "w") as f:
        f.write(f"device: {results[policies[0]]['device']}\n\n{table}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
