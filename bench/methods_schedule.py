"""Time budgets, the results file written point by point, and progress lines for bench/methods.py.

A device step is short and ends wherever its time runs out, so the benchmark is organised as a
list of entries (one method at one knob setting) run in order of value, each inside nested
budgets: the whole run (--budget-s), each input (its share of what is left), each method on an
input (--method-budget-s, its JIT warm-up excluded) and each point (--point-budget-s: how many
timed repeats fit). Every point is written to methods.json the moment it exists (a temporary file
renamed over the old one, so a reader never sees half a file), so that a run cut by `timeout`
still reports everything it measured. Progress lines carry the UTC time and the seconds since the
start, so that a log shows where the time went.

Standard library only: tested on machines without torch or a GPU (bench/tests).
"""

import json
import math
import os
import statistics
import sys
import time

NEGLIGIBLE_SETUP_S = 0.01  # a set-up this short is not recorded


class Budget:
    """A deadline `seconds` after creation (0: none), never later than its parent's."""

    def __init__(self, seconds, name, clock=time.monotonic, parent=None):
        if seconds < 0:
            raise ValueError(f"{name}: expected seconds >= 0 (0: no limit), got {seconds}")
        self.seconds, self.name, self.clock, self.parent = seconds, name, clock, parent
        self.start = clock()

    def elapsed(self):
        return self.clock() - self.start

    def own_remaining(self):
        return self.seconds - self.elapsed() if self.seconds else math.inf

    def remaining(self):
        parent = self.parent.remaining() if self.parent else math.inf
        return min(self.own_remaining(), parent)

    def spent_reason(self):
        """None while time is left, else which budget ran out ("input budget 60 s spent")."""
        if self.parent:
            reason = self.parent.spent_reason()
            if reason:
                return reason
        if self.own_remaining() <= 0:
            return f"{self.name} {self.seconds:.0f} s spent"
        return None

    def child(self, seconds, name):
        return Budget(seconds, name, self.clock, self)


def input_shares(weights, seconds_left):
    """Seconds for the next input: its weight's share of what is left over the inputs left.
    `weights` are those of the inputs not yet run, the next one first; time an input leaves
    unused flows to the ones after it."""
    if not weights:
        raise ValueError("input weights: expected at least one input left")
    if math.isinf(seconds_left):
        return 0.0  # no global budget: no input budget either
    return max(0.0, seconds_left) * weights[0] / sum(weights)


def middle_out(settings):
    """A sweep in the order that keeps a cut run useful: the middle setting first, then
    alternately the neighbours above and below, so the first k points span the knob's range
    around its centre instead of one end of it."""
    settings = list(settings)
    if not settings:
        return []
    middle = (len(settings) - 1) // 2
    order = [settings[middle]]
    for step in range(1, len(settings)):
        for index in (middle + step, middle - step):
            if 0 <= index < len(settings):
                order.append(settings[index])
    return order


def interleave(groups):
    """Entries of several methods in round-robin order (every method's first setting, then every
    method's second, ...), each group's own order kept; the groups come in order of value."""
    order, depth = [], max((len(group) for group in groups), default=0)
    for index in range(depth):
        order += [group[index] for group in groups if index < len(group)]
    return order


def budgeted_median_ms(work, measure_ms, warmup, repeats, budget_s):
    """Median of up to `repeats` timed runs of `work` after `warmup` untimed ones, as many as fit
    in `budget_s` seconds (0: no limit): one timed run always happens; further ones only while
    their expected time fits. measure_ms(work) times one run (CUDA events on the GPU).
    Returns (median ms, runs timed)."""
    times = []
    for _ in range(warmup):
        work()
    while len(times) < repeats:
        times.append(measure_ms(work))
        if budget_s and (sum(times) + max(times)) / 1000.0 > budget_s:
            break  # the next run, at the slowest time seen, would overrun the budget
    return statistics.median(times), len(times)


class Progress:
    """Progress lines: `[19:51:02 +123.4 s] message`, flushed at once (a log cut by a timeout
    keeps every line written before it)."""

    def __init__(self, clock=time.monotonic, stream=None, wall=time.gmtime):
        self.clock, self.stream, self.wall = clock, stream, wall
        self.start = clock()

    def elapsed(self):
        return self.clock() - self.start

    def __call__(self, message):
        stamp = time.strftime("%H:%M:%S", self.wall())
        stream = self.stream or sys.stdout
        stream.write(f"[{stamp} +{self.elapsed():6.1f} s] {message}\n")
        stream.flush()


class ResultsFile:
    """methods.json, rewritten after every change: each input's points grouped by the entry that
    made them (an entry's later rounds replace its points), its skipped and failed entries, and
    the seconds its set-up steps took (input generation, dense reference, each method's JIT
    warm-up) apart from any point's time."""

    def __init__(self, path, report):
        self.path, self.report = path, report
        self.report.setdefault("inputs", [])
        self.report.setdefault("not_run", [])
        self._entries = {}  # id(input result) -> {entry name: [points]}, in insertion order
        self.write()

    def begin_input(self, result):
        result.setdefault("points", [])
        result.setdefault("skipped", {})
        result.setdefault("failed", {})
        result.setdefault("setup_s", {})
        result["complete"] = False
        self.report["inputs"].append(result)
        self._entries[id(result)] = {}
        self.write()
        return result

    def put_points(self, result, entry_name, points):
        entries = self._entries[id(result)]
        entries[entry_name] = list(points)
        result["points"] = [point for group in entries.values() for point in group]
        self.write()

    def skip(self, result, name, reason):
        result["skipped"][name] = reason
        self.write()

    def fail(self, result, name, error):
        result["failed"][name] = error
        self.write()

    def set(self, result, key, value):
        result[key] = value
        self.write()

    def setup_time(self, result, name, seconds):
        result["setup_s"][name] = round(seconds, 3)
        self.write()

    def not_run(self, label):
        self.report["not_run"].append(label)
        self.write()

    def write(self):
        directory = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(directory, exist_ok=True)
        temporary = f"{self.path}.tmp{os.getpid()}"
        with open(temporary, "w") as file:
            json.dump(self.report, file, indent=1)
        os.replace(temporary, self.path)


class MethodLedger:
    """Seconds each method has spent on the current input (its warm-up not counted)."""

    def __init__(self, seconds_per_method):
        if seconds_per_method < 0:
            raise ValueError(f"--method-budget-s: expected >= 0 (0: no limit), got "
                             f"{seconds_per_method}")
        self.limit, self.used = seconds_per_method, {}

    def charge(self, method, seconds):
        self.used[method] = self.used.get(method, 0.0) + seconds

    def spent_reason(self, method):
        if self.limit and self.used.get(method, 0.0) >= self.limit:
            return f"method budget {self.limit:.0f} s spent"
        return None


def run_entries(entries, results, result, budget, ledger, rounds, log, point_budget_s=0.0,
                clock=time.monotonic):
    """Runs the entries of one input in order, within `budget` (the input's) and the ledger's
    per-method budget: round 1 over all entries (each point written as soon as it is measured),
    then further rounds, the order rotated from round to round, while the input's budget lasts
    (each round refines the medians; a point keeps the rounds it got).

    An entry has `name`, `method`, `setup()` (the method's one-time JIT warm-up, timed apart; the
    same method sets up once), `run_round(point_budget_s)`, `points()` and optionally
    `repeatable` (False: round 1 only). A failure is recorded and never stops the others; a method
    whose set-up fails skips all its entries."""
    set_up, broken = set(), {}
    done = []
    for entry in entries:
        reason = budget.spent_reason() or ledger.spent_reason(entry.method) or \
            broken.get(entry.method)
        if reason:
            results.skip(result, entry.name, reason)
            log(f"  skipped: {entry.name} ({reason})")
            continue
        if entry.method not in set_up:
            set_up.add(entry.method)
            start = clock()
            try:
                entry.setup()
            except Exception as error:  # a method that cannot start is reported, never fatal
                broken[entry.method] = f"set-up failed: {type(error).__name__}: {str(error)[:300]}"
                results.fail(result, entry.name, broken[entry.method])
                log(f"  {entry.method}: {broken[entry.method]}")
                continue
            if clock() - start >= NEGLIGIBLE_SETUP_S:  # entries without a set-up stay quiet
                results.setup_time(result, entry.method, clock() - start)
                log(f"  {entry.method}: set up (JIT warm-up) in {clock() - start:.1f} s")
        if _run_one(entry, results, result, ledger, log, point_budget_s, clock, round_number=1) \
                and getattr(entry, "repeatable", True):
            done.append(entry)
    for round_index in range(1, rounds):
        if not done or budget.spent_reason():
            break
        shift = round_index % len(done)
        for entry in done[shift:] + done[:shift]:
            if budget.spent_reason():
                log(f"  round {round_index + 1} cut: {budget.spent_reason()}")
                return
            _run_one(entry, results, result, ledger, log, point_budget_s, clock,
                     round_number=round_index + 1)


def _run_one(entry, results, result, ledger, log, point_budget_s, clock, round_number):
    start = clock()
    try:
        entry.run_round(point_budget_s)
        points = entry.points()
    except Exception as error:  # one failing point must not lose the others
        message = f"{type(error).__name__}: {str(error)[:300]}"
        ledger.charge(entry.method, clock() - start)
        if round_number == 1:
            results.fail(result, entry.name, message)
        log(f"  failed: {entry.name} (round {round_number}): {message}")
        return False
    seconds = clock() - start
    ledger.charge(entry.method, seconds)
    results.put_points(result, entry.name, points)
    summary = ", ".join(_point_summary(point) for point in points[:3])
    log(f"  {entry.name} round {round_number}: {summary} ({seconds:.1f} s)")
    return True


def _point_summary(point):
    recall = point.get("recall")
    total = point.get("total_ms")
    recall_text = f"recall {recall:.4f}" if recall is not None else "recall -"
    total_text = f"{total:.2f} ms" if total is not None else "- ms"
    return f"{recall_text} {total_text}"


# An input's share of the time left grows with the square root of its length (attention time grows
# faster, but the fixed costs of an input do not); the first input also pays the peers' first JIT
# compilations.
REFERENCE_LENGTH = 32768
FIRST_INPUT_WEIGHT = 1.5


def input_weight(seq_len, first):
    weight = max(0.25, (seq_len / REFERENCE_LENGTH) ** 0.5) if seq_len else 1.0
    return weight * (FIRST_INPUT_WEIGHT if first else 1.0)


def input_order(presets, seq_lens):
    """(preset, seq_len) pairs by value: the first preset at every length (shortest first), then
    the other presets at the shortest length, then at each longer one."""
    lengths = sorted(set(seq_lens))
    if not presets or not lengths:
        return []
    order = [(presets[0], n) for n in lengths]
    for n in lengths:
        order += [(preset, n) for preset in presets[1:]]
    return order
