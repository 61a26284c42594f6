"""bench/methods_report.py: points, curves, the README table, the CLI's JSON and the pictures.

Standard library only (unittest), so that it runs wherever Python does. With the mmsparse CLI (the
environment variable MMSPARSE_CLI, else build*/tools/cli/mmsparse of the checkout) the CLI's own
JSON at 1024 tokens on its CPU backend is parsed too; the picture test needs matplotlib.
"""

import glob
import importlib.util
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest
from contextlib import redirect_stdout

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, BENCH)

import methods_report as report  # noqa: E402

SMALL = ["--preset", "mixed-interleaved", "--seq-len", "1024", "--heads", "4", "--kv-heads", "2",
         "--head-dim", "64", "--device", "cpu"]


def find_cli():
    cli = os.environ.get("MMSPARSE_CLI")
    if cli:
        return cli
    found = sorted(glob.glob(os.path.join(BENCH, "..", "build*", "tools", "cli", "mmsparse")))
    return found[0] if found else None


def point(method, recall, total, family="peer", knob="k", index=1.0):
    p = report.make_point(method=method, family=family, knob=knob, recall=recall)
    return report.finish_point(p, [index], [total - index])


class PointTest(unittest.TestCase):
    def test_unknown_field_is_an_error_naming_it(self):
        with self.assertRaisesRegex(ValueError, "speed"):
            report.make_point(method="m", speed=1)

    def test_times_are_medians_over_rounds(self):
        p = report.finish_point(report.make_point(method="m"), [1.0, 3.0, 2.0], [10.0, 30.0, 20.0])
        self.assertEqual((p["index_ms"], p["attention_ms"], p["total_ms"]), (2.0, 20.0, 22.0))
        self.assertEqual(p["round_total_ms"], [11.0, 33.0, 22.0])

    def test_round_times_must_pair_up(self):
        with self.assertRaisesRegex(ValueError, "round times"):
            report.finish_point(report.make_point(method="m"), [1.0], [1.0, 2.0])


class CurveTest(unittest.TestCase):
    def test_pareto_front_drops_dominated_points(self):
        points = [point("m", 0.90, 10), point("m", 0.95, 8), point("m", 0.97, 20),
                  point("m", 0.92, 30), point("m", 0.99, 40)]
        front = report.pareto_front(points)
        self.assertEqual([(p["recall"], p["total_ms"]) for p in front],
                         [(0.95, 8), (0.97, 20), (0.99, 40)])

    def test_best_at_recall_is_inclusive_and_none_when_unreached(self):
        points = [point("m", 0.95, 12), point("m", 0.96, 11), point("m", 0.9, 1)]
        self.assertEqual(report.best_at_recall(points, 0.95)["total_ms"], 11)
        self.assertIsNone(report.best_at_recall(points, 0.97))

    def test_points_without_recall_are_left_out(self):
        self.assertEqual(report.pareto_front([point("m", None, 5)]), [])


class TableTest(unittest.TestCase):
    def result(self):
        return {"label": "video", "seq_len": 131072, "skipped": {"flashinfer": "not installed"},
                "failed": {"minference xattention threshold=0.9": "RuntimeError: out of memory"},
                "points": [point("sdpa-cudnn dense", 1.0, 100, family="dense", index=0),
                           point("sdpa-flash2 dense", 1.0, 160, family="dense", index=0),
                           point("mmsparse grid", 0.96, 20), point("mmsparse grid", 0.99, 50),
                           point("peer", 0.93, 5)]}

    def test_dense_reference_prefers_cudnn(self):
        self.assertEqual(report.dense_reference(self.result())["method"], "sdpa-cudnn dense")

    def test_markdown_rows_ratios_and_skips(self):
        text = report.markdown_table({"inputs": [self.result()]}, 0.95)
        self.assertIn("| mmsparse grid | `k` | 0.9600 | 20.00 | 1.00 | 5.00x |", text)
        self.assertIn("| peer | - | below 0.95 at every setting |", text)
        self.assertIn("Not run: flashinfer (not installed)", text)
        self.assertIn("Failed (see methods.json): minference xattention threshold=0.9", text)
        rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]
        self.assertTrue(rows[1].startswith("| mmsparse grid"))  # fastest first, after the header

    def test_oracle_times_divide_dense_by_the_bound(self):
        levels = [{"recall": 0.95, "bound": 4.0}, {"recall": 0.9, "bound": 5.0}]
        self.assertEqual(report.oracle_times(levels, 100.0), [(0.9, 20.0), (0.95, 25.0)])
        self.assertEqual(report.oracle_times(levels, None), [])

    def test_table_command_reads_the_json(self):
        with tempfile.TemporaryDirectory() as scratch:
            path = os.path.join(scratch, "methods.json")
            with open(path, "w") as file:
                json.dump({"inputs": [self.result()]}, file)
            output = io.StringIO()
            with redirect_stdout(output):
                self.assertEqual(report.main(["table", path, "--recall", "0.9"]), 0)
        self.assertIn("| peer | `k` | 0.9300 | 5.00 |", output.getvalue())

    @unittest.skipIf(importlib.util.find_spec("matplotlib") is None, "matplotlib not installed")
    def test_one_picture_per_input(self):
        result = dict(self.result(), tile_oracle=[{"recall": 0.9, "bound": 5.0},
                                                  {"recall": 0.98, "bound": 2.0}])
        with tempfile.TemporaryDirectory() as scratch:
            paths = report.plot_report({"inputs": [result], "gpu": "test"}, scratch)
            self.assertEqual([os.path.basename(p) for p in paths], ["methods-video-131072.png"])
            with open(paths[0], "rb") as file:
                self.assertEqual(file.read(8), b"\x89PNG\r\n\x1a\n")


@unittest.skipIf(find_cli() is None, "no mmsparse CLI (set MMSPARSE_CLI or build the CLI)")
class CliJsonTest(unittest.TestCase):
    """The CLI's own JSON, at 1024 tokens on its CPU backend (about a second)."""

    @classmethod
    def setUpClass(cls):
        cls.scratch = tempfile.TemporaryDirectory()
        cli, path = find_cli(), os.path.join(cls.scratch.name, "small.safetensors")
        subprocess.run([cli, "generate", *SMALL[:-2], "-o", path], check=True, capture_output=True)
        run = subprocess.run([cli, "run", "-i", path, "--compare", "--pattern",
                              "a-shape:sink=64,local=256", "--pattern",
                              "vertical-slash:vertical=64,slash=256", "--json", "-", "--quiet",
                              "--device", "cpu"], check=True, capture_output=True, text=True)
        cls.run_report = json.loads(run.stdout)
        bench = subprocess.run([cli, "bench", *SMALL, "--pattern", "a-shape:sink=64,local=256",
                                "--json", "-", "--quiet"], check=True, capture_output=True,
                               text=True)
        cls.bench_report = json.loads(bench.stdout)

    @classmethod
    def tearDownClass(cls):
        cls.scratch.cleanup()

    def test_run_gives_one_point_per_pattern_and_the_dense_run(self):
        points = report.mmsparse_points_from_run(self.run_report)
        self.assertEqual([p["method"] for p in points],
                         ["mmsparse a-shape", "mmsparse vertical-slash", "mmsparse dense"])
        for p in points[:2]:
            self.assertTrue(0.0 < p["recall"] <= 1.0 + 1e-6)
            self.assertGreaterEqual(p["output_error"], 0.0)
            self.assertEqual(p["needles"], 4)  # mixed-interleaved plants 4 by default
            self.assertGreater(p["attention_ms"], 0.0)
        self.assertEqual(points[2]["family"], "dense")

    def test_a_config_run_is_a_point_of_the_searched_method(self):
        points = report.mmsparse_points_from_run(self.run_report, label="target=0.95")
        self.assertEqual({p["method"] for p in points}, {report.SEARCHED_METHOD})
        self.assertEqual(len(points), 2)  # no dense point for config runs

    def test_tile_oracle_levels(self):
        levels = report.tile_oracle_from_bench(self.bench_report)
        self.assertEqual([level["recall"] for level in levels], [0.9, 0.95, 0.98])
        bounds = [level["bound"] for level in levels]
        self.assertTrue(all(b >= 1.0 for b in bounds))
        self.assertEqual(bounds, sorted(bounds, reverse=True))  # higher recall, lower bound


if __name__ == "__main__":
    unittest.main()
