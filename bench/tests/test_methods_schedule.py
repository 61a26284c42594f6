"""bench/methods_schedule.py: budgets, the order of the work, the results file written point by
point and the runner that ties them together; and the report drawn from a partial results file
(a run cut by its timeout). Standard library only: no torch, no GPU, no CLI.
"""

import io
import json
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stdout

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, BENCH)

import methods_report as report  # noqa: E402
import methods_schedule as schedule  # noqa: E402


class FakeClock:
    """A clock that only moves when told to."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds


class FakeEntry:
    """An entry whose rounds take `seconds` on the fake clock and give one point."""

    def __init__(self, clock, method, knob, seconds=1.0, recall=0.95, fail=False,
                 setup_error=None, on_round=None, repeatable=True, base_ms=10.0):
        self.clock, self.method, self.knob, self.seconds = clock, method, knob, seconds
        self.base_ms = base_ms
        self.name = f"{method} {knob}"
        self.recall, self.fail, self.setup_error = recall, fail, setup_error
        self.on_round, self.repeatable = on_round, repeatable
        self.setups, self.budgets, self.totals = 0, [], []

    def setup(self):
        self.setups += 1
        self.clock.advance(2.0)
        if self.setup_error:
            raise RuntimeError(self.setup_error)

    def run_round(self, point_budget_s):
        if self.on_round:
            self.on_round(self)
        self.budgets.append(point_budget_s)
        self.clock.advance(self.seconds)
        if self.fail:
            raise RuntimeError("kernel launch failed")
        self.totals.append(self.base_ms + len(self.totals))

    def points(self):
        family = "dense" if "dense" in self.method else "peer"
        point = report.make_point(method=self.method, family=family, knob=self.knob,
                                  recall=self.recall)
        return [report.finish_point(point, [1.0] * len(self.totals),
                                    [t - 1.0 for t in self.totals])]


class Harness:
    """A results file in a scratch folder, one input, and a log kept in memory."""

    def __init__(self, test, budget_s=0, method_budget_s=0):
        self.scratch = tempfile.TemporaryDirectory()
        test.addCleanup(self.scratch.cleanup)
        self.clock = FakeClock()
        self.path = os.path.join(self.scratch.name, "methods.json")
        self.results = schedule.ResultsFile(self.path, {"gpu": "test"})
        self.result = self.results.begin_input({"label": "video", "seq_len": 32768})
        self.budget = schedule.Budget(budget_s, "input budget", self.clock)
        self.ledger = schedule.MethodLedger(method_budget_s)
        self.lines = []

    def run(self, entries, rounds=1, point_budget_s=0.0):
        schedule.run_entries(entries, self.results, self.result, self.budget, self.ledger, rounds,
                             self.lines.append, point_budget_s, clock=self.clock)

    def on_disk(self):
        with open(self.path) as file:
            return json.load(file)


class BudgetTest(unittest.TestCase):
    def test_remaining_and_the_reason_name_the_budget(self):
        clock = FakeClock()
        budget = schedule.Budget(10, "input budget", clock)
        self.assertEqual(budget.remaining(), 10)
        self.assertIsNone(budget.spent_reason())
        clock.advance(10)
        self.assertEqual(budget.spent_reason(), "input budget 10 s spent")

    def test_a_child_ends_with_its_parent(self):
        clock = FakeClock()
        run = schedule.Budget(5, "run budget", clock)
        child = run.child(60, "input budget")
        self.assertEqual(child.remaining(), 5)
        clock.advance(6)
        self.assertEqual(child.spent_reason(), "run budget 5 s spent")

    def test_zero_is_no_limit_and_negative_is_refused(self):
        budget = schedule.Budget(0, "run budget", FakeClock())
        self.assertEqual(budget.remaining(), float("inf"))
        self.assertIsNone(budget.spent_reason())
        with self.assertRaisesRegex(ValueError, "run budget: expected seconds >= 0"):
            schedule.Budget(-1, "run budget", FakeClock())

    def test_input_shares_pass_unused_time_on(self):
        self.assertEqual(schedule.input_shares([1, 2, 1], 200), 50)
        self.assertEqual(schedule.input_shares([2, 1], 150), 100)  # the first left 0 unused
        self.assertEqual(schedule.input_shares([1], float("inf")), 0.0)
        self.assertEqual(schedule.input_shares([1, 1], -5), 0.0)

    def test_longer_and_first_inputs_weigh_more(self):
        self.assertEqual(schedule.input_weight(131072, first=False), 2.0)
        self.assertEqual(schedule.input_weight(32768, first=True), schedule.FIRST_INPUT_WEIGHT)
        self.assertEqual(schedule.input_weight(1024, first=False), 0.25)

    def test_method_ledger(self):
        ledger = schedule.MethodLedger(3)
        ledger.charge("m", 2)
        self.assertIsNone(ledger.spent_reason("m"))
        ledger.charge("m", 1)
        self.assertEqual(ledger.spent_reason("m"), "method budget 3 s spent")
        self.assertIsNone(ledger.spent_reason("other"))
        with self.assertRaisesRegex(ValueError, "--method-budget-s"):
            schedule.MethodLedger(-1)


class OrderTest(unittest.TestCase):
    def test_middle_out_spans_the_sweep_first(self):
        self.assertEqual(schedule.middle_out([1, 2, 3, 4, 5]), [3, 4, 2, 5, 1])
        self.assertEqual(schedule.middle_out([1, 2, 3, 4]), [2, 3, 1, 4])
        self.assertEqual(schedule.middle_out([]), [])

    def test_interleave_is_round_robin(self):
        self.assertEqual(schedule.interleave([["a1", "a2", "a3"], ["b1"], ["c1", "c2"]]),
                         ["a1", "b1", "c1", "a2", "c2", "a3"])

    def test_input_order_puts_the_first_preset_at_every_length_first(self):
        self.assertEqual(schedule.input_order(["video", "mixed", "multi"], [131072, 32768]),
                         [("video", 32768), ("video", 131072), ("mixed", 32768),
                          ("multi", 32768), ("mixed", 131072), ("multi", 131072)])


class TimingTest(unittest.TestCase):
    def timed(self, times_ms, warmup, repeats, budget_s):
        calls = []
        runs = iter(times_ms)

        def measure(work):
            work()
            return next(runs)
        median, timed = schedule.budgeted_median_ms(lambda: calls.append(1), measure, warmup,
                                                    repeats, budget_s)
        return median, timed, len(calls)

    def test_all_repeats_without_a_budget(self):
        self.assertEqual(self.timed([3.0, 1.0, 2.0], 2, 3, 0), (2.0, 3, 5))

    def test_a_slow_point_gets_fewer_repeats_but_at_least_one(self):
        # 400 ms a run, 1 s budget: a third run (1.2 s in all) would overrun it.
        self.assertEqual(self.timed([400.0] * 5, 0, 5, 1.0), (400.0, 2, 2))
        self.assertEqual(self.timed([5000.0] * 5, 1, 5, 1.0), (5000.0, 1, 2))


class ResultsFileTest(unittest.TestCase):
    def test_every_point_is_on_disk_as_soon_as_it_exists(self):
        harness = Harness(self)
        seen = []

        def check_disk(entry):  # what a timeout at this moment would leave behind
            seen.append([p["knob"] for p in harness.on_disk()["inputs"][0]["points"]])
        entries = [FakeEntry(harness.clock, "m", f"k{i}", on_round=check_disk) for i in range(3)]
        harness.run(entries)
        self.assertEqual(seen, [[], ["k0"], ["k0", "k1"]])
        on_disk = harness.on_disk()
        self.assertEqual(len(on_disk["inputs"][0]["points"]), 3)
        self.assertEqual(os.listdir(os.path.dirname(harness.path)), ["methods.json"])  # no temp

    def test_later_rounds_replace_an_entrys_points(self):
        harness = Harness(self)
        harness.run([FakeEntry(harness.clock, "m", "a"), FakeEntry(harness.clock, "n", "b")],
                    rounds=3)
        points = harness.on_disk()["inputs"][0]["points"]
        self.assertEqual([p["knob"] for p in points], ["a", "b"])
        self.assertEqual(points[0]["round_total_ms"], [10.0, 11.0, 12.0])
        self.assertEqual(points[0]["total_ms"], 11.0)


class RunEntriesTest(unittest.TestCase):
    def test_set_up_once_per_method_and_recorded_apart(self):
        harness = Harness(self)
        first, second = FakeEntry(harness.clock, "m", "a"), FakeEntry(harness.clock, "m", "b")
        harness.run([first, second])
        self.assertEqual((first.setups, second.setups), (1, 0))
        self.assertEqual(harness.on_disk()["inputs"][0]["setup_s"], {"m": 2.0})

    def test_the_method_budget_skips_its_later_settings_not_other_methods(self):
        harness = Harness(self, method_budget_s=3)
        entries = [FakeEntry(harness.clock, "slow", f"k{i}", seconds=2.0) for i in range(3)]
        entries.append(FakeEntry(harness.clock, "other", "x"))
        harness.run(entries)
        result = harness.on_disk()["inputs"][0]
        self.assertEqual([p["knob"] for p in result["points"]], ["k0", "k1", "x"])
        self.assertEqual(result["skipped"], {"slow k2": "method budget 3 s spent"})

    def test_the_input_budget_skips_what_is_left(self):
        harness = Harness(self, budget_s=4)
        entries = [FakeEntry(harness.clock, f"m{i}", "k", seconds=1.0) for i in range(3)]
        harness.run(entries, rounds=3)  # m0: set-up 2 s + 1 s; m1: 2 s + 1 s: 6 s > 4 s
        result = harness.on_disk()["inputs"][0]
        self.assertEqual([p["method"] for p in result["points"]], ["m0", "m1"])
        self.assertEqual(result["skipped"], {"m2 k": "input budget 4 s spent"})
        self.assertEqual(len(result["points"][0]["round_total_ms"]), 1)  # no time for round 2

    def test_a_failure_is_recorded_and_the_rest_runs(self):
        harness = Harness(self)
        harness.run([FakeEntry(harness.clock, "bad", "k", fail=True),
                     FakeEntry(harness.clock, "good", "k")], rounds=2)
        result = harness.on_disk()["inputs"][0]
        self.assertEqual(result["failed"], {"bad k": "RuntimeError: kernel launch failed"})
        self.assertEqual([p["method"] for p in result["points"]], ["good"])
        self.assertTrue(any("failed: bad k" in line for line in harness.lines))

    def test_a_failed_set_up_skips_the_whole_method(self):
        harness = Harness(self)
        broken = [FakeEntry(harness.clock, "jit", f"k{i}", setup_error="nvcc not found")
                  for i in range(2)]
        harness.run(broken + [FakeEntry(harness.clock, "good", "k")])
        result = harness.on_disk()["inputs"][0]
        self.assertIn("set-up failed: RuntimeError: nvcc not found", result["failed"]["jit k0"])
        self.assertIn("set-up failed", result["skipped"]["jit k1"])
        self.assertEqual(broken[1].budgets, [])
        self.assertEqual([p["method"] for p in result["points"]], ["good"])

    def test_rounds_rotate_and_skip_entries_that_run_once(self):
        harness = Harness(self)
        order = []
        entries = [FakeEntry(harness.clock, name, "k", on_round=lambda e: order.append(e.method))
                   for name in ("a", "b", "c")]
        entries.append(FakeEntry(harness.clock, "oracle", "once", repeatable=False,
                                 on_round=lambda e: order.append(e.method)))
        harness.run(entries, rounds=3, point_budget_s=7.0)
        self.assertEqual(order, ["a", "b", "c", "oracle", "b", "c", "a", "c", "a", "b"])
        self.assertEqual(entries[0].budgets, [7.0, 7.0, 7.0])

    def test_progress_lines_carry_the_time(self):
        clock, stream = FakeClock(), io.StringIO()
        progress = schedule.Progress(clock, stream, wall=lambda: (2026, 1, 1, 19, 5, 7, 0, 1, 0))
        clock.advance(12.34)
        progress("video 32768: input ready")
        self.assertEqual(stream.getvalue(), "[19:05:07 +  12.3 s] video 32768: input ready\n")


class PartialReportTest(unittest.TestCase):
    """The report from a results file a timeout cut short."""

    def partial(self):
        harness = Harness(self)
        harness.run([FakeEntry(harness.clock, "sdpa-cudnn dense", "dense", recall=1.0,
                               base_ms=40.0),
                     FakeEntry(harness.clock, "mmsparse grid", "grid", recall=0.97)])
        harness.results.begin_input({"label": "video", "seq_len": 131072})  # cut at its start
        return harness

    def test_table_marks_the_partial_inputs(self):
        on_disk = self.partial().on_disk()
        text = report.markdown_table(on_disk)
        self.assertIn("INCOMPLETE", text)
        self.assertIn("| mmsparse grid | `grid` | 0.9700 |", text)
        summary = report.summary_table(on_disk)
        self.assertIn("| method | video 32768* | video 131072* |", summary)
        self.assertIn("| mmsparse grid | 10.00 (4.00x) | - |", summary)
        self.assertIn("| sdpa-cudnn dense | 40.00 (1.00x) | - |", summary)

    def test_table_command_on_the_partial_file(self):
        harness = self.partial()
        output = io.StringIO()
        with redirect_stdout(output):
            self.assertEqual(report.main(["table", harness.path, "--summary"]), 0)
        self.assertIn("partial input", output.getvalue())

    def test_inputs_without_points_get_no_picture(self):
        harness = self.partial()
        harness.result["points"] = []
        drawn = []
        original = report.plot_input
        report.plot_input = lambda result, path, note: drawn.append(path) or path
        try:
            report.plot_report(harness.on_disk(), harness.scratch.name)
        finally:
            report.plot_input = original
        self.assertEqual([os.path.basename(p) for p in drawn], ["methods-video-32768.png"])


if __name__ == "__main__":
    unittest.main()
