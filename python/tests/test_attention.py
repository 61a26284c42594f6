"""mmsparse.attention, prepare and Plan.run over CPU tensors (the reference backend)."""

from __future__ import annotations

import threading
import time

import pytest
import torch

import mmsparse
from reference import a_shape_mask, causal_mask, lse, qkv, sdpa

TOLERANCE = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_dense_matches_sdpa(generator, dtype):
    q, k, v = qkv(generator, batch=2, q_len=97, q_heads=6, kv_heads=2, head_dim=40, dtype=dtype)
    out = mmsparse.attention(q, k, v)
    assert out.shape == q.shape and out.dtype == dtype
    torch.testing.assert_close(out.double(), sdpa(q, k, v), atol=TOLERANCE[dtype], rtol=0)


def test_bhsd_strides_are_read_without_copies(generator):
    q, k, v = qkv(generator, q_len=64)
    q_bhsd, k_bhsd, v_bhsd = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    out = torch.empty_like(q_bhsd)
    result = mmsparse.attention(q_bhsd, k_bhsd, v_bhsd, tensor_layout="bhsd", out=out)
    assert result is out  # written in place, in the caller's layout
    torch.testing.assert_close(out.transpose(1, 2).double(), sdpa(q, k, v), atol=2e-5, rtol=0)
    # The same memory read as a [B, S, H, D] view with [B, H, S, D] strides.
    strided = mmsparse.attention(q_bhsd.transpose(1, 2), k_bhsd.transpose(1, 2),
                                 v_bhsd.transpose(1, 2))
    torch.testing.assert_close(strided, out.transpose(1, 2), atol=0, rtol=0)


def test_kv_longer_than_q_is_bottom_right_causal_and_lse_is_natural_log(generator):
    q, k, v = qkv(generator, q_len=50, kv_len=130)
    out, out_lse = mmsparse.attention(q, k, v, return_lse=True, scale=0.3)
    mask = causal_mask(50, 130)
    torch.testing.assert_close(out.double(), sdpa(q, k, v, mask=mask, scale=0.3), atol=2e-5,
                               rtol=0)
    assert out_lse.shape == (1, 4, 50) and out_lse.dtype == torch.float32
    torch.testing.assert_close(out_lse.double(), lse(q, k, mask, scale=0.3), atol=1e-4, rtol=0)


def test_non_causal_dense(generator):
    q, k, v = qkv(generator, q_len=40, kv_len=70)
    out = mmsparse.attention(q, k, v, causal=False)
    torch.testing.assert_close(out.double(), sdpa(q, k, v, causal=False), atol=2e-5, rtol=0)


def test_a_shape_equals_its_mask(generator):
    q, k, v = qkv(generator, q_len=300, kv_len=310)
    out = mmsparse.attention(q, k, v, pattern="a-shape:sink=16,local=64")
    expected = sdpa(q, k, v, mask=a_shape_mask(300, 310, sink=16, local=64))
    torch.testing.assert_close(out.double(), expected, atol=2e-5, rtol=0)
    # The pattern drops keys: far from dense, so the comparison above can fail.
    assert (out.double() - sdpa(q, k, v)).abs().max() > 0.05


def test_per_head_specs_and_configs(generator):
    q, k, v = qkv(generator, q_len=160)
    specs = ["dense", "a-shape:sink=8,local=32", "a-shape:sink=4,local=80", "dense"]
    out = mmsparse.attention(q, k, v, pattern=specs)
    for head, spec in enumerate(specs):
        mask = causal_mask(160, 160) if spec == "dense" else a_shape_mask(
            160, 160, sink=int(spec.split("sink=")[1].split(",")[0]),
            local=int(spec.split("local=")[1]))
        expected = sdpa(q[:, :, head:head + 1], k[:, :, head // 2:head // 2 + 1],
                        v[:, :, head // 2:head // 2 + 1], mask=mask)
        torch.testing.assert_close(out[:, :, head:head + 1].double(), expected, atol=2e-5, rtol=0)
    config = mmsparse.PatternConfig.from_json({
        "schema_version": 2, "default": "dense",
        "layers": {"1": {"default": "dense", "heads": {str(h): s for h, s in enumerate(specs)}}}})
    torch.testing.assert_close(mmsparse.attention(q, k, v, config=config, layer=1), out)
    torch.testing.assert_close(mmsparse.attention(q, k, v, config=config, layer=0),
                               mmsparse.attention(q, k, v))


def test_prepare_then_run_equals_attention(generator):
    q, k, v = qkv(generator, batch=2, q_len=128)
    plan = mmsparse.prepare(q, k, pattern="a-shape:sink=8,local=32")
    assert plan.shape[:4] == (1, 4, 128, 128)  # a static plan serves every batch element
    assert 0 < plan.density() < 1
    out = torch.empty_like(q)
    assert plan.run(q, k, v, out=out) is out
    torch.testing.assert_close(out, mmsparse.attention(q, k, v, pattern="a-shape:sink=8,local=32"))
    q2, k2, v2 = qkv(torch.Generator().manual_seed(5), batch=2, q_len=128)
    torch.testing.assert_close(plan.run(q2, k2, v2),
                               mmsparse.attention(q2, k2, v2, pattern="a-shape:sink=8,local=32"))


def test_dynamic_pattern_recall_on_its_plan(generator):
    q, k, v = qkv(generator, q_len=512)
    spec = "vertical-slash:vertical=16,slash=40,last_q=32,sink=8,local=32"
    out, out_lse = mmsparse.attention(q, k, v, pattern=spec, return_lse=True)
    _, dense_lse = mmsparse.attention(q, k, v, return_lse=True)
    recall = torch.exp(out_lse - dense_lse)  # the share of the softmax mass the plan keeps
    assert torch.all(recall <= 1 + 1e-5) and recall.mean() > 0.2
    plan = mmsparse.prepare(q, k, pattern=spec)
    assert plan.shape[0] == 1 and 0 < plan.density() < 1
    torch.testing.assert_close(plan.run(q, k, v), out)


def test_gil_is_released_while_the_engine_works(generator):
    q, k, v = qkv(generator, q_len=1536, q_heads=8, head_dim=64)
    counter = [0]
    running = threading.Event()
    stop = threading.Event()

    def count():
        running.set()
        while not stop.is_set():
            counter[0] += 1

    thread = threading.Thread(target=count)
    thread.start()
    running.wait()
    before = counter[0]
    start = time.perf_counter()
    mmsparse.attention(q, k, v)
    during = counter[0] - before
    elapsed = time.perf_counter() - start
    stop.set()
    thread.join()
    # Holding the GIL would freeze the counting thread for the whole call.
    assert elapsed < 0.02 or during > 1000, (during, elapsed)


def test_torch_compile_fullgraph(generator):
    q, k, v = qkv(generator, q_len=96)
    config = mmsparse.PatternConfig.uniform("a-shape:sink=8,local=32")
    plan = mmsparse.prepare(q, k, pattern="tri-shape:sink=8,local=16,bottom=8")

    def layer(q, k, v):
        sparse = mmsparse.attention(q * 0.5, k, v, config=config, layer=3)
        dense, dense_lse = mmsparse.attention(q, k, v, return_lse=True)
        return sparse + dense + plan.run(q, k, v), dense_lse

    compiled = torch.compile(layer, fullgraph=True, backend="inductor")
    for seed in (1, 2):
        inputs = qkv(torch.Generator().manual_seed(seed), q_len=96)
        expected, expected_lse = layer(*inputs)
        got, got_lse = compiled(*inputs)
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(got_lse, expected_lse)


def test_build_info_and_patterns():
    info = mmsparse.build_info()
    assert info["version"] == mmsparse.__version__ and "cpu-reference" in info["backends"]
    names = {p["name"] for p in mmsparse.known_patterns()}
    assert {"dense", "a-shape", "vertical-slash", "grid"} <= names


def test_pass_arrays_are_the_plans_records(generator):
    q, k, _ = qkv(generator, q_len=96)
    plan = mmsparse.prepare(q, k, pattern="a-shape:sink=8,local=32")
    assert plan.num_passes >= 1
    arrays = plan.pass_arrays(0)
    heads, q_len, kv_len = plan.shape[1], plan.shape[2], plan.shape[3]
    tiles = arrays["tiles"]
    assert len(arrays["head_tile_offsets"]) == heads + 1
    assert arrays["head_tile_offsets"][-1] == len(tiles) == len(arrays["tile_masks"])
    assert (tiles[:, 0] < tiles[:, 1]).all() and tiles[:, 1].max() <= q_len
    spans = arrays["spans"]
    assert arrays["tile_span_offsets"][-1] == len(spans) and spans.max() <= kv_len
    assert not spans.flags.writeable  # views of the plan, not copies
    assert len(arrays["tile_key_orders"]) == 0 and len(arrays["key_orders"]) == 0  # all in place
    assert list(arrays["mask_fields"])[:2] == ["causal", "window"]
    assert arrays["masks"].shape[1] == len(arrays["mask_fields"])
    del plan  # the arrays keep the plan's memory alive
    assert int(arrays["tiles"][0, 1]) == int(tiles[0, 1])
    with pytest.raises(ValueError, match="pass_index"):
        mmsparse.prepare(q, k).pass_arrays(99)
