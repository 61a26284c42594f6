"""The modality layout of a transformers VLM prefill, from the model's inputs and config.

Qwen2-VL / Qwen2.5-VL / Qwen3-VL: token types from mm_token_type_ids (0 text, 1 image, 2 video)
or, without them, from input_ids and the config's image/video token ids; grids from
image_grid_thw / video_grid_thw divided by the vision tower's spatial_merge_size. A Qwen3-VL video
is emitted frame by frame with a timestamp and markers between frames; the frames of one video
continue across that text, so the layout keeps one video with its frames.
Gemma 3: image tokens from token_type_ids (1 = image) or the config's image token id, each image
mm_tokens_per_image tokens on a square grid; attention inside an image is bidirectional.
"""

from __future__ import annotations

import math

import torch

from .._config import Layout

QWEN_TYPES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe")
GEMMA_TYPES = ("gemma3",)
TEXT, IMAGE, VIDEO = 0, 1, 2


def family(config) -> str:
    model_type = getattr(config, "model_type", "")
    if model_type in QWEN_TYPES:
        return "qwen"
    if model_type in GEMMA_TYPES:
        return "gemma3"
    return "text"


def has_bidirectional_media(config) -> bool:
    """Whether the model attends bidirectionally inside images (Gemma 3, given token_type_ids)."""
    return family(config) == "gemma3"


def _token_types(config, input_ids, mm_token_type_ids, token_type_ids) -> torch.Tensor:
    kind = family(config)
    if mm_token_type_ids is not None:
        return mm_token_type_ids.to(torch.int64)
    if input_ids is None:
        raise ValueError("input_ids: expected token ids (or mm_token_type_ids / token_type_ids) to "
                         "find the modality layout, got None")
    if kind == "gemma3":
        if token_type_ids is not None:
            return token_type_ids.to(torch.int64)
        return (input_ids == config.image_token_id).to(torch.int64)
    types = torch.zeros_like(input_ids, dtype=torch.int64)
    if kind == "qwen":
        types[input_ids == config.image_token_id] = IMAGE
        types[input_ids == config.video_token_id] = VIDEO
    return types


def _merged_grids(config, grid_thw) -> list[tuple[int, int, int]]:
    if grid_thw is None:
        return []
    merge = config.vision_config.spatial_merge_size
    grids = []
    for t, h, w in grid_thw.tolist():
        if h % merge or w % merge:
            raise ValueError(f"grid_thw: expected h and w multiples of spatial_merge_size {merge}, "
                             f"got {(t, h, w)}")
        grids.append((t, h // merge, w // merge))
    return grids


def _take(grids: list, start: int, tokens: int, name: str) -> int:
    """The index past the grids, from `start`, whose tokens add up to `tokens`."""
    index, total = start, 0
    while total < tokens:
        if index >= len(grids):
            raise ValueError(f"{name}: expected grids for {tokens} tokens of this sequence, got "
                             f"grids for {total}")
        t, h, w = grids[index]
        total += t * h * w
        index += 1
    if total != tokens:
        raise ValueError(f"{name}: expected grids adding up to {tokens} tokens, got {total}")
    return index


def layout_from_inputs(config, input_ids=None, *, mm_token_type_ids=None, token_type_ids=None,
                       image_grid_thw=None, video_grid_thw=None) -> list[Layout]:
    """One Layout per batch element (no padding: every token counts)."""
    types = _token_types(config, input_ids, mm_token_type_ids, token_type_ids)
    if types.dim() != 2:
        raise ValueError(f"input_ids: expected [batch, seq], got {list(types.shape)}")
    if family(config) == "gemma3":
        per_image = int(config.mm_tokens_per_image)
        side = math.isqrt(per_image)
        image_tokens = int((types == IMAGE).sum())
        image_grids = [(1, side, side)] * (image_tokens // per_image)
        if side * side != per_image or image_tokens % per_image:
            raise ValueError(f"token_type_ids: expected images of mm_tokens_per_image = "
                             f"{per_image} tokens on a square grid, got {image_tokens} image "
                             "tokens")
        video_grids = []
    else:
        image_grids = _merged_grids(config, image_grid_thw)
        video_grids = _merged_grids(config, video_grid_thw)
    layouts, next_image, next_video = [], 0, 0
    for row in types.cpu():
        image_end = _take(image_grids, next_image, int((row == IMAGE).sum()), "image_grid_thw")
        video_end = _take(video_grids, next_video, int((row == VIDEO).sum()), "video_grid_thw")
        layouts.append(Layout.from_token_types(row, image_grids[next_image:image_end],
                                               video_grids[next_video:video_end]))
        next_image, next_video = image_end, video_end
    return layouts
