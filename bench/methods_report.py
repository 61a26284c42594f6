#!/usr/bin/env python3
"""The report side of bench/methods.py: points, Pareto curves, the README table and the pictures.

Nothing here needs torch or a GPU, so that the JSON a device run wrote can be read, tabulated and
plotted anywhere (and tested on a CPU-only machine):

    python3 bench/methods_report.py table results/methods.json [--recall 0.95]
    python3 bench/methods_report.py plot results/methods.json OUTPUT_DIR

A *point* is one method at one setting of its knob on one input, a dict with the keys of
`POINT_FIELDS`; an *input* groups the points measured on the same Q/K/V with the dense reference
time and the tile oracle of that input (docs/methods-bench.md describes every field).
"""

import argparse
import json
import math
import os
import statistics
import sys

# Every point carries these keys (None where a measure does not apply or was not available).
POINT_FIELDS = (
    "method",          # the method's name: "mmsparse vertical-slash", "minference xattention", ...
    "family",          # mmsparse, dense, minference, flexattention, flashinfer
    "knob",            # the setting of the method's main knob, as text
    "kernel",          # the attention kernel that ran the method's selection
    "recall",          # mean over heads of the mean over query rows of exp(LSE_method - LSE_dense)
    "recall_min",      # the lowest row recall over heads
    "recall_source",   # "lse" (the kernel's LSE), "sentinel probe" or "cli" (mmsparse's own report)
    "output_error",    # mean over heads of ||O_method - O_dense|| / ||O_dense||
    "needles_kept",    # needles kept (docs/report.md's verdict), None without a needle task
    "needles",         # needles planted in the input
    "density",         # computed pairs / causal pairs where the method reports it, else None
    "index_ms",        # building the method's selection (index estimation), median over rounds
    "attention_ms",    # the sparse (or dense) attention kernel, median over rounds
    "total_ms",        # index + attention, median over rounds of the per-round sums
    "round_total_ms",  # the per-round totals behind total_ms
    "note",            # anything a reader must know about this point
)

DEFAULT_RECALL = 0.95


def make_point(**fields):
    """A point with every field of POINT_FIELDS (missing ones None); unknown fields are an error."""
    unknown = set(fields) - set(POINT_FIELDS)
    if unknown:
        raise ValueError(f"point fields: unknown {sorted(unknown)}; "
                         f"expected some of {POINT_FIELDS}")
    point = {name: None for name in POINT_FIELDS}
    point.update(fields)
    return point


def finish_point(point, round_index_ms, round_attention_ms):
    """Fills the time fields of `point` from per-round index and attention times (ms)."""
    if len(round_index_ms) != len(round_attention_ms) or not round_index_ms:
        raise ValueError("round times: expected as many index as attention times, at least "
                         f"one, got {len(round_index_ms)} and {len(round_attention_ms)}")
    totals = [i + a for i, a in zip(round_index_ms, round_attention_ms)]
    point["index_ms"] = statistics.median(round_index_ms)
    point["attention_ms"] = statistics.median(round_attention_ms)
    point["total_ms"] = statistics.median(totals)
    point["round_total_ms"] = totals
    return point


# --- mmsparse's own reports (the CLI's JSON, docs/report.md) -----------------------------------

SEARCHED_METHOD = "mmsparse searched config"


def mmsparse_points_from_run(run_report, label=None):
    """One point per pattern run of `mmsparse run --compare --json` (first layer).

    The CLI measures recall, output error and needles against its own dense run on the same
    tensors; index_ms is the whole plan's build (host clock around the synchronised build) and
    attention_ms the median of its timed repeats. `label` is the knob of a config run (a searched
    config: every such run is one point of the method SEARCHED_METHOD). The engine's dense run
    becomes the point "mmsparse dense" (without `label` only, so once per input). Times are one
    round's; finish_point() takes the rounds.
    """
    layers = run_report.get("layers") or []
    if not layers:
        raise ValueError("mmsparse run report: expected at least one entry under 'layers'")
    points = []
    for pattern in layers[0].get("patterns", []):
        needles = pattern.get("needles") or {}
        name = pattern.get("pattern", "?")
        method = SEARCHED_METHOD if label else f"mmsparse {name}"
        knob = pattern.get("spec", name) if not label else label
        point = make_point(method=method, family="mmsparse", knob=knob, kernel="mmsparse engine",
                           recall=pattern.get("recall_mean"), recall_min=pattern.get("recall_min"),
                           recall_source="cli", output_error=pattern.get("output_error"),
                           needles_kept=needles.get("kept"), needles=needles.get("count"),
                           density=pattern.get("density"))
        point["index_ms"] = pattern.get("index_ms")
        point["attention_ms"] = pattern.get("attention_ms")
        points.append(point)
    dense = layers[0].get("dense")
    if dense and not label:  # the engine's own dense run, once per input (not per config run)
        point = make_point(method="mmsparse dense", family="dense", knob="dense",
                           kernel="mmsparse engine", recall=1.0, recall_min=1.0,
                           recall_source="cli", output_error=0.0, density=1.0)
        point["index_ms"], point["attention_ms"] = 0.0, dense.get("attention_ms")
        points.append(point)
    return points


def tile_oracle_from_bench(bench_report):
    """The first layer's tile oracle of `mmsparse bench --json`: [{recall, bound, cost_share}]."""
    layers = bench_report.get("layers") or []
    oracle = layers[0].get("tile_oracle") if layers else None
    if not oracle:
        return []
    return [{"recall": level["recall"], "bound": level["bound"],
             "cost_share": level.get("mean_cost_share")} for level in oracle.get("levels", [])]


def oracle_times(tile_oracle, dense_ms):
    """The tile oracle's bound as times: dense time / bound at each recall, sorted by recall."""
    if not dense_ms:
        return []
    levels = sorted(tile_oracle, key=lambda level: level["recall"])
    return [(level["recall"], dense_ms / level["bound"]) for level in levels if level.get("bound")]


# --- Curves and tables --------------------------------------------------------------------------

def _usable(point):
    return point.get("recall") is not None and point.get("total_ms") is not None and \
        not math.isnan(point["recall"]) and point["total_ms"] > 0


def pareto_front(points):
    """Points no other point beats on both recall (higher) and total time (lower), by recall."""
    usable = sorted((p for p in points if _usable(p)), key=lambda p: (-p["recall"], p["total_ms"]))
    front, best_time = [], math.inf
    for point in usable:  # from the highest recall down: keep each point faster than all above it
        if point["total_ms"] < best_time:
            front.append(point)
            best_time = point["total_ms"]
    return sorted(front, key=lambda p: p["recall"])


def by_method(points):
    """Points grouped by method name, in the order the methods first appear."""
    groups = {}
    for point in points:
        groups.setdefault(point["method"], []).append(point)
    return groups


def best_at_recall(points, recall):
    """The fastest point (total time) whose recall is at least `recall`, or None."""
    eligible = [p for p in points if _usable(p) and p["recall"] >= recall]
    return min(eligible, key=lambda p: p["total_ms"], default=None)


def dense_reference(result):
    """The input's dense point that times are compared with: cuDNN SDPA when it ran (the dense bar,
    GUIDE §5), else the fastest dense point; None without one."""
    dense = [p for p in result.get("points", []) if p["family"] == "dense" and p.get("total_ms")]
    chosen = [p for p in dense if "cudnn" in p["method"]] or dense
    return min(chosen, key=lambda p: p["total_ms"]) if chosen else None


def dense_time(result):
    reference = dense_reference(result)
    return reference["total_ms"] if reference else None


def summary_rows(result, recall=DEFAULT_RECALL):
    """Per method of one input: its best point at `recall` (None if none reaches it)."""
    rows = []
    dense_ms = dense_time(result)
    for method, points in by_method(result.get("points", [])).items():
        best = best_at_recall(points, recall)
        speedup = dense_ms / best["total_ms"] if best and dense_ms else None
        rows.append({"method": method, "best": best, "speedup_vs_dense": speedup})
    rows.sort(key=lambda row: row["best"]["total_ms"] if row["best"] else math.inf)
    return rows


def markdown_table(report, recall=DEFAULT_RECALL):
    """The README table: per input, each method's best total time at `recall` and its speedup."""
    lines = []
    for result in report.get("inputs", []):
        dense = dense_reference(result)
        dense_text = f"{dense['method']} {dense['total_ms']:.2f} ms" if dense else "not measured"
        lines.append(f"**{result['label']}** ({result.get('seq_len')} tokens; dense: {dense_text}; "
                     f"best point at recall >= {recall:.2f}, index included)"
                     f"{incomplete_note(result)}")
        lines.append("")
        lines.append("| method | setting | recall | total ms | index ms | dense / total |")
        lines.append("| --- | --- | --- | --- | --- | --- |")
        for row in summary_rows(result, recall):
            best = row["best"]
            if best is None:
                lines.append(f"| {row['method']} | - | below {recall:.2f} at every setting "
                             "| - | - | - |")
                continue
            speedup = f"{row['speedup_vs_dense']:.2f}x" if row["speedup_vs_dense"] else "-"
            lines.append(f"| {row['method']} | `{best['knob']}` | {best['recall']:.4f} | "
                         f"{best['total_ms']:.2f} | {best['index_ms']:.2f} | {speedup} |")
        skipped = result.get("skipped") or {}
        if skipped:
            by_reason = {}
            for name, why in skipped.items():
                by_reason.setdefault(why, []).append(name)
            lines.append("")
            lines.append("Not run: " + "; ".join(f"{', '.join(names)} ({why})"
                                                 for why, names in by_reason.items()))
        failed = result.get("failed") or {}
        if failed:
            lines.append("")
            lines.append("Failed (see methods.json): " + "; ".join(sorted(failed)))
        setup = result.get("setup_s") or {}
        if setup:
            lines.append("")
            lines.append("Set-up, in no point's time (s): " + ", ".join(
                f"{name} {seconds:.1f}" for name, seconds in setup.items()))
        lines.append("")
    if report.get("not_run"):
        lines.append("Inputs not run (time budget): " + ", ".join(report["not_run"]))
    return "\n".join(lines).rstrip() + "\n"


def summary_table(report, recall=DEFAULT_RECALL):
    """The README's table: one row per method, one column per input; a cell is the method's best
    total time at `recall` (index included) and dense / that time, "below" when no setting
    reaches the recall, "-" when the method has no point on the input."""
    inputs = report.get("inputs", [])
    methods = []
    for result in inputs:
        methods += [m for m in by_method(result.get("points", [])) if m not in methods]
    header = [f"{result['label']} {result.get('seq_len')}{'*' if incomplete_note(result) else ''}"
              for result in inputs]
    lines = [f"Best total time (ms, index included) at recall >= {recall:.2f}, and dense / it:",
             "", "| method | " + " | ".join(header) + " |",
             "| --- |" + " --- |" * len(inputs)]
    for method in methods:
        cells = []
        for result in inputs:
            rows = {row["method"]: row for row in summary_rows(result, recall)}
            row = rows.get(method)
            if row is None:
                cells.append("-")
            elif row["best"] is None:
                cells.append(f"below {recall:.2f}")
            else:
                speedup = f" ({row['speedup_vs_dense']:.2f}x)" if row["speedup_vs_dense"] else ""
                cells.append(f"{row['best']['total_ms']:.2f}{speedup}")
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    if any(incomplete_note(result) for result in inputs):
        lines += ["", "*: partial input (budget, timeout or failure; see the per-input table)"]
    return "\n".join(lines) + "\n"


def incomplete_note(result):
    """Why an input's points may be fewer than asked for: cut by its budget or a timeout, or it
    failed ("" for an input that ran to its end)."""
    if result.get("error"):
        return f"; FAILED after {len(result.get('points', []))} points: {result['error'][:200]}"
    if result.get("complete") is False:
        return "; INCOMPLETE: the run stopped (timeout) before this input's end"
    if result.get("skipped") and any("budget" in why for why in result["skipped"].values()):
        return "; some settings skipped by the time budget (see Not run)"
    return ""


# --- Pictures -----------------------------------------------------------------------------------

def picture_name(result):
    """The PNG's file name for one input: letters, digits, '.', '_' and '-' only."""
    safe = "".join(c if c.isalnum() or c in "._-" else "-" for c in result["label"])
    return f"methods-{safe}-{result['seq_len']}.png"


def plot_input(result, path, title_note=""):
    """Total time (log) against recall: one curve (its Pareto front) per method, every point
    marked, the tile oracle's bound as a dashed line and dense as a horizontal line."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 5.5))
    markers = "osD^v<>pXh*"
    for index, (method, points) in enumerate(by_method(result.get("points", [])).items()):
        usable = [p for p in points if _usable(p)]
        if not usable:
            continue
        if all(p["family"] == "dense" for p in usable):
            axes.axhline(min(p["total_ms"] for p in usable), linestyle=":", linewidth=1,
                         color=f"C{index % 10}", label=f"{method} (dense)")
            continue
        front = pareto_front(usable)
        marker = markers[index % len(markers)]
        axes.scatter([p["recall"] for p in usable], [p["total_ms"] for p in usable],
                     marker=marker, s=18, alpha=0.35, color=f"C{index % 10}")
        axes.plot([p["recall"] for p in front], [p["total_ms"] for p in front], marker=marker,
                  markersize=5, linewidth=1.4, color=f"C{index % 10}", label=method)
    bound = oracle_times(result.get("tile_oracle") or [], dense_time(result))
    if bound:
        axes.plot([r for r, _ in bound], [t for _, t in bound], linestyle="--", color="black",
                  linewidth=1.2, label="tile oracle bound")
    axes.set_yscale("log")
    axes.set_xlabel("recall (mean over rows of exp(LSE_method - LSE_dense))")
    axes.set_ylabel("total time, index + attention (ms, log)")
    axes.axvline(DEFAULT_RECALL, color="grey", linewidth=0.8, alpha=0.5)  # the table's recall
    # Two lines: the note (GPU, date, SYNTHETIC, partial) would run past a one-line title.
    axes.set_title(f"{result['label']}, {result['seq_len']} tokens\n{title_note.strip()}",
                   fontsize=10)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=7, loc="best")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def plot_report(report, out_dir):
    """One PNG per input with at least one point into out_dir; returns the paths written."""
    os.makedirs(out_dir, exist_ok=True)
    return [plot_input(result, os.path.join(out_dir, picture_name(result)),
                       title_note(report, result))
            for result in report.get("inputs", []) if any(map(_usable, result.get("points", [])))]


def title_note(report, result):
    synthetic = ", SYNTHETIC workload" if result.get("synthetic") else ""
    partial = ", partial" if result.get("complete") is False or result.get("error") else ""
    return f" ({report.get('gpu', 'GPU?')}, {report.get('date', '')}{synthetic}{partial})"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    table = commands.add_parser("table", help="print the README table (markdown)")
    table.add_argument("results", help="the JSON bench/methods.py wrote")
    table.add_argument("--recall", type=float, default=DEFAULT_RECALL)
    table.add_argument("--summary", action="store_true",
                       help="one row per method, one column per input (the README's table)")
    plot = commands.add_parser("plot", help="draw one PNG per input")
    plot.add_argument("results")
    plot.add_argument("out_dir")
    args = parser.parse_args(argv)
    with open(args.results) as file:
        report = json.load(file)
    if args.command == "table":
        if not 0.0 < args.recall <= 1.0:
            parser.error(f"--recall must be in (0, 1], got {args.recall}")
        write = summary_table if args.summary else markdown_table
        sys.stdout.write(write(report, args.recall))
    else:
        for path in plot_report(report, args.out_dir):
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
