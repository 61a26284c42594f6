"""bench/methods.py's harness on the CPU: the output error summed in row chunks, the masks shared
across settings (no recompilation per setting), the order of the entries, and a whole smoke run
cut by its budget (mmsparse's Python package and CLI on their CPU backend). Needs torch (skipped
without it); the smoke run also needs the package's extension and the CLI (skipped without them).
"""

import glob
import importlib.util
import json
import os
import sys
import tempfile
import unittest
from unittest import mock

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(BENCH)
sys.path.insert(0, BENCH)
sys.path.insert(0, os.path.join(REPO, "python"))

HAVE_TORCH = importlib.util.find_spec("torch") is not None and \
    importlib.util.find_spec("safetensors") is not None
if HAVE_TORCH:
    import torch

    import methods
    import methods_peers as peers


def find_cli():
    cli = os.environ.get("MMSPARSE_CLI")
    if cli:
        return cli
    found = sorted(glob.glob(os.path.join(REPO, "build*", "tools", "cli", "mmsparse")))
    return found[0] if found else None


def have_package():
    """The package's extension, built in the tree for this interpreter."""
    import importlib.machinery
    return any(os.path.isfile(os.path.join(REPO, "python", "mmsparse", "_core" + suffix))
               for suffix in importlib.machinery.EXTENSION_SUFFIXES)


def small_tensors(seq=200, heads=4, kv_heads=2, dim=32, seed=11):
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(1, seq, heads, dim, generator=generator).to(torch.bfloat16)
    k, v = (torch.randn(1, seq, kv_heads, dim, generator=generator).to(torch.bfloat16)
            for _ in range(2))
    return peers.Tensors(q, k, v)


@unittest.skipUnless(HAVE_TORCH, "torch or safetensors not installed")
class OutputErrorTest(unittest.TestCase):
    def test_chunked_error_matches_a_per_head_loop(self):
        t = small_tensors()
        with mock.patch.object(methods, "ERROR_CHUNK_ROWS", 48):  # 200 rows: 5 chunks, one short
            reference = methods.Reference(t, None, methods.math_dense)
            noisy = (reference.out.float() + 0.05 * torch.randn_like(reference.out.float()))
            noisy = noisy.to(torch.bfloat16)
            error = reference.output_error(noisy)
        expected = []
        for head in range(t.heads):
            diff = noisy[0, :, head].float() - reference.out[0, :, head].float()
            expected.append(float(diff.norm() / reference.out[0, :, head].float().norm()))
        self.assertAlmostEqual(error, sum(expected) / len(expected), places=5)
        self.assertGreater(error, 0.01)
        self.assertEqual(reference.output_error(reference.out), 0.0)


@unittest.skipUnless(HAVE_TORCH, "torch or safetensors not installed")
class SharedMaskTest(unittest.TestCase):
    def test_block_masks_of_one_shape_share_their_mask_mod(self):
        blocks, heads = 3, 2
        seq = peers.BLOCK * blocks
        first = torch.eye(blocks, dtype=torch.bool).expand(heads, -1, -1).clone()
        second = torch.ones(heads, blocks, blocks, dtype=torch.bool)
        mask_a = peers.block_mask_from_bool(first, seq)
        mask_b = peers.block_mask_from_bool(second, seq)
        self.assertIs(mask_a.mask_mod, mask_b.mask_mod)
        # The shared mask_mod reads the latest selection: the second one, element by element.
        rows = torch.arange(seq)
        value = mask_b.mask_mod(0, torch.tensor(1), rows[:, None], rows[None, :])
        self.assertTrue(torch.equal(value, rows[None, :] <= rows[:, None]))

    def test_a_shape_windows_share_one_mask_mod_set_per_window(self):
        adapter = peers.FlexAShape([64, 256], sink=16)
        narrow = adapter.mask_mod(64, "cpu")
        rows = torch.arange(400)
        narrow_pairs = int(narrow(0, 0, rows[:, None], rows[None, :]).sum())
        wide = adapter.mask_mod(256, "cpu")
        self.assertIs(narrow, wide)
        wide_pairs = int(wide(0, 0, rows[:, None], rows[None, :]).sum())
        self.assertEqual(narrow_pairs, peers_a_shape_pairs(400, 16, 64))
        self.assertEqual(wide_pairs, peers_a_shape_pairs(400, 16, 256))


def peers_a_shape_pairs(seq, sink, local):
    return sum(min(i + 1, local) + min(max(i + 1 - local, 0), sink) for i in range(seq))


class Args:
    warmup, repeats = 0, 2


@unittest.skipUnless(HAVE_TORCH, "torch or safetensors not installed")
class PeerEntryTest(unittest.TestCase):
    """A real peer adapter (FlexAttention's A-shape, eager on the CPU) through the harness: set-up,
    timing, accuracy from its LSE, and the point."""

    def test_flex_a_shape_point_matches_its_mask(self):
        t = small_tensors(seq=256)
        reference = methods.Reference(t, None, methods.math_dense)
        adapter = peers.FlexAShape([32, 128], sink=16)

        original = peers.create_block_mask

        def eager_block_mask(*args, **kwargs):
            return original(*args, **dict(kwargs, _compile=False))
        with mock.patch.object(peers, "compiled_flex", lambda: peers.flex_attention), \
                mock.patch.object(peers, "create_block_mask", side_effect=eager_block_mask):
            adapter_points = []
            for local in adapter.settings:
                entry = methods.PeerEntry(adapter, local, t, reference, Args())
                entry.setup()
                entry.run_round(0.0)
                entry.run_round(0.0)
                adapter_points += entry.points()
        rows = torch.arange(t.seq_len)
        for local, point in zip(adapter.settings, adapter_points):
            keep = (rows[None, :] <= rows[:, None]) & \
                ((rows[None, :] < 16) | (rows[:, None] - rows[None, :] < local))
            scores = torch.einsum("bhqd,bhkd->bhqk", t.qt.float(), t.kt_full.float()) * t.scale
            lse = torch.logsumexp(scores.masked_fill(~keep, float("-inf")), -1)
            expected = torch.exp(lse - reference.lse).mean().item()
            self.assertAlmostEqual(point["recall"], expected, places=4)
            self.assertEqual(point["recall_source"], "lse")
            self.assertEqual(point["knob"], f"sink=16,local={local}")
            self.assertEqual(len(point["round_total_ms"]), 2)
        self.assertLess(adapter_points[0]["recall"], adapter_points[1]["recall"])
        self.assertLess(adapter_points[1]["recall"], 1.0)


class FakeEntry:
    def __init__(self, name):
        self.name = name


@unittest.skipUnless(HAVE_TORCH, "torch or safetensors not installed")
class ConfigSettingsTest(unittest.TestCase):
    """The shipped config and those of --config-file are points of two methods, each labelled by
    its file; a --config-file for another input is not this input's."""

    def test_given_configs_are_not_the_shipped_one(self):
        class ConfigArgs:
            config_file = ["video:131072=/tmp/r0.985.json", "video:32768=/tmp/other.json"]
        settings = methods.config_settings(ConfigArgs(), "video", 131072, None,
                                           "/repo/configs/video-131072.json")
        self.assertEqual([(label, method) for label, _, _, method in settings],
                         [("configs/video-131072.json", methods.mm_lib.SHIPPED_METHOD),
                          ("file=r0.985.json", methods.mm_lib.GIVEN_METHOD)])
        self.assertEqual(settings[1][1], "/tmp/r0.985.json")
        self.assertIn("unreadable", settings[1][2])  # the note says what it knows of the file


@unittest.skipUnless(HAVE_TORCH, "torch or safetensors not installed")
class OrderTest(unittest.TestCase):
    def test_dense_configs_one_point_per_method_oracle_rest_searched(self):
        mm = [[FakeEntry("vs1"), FakeEntry("vs2")], [FakeEntry("grid")]]
        peer = [[FakeEntry("mi1"), FakeEntry("mi2"), FakeEntry("mi3")]]
        order = methods.ordered_entries([[FakeEntry("cudnn")]], [FakeEntry("shipped")], mm, peer,
                                        FakeEntry("oracle"), [FakeEntry("search")])
        self.assertEqual([e.name for e in order],
                         ["cudnn", "shipped", "vs1", "mi1", "grid", "oracle", "vs2", "mi2", "mi3",
                          "search"])

    def test_peers_still_building_come_after_every_sweep(self):
        late = [[FakeEntry("mvs1"), FakeEntry("mvs2")]]
        order = methods.ordered_entries([[FakeEntry("cudnn")]], [], [[FakeEntry("vs1")]],
                                        [[FakeEntry("xa1"), FakeEntry("xa2")]], None,
                                        [FakeEntry("search")], late)
        self.assertEqual([e.name for e in order],
                         ["cudnn", "vs1", "xa1", "xa2", "mvs1", "mvs2", "search"])


class FakeBuiltPeer:
    """A peer that loads once its build is done (the marker file removed)."""

    name = "fake peer"

    def __init__(self, marker):
        self.marker, self.set_up = marker, False

    def available(self):
        return "not installed" if os.path.exists(self.marker) else None

    def setup(self, t):
        self.set_up = True


@unittest.skipUnless(HAVE_TORCH, "torch or safetensors not installed")
class AwaitingBuildTest(unittest.TestCase):
    """A peer compiling beside the benchmark is set up once its build is done, and fails its
    set-up with the reason when the build outlasts the budget or leaves it unloadable."""

    def test_sets_up_the_peer_when_the_build_finishes(self):
        with tempfile.TemporaryDirectory() as folder:
            marker = os.path.join(folder, "building")
            open(marker, "w").close()
            peer = FakeBuiltPeer(marker)
            waits = []

            def build_finishes(seconds):
                waits.append(seconds)
                os.remove(marker)
            methods.AwaitingBuild(peer, marker, lambda: 60.0, sleep=build_finishes).setup(None)
            self.assertEqual((len(waits), peer.set_up), (1, True))

    def test_a_build_outlasting_the_budget_fails_the_set_up(self):
        with tempfile.TemporaryDirectory() as folder:
            marker = os.path.join(folder, "building")
            open(marker, "w").close()
            peer = FakeBuiltPeer(marker)
            awaiting = methods.AwaitingBuild(peer, marker, lambda: 0.0, sleep=lambda s: None)
            with self.assertRaisesRegex(TimeoutError, "still compiling"):
                awaiting.setup(None)
            self.assertFalse(peer.set_up)

    def test_an_unloadable_build_fails_the_set_up_with_the_reason(self):
        class Broken(FakeBuiltPeer):
            def available(self):
                return "not installed or not loadable: ImportError: no .so"
        with tempfile.TemporaryDirectory() as folder:
            peer = Broken(os.path.join(folder, "gone"))
            awaiting = methods.AwaitingBuild(peer, peer.marker, lambda: 5.0)
            with self.assertRaisesRegex(RuntimeError, "no .so"):
                awaiting.setup(None)
            self.assertEqual(awaiting.name, "fake peer")  # the rest is the peer's own


@unittest.skipUnless(HAVE_TORCH and find_cli() and have_package(),
                     "needs torch, the mmsparse CLI and the Python package's extension")
class SmokeRunTest(unittest.TestCase):
    """methods.py end to end on the CPU backend, one tiny input, with a budget that stops it."""

    def run_main(self, out, presets, budget_s):
        methods.main(["--mmsparse", find_cli(), "--out", out, "--device", "cpu",
                      "--presets", *presets, "--seq-lens", "512", "--heads", "2",
                      "--kv-heads", "1", "--rounds", "2", "--warmup", "0", "--repeats", "1",
                      "--search-targets", "--no-plots", "--budget-s", str(budget_s),
                      "--mmsparse-patterns", "a-shape:sink=16,local=64",
                      "vertical-slash:vertical=32,slash=128"])
        with open(os.path.join(out, "methods.json")) as file:
            return json.load(file)

    def test_points_and_the_set_up_are_in_the_json(self):
        with tempfile.TemporaryDirectory() as out:
            report = self.run_main(out, ["mixed-interleaved"], 0)
        result = report["inputs"][0]
        self.assertEqual((result["label"], result["complete"]), ("mixed-interleaved", True))
        self.assertEqual({p["method"] for p in result["points"]},
                         {"mmsparse dense", "mmsparse a-shape", "mmsparse vertical-slash"})
        for point in result["points"]:
            self.assertTrue(0.0 < point["recall"] <= 1.0 + 1e-6)
            self.assertGreater(point["total_ms"], 0.0)
            self.assertEqual(len(point["round_total_ms"]), 2)
        self.assertIn("input: load + dense reference", result["setup_s"])
        self.assertIn("mmsparse a-shape", result["setup_s"])
        self.assertIn("needs a CUDA device", result["skipped"]["minference vertical-slash"])
        self.assertEqual(len(result["tile_oracle"]), 3)

    def test_a_spent_budget_lists_what_it_cut(self):
        with tempfile.TemporaryDirectory() as out:
            report = self.run_main(out, ["mixed-interleaved", "multi-image"], 0.001)
        cut = report["not_run"] + [name for result in report["inputs"]
                                   for name, why in result["skipped"].items() if "budget" in why]
        self.assertTrue(cut)
        self.assertIn("multi-image 512", report["not_run"])


if __name__ == "__main__":
    unittest.main()
