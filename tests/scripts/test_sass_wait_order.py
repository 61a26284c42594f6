#!/usr/bin/env python3
"""The SASS wait check (scripts/sass_wait_order.py) on hand-written SASS: it must fail a P·V wait
behind a branch on a warp vote, pass one behind a warpgroup barrier's verdict or behind no branch,
and fail a missing softmax gap only when asked to."""

import pathlib
import sys
import unittest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "scripts"))
import sass_wait_order  # noqa: E402

KERNEL = "_ZN8mmsparse4cuda22wgmma_attention_kernelI_test_E"


def sass(*body, name=KERNEL):
    """cuobjdump -sass text of one function holding `body`, one instruction per line."""
    lines = [f"        Function : {name}"]
    lines += [f"        /*{16 * i:04x}*/                   {instruction} ;" for i, instruction in enumerate(body)]
    return "\n".join(lines) + "\n"


SCORES_WAIT = "WARPGROUP.DEPBAR.LE gsb0, 0x1"
PV_WAIT = "WARPGROUP.DEPBAR.LE gsb0, 0x0"
SOFTMAX = ["MUFU.EX2 R10, R10", "FFMA R11, R10, R2, -R3"] * (sass_wait_order.SOFTMAX_MIN_FLOAT_OPS // 2)


class SassWaitOrder(unittest.TestCase):
    def verdict(self, text, require_overlap=False):
        results = sass_wait_order.check(text, require_overlap)
        self.assertEqual(len(results), 1)
        _, fails, gaps, per_warp = results[0]
        return fails, gaps, per_warp

    def test_wait_behind_a_warp_vote_fails(self):
        text = sass(SCORES_WAIT, *SOFTMAX, "VOTE.ANY P0, PT, P1", "@P0 BRA 0x400", PV_WAIT)
        fails, gaps, per_warp = self.verdict(text)
        self.assertTrue(fails)
        self.assertTrue(per_warp)
        self.assertEqual(gaps, [len(SOFTMAX)])

    def test_wait_behind_a_warpgroup_barrier_passes(self):
        # As ptxas writes bar.red.or.pred: the verdict comes back in the barrier's predicate operand.
        text = sass(SCORES_WAIT, *SOFTMAX, "FSETP.NEU.AND P0, PT, R5, 1, PT",
                    "BAR.RED.OR.DEFER_BLOCKING R9, 0x80, P0", "B2R.RESULT RZ, P0", "@P0 BRA 0x400", PV_WAIT)
        self.assertEqual(self.verdict(text, require_overlap=True), (False, [len(SOFTMAX)], False))

    def test_vote_taken_before_the_scores_wait_still_counts(self):
        text = sass("VOTE.ALL P3, PT, P1", SCORES_WAIT, *SOFTMAX, "@!P3 BRA 0x400", PV_WAIT)
        self.assertTrue(self.verdict(text)[2])

    def test_branch_on_a_predicate_set_elsewhere_passes(self):
        text = sass(SCORES_WAIT, *SOFTMAX, "@P4 BRA 0x400", PV_WAIT)
        self.assertEqual(self.verdict(text), (False, [len(SOFTMAX)], False))

    def test_wait_without_a_branch_passes_unless_overlap_is_required(self):
        text = sass(SCORES_WAIT, "FADD R1, R1, R2", PV_WAIT, *SOFTMAX, "VOTE.ANY P0, PT, P1", "@P0 BRA 0x400")
        self.assertEqual(self.verdict(text), (False, [1], False))
        self.assertEqual(self.verdict(text, require_overlap=True), (True, [1], False))

    def test_other_functions_are_ignored(self):
        text = sass(SCORES_WAIT, "VOTE.ANY P0, PT, P1", "@P0 BRA 0x400", PV_WAIT, name="_Z11fill_kernelv")
        self.assertEqual(sass_wait_order.check(text), [])


if __name__ == "__main__":
    unittest.main()
