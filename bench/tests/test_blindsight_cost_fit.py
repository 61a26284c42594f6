"""scripts/blindsight_cost_fit.py on made-up counts: shares computed from planted cost constants
are fitted back to those constants, the assumed constants are judged against them, per-class
counts feed the text-tile extension, and layouts that do not match are refused. No GPU."""

import os
import sys
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "scripts"))

import blindsight_cost_fit as cost_fit  # noqa: E402

HEADS = 28
PLANTED = {"cta": 7.0, "one_warpgroup": 0.9, "masked_extra": 0.3, "gathered_extra": 0.1}
# (tokens, pattern, class): (pairs on the class's first line, tiles, chunks, two-wg, one-wg,
# skipped, masked, gathered, partial, records). Made up, with the shape of the real table: few
# chunks per image tile in the sparse patterns, many in dense's, at two lengths.
ROWS = [
    (4096, "dense", "text", 100000000, 2, 40, 40, 0, 0, 2, 0, 0, 2),
    (4096, "dense", "image", None, 30, 500, 500, 0, 0, 30, 0, 0, 30),
    (4096, "sink", "text", 20000000, 2, 40, 36, 4, 0, 10, 0, 1, 2),
    (4096, "sink", "image", None, 30, 180, 170, 10, 0, 5, 60, 20, 90),
    (4096, "intra", "text", 15000000, 2, 40, 36, 4, 0, 10, 0, 1, 2),
    (4096, "intra", "image", None, 30, 150, 120, 30, 0, 60, 40, 30, 60),
    (16384, "dense", "text", 1600000000, 8, 600, 600, 0, 0, 8, 0, 0, 8),
    (16384, "dense", "image", None, 120, 8000, 8000, 0, 0, 120, 0, 0, 120),
    (16384, "sink", "text", 300000000, 8, 600, 560, 40, 0, 80, 0, 4, 8),
    (16384, "sink", "image", None, 120, 2400, 2350, 50, 0, 20, 300, 90, 800),
    (16384, "intra", "text", 200000000, 8, 600, 560, 40, 0, 80, 0, 4, 8),
    (16384, "intra", "image", None, 120, 1500, 1300, 200, 0, 240, 600, 120, 240),
]


def plan_model_output():
    """The plan model's tables as far as the fit reads them: the cost basis and its header."""
    lines = ["   tokens pattern  (other tables)", "", "cost basis",
             "  tokens pattern class pairs tiles chunks two-wg one-wg skipped masked gathered "
             "partial records"]
    for tokens, pattern, tile_class, pairs, *counts in ROWS:
        cells = " ".join(str(count) for count in counts)
        lines.append(f"{tokens:>8} {pattern:<22} {tile_class:<6} "
                     f"{pairs if pairs else '-':>13} {cells}")
    lines += ["", "SYNTHETIC layout ..."]
    return "\n".join(lines)


def summary_output(basis, constants, offset=0.0, extra_pairs=0):
    """A throughput summary whose shares are the model's under `constants`, plus `offset`."""
    lines = ["BlindSight templates, multi-image preset (SYNTHETIC)",
             "  tokens pattern pairs ms TFLOP/s of dense bar"]
    for tokens in (4096, 16384):
        dense = basis[(tokens, "dense")]
        lines.append(f"{tokens:>8} dense {dense['pairs'] * HEADS} 1.00 600.0 100.0%")
        for pattern in ("sink", "intra"):
            sparse = basis[(tokens, pattern)]
            share = (sparse["pairs"] / cost_fit.Fit.cost(sparse, constants)) / (
                dense["pairs"] / cost_fit.Fit.cost(dense, constants)) + offset
            lines.append(f"{tokens:>8} {pattern} {sparse['pairs'] * HEADS + extra_pairs} 1.00 500.0 "
                         f"{100 * share:.3f}%  miss")
    return "\n".join(lines)


class CostFitTest(unittest.TestCase):
    def setUp(self):
        self.basis = cost_fit.parse_cost_basis(plan_model_output())

    def test_parses_counts_summed_over_classes_and_per_class(self):
        sink = self.basis[(4096, "sink")]
        self.assertEqual(sink["pairs"], 20000000)
        self.assertEqual(sink["tiles"], 32)
        self.assertEqual(sink["masked"], 15)
        self.assertEqual(sink[("chunks", "text")], 40)
        self.assertEqual(sink[("chunks", "image")], 180)

    def test_fit_recovers_the_planted_constants(self):
        runs = [cost_fit.parse_measured(summary_output(self.basis, PLANTED))]
        fit = cost_fit.Fit(self.basis, runs)
        self.assertEqual(len(fit.points), 4)
        self.assertLess(fit.rms(PLANTED), 1e-4)
        self.assertGreater(fit.rms(cost_fit.assumed(cost_fit.BASE)), 0.01)
        constants, error = fit.best(["cta"], dict(PLANTED, cta=0.0))
        self.assertAlmostEqual(constants["cta"], PLANTED["cta"], delta=0.05)
        self.assertLess(error, 1e-3)

    def test_profile_brackets_the_planted_value(self):
        runs = [cost_fit.parse_measured(summary_output(self.basis, PLANTED))]
        fit = cost_fit.Fit(self.basis, runs)
        others = {name: value for name, value in PLANTED.items() if name != "cta"}
        low, high = fit.profile("cta", ["cta"], others, 0.002)
        self.assertLessEqual(low, PLANTED["cta"])
        self.assertGreaterEqual(high, PLANTED["cta"])
        self.assertLess(high - low, 4.0)

    def test_text_tile_extension_reads_the_text_class_only(self):
        constants = dict(PLANTED, text_chunk_extra=0.5)
        text_chunks = self.basis[(4096, "sink")][("chunks", "text")]
        self.assertAlmostEqual(
            cost_fit.Fit.cost(self.basis[(4096, "sink")], constants)
            - cost_fit.Fit.cost(self.basis[(4096, "sink")], PLANTED), 0.5 * text_chunks)

    def test_noise_is_the_runs_spread(self):
        runs = [cost_fit.parse_measured(summary_output(self.basis, PLANTED, offset))
                for offset in (-0.01, 0.01)]
        fit = cost_fit.Fit(self.basis, runs)
        self.assertAlmostEqual(fit.noise(), 0.01, delta=1e-4)
        self.assertLess(fit.rms(PLANTED), 1e-4)

    def test_refuses_another_layouts_measurements(self):
        runs = [cost_fit.parse_measured(summary_output(self.basis, PLANTED, extra_pairs=1))]
        with self.assertRaisesRegex(SystemExit, "not a multiple"):
            cost_fit.Fit(self.basis, runs)

    def test_refuses_output_without_a_cost_basis(self):
        with self.assertRaisesRegex(SystemExit, "no 'cost basis' table"):
            cost_fit.parse_cost_basis("   tokens pattern fill\n")


if __name__ == "__main__":
    unittest.main()
