"""scripts/blindsight_rounds_summary.py on made-up bench JSON: each template's share is taken
against the dense run of its own round, the median over rounds is printed, and a round without a
dense run is refused by name. No GPU."""

import contextlib
import io
import json
import os
import sys
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "scripts"))

import blindsight_rounds_summary as summary  # noqa: E402

DENSE_PAIRS = 1000
SINK_PAIRS = 100


def write_round(directory, tokens, round_index, dense_ms, sink_ms, with_dense=True):
    runs = [{"spec": "blindsight-sink:bidirectional=0,permute=1", "attention_ms": sink_ms,
             "computed_pairs": SINK_PAIRS, "throughput_vs_dense": 0.5}]
    if with_dense:
        runs.append({"spec": "dense", "attention_ms": dense_ms, "computed_pairs": DENSE_PAIRS})
    path = os.path.join(directory, f"bench-{tokens}-r{round_index}.json")
    with open(path, "w") as file:
        json.dump({"layers": [{"patterns": runs}]}, file)


def run_summary(directory):
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        sys.argv = ["blindsight_rounds_summary.py", directory]
        summary.main()
    return output.getvalue()


class RoundsSummaryTest(unittest.TestCase):
    def test_shares_against_each_rounds_dense_and_their_median(self):
        with tempfile.TemporaryDirectory() as directory:
            # Share = (100 / sink_ms) / (1000 / dense_ms): 0.80, 0.90 and 1.00.
            write_round(directory, 36864, 1, 8.0, 1.0)
            write_round(directory, 36864, 2, 9.0, 1.0)
            write_round(directory, 36864, 3, 5.0, 0.5)
            text = run_summary(directory)
        self.assertIn("share 80.0 90.0 100.0 | median 90.0%", text)
        self.assertIn("ms 1.000 1.000 0.500", text)
        self.assertIn("vs reference 50.0 50.0 50.0", text)

    def test_a_round_without_dense_is_refused(self):
        with tempfile.TemporaryDirectory() as directory:
            write_round(directory, 36864, 1, 8.0, 1.0, with_dense=False)
            with self.assertRaises(SystemExit) as raised:
                run_summary(directory)
        self.assertIn("expected a run of the pattern 'dense'", str(raised.exception))


if __name__ == "__main__":
    unittest.main()
