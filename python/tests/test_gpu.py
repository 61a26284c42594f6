"""CUDA tensors: the engine against the CPU reference and SDPA, torch's current stream, CUDA graph
capture of Plan.run, torch.compile, and the transformers backend on the GPU.

Run on a GPU machine with a CUDA build (README, "Python"): pytest python/tests -m gpu
"""

from __future__ import annotations

import pytest
import torch

import mmsparse
import mmsparse.hf
import tiny_models as tiny
from reference import qkv, sdpa

pytestmark = pytest.mark.gpu
BF16_TOLERANCE = 2e-2
# Odd lengths, kv_len > q_len, GQA ratios 7, 1 and 4, head_dim 128 and 64 (the engine's two
# kernel families).
SHAPES = [(1, 1000, 1000, 28, 4, 128), (2, 333, 517, 8, 8, 64), (1, 2049, 2049, 16, 4, 128)]


def _cuda(tensors):
    return [t.cuda() for t in tensors]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_dense_matches_sdpa(shape, dtype):
    batch, q_len, kv_len, q_heads, kv_heads, head_dim = shape
    q, k, v = qkv(torch.Generator().manual_seed(1), batch, q_len, kv_len, q_heads, kv_heads,
                  head_dim, dtype=dtype, device="cuda")
    out, out_lse = mmsparse.attention(q, k, v, return_lse=True)
    torch.testing.assert_close(out.double(), sdpa(q, k, v), atol=BF16_TOLERANCE, rtol=0)
    _, cpu_lse = mmsparse.attention(q.cpu().float(), k.cpu().float(), v.cpu().float(),
                                    return_lse=True)
    torch.testing.assert_close(out_lse.cpu(), cpu_lse, atol=5e-2, rtol=0)


# The exact static patterns: their coverage does not depend on the tile height, which differs
# between the engine (128 rows for head_dim 128) and the CPU reference (64).
@pytest.mark.parametrize("pattern", ["a-shape:sink=64,local=256",
                                     "tri-shape:sink=64,local=128,bottom=64",
                                     "sf-fixed:segment=96,vline_stride=96",
                                     "grid-mask:sink=32,local=128,period=256,band=32"])
def test_static_patterns_match_the_cpu_reference(pattern):
    q, k, v = qkv(torch.Generator().manual_seed(2), 1, 1500, 1500, 14, 2, 128,
                  dtype=torch.bfloat16)
    layout = mmsparse.Layout.from_segments([{"type": "text", "length": 60},
                                            {"type": "video", "grid": [15, 8, 12],
                                             "markers": False}])
    expected = mmsparse.attention(q.float(), k.float(), v.float(), pattern=pattern, layout=layout)
    got = mmsparse.attention(*_cuda((q, k, v)), pattern=pattern, layout=layout)
    torch.testing.assert_close(got.cpu().float(), expected, atol=BF16_TOLERANCE, rtol=0)


def test_bhsd_strides_and_the_current_stream():
    q, k, v = qkv(torch.Generator().manual_seed(3), 2, 700, 700, 8, 2, 128, dtype=torch.bfloat16,
                  device="cuda")
    q_bhsd, k_bhsd, v_bhsd = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    expected = mmsparse.attention(q, k, v, pattern="a-shape:sink=32,local=128")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        got = mmsparse.attention(q_bhsd, k_bhsd, v_bhsd, pattern="a-shape:sink=32,local=128",
                                 tensor_layout="bhsd")
    torch.cuda.current_stream().wait_stream(stream)
    torch.testing.assert_close(got.transpose(1, 2), expected, atol=1e-3, rtol=0)


@pytest.mark.parametrize("spec", ["vertical-slash:vertical=200,slash=400",
                                  "grid:stride=0,hline=1,vline=1,slash=1"])
def test_dynamic_patterns_estimated_on_the_gpu_keep_what_the_host_keeps(spec):
    q, k, v = qkv(torch.Generator().manual_seed(4), 1, 4096, 4096, 8, 2, 128,
                  dtype=torch.bfloat16)

    def recall(q, k, v):
        _, sparse_lse = mmsparse.attention(q, k, v, pattern=spec, return_lse=True)
        _, dense_lse = mmsparse.attention(q, k, v, return_lse=True)
        return torch.exp(sparse_lse.cpu() - dense_lse.cpu())

    gpu, host = recall(*_cuda((q, k, v))), recall(q, k, v)
    assert gpu.max() <= 1 + 1e-2 and gpu.min() > 0
    assert abs(gpu.mean() - host.mean()) < 0.05, (gpu.mean(), host.mean())


def test_cuda_needs_a_contiguous_last_dimension():
    q, k, v = qkv(torch.Generator().manual_seed(9), 1, 64, 64, 4, 2, 128, dtype=torch.bfloat16,
                  device="cuda")
    wide = torch.cat([q, q], dim=-1)[..., ::2]  # head_dim 128 with stride 2
    with pytest.raises(ValueError, match=r"^q strides: expected a contiguous last dimension"):
        mmsparse.attention(wide, k, v)
    with pytest.raises(ValueError, match=r"^k device: expected cuda:0"):
        mmsparse.attention(q, k.cpu(), v)


def test_cuda_graph_replays_plan_run():
    q, k, v = qkv(torch.Generator().manual_seed(5), 1, 2048, 2048, 28, 4, 128,
                  dtype=torch.bfloat16, device="cuda")
    plan = mmsparse.prepare(q, k, pattern="a-shape:sink=128,local=512")  # outside the capture
    out = torch.empty_like(q)
    plan.run(q, k, v, out=out)  # warm-up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        plan.run(q, k, v, out=out)
    for seed in (6, 7):
        fresh = qkv(torch.Generator().manual_seed(seed), 1, 2048, 2048, 28, 4, 128,
                    dtype=torch.bfloat16, device="cuda")
        for static, new in zip((q, k, v), fresh):
            static.copy_(new)
        graph.replay()
        torch.cuda.synchronize()
        expected = mmsparse.attention(*fresh, pattern="a-shape:sink=128,local=512")
        torch.testing.assert_close(out, expected, atol=0, rtol=0)


def test_torch_compile_on_cuda():
    q, k, v = qkv(torch.Generator().manual_seed(8), 1, 1024, 1024, 8, 2, 128,
                  dtype=torch.bfloat16, device="cuda")
    config = mmsparse.PatternConfig.uniform("a-shape:sink=64,local=256")
    plan = mmsparse.prepare(q, k, config=config)

    def planned(q, k, v):
        return plan.run(q, k, v) * 2

    def layer(q, k, v):
        return mmsparse.attention(q, k, v, config=config) * 2

    compiled = torch.compile(layer, fullgraph=True)
    torch.testing.assert_close(compiled(q, k, v), layer(q, k, v), atol=0, rtol=0)
    # reduce-overhead records CUDA graphs: only the plan's run is inside them.
    graphed = torch.compile(planned, fullgraph=True, mode="reduce-overhead")
    for _ in range(3):
        got = graphed(q, k, v)
    torch.testing.assert_close(got, layer(q, k, v), atol=0, rtol=0)


@torch.no_grad()
@pytest.mark.parametrize("build", [tiny.qwen2_5_vl, tiny.qwen3_vl, tiny.gemma3])
def test_hf_dense_mode_on_cuda(build):
    model = build(head_dim=64).cuda().to(torch.bfloat16)  # the engine's head_dim 64 kernels
    kind = "gemma3" if build is tiny.gemma3 else "qwen"
    items = [("text", 6), ("image", None if kind == "gemma3" else (1, 8, 8)), ("text", 40)]
    inputs = {key: value.cuda() for key, value in tiny.Prompt(kind, items).inputs(model).items()}
    if "pixel_values" in inputs:
        inputs["pixel_values"] = inputs["pixel_values"].to(torch.bfloat16)
    expected = model(**inputs).logits.float()
    mmsparse.hf.enable(model)
    try:
        got = model(**inputs).logits.float()
    finally:
        mmsparse.hf.disable(model)
    scale = expected.abs().max()
    assert (got - expected).abs().max() <= 0.05 * scale
