#!/usr/bin/env python3
"""Fit the plan model's cost constants to measured BlindSight throughput (SYNTHETIC inputs).

    blindsight_cost_fit.py PLAN_MODEL_OUTPUT SUMMARY [SUMMARY...]

PLAN_MODEL_OUTPUT: what `mmsparse-plan-model --seq-len ...` prints; its "cost basis" table counts,
per pattern and tile class, every term the model weighs (CTAs, chunks two or one warpgroup
computes, masked, gathered and partial chunks, records read). SUMMARY: a
scripts/blindsight_throughput_summary.py output whose template table gives the measured
throughput on computed pairs as a share of dense's; several runs are averaged, their spread is the
noise the fit is judged against.

The model: a pattern's time is proportional to its cost, the sum over tiles of
    cta x CTAs + two-warpgroup chunks + one_warpgroup x one-warpgroup chunks + skipped x skipped
    + masked_extra x masked + gathered_extra x gathered + partial_extra x partial
    + record x records
in units of one full chunk (the schedule's imbalance, under 0.3% in the model, is left out). Its
throughput on computed pairs over dense's is (pairs / cost) over dense's (pairs / cost) at the same
length. The script prints the assumed constants' error, each constant fitted alone, the four
constants fitted together within physical bounds (and the range of each that fits within the
runs' spread, or a quarter point of the best fit), the same with a cost per partial chunk and per record, and what removing each extra cost
would gain.
"""

import itertools
import math
import sys

# name: (count column, tile class or None for every class, assumed value, lower bound, upper
# bound). The assumed values are the plan
# model's defaults (tools/plan_model/main.cpp, CostModel) except the fixed cost per CTA, the
# short-tile engine bench's fit. The bounds are physical: a CTA's fixed cost is not negative, a
# one-warpgroup chunk costs between half a chunk (no overlap lost) and a whole one, extras are not
# negative and stay under a whole chunk's cost of extra work for masks, one of gathering.
# Three extensions, assumed 0, ask whether a cost the model lacks fits better: a partial chunk
# costing more than a full one, a cost per record (span or column run) read, and an extra cost per
# chunk of the text tiles (rows gathered from text runs, the longest CTAs).
CONSTANTS = {
    "cta": ("tiles", None, 2.98, 0.0, 16.0),
    "one_warpgroup": ("one-wg", None, 0.6, 0.5, 1.0),
    "masked_extra": ("masked", None, 0.15, 0.0, 1.5),
    "gathered_extra": ("gathered", None, 0.15, 0.0, 1.0),
    "partial_extra": ("partial", None, 0.0, 0.0, 1.0),
    "record": ("records", None, 0.0, 0.0, 2.0),
    "text_chunk_extra": ("chunks", "text", 0.0, 0.0, 1.0),
}
BASE = ["cta", "one_warpgroup", "masked_extra", "gathered_extra"]
EXTENSIONS = ["partial_extra", "record", "text_chunk_extra"]
FIXED_TERMS = {"two-wg": 1.0, "skipped": 0.05}  # a full chunk; a chunk every warpgroup skips
COUNT_COLUMNS = ["tiles", "chunks", "two-wg", "one-wg", "skipped", "masked", "gathered", "partial",
                 "records"]
GRID_STEPS = 9  # points per constant in each refinement of the grid search
GRID_STEPS_MANY = 7  # the same when more than four constants are free
GRID_ZOOMS = 5  # refinements, each around the best point at a third of the previous span
PROFILE_STEPS = 41  # values of one constant whose best fit is checked against the noise
PROFILE_SLACK = 0.0025  # a profile's tolerance at least the best fit's error plus this (shares)


def parse_cost_basis(text):
    """{(tokens, pattern): {"pairs": int, column: count summed over tile classes,
    (column, class): count in that class}}."""
    lines = text.splitlines()
    try:
        start = lines.index("cost basis") + 2
    except ValueError:
        raise SystemExit("plan model output: no 'cost basis' table (an older mmsparse-plan-model?)")
    basis = {}
    for line in lines[start:]:
        parts = line.split()
        if len(parts) != 4 + len(COUNT_COLUMNS):
            break
        key = (int(parts[0]), parts[1])
        entry = basis.setdefault(key, {column: 0 for column in COUNT_COLUMNS})
        if parts[3] != "-":
            entry["pairs"] = int(parts[3])
        for column, value in zip(COUNT_COLUMNS, parts[4:]):
            entry[column] += int(value)
            entry[(column, parts[2])] = int(value)
    return basis


def parse_measured(text):
    """{(tokens, pattern): (pairs, share)} from a throughput summary's template table."""
    measured = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 6 or not parts[0].isdigit() or not parts[5].endswith("%"):
            continue
        try:
            measured[(int(parts[0]), parts[1])] = (int(parts[2]), float(parts[5][:-1]) / 100.0)
        except ValueError:
            continue
    return measured


class Fit:
    """The measured points, each a sparse pattern's counts, dense's counts and measured shares."""

    def __init__(self, basis, runs):
        self.points = []
        for key in sorted(runs[0]):
            tokens, pattern = key
            if pattern == "dense" or not all(key in run for run in runs):
                continue
            if key not in basis or (tokens, "dense") not in basis:
                raise SystemExit(f"plan model output: no cost basis for {pattern} at {tokens}")
            pairs = runs[0][key][0]
            if pairs % basis[key]["pairs"] != 0:
                raise SystemExit(f"{pattern} at {tokens}: measured pairs {pairs} are not a multiple"
                                 f" of the model's {basis[key]['pairs']} (another layout?)")
            shares = [run[key][1] for run in runs]
            self.points.append((key, basis[key], basis[(tokens, "dense")], shares))
        if not self.points:
            raise SystemExit("no measured sparse pattern matches the plan model's output")

    @staticmethod
    def cost(counts, constants):
        total = sum(weight * counts[column] for column, weight in FIXED_TERMS.items())
        for name, value in constants.items():
            column, tile_class = CONSTANTS[name][:2]
            total += value * counts.get((column, tile_class) if tile_class else column, 0)
        return total

    def predict(self, constants, point):
        _, sparse, dense, _ = point
        return (sparse["pairs"] / self.cost(sparse, constants)) / (
            dense["pairs"] / self.cost(dense, constants))

    def rms(self, constants):
        """Root mean square of prediction minus the runs' mean share, in share units."""
        errors = [self.predict(constants, p) - sum(p[3]) / len(p[3]) for p in self.points]
        return math.sqrt(sum(e * e for e in errors) / len(errors))

    def noise(self):
        """Root mean square of the runs' deviations from their mean share."""
        deviations = [s - sum(p[3]) / len(p[3]) for p in self.points for s in p[3]]
        return math.sqrt(sum(d * d for d in deviations) / len(deviations))

    def best(self, free, fixed):
        """Grid search over the free constants within their bounds, the others fixed."""
        bounds = {name: CONSTANTS[name][3:] for name in free}
        best_constants, best_rms = None, math.inf
        steps = GRID_STEPS if len(free) <= len(BASE) else GRID_STEPS_MANY
        for _ in range(GRID_ZOOMS):
            axes = [[low + (high - low) * i / (steps - 1) for i in range(steps)]
                    for low, high in (bounds[name] for name in free)]
            for values in itertools.product(*axes):
                constants = dict(fixed, **dict(zip(free, values)))
                error = self.rms(constants)
                if error < best_rms:
                    best_constants, best_rms = constants, error
            for name in free:
                low, high = CONSTANTS[name][3:]
                span = (bounds[name][1] - bounds[name][0]) / 3.0
                centre = best_constants[name]
                bounds[name] = (max(low, centre - span / 2), min(high, centre + span / 2))
        return best_constants, best_rms

    def profile(self, name, free, fixed, tolerance):
        """The range of `name` whose best fit over the other free constants stays within
        `tolerance`, or None."""
        low, high = CONSTANTS[name][3:]
        others = [other for other in free if other != name]
        inside = []
        for i in range(PROFILE_STEPS):
            value = low + (high - low) * i / (PROFILE_STEPS - 1)
            _, error = self.best(others, dict(fixed, **{name: value}))
            if error <= tolerance:
                inside.append(value)
        return (min(inside), max(inside)) if inside else None


def assumed(names):
    return {name: CONSTANTS[name][2] for name in names}


def show(fit, title, constants):
    values = ", ".join(f"{name} {value:.3f}" for name, value in constants.items())
    print(f"{title}: {values}; rms error {100 * fit.rms(constants):.2f} points")
    for point in fit.points:
        (tokens, pattern), _, _, shares = point
        mean = sum(shares) / len(shares)
        print(f"  {tokens:>8} {pattern:<22} measured {100 * mean:5.1f}%  "
              f"model {100 * fit.predict(constants, point):5.1f}%")


def gains(fit, constants):
    """What each extra cost's removal would give each pattern, in share points."""
    print("one cost changed (the rest as fitted), model share gain in points:")
    changes = [("cta", CONSTANTS["cta"][2], "cta at the short-tile bench's value")]
    changes += [(name, 0.0, f"{name} removed") for name in ["cta"] + BASE[2:] + EXTENSIONS]
    for name, value, title in changes:
        if constants.get(name, 0.0) <= value:
            continue
        changed = dict(constants, **{name: value})
        cells = ", ".join(
            f"{p[0][1]}@{p[0][0]} +{100 * (fit.predict(changed, p) - fit.predict(constants, p)):.1f}"
            for p in fit.points)
        print(f"  {title}: {cells}")


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    with open(argv[1]) as source:
        basis = parse_cost_basis(source.read())
    runs = []
    for path in argv[2:]:
        with open(path) as source:
            runs.append(parse_measured(source.read()))
    fit = Fit(basis, runs)
    noise = fit.noise()
    print(f"{len(fit.points)} measured points, {len(runs)} run(s); runs' spread (rms) "
          f"{100 * noise:.2f} points\n")
    show(fit, "assumed", assumed(BASE))
    print("\neach constant fitted alone, the others as assumed:")
    for name in BASE + EXTENSIONS:
        constants, error = fit.best([name], assumed(BASE))
        print(f"  {name:<15} {constants[name]:6.3f}  rms error {100 * error:.2f} points")
    constants, error = fit.best(BASE, {})
    print()
    show(fit, "fitted together (skipped 0.05)", constants)
    tolerance = max(noise, error + PROFILE_SLACK)
    print(f"each within {100 * tolerance:.2f} points rms (the runs' spread, at least the best fit's"
          f" error + {100 * PROFILE_SLACK:.2f}), the others refitted:")
    for name in BASE:
        found = fit.profile(name, BASE, {}, tolerance)
        print(f"  {name:<15} " + (f"{found[0]:.3f} .. {found[1]:.3f}" if found else "none"))
    for extension in EXTENSIONS:
        extended, _ = fit.best(BASE + [extension], {})
        print()
        show(fit, f"with {extension}", extended)
    print()
    gains(fit, constants)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
