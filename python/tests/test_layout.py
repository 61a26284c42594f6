"""mmsparse.Layout and the layouts mmsparse.hf finds from a model's inputs."""

from __future__ import annotations

import pytest
import torch

import mmsparse
import tiny_models as tiny
from mmsparse.hf import layout_from_inputs

QWEN25_CASES = {
    "video": [("text", 12), ("video", (4, 8, 12)), ("text", 9)],
    "multi-image": [("text", 5), ("image", (1, 8, 8)), ("image", (1, 4, 12)), ("text", 3),
                    ("image", (1, 8, 4)), ("text", 6)],
    "interleaved": [("text", 7), ("image", (1, 4, 4)), ("text", 4), ("video", (2, 8, 8)),
                    ("text", 2), ("image", (1, 8, 8)), ("video", (3, 4, 4)), ("text", 5)],
}


def _model_inputs(prompt: tiny.Prompt, model) -> dict:
    return {k: v for k, v in prompt.inputs(model).items() if not k.startswith("pixel")}


@pytest.fixture(scope="module")
def qwen25():
    return tiny.qwen2_5_vl()


@pytest.mark.parametrize("case", sorted(QWEN25_CASES))
def test_qwen2_5_vl_layouts_match_hand_built(qwen25, case):
    prompt = tiny.Prompt("qwen", QWEN25_CASES[case])
    expected = mmsparse.Layout.from_segments(prompt.segments)
    inputs = _model_inputs(prompt, qwen25)
    [from_types] = layout_from_inputs(qwen25.config, **inputs)
    assert from_types == expected
    # Without mm_token_type_ids the config's image and video token ids give the same layout.
    inputs.pop("mm_token_type_ids")
    [from_ids] = layout_from_inputs(qwen25.config, **inputs)
    assert from_ids == expected


def test_qwen3_vl_timestamps_between_frames_keep_one_video():
    model = tiny.qwen3_vl()
    prompt = tiny.Prompt("qwen", [("text", 6), ("video", (4, 8, 8)), ("text", 3),
                                  ("image", (1, 8, 4)), ("text", 2)], timestamps=5)
    [layout] = layout_from_inputs(model.config, **_model_inputs(prompt, model))
    assert layout == mmsparse.Layout.from_segments(prompt.segments)
    videos = [m for m in layout.media() if m["type"] == "video"]
    assert len(videos) == 1 and videos[0]["grid"] == (4, 4, 4)
    frames = [s["first_frame"] for s in layout.segments() if s["type"] == "video"]
    assert frames == [0, 1, 2, 3]  # frames continue across the timestamps


def test_gemma3_images():
    model = tiny.gemma3()
    prompt = tiny.Prompt("gemma3", [("text", 4), ("image", None), ("text", 9), ("image", None),
                                    ("text", 1)])
    inputs = _model_inputs(prompt, model)
    [layout] = layout_from_inputs(model.config, **inputs)
    assert layout == mmsparse.Layout.from_segments(prompt.segments)
    inputs.pop("token_type_ids")
    assert layout_from_inputs(model.config, **inputs) == [layout]


def test_batch_elements_take_their_own_grids(qwen25):
    first = tiny.Prompt("qwen", [("text", 4), ("image", (1, 8, 8)), ("text", 10)], seed=1)
    second = tiny.Prompt("qwen", [("text", 2), ("video", (2, 4, 4)), ("image", (1, 4, 4)),
                                  ("text", 14)], seed=2)
    assert len(first.ids) == len(second.ids)
    ids = torch.tensor([first.ids, second.ids])
    types = torch.tensor([first.types, second.types])
    image_grids = torch.tensor(first.image_grids + second.image_grids)
    layouts = layout_from_inputs(qwen25.config, ids, mm_token_type_ids=types,
                                 image_grid_thw=image_grids,
                                 video_grid_thw=torch.tensor(second.video_grids))
    assert layouts == [mmsparse.Layout.from_segments(first.segments),
                       mmsparse.Layout.from_segments(second.segments)]


def test_grids_that_do_not_match_the_tokens_are_named(qwen25):
    prompt = tiny.Prompt("qwen", QWEN25_CASES["multi-image"])
    inputs = _model_inputs(prompt, qwen25)
    inputs["image_grid_thw"] = inputs["image_grid_thw"][:2]
    with pytest.raises(ValueError, match="^image_grid_thw: expected grids for"):
        layout_from_inputs(qwen25.config, **inputs)
    inputs["image_grid_thw"] = torch.tensor([[1, 7, 8]])
    with pytest.raises(ValueError, match="^grid_thw: expected h and w multiples"):
        layout_from_inputs(qwen25.config, **inputs)


def test_layout_constructors_round_trip():
    layout = mmsparse.Layout.from_segments([
        {"type": "text", "length": 10}, {"type": "image", "grid": [1, 4, 4], "markers": True},
        {"type": "video", "grid": [3, 2, 4], "frame_separator": 2}, {"type": "text", "length": 1}])
    assert mmsparse.Layout.from_json(layout.to_json()) == layout
    assert layout.is_mixed() and layout.length == len(layout.token_types())
    types = layout.token_types()
    grids = [tuple(m["grid"]) for m in layout.media()]
    rebuilt = mmsparse.Layout.from_token_types(types, [grids[0]], [grids[1]])
    assert [s["type"] for s in rebuilt.segments()] == [s["type"] for s in layout.segments()]
    assert mmsparse.Layout.text_only(5).length == 5
    with pytest.raises(TypeError, match="^segments"):
        mmsparse.Layout.from_segments("text")
    with pytest.raises(ValueError, match="image_grids"):
        mmsparse.Layout.from_token_types([0, 1, 1], image_grids=[], video_grids=[])
