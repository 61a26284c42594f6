#!/usr/bin/env python3
"""Summary of scripts/blindsight-throughput.sh's logs (SYNTHETIC inputs).

    blindsight_throughput_summary.py LOGS LENGTH... [--schedules SCHEDULE...]

Per CTA schedule of the wgmma kernel (tile, persistent: MMSPARSE_CTA_SCHEDULE; without
--schedules, the logs of one unnamed run):
1. BlindSight's templates on the multi-image preset: throughput on computed pairs as a share of
   dense's (bench-<n>[-<schedule>].json), against the 85% bar; with two schedules, the A/B;
   where a template ran in place (permute=0) and through its key order (permute=1) in one bench,
   that A/B (the copy of K and V into the order is inside the key order's attention time).
2. The short-tile cases of the engine bench (engine-bench[-<schedule>].txt): per kernel and key
   form, a least squares line time = fixed + chunks x per_chunk over the chunks per tile; the fixed
   cost per CTA (per tile, persistent) in chunks, the marginal TFLOP/s of one more chunk against
   dense's, and a gathered chunk's cost against a span chunk's; a diagonal (masked) chunk's extra
   cost from the diagonal form's fixed cost, a record's from the split form's cost per chunk, the
   switch from spans to gathered columns in one CTA from the mixed form's fixed cost. The last
   line gives the wgmma/128 spans' fixed cost for the plan model, from the first schedule.
3. The engine bench's sink-like plan in place against through a key order (sinks-*-<length>).
"""

import json
import os
import sys

BAR = 0.85  # the throughput on computed pairs the sink-packed kernel must reach, of dense's
# The engine bench's short-tile shape (bench/engine_bench.cu, short_tiles_plan).
HEADS = 28
HEAD_DIM = 128
SHORT_ROWS = 264 * 128
CHUNK_KEYS = 128
FLOPS_PER_PAIR_PER_DIM = 4
MODEL_KERNEL = "wgmma/128"
# The short-tile forms: whole unmasked chunks as spans or gathered columns, the last chunk the
# tile's causal diagonal, one span per chunk, and a span then one gathered chunk.
SHORT_FORMS = ("spans", "columns", "diagonal", "split", "mixed")


def suffix(schedule):
    return f"-{schedule}" if schedule else ""


def load_bench(logs, n, schedule):
    path = os.path.join(logs, f"bench-{n}{suffix(schedule)}.json")
    if not os.path.exists(path):
        return None
    with open(path) as source:
        return json.load(source)


def run_label(run):
    """The run's pattern name, with its permute value where its resolved spec has one (the bench
    labels runs by name: a template in place and through its key order share it)."""
    for parameter in run.get("spec", "").partition(":")[2].split(","):
        if parameter.startswith("permute="):
            return f"{run['pattern']}:{parameter}"
    return run["pattern"]


def templates(logs, lengths, schedule):
    print("BlindSight templates, multi-image preset (SYNTHETIC), 28 heads, 4 KV heads, d128, bf16"
          + (f", schedule {schedule}" if schedule else ""))
    print(f"{'tokens':>8} {'pattern':<31} {'pairs':>15} {'ms':>9} {'TFLOP/s':>8} {'of dense':>9} "
          f"{'bar':>5}")
    for n in lengths:
        bench = load_bench(logs, n, schedule)
        if bench is None:
            print(f"{n:>8} (no bench-{n}{suffix(schedule)}.json)")
            continue
        for layer in bench["layers"]:
            dense = layer["dense"]
            print(f"{n:>8} {'dense':<31} {dense['pairs']:>15} {dense['attention_ms']:>9.2f} "
                  f"{dense['tflops']:>8.1f} {1.0:>8.1%}")
            for run in layer["patterns"]:
                share = run.get("throughput_vs_dense", float("nan"))
                print(f"{n:>8} {run_label(run):<31} {run['computed_pairs']:>15} "
                      f"{run['attention_ms']:>9.2f} {run['tflops']:>8.1f} {share:>8.1%} "
                      f"{'ok' if share >= BAR else 'miss':>5}")


def schedule_ab(logs, lengths, schedules):
    """Each template's time and share of dense under every schedule, side by side; the last
    schedule's share also against the first's dense (dense runs under each schedule too, so that
    its own share moves with dense's time)."""
    first, last = schedules[0], schedules[-1]
    print("\nA/B of the CTA schedules: ms (share of dense's throughput on computed pairs)")
    print(f"{'tokens':>8} {'pattern':<31}" + "".join(f" {name:>20}" for name in schedules) +
          f" {'change':>8} {f'{last} of {first} dense':>24}")
    for n in lengths:
        benches = [load_bench(logs, n, schedule) for schedule in schedules]
        if any(bench is None for bench in benches):
            continue
        runs = {}
        for schedule, bench in zip(schedules, benches):
            layer = bench["layers"][0]
            runs.setdefault("dense", {})[schedule] = (layer["dense"]["attention_ms"], 1.0)
            for run in layer["patterns"]:
                runs.setdefault(run_label(run), {})[schedule] = (
                    run["attention_ms"], run.get("throughput_vs_dense", float("nan")))
        dense = runs["dense"]
        for pattern, by_schedule in runs.items():
            cells = "".join(f" {by_schedule[name][0]:>10.3f} ({by_schedule[name][1]:>6.1%})"
                            if name in by_schedule else f" {'-':>20}" for name in schedules)
            before, after = by_schedule.get(first), by_schedule.get(last)
            change = f"{after[0] / before[0] - 1:>+8.1%}" if before and after else f"{'-':>8}"
            # share x (dense's time under the last schedule / under the first): the same pairs
            # per ms against the first schedule's dense.
            against_first = (f"{after[1] * dense[first][0] / dense[last][0]:>24.1%}"
                             if after else f"{'-':>24}")
            print(f"{n:>8} {pattern:<31}{cells} {change} {against_first}")


PERMUTE_VALUES = ("permute=0", "permute=1")


def permute_ab(logs, lengths, schedule):
    """Each template in place (permute=0) against through its key order (permute=1), from the
    runs of one bench (one build, one process, one dense)."""
    rows = []
    for n in lengths:
        bench = load_bench(logs, n, schedule)
        if bench is None:
            continue
        runs = {run_label(run): run for run in bench["layers"][0]["patterns"]}
        for pattern, in_place in runs.items():
            if not pattern.endswith(":" + PERMUTE_VALUES[0]):
                continue
            name = pattern[:-len(PERMUTE_VALUES[0]) - 1]
            ordered = runs.get(f"{name}:{PERMUTE_VALUES[1]}")
            if ordered is not None:
                rows.append((n, name, in_place, ordered))
    if not rows:
        return
    print("\nKey orders" + (f", schedule {schedule}" if schedule else "") +
          ": ms and share of dense in place (permute=0) and through the key order (permute=1, "
          "the copy included)")
    print(f"{'tokens':>8} {'template':<22} {'in place ms':>11} {'share':>7} {'ordered ms':>11} "
          f"{'share':>7} {'change':>8} {'bar':>5}")
    for n, name, in_place, ordered in rows:
        share_in_place = in_place.get("throughput_vs_dense", float("nan"))
        share_ordered = ordered.get("throughput_vs_dense", float("nan"))
        change = ordered["attention_ms"] / in_place["attention_ms"] - 1.0
        print(f"{n:>8} {name:<22} {in_place['attention_ms']:>11.3f} {share_in_place:>7.1%} "
              f"{ordered['attention_ms']:>11.3f} {share_ordered:>7.1%} {change:>+8.1%} "
              f"{'ok' if share_ordered >= BAR else 'miss':>5}")


def engine_rows(logs, schedule):
    """{case: {kernel: (ms, tflops)}} and the kernels' names, from the engine bench's table."""
    path = os.path.join(logs, f"engine-bench{suffix(schedule)}.txt")
    if not os.path.exists(path):
        return {}, []
    kernels, rows = [], {}
    with open(path) as source:
        lines = source.read().splitlines()
    for line in lines:
        parts = [part.strip() for part in line.split("|")]
        if parts[0].startswith("case"):
            kernels = [part.split()[0] for part in parts[1:] if part.endswith("TFLOP/s")]
            continue
        if not kernels or len(parts) < len(kernels) + 1 or len(parts[0].split()) != 2:
            continue
        timings = {}
        for kernel, cell in zip(kernels, parts[1:1 + len(kernels)]):
            fields = cell.split()
            if len(fields) == 2 and fields[0] != "-":
                timings[kernel] = (float(fields[0]), float(fields[1]))
        rows[parts[0].split()[0]] = timings
    return rows, kernels


def key_order_cases(logs, schedule):
    """The engine bench's sink-like plan in place against through a key order (its copy inside
    the ordered time), per length and kernel."""
    rows, kernels = engine_rows(logs, schedule)
    pairs = [(name, name.replace("sinks-in-place-", "sinks-ordered-")) for name in rows
             if name.startswith("sinks-in-place-")]
    pairs = [(in_place, ordered) for in_place, ordered in pairs if ordered in rows]
    if not pairs:
        return
    print("\nKey-order cases (engine bench" + (f", schedule {schedule}" if schedule else "") +
          "): ms in place, ms through the key order (copy included), change")
    for in_place, ordered in pairs:
        for kernel in kernels:
            if kernel in rows[in_place] and kernel in rows[ordered]:
                before, after = rows[in_place][kernel][0], rows[ordered][kernel][0]
                print(f"{in_place[len('sinks-in-place-'):]:>6} {kernel:<12} {before:>9.3f} "
                      f"{after:>9.3f} {after / before - 1:>+8.1%}")


def line_fit(points):
    """Least squares (intercept, slope) of [(x, y)]."""
    count = len(points)
    mean_x = sum(x for x, _ in points) / count
    mean_y = sum(y for _, y in points) / count
    slope = (sum((x - mean_x) * (y - mean_y) for x, y in points) /
             sum((x - mean_x) ** 2 for x, _ in points))
    return mean_y - slope * mean_x, slope


def short_tiles(logs, schedule, model_line):
    rows, kernels = engine_rows(logs, schedule)
    if not any(name.startswith("short-") for name in rows):
        print(f"\n(no short-tile cases in engine-bench{suffix(schedule)}.txt)")
        return
    pairs_per_chunk_step = HEADS * SHORT_ROWS * CHUNK_KEYS  # one more chunk in every tile
    print("\nShort tiles (engine bench" + (f", schedule {schedule}" if schedule else "") +
          "): time = fixed + chunks x per_chunk, least squares over 8-64 chunks a tile")
    print(f"{'kernel':<12} {'form':<8} {'fixed ms':>9} {'chunk ms':>9} {'fixed/chunk':>11} "
          f"{'marginal TFLOP/s':>17} {'of dense-32k':>13}")
    slopes = {}
    for kernel in kernels:
        dense = rows.get("dense-32k", {}).get(kernel)
        for form in SHORT_FORMS:
            points = [(int(name.rsplit("-", 1)[1]), timings[kernel][0])
                      for name, timings in rows.items()
                      if name.startswith(f"short-{form}-") and kernel in timings]
            if len(points) < 2:
                continue
            fixed, per_chunk = line_fit(points)
            slopes[(kernel, form)] = (fixed, per_chunk)
            marginal = (FLOPS_PER_PAIR_PER_DIM * HEAD_DIM * pairs_per_chunk_step /
                        (per_chunk / 1e3) / 1e12)
            of_dense = f"{marginal / dense[1]:.1%}" if dense else "-"
            print(f"{kernel:<12} {form:<8} {fixed:>9.3f} {per_chunk:>9.4f} "
                  f"{fixed / per_chunk:>11.2f} {marginal:>17.1f} {of_dense:>13}")
    for kernel in kernels:
        if (kernel, "spans") in slopes and (kernel, "columns") in slopes:
            ratio = slopes[(kernel, "columns")][1] / slopes[(kernel, "spans")][1]
            print(f"{kernel}: a gathered chunk costs {ratio:.3f} x a span chunk")
        if (kernel, "spans") in slopes and (kernel, "diagonal") in slopes:
            extra = (slopes[(kernel, "diagonal")][0] - slopes[(kernel, "spans")][0]) / \
                slopes[(kernel, "spans")][1]
            print(f"{kernel}: a diagonal (masked) chunk costs {extra:+.2f} chunks more than an "
                  f"unmasked one")
        if (kernel, "spans") in slopes and (kernel, "split") in slopes:
            extra = slopes[(kernel, "split")][1] / slopes[(kernel, "spans")][1] - 1.0
            print(f"{kernel}: a record (span) costs {extra:+.3f} chunks")
        if all((kernel, form) in slopes for form in ("spans", "columns", "mixed")):
            spans_fixed, spans_chunk = slopes[(kernel, "spans")]
            gathered_extra = slopes[(kernel, "columns")][1] / spans_chunk - 1.0
            switch = (slopes[(kernel, "mixed")][0] - spans_fixed) / spans_chunk - gathered_extra
            print(f"{kernel}: switching from spans to gathered columns in a CTA costs "
                  f"{switch:+.2f} chunks")
    if model_line and (MODEL_KERNEL, "spans") in slopes:
        fixed, per_chunk = slopes[(MODEL_KERNEL, "spans")]
        print(f"fixed cost per CTA for the model: {fixed / per_chunk:.2f}")


def main():
    arguments = sys.argv[2:]
    schedules = [""]
    if "--schedules" in arguments:
        at = arguments.index("--schedules")
        schedules = arguments[at + 1:] or [""]
        arguments = arguments[:at]
    logs, lengths = sys.argv[1], [int(n) for n in arguments]
    for schedule in schedules:
        templates(logs, lengths, schedule)
        permute_ab(logs, lengths, schedule)
        print()
    if len(schedules) > 1:
        schedule_ab(logs, lengths, schedules)
    for index, schedule in enumerate(schedules):
        key_order_cases(logs, schedule)
        short_tiles(logs, schedule, model_line=index == 0)


if __name__ == "__main__":
    main()
