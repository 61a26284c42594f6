"""bench/plan_blocks.py (an mmsparse plan's blocks for block-sparse kernels) against a slow
reference that lists every pair the plan computes, row by row and key by key, with the mask rule
of src/core/mask_rule.h. Random small plans of the CSR arrays Plan.pass_arrays gives; where the
package's extension loads (a build with Python on), real plans of several patterns too, whose
pair counts the C++ count_plan_pairs confirms. Needs numpy (skipped without it); no torch, no GPU.
"""

import glob
import importlib.util
import os
import random
import sys
import unittest

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(BENCH)
sys.path.insert(0, BENCH)

HAVE_NUMPY = importlib.util.find_spec("numpy") is not None
if HAVE_NUMPY:
    import numpy as np

    import plan_blocks

MAX_RANDOM_CASES = 60


def pair_kept(mask, aligned, key):
    """mask_rule::positions_keep; masks on token arrays are left out of the random plans."""
    distance = aligned - key
    if mask["causal"] and distance < 0:
        return False
    if mask["window"] > 0 and key >= mask["window_sink"] and distance >= mask["window"]:
        return False
    if mask["min_distance"] > 0 and distance < mask["min_distance"]:
        return False
    return mask["period"] == 0 or distance % mask["period"] < mask["band"]


def tile_keys(arrays, tile):
    keys = []
    for offsets, records in (("tile_span_offsets", "spans"),
                             ("tile_strided_offsets", "strided_spans"),
                             ("tile_column_offsets", "columns")):
        lo, hi = arrays[offsets][tile], arrays[offsets][tile + 1]
        for record in arrays[records][lo:hi]:
            if records == "columns":
                keys.append(int(record))
            else:
                step = int(record[2]) if records == "strided_spans" else 1
                keys.extend(range(int(record[0]), int(record[1]), step))
    return keys


def reference_pairs(passes, shape):
    """{slot: set of (query, key)} the plan computes (its passes' union)."""
    batch, heads, q_len, kv_len, _ = shape
    pairs = {slot: set() for slot in range(batch * heads)}
    for arrays in passes:
        masks = [dict(zip(plan_blocks.MASK_FIELDS, (int(x) for x in row)))
                 for row in arrays["masks"]]
        for slot in range(batch * heads):
            order = []
            for run in arrays["runs"][arrays["head_run_offsets"][slot]:
                                      arrays["head_run_offsets"][slot + 1]]:
                order.extend(int(run[0]) + int(run[2]) * i for i in range(int(run[1])))
            order = order or list(range(q_len))
            for tile in range(arrays["head_tile_offsets"][slot],
                              arrays["head_tile_offsets"][slot + 1]):
                mask = masks[arrays["tile_masks"][tile]]
                keys = tile_keys(arrays, tile)
                for index in range(*arrays["tiles"][tile]):
                    query = order[index]
                    pairs[slot].update((query, key) for key in keys
                                       if pair_kept(mask, query + kv_len - q_len, key))
    return pairs


def reference_blocks(pairs, shape, block_q, block_k):
    batch, heads, q_len, kv_len, _ = shape
    out = np.zeros((batch * heads, -(-q_len // block_q), -(-kv_len // block_k)), dtype=bool)
    for slot, slot_pairs in pairs.items():
        for query, key in slot_pairs:
            out[slot, query // block_q, key // block_k] = True
    return out


def csr(per_tile, width, dtype):
    offsets = np.zeros(len(per_tile) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(records) for records in per_tile])
    flat = [record for records in per_tile for record in records]
    records = np.array(flat, dtype=dtype).reshape(-1, width) if width > 1 else \
        np.array(flat, dtype=dtype)
    return offsets, records


def random_mask(rng, kinds):
    mask = dict.fromkeys(plan_blocks.MASK_FIELDS, 0)
    mask["causal"] = 1
    mask["modality_pairs"] = (1 << 9) - 1
    if "window" in kinds and rng.random() < 0.5:
        mask["window"] = rng.randint(1, 40)
        mask["window_sink"] = rng.choice([0, rng.randint(1, 20)])
    if "distance" in kinds and rng.random() < 0.3:
        mask["min_distance"] = rng.randint(1, 30)
    if "band" in kinds and rng.random() < 0.3:
        mask["period"] = rng.randint(2, 12)
        mask["band"] = rng.randint(1, mask["period"])
    return [mask[name] for name in plan_blocks.MASK_FIELDS]


def tile_records(rng, kv_len, strided, diagonal):
    """Disjoint spans, strided spans and columns of one tile (keys drawn once each); some columns
    next to `diagonal` (the tile's last row's aligned position), where the causal cut decides."""
    free = [key for key in range(diagonal - 2, diagonal + 3) if 0 <= key < kv_len]
    rest = [key for key in range(kv_len) if key not in free]
    rng.shuffle(free)
    rng.shuffle(rest)
    free += rest
    taken = set()
    spans, stridden, columns = [], [], []
    for _ in range(rng.randint(0, 3)):
        begin = rng.randrange(kv_len)
        end = min(kv_len, begin + rng.randint(1, 40))
        if not taken.intersection(range(begin, end)):
            spans.append((begin, end))
            taken.update(range(begin, end))
    for _ in range(rng.randint(0, 2) if strided else 0):
        begin, step = rng.randrange(kv_len), rng.randint(2, 70)
        keys = list(range(begin, min(kv_len, begin + step * rng.randint(2, 6)), step))
        if len(keys) > 1 and not taken.intersection(keys):
            stridden.append((keys[0], keys[-1] + 1, step))
            taken.update(keys)
    for key in free[: rng.randint(0, 6)]:
        if key not in taken:
            columns.append(key)
            taken.add(key)
    return spans, stridden, sorted(columns)


def random_pass(rng, shape, kinds, permuted, aligned=False):
    """One pass's arrays: every head split into tiles of up to tile_rows order indices (some left
    out), in natural order or, with `permuted`, a phase-major order of runs; `aligned`: tiles of
    exactly tile_rows (the last shorter)."""
    batch, heads, q_len, kv_len, tile_rows = shape
    runs, run_offsets, tiles, tile_offsets = [], [0], [], [0]
    masks = [random_mask(rng, kinds) for _ in range(3)]
    tile_masks, per_tile = [], ([], [], [])
    for _ in range(batch * heads):
        if permuted and rng.random() < 0.7:
            stride = rng.randint(2, 5)
            runs += [(phase, len(range(phase, q_len, stride)), stride) for phase in range(stride)
                     if phase < q_len]
        run_offsets.append(len(runs))
        begin = 0
        while begin < q_len:
            end = min(q_len, begin + (tile_rows if aligned else rng.randint(1, tile_rows)))
            if rng.random() < 0.9:
                tiles.append((begin, end))
                tile_masks.append(rng.randrange(len(masks)))
                diagonal = end - 1 + kv_len - q_len
                for records, new in zip(per_tile, tile_records(rng, kv_len, "strided" in kinds,
                                                               diagonal)):
                    records.append(new)
            begin = end
        tile_offsets.append(len(tiles))
    arrays = {"head_run_offsets": np.array(run_offsets, dtype=np.int64),
              "runs": np.array(runs, dtype=np.int64).reshape(-1, 3),
              "head_tile_offsets": np.array(tile_offsets, dtype=np.int64),
              "tiles": np.array(tiles, dtype=np.int64).reshape(-1, 2),
              "tile_masks": np.array(tile_masks, dtype=np.int32),
              "masks": np.array(masks, dtype=np.int64),
              "mask_fields": list(plan_blocks.MASK_FIELDS)}
    for (offsets_name, records_name, width), records in zip(
            (("tile_span_offsets", "spans", 2), ("tile_strided_offsets", "strided_spans", 3),
             ("tile_column_offsets", "columns", 1)), per_tile):
        arrays[offsets_name], arrays[records_name] = csr(records, width, np.int32)
    return arrays


@unittest.skipUnless(HAVE_NUMPY, "numpy not installed")
class RandomPlanBlocks(unittest.TestCase):
    def check(self, kinds, permuted, exact, seed, aligned=False):
        rng = random.Random(seed)
        for case in range(MAX_RANDOM_CASES):
            q_len = rng.randint(1, 90)
            shape = (rng.randint(1, 2), rng.randint(1, 3), q_len, q_len + rng.choice([0, 0, 17]),
                     rng.choice([4, 16, 32]))
            passes = [random_pass(rng, shape, kinds, permuted, aligned)
                      for _ in range(rng.choice([1, 1, 2]))]
            block_q, block_k = rng.choice([1, 8, 16, 64]), rng.choice([1, 8, 16, 64])
            if aligned:  # tiles inside query blocks: the columns' fast path
                block_q = shape[4] * rng.choice([1, 2])
            blocks = plan_blocks.block_map(passes, shape, block_q, block_k)
            expected = reference_blocks(reference_pairs(passes, shape), shape, block_q, block_k)
            chunk = plan_blocks.CHUNK_RECORDS
            try:  # tiles taken a few records at a time give the same map
                plan_blocks.CHUNK_RECORDS = rng.randint(1, 5)
                np.testing.assert_array_equal(
                    plan_blocks.block_map(passes, shape, block_q, block_k), blocks)
            finally:
                plan_blocks.CHUNK_RECORDS = chunk
            where = f"case {case}, shape {shape}, blocks {block_q}x{block_k}"
            self.assertEqual(blocks.shape, expected.shape, where)
            self.assertFalse(np.any(expected & ~blocks), f"{where}: a block with a pair is missing")
            if exact:
                np.testing.assert_array_equal(blocks, expected, where)

    def test_causal_spans_and_columns_are_exact(self):
        self.check(kinds=(), permuted=False, exact=True, seed=1)

    def test_columns_of_one_block_tiles_are_exact(self):
        self.check(kinds=("distance",), permuted=False, exact=True, seed=5, aligned=True)

    def test_windows_sinks_distances_and_bands_are_exact_on_contiguous_rows(self):
        self.check(kinds=("window", "distance", "band"), permuted=False, exact=True, seed=2)

    def test_causal_strided_spans_and_permuted_orders_are_exact(self):
        self.check(kinds=("strided", "distance"), permuted=True, exact=True, seed=3)

    def test_windows_over_strided_keys_and_permuted_orders_cover_every_pair(self):
        self.check(kinds=("strided", "window", "distance", "band"), permuted=True, exact=False,
                   seed=4)

    def test_bad_block_size_is_named(self):
        with self.assertRaisesRegex(ValueError, "block_q, block_k"):
            plan_blocks.block_map([], (1, 1, 4, 4, 4), 0, 4)


def load_core():
    """mmsparse._core from python/mmsparse (a build with Python on), without the package's
    __init__ (which imports torch), or None."""
    for path in glob.glob(os.path.join(REPO, "python", "mmsparse", "_core*.so")):
        spec = importlib.util.spec_from_file_location("_core", path)
        try:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
        except ImportError:
            return None
    return None


CORE = load_core() if HAVE_NUMPY else None
CPU_DEVICE = 1  # DLPack's kDLCPU
SPECS = ["a-shape:sink=8,local=40", "tri-shape", "grid-mask", "dense",
         "vertical-slash:vertical=40,slash=110", "grid", "vec:alpha_ppm=100000"]


def host_view(array):
    """A View of a C-contiguous float32 numpy array (strides in elements)."""
    return CORE.View(array.ctypes.data, "float32", CPU_DEVICE, 0, list(array.shape),
                     [stride // array.itemsize for stride in array.strides])


@unittest.skipUnless(CORE is not None, "mmsparse._core not built (-DMMSPARSE_BUILD_PYTHON=ON)")
class RealPlanBlocks(unittest.TestCase):
    def test_static_patterns_match_the_reference_and_the_engine_pair_counts(self):
        rng = np.random.default_rng(0)
        for spec in SPECS:
            for q_len, kv_len, tile_rows in ((300, 300, 16), (197, 230, 32)):
                q = rng.standard_normal((1, q_len, 4, 16), dtype=np.float32)
                k = rng.standard_normal((1, kv_len, 2, 16), dtype=np.float32)
                with self.subTest(spec=spec, q_len=q_len, kv_len=kv_len):
                    try:
                        plan = CORE.prepare([spec], 1, 4, q_len, kv_len, tile_rows, None,
                                            CPU_DEVICE, 0, 0, host_view(q), host_view(k), None,
                                            None, 0.25)
                    except (ValueError, NotImplementedError) as error:
                        self.skipTest(f"{spec} at this shape: {error}")
                    passes = [plan.pass_arrays(p) for p in range(plan.num_passes)]
                    pairs = reference_pairs(passes, plan.shape)
                    self.assertEqual([len(pairs[s]) for s in sorted(pairs)], plan.pair_counts())
                    for block_q, block_k in ((16, 16), (64, 32)):
                        blocks = plan_blocks.block_map(passes, plan.shape, block_q, block_k)
                        expected = reference_blocks(pairs, plan.shape, block_q, block_k)
                        self.assertFalse(np.any(expected & ~blocks))
                        if not any(np.any(a["strided_spans"]) or np.any(a["runs"])
                                   for a in passes):
                            np.testing.assert_array_equal(blocks, expected)

    def test_arrays_are_views_that_keep_the_plan_alive(self):
        plan = CORE.prepare(["a-shape:sink=8,local=40"], 1, 2, 64, 64, 16, None, CPU_DEVICE, 0, 0,
                            None, None, None, None, 0.0)
        arrays = plan.pass_arrays(0)
        del plan
        self.assertEqual(arrays["tiles"].shape[1], 2)
        self.assertFalse(arrays["spans"].flags.writeable)
        self.assertEqual(int(arrays["head_tile_offsets"][-1]), len(arrays["tiles"]))
        with self.assertRaises(ValueError):
            CORE.prepare(["dense"], 1, 1, 8, 8, 8, None, CPU_DEVICE, 0, 0, None, None, None, None,
                         0.0).pass_arrays(5)


if __name__ == "__main__":
    unittest.main()
