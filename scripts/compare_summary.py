#!/usr/bin/env python3
"""The table of a scripts/compare-builds.sh run: base against new, case by case.

Reads, from the log folder given as the only argument, engine-bench.txt (rounds headed "## base
round N" / "## new round N", each the engine bench's table) and peers-<base|new>-r<N>.json
(bench/peers.py, one round each). Prints, per engine case and kernel and per peers row, the median
over rounds of each build's time, the change of the new build's median against the base's, and
"SLOWER" where the change exceeds the bar (2%). For peers rows it also gives the change of the
row's time relative to cuDNN's dense time in the same peers run, which cancels the clock drift
between the runs.

    python3 scripts/compare_summary.py compare-logs
"""

import glob
import json
import os
import re
import statistics
import sys

SLOWER_BAR = 0.02  # a case slower than this fraction is flagged
BUILDS = ("base", "new")
ROUND_HEADER = re.compile(r"^## (base|new) round (\d+)$")


def parse_engine(path):
    """{(case, kernel): {build: [ms per round]}} from the engine bench log."""
    times = {}
    build, kernels = None, []
    with open(path) as log:
        for line in log:
            line = line.rstrip("\n")
            header = ROUND_HEADER.match(line)
            if header:
                build = header.group(1)
                continue
            cells = [cell.strip() for cell in line.split("|")]
            if cells[0].startswith("case"):
                kernels = [cell.split()[0] for cell in cells[1:] if "TFLOP/s" in cell]
                continue
            if build is None or len(cells) <= len(kernels) or not kernels:
                continue
            case = cells[0].split()[0]
            for kernel, cell in zip(kernels, cells[1:1 + len(kernels)]):
                fields = cell.split()
                if fields and fields[0].replace(".", "", 1).isdigit():
                    per_build = times.setdefault((case, kernel), {})
                    per_build.setdefault(build, []).append(float(fields[0]))
    return times


def parse_peers(folder):
    """{(seq_len, impl, pattern): {build: [ms]}}, and the same keys' times over cuDNN's."""
    times, relative = {}, {}
    for path in sorted(glob.glob(os.path.join(folder, "peers-*-r*.json"))):
        build = os.path.basename(path).split("-")[1]
        if build not in BUILDS:
            continue
        with open(path) as file:
            rows = json.load(file)["rows"]
        cudnn = {row["seq_len"]: row["ms"] for row in rows if row["impl"] == "sdpa-cudnn"}
        for row in rows:
            key = (row["seq_len"], row["impl"], row["pattern"])
            times.setdefault(key, {}).setdefault(build, []).append(row["ms"])
            if row["seq_len"] in cudnn:
                ratio = row["ms"] / cudnn[row["seq_len"]]
                relative.setdefault(key, {}).setdefault(build, []).append(ratio)
    return times, relative


def change_cells(per_build):
    """Median of each build, the change, and the flag; None when a build has no value."""
    if not all(per_build.get(build) for build in BUILDS):
        return None
    base, new = (statistics.median(per_build[build]) for build in BUILDS)
    change = new / base - 1.0
    return base, new, change, "SLOWER" if change > SLOWER_BAR else ""


def print_engine(times):
    print("Engine bench, ms (median over rounds; rounds per build: "
          f"{max((len(v) for t in times.values() for v in t.values()), default=0)})")
    print(f"{'case':<24} {'kernel':<12} {'base':>10} {'new':>10} {'change':>8}")
    for (case, kernel), per_build in times.items():
        cells = change_cells(per_build)
        if cells:
            base, new, change, flag = cells
            print(f"{case:<24} {kernel:<12} {base:>10.3f} {new:>10.3f} {change:>+8.2%} {flag}")


def print_peers(times, relative):
    print("\nbench/peers.py, ms (median over runs), and the change of the time over cuDNN dense's")
    print(f"{'seq_len':>8} {'impl':<14} {'pattern':<8} {'base':>10} {'new':>10} {'change':>8} "
          f"{'vs cuDNN':>9}")
    for key, per_build in times.items():
        cells = change_cells(per_build)
        if not cells:
            continue
        base, new, change, flag = cells
        relative_cells = change_cells(relative.get(key, {}))
        relative_text = f"{relative_cells[2]:>+9.2%}" if relative_cells else f"{'':>9}"
        seq_len, impl, pattern = key
        print(f"{seq_len:>8} {impl:<14} {pattern:<8} {base:>10.2f} {new:>10.2f} {change:>+8.2%} "
              f"{relative_text} {flag}")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: compare_summary.py LOG_FOLDER")
    folder = sys.argv[1]
    engine_log = os.path.join(folder, "engine-bench.txt")
    if os.path.exists(engine_log):
        print_engine(parse_engine(engine_log))
    print_peers(*parse_peers(folder))


if __name__ == "__main__":
    main()
