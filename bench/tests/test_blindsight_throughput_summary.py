"""scripts/blindsight_throughput_summary.py on made-up logs: the short-tile fit recovers a fixed
cost and a gathered chunk's cost planted in an engine-bench table of the bench's own format, and
the template table marks shares against the 85% bar. No GPU."""

import contextlib
import io
import json
import os
import re
import sys
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "scripts"))

import blindsight_throughput_summary as summary  # noqa: E402

KERNELS = ["mma.sync/64", "wgmma/64", "wgmma/128"]
WAVES = 56
CHUNK_MS = 0.0017  # one chunk of one CTA
PLANTED_FIXED = 4.5  # chunks
PLANTED_GATHER = 1.2  # a gathered chunk against a span chunk
PLANTED_DIAGONAL = 0.75  # a diagonal chunk's extra cost, in chunks
PLANTED_RECORD = 0.25  # a record's cost, in chunks
PLANTED_SWITCH = 3.0  # switching from spans to gathered columns in a CTA, in chunks


def engine_table(fixed, gather):
    """An engine-bench table with short-tile rows timed as WAVES * (fixed + chunks) chunks."""
    lines = ["mmsparse_engine_bench on a made-up GPU (132 SMs)",
             "%-23s %10s" % ("case", "pairs")
             + "".join(" | %-9s %7s" % (kernel, "TFLOP/s") for kernel in KERNELS)
             + " | %6s" % "gain"
             + "".join(" | %s max|dO| |dLSE|" % kernel for kernel in KERNELS[1:])]

    def row(name, ms):
        return ("%-23s %10.3e" % (name, 1e12)
                + "".join(" | %9.3f %7.1f" % (ms, 600.0) for _ in KERNELS)
                + " | %5.2fx" % 1.0 + " | 0.0e+00 0.0e+00" * 2)

    lines.append(row("dense-32k", 15.0))
    lines.append(row("sinks-in-place-32k", 2.0))
    lines.append(row("sinks-ordered-32k", 1.5))
    forms = (("spans", 0.0, 1.0), ("columns", 0.0, gather),
             ("diagonal", PLANTED_DIAGONAL, 1.0), ("split", 0.0, 1.0 + PLANTED_RECORD),
             ("mixed", PLANTED_SWITCH + gather - 1.0, 1.0))
    for form, extra, per_chunk in forms:
        for chunks in (64, 32, 16, 8):
            lines.append(row(f"short-{form}-{chunks}",
                             WAVES * CHUNK_MS * (fixed + extra + chunks * per_chunk)))
    return "\n".join(lines) + "\n"


class SummaryTest(unittest.TestCase):
    def run_summary(self, directory, lengths):
        output = io.StringIO()
        with contextlib.redirect_stdout(output):
            sys.argv = ["summary", directory] + [str(n) for n in lengths]
            summary.main()
        return output.getvalue()

    def test_fit_recovers_the_planted_costs(self):
        with tempfile.TemporaryDirectory() as directory:
            with open(os.path.join(directory, "engine-bench.txt"), "w") as out:
                out.write(engine_table(PLANTED_FIXED, PLANTED_GATHER))
            text = self.run_summary(directory, [])
        self.assertIn(f"fixed cost per CTA for the model: {PLANTED_FIXED:.2f}", text)
        self.assertRegex(text, r"32k wgmma/128 +2\.000 +1\.500 +-25\.0%")
        self.assertIn(f"wgmma/128: a gathered chunk costs {PLANTED_GATHER:.3f} x a span chunk",
                      text)
        # The table's times have three decimals: the planted costs come back to about 0.01.
        diagonal = re.search(r"wgmma/128: a diagonal \(masked\) chunk costs ([-+.0-9]+) chunks "
                             r"more than an unmasked one", text)
        self.assertAlmostEqual(float(diagonal.group(1)), PLANTED_DIAGONAL, delta=0.02)
        record = re.search(r"wgmma/128: a record \(span\) costs ([-+.0-9]+) chunks", text)
        self.assertAlmostEqual(float(record.group(1)), PLANTED_RECORD, delta=0.01)
        switch = re.search(r"wgmma/128: switching from spans to gathered columns in a CTA costs "
                           r"([-+.0-9]+) chunks", text)
        self.assertAlmostEqual(float(switch.group(1)), PLANTED_SWITCH, delta=0.03)

    def test_templates_against_the_bar(self):
        layer = {"dense": {"pairs": 1000, "attention_ms": 10.0, "tflops": 500.0},
                 "patterns": [
                     {"pattern": "blindsight-sink", "computed_pairs": 200, "attention_ms": 2.5,
                      "tflops": 400.0, "throughput_vs_dense": 0.80},
                     {"pattern": "blindsight-intra", "computed_pairs": 200,
                      "attention_ms": 2.2, "tflops": 454.0, "throughput_vs_dense": 0.91}]}
        with tempfile.TemporaryDirectory() as directory:
            with open(os.path.join(directory, "bench-36864.json"), "w") as out:
                json.dump({"layers": [layer]}, out)
            text = self.run_summary(directory, [36864, 131072])
        self.assertRegex(text, r"blindsight-sink .* 80\.0% +miss")
        self.assertRegex(text, r"blindsight-intra .* 91\.0% +ok")
        self.assertIn("(no bench-131072.json)", text)
        self.assertIn("no short-tile cases", text)

    def test_schedules_side_by_side(self):
        # Dense 10 ms under tile and 12.5 ms under persistent; the template 2.5 ms (80% of dense)
        # under tile and 2.0 ms under persistent (125% of persistent dense, 100% of tile dense).
        def layer(dense_ms, pattern_ms, share):
            return {"dense": {"pairs": 1000, "attention_ms": dense_ms, "tflops": 500.0},
                    "patterns": [{"pattern": "blindsight-sink", "computed_pairs": 200,
                                  "attention_ms": pattern_ms, "tflops": 400.0,
                                  "throughput_vs_dense": share}]}
        with tempfile.TemporaryDirectory() as directory:
            for schedule, dense_ms, pattern_ms, share in (("tile", 10.0, 2.5, 0.80),
                                                          ("persistent", 12.5, 2.0, 1.25)):
                with open(os.path.join(directory, f"bench-36864-{schedule}.json"), "w") as out:
                    json.dump({"layers": [layer(dense_ms, pattern_ms, share)]}, out)
            output = io.StringIO()
            with contextlib.redirect_stdout(output):
                sys.argv = ["summary", directory, "36864", "--schedules", "tile", "persistent"]
                summary.main()
            text = output.getvalue()
        self.assertIn("schedule persistent", text)
        self.assertRegex(text, r"36864 blindsight-sink +2\.500 \( 80\.0%\) +2\.000 \(125\.0%\) "
                               r"+-20\.0% +100\.0%")
        self.assertRegex(text, r"36864 dense .* \+25\.0% +80\.0%")

    def test_key_orders_against_in_place(self):
        # One bench: the sink template in place 2.5 ms (80%), through its key order 2.0 ms (100%);
        # the bench labels both by name, their specs tell them apart.
        layer = {"dense": {"pairs": 1000, "attention_ms": 10.0, "tflops": 500.0},
                 "patterns": [
                     {"pattern": "blindsight-sink", "computed_pairs": 200,
                      "spec": "blindsight-sink:bidirectional=0,permute=0,sink_percent=10,sinks=[]",
                      "attention_ms": 2.5, "tflops": 400.0, "throughput_vs_dense": 0.80},
                     {"pattern": "blindsight-sink", "computed_pairs": 200,
                      "spec": "blindsight-sink:bidirectional=0,permute=1,sink_percent=10,sinks=[]",
                      "attention_ms": 2.0, "tflops": 500.0, "throughput_vs_dense": 1.0},
                     {"pattern": "blindsight-intra", "computed_pairs": 200,
                      "spec": "blindsight-intra:bidirectional=0,permute=0",
                      "attention_ms": 2.2, "tflops": 454.0, "throughput_vs_dense": 0.91}]}
        with tempfile.TemporaryDirectory() as directory:
            with open(os.path.join(directory, "bench-36864.json"), "w") as out:
                json.dump({"layers": [layer]}, out)
            text = self.run_summary(directory, [36864])
        self.assertIn("Key orders", text)
        self.assertRegex(text, r"36864 blindsight-sink +2\.500 +80\.0% +2\.000 +100\.0% "
                               r"+-20\.0% +ok")
        self.assertNotRegex(text, r"36864 blindsight-intra +2\.200")  # no key-order run to pair
        self.assertRegex(text, r"36864 blindsight-sink:permute=1 .* 100\.0% +ok")


if __name__ == "__main__":
    unittest.main()
