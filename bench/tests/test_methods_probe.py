"""bench/methods.py's accuracy side on the CPU: the diagonal sums of the vertical-slash estimate,
the sentinel probe's recall, the needle verdict and the Flex block masks built from tile
selections. Needs torch (skipped without it); no GPU, no peer package.
"""

import importlib.util
import math
import os
import sys
import unittest

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, BENCH)

HAVE_TORCH = importlib.util.find_spec("torch") is not None and \
    importlib.util.find_spec("safetensors") is not None
if HAVE_TORCH:
    import torch

    import methods
    import methods_peers as peers


class MaskedMethod:
    """A stand-in peer: exact attention over a fixed boolean mask [heads, seq, seq] (fp32 math,
    bf16 output as the kernels give), with or without its LSE."""

    def __init__(self, mask, with_lse):
        self.mask, self.with_lse = mask, with_lse

    def attend(self, t, v):
        scores = torch.einsum("bhqd,bhkd->bhqk", t.qt.float(), t.kt_full.float()) * t.scale
        scores = scores.masked_fill(~self.mask[None], -math.inf)
        lse = torch.logsumexp(scores, -1)
        vt = t.expand(v).transpose(1, 2).float()
        out = torch.einsum("bhqk,bhkd->bhqd", torch.exp(scores - lse[..., None]), vt)
        return out.transpose(1, 2).to(torch.bfloat16), (lse if self.with_lse else None)


@unittest.skipUnless(HAVE_TORCH, "torch or safetensors not installed")
class ProbeTest(unittest.TestCase):
    seq, heads, kv_heads, dim = 320, 4, 2, 32

    def setUp(self):
        generator = torch.Generator().manual_seed(7)
        shape_q = (1, self.seq, self.heads, self.dim)
        shape_kv = (1, self.seq, self.kv_heads, self.dim)
        q = (torch.randn(shape_q, generator=generator) * 2).to(torch.bfloat16)
        k = (torch.randn(shape_kv, generator=generator) * 2).to(torch.bfloat16)
        v = torch.randn(shape_kv, generator=generator).to(torch.bfloat16)
        self.t = peers.Tensors(q, k, v)
        self.needles = {"question_begin": self.seq - 40, "keys": [37, 150, 201]}
        self.reference = methods.Reference(self.t, self.needles, methods.math_dense)
        rows = torch.arange(self.seq)
        causal = rows[None, :] <= rows[:, None]
        keep = torch.rand((self.heads, self.seq, self.seq), generator=generator) < 0.3
        keep |= (rows[:, None] - rows[None, :]) < 8  # a local band, so every row keeps some mass
        keep[:, :, 0] = True                          # the sentinel key, as the probed peers keep
        keep[:, :, 37] = True                         # needle 37: kept by every head
        keep[:, :, 150] = True
        keep[0, :, 150] = False                       # needle 150: head 0 never computes it
        self.mask = keep & causal[None]

    def exact(self):
        method = MaskedMethod(self.mask, with_lse=True)
        _, lse = method.attend(self.t, self.t.v)
        recall = torch.exp(lse - self.reference.lse)[0]
        return recall.mean().item(), lse

    def measure(self, with_lse):
        method = MaskedMethod(self.mask, with_lse)
        out, lse = method.attend(self.t, self.t.v)
        probe, _ = method.attend(self.t, self.reference.probe_v)
        return self.reference.measure(self.t, out, lse, probe)

    def test_sentinel_probe_recall_matches_the_lse(self):
        expected, _ = self.exact()
        from_lse = self.measure(with_lse=True)
        probed = self.measure(with_lse=False)
        self.assertEqual(probed["recall_source"], "sentinel probe")
        self.assertAlmostEqual(from_lse["recall"], expected, places=5)
        self.assertAlmostEqual(probed["recall"], expected, delta=2e-3)  # bf16 probe output
        self.assertLess(expected, 0.95)  # the mask drops mass: the test can fail
        self.assertAlmostEqual(probed["output_error"], from_lse["output_error"], places=6)

    def test_dense_mask_recalls_everything(self):
        rows = torch.arange(self.seq)
        self.mask = (rows[None, :] <= rows[:, None]).expand(self.heads, -1, -1)
        result = self.measure(with_lse=False)
        self.assertAlmostEqual(result["recall"], 1.0, delta=2e-3)
        self.assertEqual(result["needles_kept"], 3)

    def test_needle_verdict_matches_a_direct_count(self):
        _, lse = self.exact()
        result = self.measure(with_lse=False)
        rows = torch.arange(self.needles["question_begin"], self.seq)
        expected = 0
        for key in self.needles["keys"]:
            logits = self.reference.logits(self.t, rows, key)
            dense = torch.exp(logits - self.reference.lse[0][:, rows])
            kept = dense * self.mask[:, rows, key]
            expected += int(kept.sum() >= methods.NEEDLE_KEPT_SHARE * dense.sum())
        self.assertEqual(result["needles"], 3)
        self.assertEqual(result["needles_kept"], expected)
        self.assertEqual(expected, 1)  # 37 kept; 150 and 201 (a random 30% of rows) are not


@unittest.skipUnless(HAVE_TORCH, "torch not installed")
class EstimateTest(unittest.TestCase):
    def test_diagonal_sums_match_a_loop(self):
        rows, seq = 5, 23
        probabilities = torch.rand(2, 3, rows, seq)
        sums = peers.diagonal_sums(probabilities)
        expected = torch.zeros(2, 3, seq)
        for r in range(rows):
            row = seq - rows + r
            for key in range(seq):
                if key <= row:
                    expected[..., row - key] += probabilities[..., r, key]
                # keys right of a row are masked to probability 0 by the estimate
        causal = torch.arange(seq)[None, :] <= torch.arange(seq - rows, seq)[:, None]
        sums_masked = peers.diagonal_sums(probabilities * causal)
        self.assertTrue(torch.allclose(sums_masked, expected, atol=1e-6))
        self.assertEqual(sums.shape, (2, 3, seq))

    def test_block_mask_keeps_the_selection_under_the_diagonal(self):
        blocks, heads = 5, 2
        seq = peers.BLOCK * blocks - 17  # the last block is partial
        generator = torch.Generator().manual_seed(3)
        selected = torch.rand(heads, blocks, blocks, generator=generator) < 0.5
        selected |= torch.eye(blocks, dtype=torch.bool)
        mask = peers.block_mask_from_bool(selected, seq)
        dense = mask.to_dense()[0].bool()  # [heads, q_blocks, kv_blocks]: partial or full
        expected = selected & torch.tril(torch.ones(blocks, blocks, dtype=torch.bool))
        self.assertTrue(torch.equal(dense, expected))

    def test_flex_on_a_block_selection_computes_exactly_its_pairs(self):
        blocks, heads, kv_heads, dim = 3, 4, 2, 32
        seq = peers.BLOCK * blocks
        generator = torch.Generator().manual_seed(5)
        selected = torch.rand(heads, blocks, blocks, generator=generator) < 0.5
        selected |= torch.eye(blocks, dtype=torch.bool)
        q = torch.randn(1, seq, heads, dim, generator=generator).to(torch.bfloat16)
        k, v = (torch.randn(1, seq, kv_heads, dim, generator=generator).to(torch.bfloat16)
                for _ in range(2))
        t = peers.Tensors(q, k, v)
        out, lse = peers.flex_attention(t.qt, t.kt, t.vt, return_lse=True, enable_gqa=True,
                                        block_mask=peers.block_mask_from_bool(selected, seq))
        rows = torch.arange(seq)
        pairs = selected.repeat_interleave(peers.BLOCK, 1).repeat_interleave(peers.BLOCK, 2)
        pairs &= rows[None, :] <= rows[:, None]
        scores = torch.einsum("bhqd,bhkd->bhqk", t.qt.float(), t.kt_full.float()) * t.scale
        scores = scores.masked_fill(~pairs[None], -math.inf)
        self.assertTrue(torch.allclose(lse.float(), torch.logsumexp(scores, -1), atol=1e-4))
        expected = torch.einsum("bhqk,bhkd->bhqd", torch.softmax(scores, -1), t.vt_full.float())
        self.assertLess((out.float() - expected).abs().max().item(), 0.05)  # bf16 output
        self.assertFalse(torch.equal(pairs, (rows[None, :] <= rows[:, None]).expand_as(pairs)))


if __name__ == "__main__":
    unittest.main()
