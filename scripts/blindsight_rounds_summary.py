#!/usr/bin/env python3
"""Summary of scripts/blindsight-rounds.sh: each pattern's time per round, its share of the same
round's dense run (throughput on computed pairs) and the median share; beside it the share against
the bench's dense reference, measured before the CPU oracle step, for comparison.

    scripts/blindsight_rounds_summary.py LOGS_DIR
"""
import glob
import json
import re
import statistics
import sys


def read_rounds(logs):
    rows = {}
    for path in sorted(glob.glob(f"{logs}/bench-*-r*.json")):
        match = re.search(r"bench-(\d+)-r(\d+)\.json$", path)
        if not match:
            continue
        layer = json.load(open(path))["layers"][0]
        runs = layer["patterns"]
        dense = next((run for run in runs if run["spec"] == "dense"), None)
        if dense is None:
            sys.exit(f"{path}: expected a run of the pattern 'dense' among the patterns")
        dense_rate = dense["computed_pairs"] / dense["attention_ms"]
        for run in runs:
            share = run["computed_pairs"] / run["attention_ms"] / dense_rate
            name = run["spec"].split(",")[0]
            rows.setdefault((int(match.group(1)), name), []).append(
                (int(match.group(2)), run["attention_ms"], share, run.get("throughput_vs_dense")))
    return rows


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    rows = read_rounds(sys.argv[1])
    if not rows:
        sys.exit(f"{sys.argv[1]}: no bench-<tokens>-r<round>.json files")
    print("BlindSight's key-ordered templates against dense in alternating rounds (SYNTHETIC")
    print("multi-image preset); share: of the same round's dense run")
    for (tokens, name), values in sorted(rows.items()):
        values.sort()
        times = " ".join(f"{v[1]:.3f}" for v in values)
        shares = " ".join(f"{v[2] * 100:.1f}" for v in values)
        reference = " ".join(f"{v[3] * 100:.1f}" for v in values if v[3] is not None)
        median = statistics.median(v[2] for v in values) * 100
        print(f"{tokens:>7} {name:<40} ms {times}")
        print(f"{'':>7} {'':<40} share {shares} | median {median:.1f}% | vs reference {reference}")


if __name__ == "__main__":
    main()
