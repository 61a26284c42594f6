"""mmsparse.hf on the real transformers model classes (tiny configs, random weights)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from safetensors import safe_open
from transformers import AttentionInterface

import mmsparse
import mmsparse.hf
import tiny_models as tiny
from reference import a_shape_mask, causal_mask

FAMILIES = {"qwen2_5_vl": (tiny.qwen2_5_vl, "qwen", 0), "qwen3_vl": (tiny.qwen3_vl, "qwen", 3),
            "gemma3": (tiny.gemma3, "gemma3", 0)}
PROMPTS = {  # Gemma 3 prompts take images only (its tower has no video); kept below its window.
    "qwen": {"text": [("text", 90)],
             "media": [("text", 9), ("image", (1, 8, 8)), ("text", 5), ("video", (3, 8, 8)),
                       ("text", 6)]},
    "gemma3": {"text": [("text", 60)],
               "media": [("text", 6), ("image", None), ("text", 4), ("image", None), ("text", 5)]},
}
LOGITS_TOLERANCE = 1e-4
# Layer 0: one spec per head (and a dense head); layer 1: one spec for every head.
SPARSE_CONFIG = {
    "schema_version": 2, "default": "dense",
    "layers": {"0": {"default": "a-shape:sink=8,local=24",
                     "heads": {"0": "a-shape:sink=4,local=16", "1": "dense",
                               "2": "a-shape:sink=2,local=8"}},
               "1": {"default": "a-shape:sink=4,local=32"}},
}


def _spec_mask(spec: str, length: int) -> torch.Tensor:
    if spec == "dense":
        return causal_mask(length, length)
    params = dict(item.split("=") for item in spec.split(":")[1].split(","))
    return a_shape_mask(length, length, int(params["sink"]), int(params["local"]))


def _reference(config: mmsparse.PatternConfig, layout: mmsparse.Layout | None):
    """An attention function computing what the config's plans compute, from explicit masks,
    through SDPA in float64. With Gemma 3's images, a query also sees the later keys of its image
    (the bidirectional part the plan's causal mask leaves out); earlier keys are the plan's."""

    def attention(module, query, key, value, attention_mask, scaling=None, **kwargs):
        heads, length = query.shape[1], query.shape[2]
        specs = config.layer_specs(module.layer_idx, heads)
        mask = torch.stack([_spec_mask(spec.split(":")[0] if spec == "dense" else spec, length)
                            for spec in specs])
        if layout is not None:
            media = torch.tensor(layout._native.token_media())
            image = torch.tensor(layout.token_types()) == 1
            same_image = (media[:, None] == media[None, :]) & image[:, None] & image[None, :]
            mask = mask | (same_image & ~causal_mask(length, length))
        out = torch.nn.functional.scaled_dot_product_attention(
            query.double(), key.double(), value.double(), attn_mask=mask, scale=scaling,
            enable_gqa=True)
        return out.to(query.dtype).transpose(1, 2).contiguous(), None

    return attention


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request):
    build, kind, timestamps = FAMILIES[request.param]
    return request.param, build(), kind, timestamps


def _prompt(family, name: str) -> tuple[tiny.Prompt, dict]:
    _, model, kind, timestamps = family
    prompt = tiny.Prompt(kind, PROMPTS[kind][name], timestamps=timestamps)
    return prompt, prompt.inputs(model)


@torch.no_grad()
@pytest.mark.parametrize("prompt_name", ["text", "media"])
def test_dense_mode_matches_sdpa(family, prompt_name):
    _, model, _, _ = family
    _, inputs = _prompt(family, prompt_name)
    expected = model(**inputs).logits
    state = mmsparse.hf.enable(model)
    try:
        got = model(**inputs).logits
        assert model.config.get_text_config()._attn_implementation == "mmsparse"
        assert model.config.vision_config._attn_implementation == "sdpa"  # the tower keeps its own
    finally:
        mmsparse.hf.disable(model)
    assert state.layouts is not None  # the prefill ran with the layout the hook found
    torch.testing.assert_close(got, expected, atol=LOGITS_TOLERANCE, rtol=0)
    assert model.config.get_text_config()._attn_implementation == "sdpa"


@torch.no_grad()
@pytest.mark.parametrize("prompt_name", ["text", "media"])
def test_sparse_config_computes_exactly_its_plans(family, prompt_name):
    name, model, _, _ = family
    prompt, inputs = _prompt(family, prompt_name)
    config = mmsparse.PatternConfig.from_json(SPARSE_CONFIG)
    layout = mmsparse.Layout.from_segments(prompt.segments) if name == "gemma3" else None
    AttentionInterface.register("reference_masked", _reference(config, layout))
    model.set_attn_implementation({"text_config": "reference_masked"})
    try:
        expected = model(**inputs).logits
    finally:
        model.set_attn_implementation({"text_config": "sdpa"})
    dense = model(**inputs).logits
    state = mmsparse.hf.enable(model, config=config)
    try:
        got = model(**inputs).logits
        assert len(state.plans) == 2  # one static plan per distinct layer config
        again = model(**inputs).logits  # from the cached plans
    finally:
        mmsparse.hf.disable(model)
    torch.testing.assert_close(got, expected, atol=LOGITS_TOLERANCE, rtol=0)
    torch.testing.assert_close(again, got, atol=0, rtol=0)
    assert (got - dense).abs().max() > 100 * LOGITS_TOLERANCE  # the config does drop keys


@torch.no_grad()
def test_hook_finds_the_layout_of_each_prefill(family):
    name, model, _, _ = family
    prompt, inputs = _prompt(family, "media")
    state = mmsparse.hf.enable(model, pattern="a-shape:sink=4,local=16")
    try:
        model(**inputs)
        assert state.layouts == [mmsparse.Layout.from_segments(prompt.segments)]
        assert state.bidirectional_media == (name == "gemma3")
        with mmsparse.hf.use_layout(model, [{"type": "text", "length": len(prompt.ids)}]):
            model(**inputs)
            assert state.layouts == [mmsparse.Layout.text_only(len(prompt.ids))]
    finally:
        mmsparse.hf.disable(model)


@torch.no_grad()
def test_decode_steps_and_padded_batches_are_dense(family):
    _, model, _, _ = family
    _, inputs = _prompt(family, "text")
    kwargs = dict(max_new_tokens=4, do_sample=False, pad_token_id=0)
    expected = model.generate(**inputs, **kwargs)
    mmsparse.hf.enable(model)  # dense prefill through mmsparse, decode through SDPA
    try:
        assert torch.equal(model.generate(**inputs, **kwargs), expected)
    finally:
        mmsparse.hf.disable(model)
    ids = inputs["input_ids"].repeat(2, 1)
    mask = torch.ones_like(ids)
    mask[1, :7] = 0  # left padding in the second row
    padded = {"input_ids": ids, "attention_mask": mask}
    expected = model(**padded).logits
    mmsparse.hf.enable(model, pattern="a-shape:sink=2,local=4")
    try:
        torch.testing.assert_close(model(**padded).logits, expected, atol=LOGITS_TOLERANCE, rtol=0)
    finally:
        mmsparse.hf.disable(model)


@torch.no_grad()
def test_dump_then_search_then_enable(tmp_path):
    model = tiny.qwen2_5_vl()
    prompt = tiny.Prompt("qwen", [("text", 40), ("video", (8, 8, 8)), ("text", 30)])
    inputs = prompt.inputs(model)
    path = tmp_path / "calib.safetensors"
    with mmsparse.hf.dump(model, path, layers=[0, 1]):
        reference = model(**inputs).logits
    assert model.config.get_text_config()._attn_implementation == "sdpa"
    text = model.config.get_text_config()
    head_dim = text.hidden_size // text.num_attention_heads
    length = len(prompt.ids)
    with safe_open(str(path), "pt") as file:
        assert sorted(file.keys()) == [f"layers.{l}.{n}" for l in (0, 1) for n in "kqv"]
        q_shape = (1, length, text.num_attention_heads, head_dim)
        k_shape = (1, length, text.num_key_value_heads, head_dim)
        assert file.get_tensor("layers.1.q").shape == q_shape
        assert file.get_tensor("layers.0.k").shape == k_shape
        layout = mmsparse.Layout.from_json(file.metadata()["mmsparse.layout"])
    assert layout == mmsparse.Layout.from_segments(prompt.segments)

    config_path = tmp_path / "model.json"
    cli = [sys.executable, "-m", "mmsparse"]
    subprocess.run(cli + ["search", "--input", str(path), "--output", str(config_path),
                          "--device", "cpu", "--dtype", "fp32", "--quiet", "--sample-rows", "16"],
                   check=True, capture_output=True, text=True)
    config = json.loads(config_path.read_text())
    assert set(config["layers"]) == {"0", "1"}
    mmsparse.hf.enable(model, config=config_path)
    try:
        got = model(**inputs).logits
    finally:
        mmsparse.hf.disable(model)
    # The searched config is sparse where it can be; the logits stay close to dense.
    assert (got - reference).abs().max() < 0.5


def test_enable_errors():
    model = tiny.qwen2_5_vl()
    with pytest.raises(ValueError, match="^config, pattern"):
        mmsparse.hf.enable(model, config={"default": "dense"}, pattern="dense")
    with pytest.raises(ValueError, match="^model: expected a transformers model"):
        mmsparse.hf.enable(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="^model: expected a model enabled"):
        with mmsparse.hf.use_layout(model, [{"type": "text", "length": 3}]):
            pass
    with pytest.raises(TypeError, match="^layers"):
        mmsparse.hf.dump(model, "x.safetensors", layers="0,1")
    with pytest.raises(ValueError, match="^dump: expected a prefill"):
        with mmsparse.hf.dump(model, "x.safetensors"):
            pass
