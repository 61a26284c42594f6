"""Real transformers model classes from tiny configs with random weights (nothing downloaded).

Token ids are remapped into a small vocabulary; the inputs are built the way the processors lay
them out (markers around media, Qwen3-VL's timestamps between video frames, Gemma 3's boi/eoi).
"""

from __future__ import annotations

import torch
from transformers import (Gemma3Config, Gemma3ForConditionalGeneration, Qwen2_5_VLConfig,
                          Qwen2_5_VLForConditionalGeneration, Qwen3VLConfig,
                          Qwen3VLForConditionalGeneration)

VOCAB = 256
IMAGE, VIDEO, VISION_START, VISION_END = 250, 251, 248, 249
GEMMA_IMAGE, GEMMA_BOI, GEMMA_EOI = 250, 248, 249
TEXT_TOKENS = 200  # text ids are drawn below this
GEMMA_TOKENS_PER_IMAGE = 16
MERGE = 2  # spatial_merge_size of the Qwen vision towers
QWEN25_PATCH, QWEN3_PATCH, TEMPORAL_PATCH = 14, 16, 2

HEADS, KV_HEADS = 4, 2


def _text(head_dim: int) -> dict:
    return dict(vocab_size=VOCAB, bos_token_id=1, eos_token_id=2, pad_token_id=0,
                hidden_size=HEADS * head_dim, intermediate_size=2 * HEADS * head_dim,
                num_hidden_layers=2, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                head_dim=head_dim, max_position_embeddings=4096)


def _mrope(head_dim: int, **extra) -> dict:
    """mRoPE sections (temporal, height, width) covering head_dim / 2 frequencies."""
    half = head_dim // 2
    temporal = half // 4
    height = (half - temporal) // 2
    return {"rope_type": "default", "rope_theta": 10000.0,
            "mrope_section": [temporal, height, half - temporal - height], **extra}


QWEN_TOKEN_IDS = dict(image_token_id=IMAGE, video_token_id=VIDEO,
                      vision_start_token_id=VISION_START, vision_end_token_id=VISION_END)


def qwen2_5_vl(head_dim: int = 16) -> Qwen2_5_VLForConditionalGeneration:
    config = Qwen2_5_VLConfig(
        text_config=dict(_text(head_dim), rope_parameters=_mrope(head_dim)),
        vision_config=dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2,
                           out_hidden_size=HEADS * head_dim, patch_size=QWEN25_PATCH,
                           spatial_merge_size=MERGE,
                           temporal_patch_size=TEMPORAL_PATCH, window_size=112,
                           fullatt_block_indexes=[0]),
        **QWEN_TOKEN_IDS)
    return _build(Qwen2_5_VLForConditionalGeneration, config)


def qwen3_vl(head_dim: int = 16) -> Qwen3VLForConditionalGeneration:
    config = Qwen3VLConfig(
        text_config=dict(_text(head_dim), rope_parameters=_mrope(head_dim, mrope_interleaved=True)),
        vision_config=dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2,
                           out_hidden_size=HEADS * head_dim, patch_size=QWEN3_PATCH,
                           spatial_merge_size=MERGE,
                           temporal_patch_size=TEMPORAL_PATCH, num_position_embeddings=64,
                           deepstack_visual_indexes=[0]),
        **QWEN_TOKEN_IDS)
    return _build(Qwen3VLForConditionalGeneration, config)


def gemma3(head_dim: int = 16) -> Gemma3ForConditionalGeneration:
    config = Gemma3Config(
        text_config=dict(_text(head_dim), sliding_window=64, query_pre_attn_scalar=head_dim,
                         layer_types=["sliding_attention", "full_attention"]),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                           num_attention_heads=2, image_size=32, patch_size=4),
        mm_tokens_per_image=GEMMA_TOKENS_PER_IMAGE, image_token_index=GEMMA_IMAGE,
        boi_token_index=GEMMA_BOI, eoi_token_index=GEMMA_EOI)
    return _build(Gemma3ForConditionalGeneration, config)


def _build(cls, config):
    torch.manual_seed(0)
    config._attn_implementation = "sdpa"
    model = cls(config).eval()
    return model


def text(generator: torch.Generator, count: int) -> list[int]:
    return torch.randint(0, TEXT_TOKENS, (count,), generator=generator).tolist()


class Prompt:
    """A prompt as a processor lays it out, and the layout a person would write down for it.

    items: ("text", n), ("image", (t, h, w)) or ("video", (t, h, w)), grids in patches (before
    spatial merging, as image_grid_thw / video_grid_thw hold them). Media tokens are surrounded by
    vision_start / vision_end (Qwen) or boi / eoi (Gemma 3); with timestamps > 0 (Qwen3-VL) every
    video frame is emitted as `timestamps` text tokens, vision_start, the frame, vision_end.
    """

    def __init__(self, family: str, items, timestamps: int = 0, seed: int = 0):
        self.generator = torch.Generator().manual_seed(seed)
        self.family = family
        self.ids: list[int] = []
        self.types: list[int] = []
        self.segments: list[dict] = []  # the hand-built layout, compact form
        self.image_grids: list[tuple] = []
        self.video_grids: list[tuple] = []
        for kind, value in items:
            if kind == "text":
                self._text(text(self.generator, value))
            elif family == "gemma3":
                self._gemma_image()
            elif kind == "image":
                self._qwen_media(IMAGE, value)
            elif timestamps:
                self._qwen3_video(value, timestamps)
            else:
                self._qwen_media(VIDEO, value)

    def _text(self, ids: list[int]) -> None:
        self.ids += ids
        self.types += [0] * len(ids)
        if self.segments and self.segments[-1]["type"] == "text":
            self.segments[-1]["length"] += len(ids)
        else:
            self.segments.append({"type": "text", "length": len(ids)})

    def _media_tokens(self, token: int, code: int, count: int) -> None:
        self.ids += [token] * count
        self.types += [code] * count

    def _qwen_media(self, token: int, grid) -> None:
        t, h, w = grid
        merged = (t, h // MERGE, w // MERGE)
        self._text([VISION_START])
        self._media_tokens(token, 1 if token == IMAGE else 2, t * merged[1] * merged[2])
        kind = "image" if token == IMAGE else "video"
        self.segments.append({"type": kind, "grid": list(merged), "markers": False})
        (self.image_grids if token == IMAGE else self.video_grids).append(tuple(grid))
        self._text([VISION_END])

    def _qwen3_video(self, grid, timestamps: int) -> None:
        t, h, w = grid
        frame_tokens = (h // MERGE) * (w // MERGE)
        self._text(text(self.generator, timestamps) + [VISION_START])
        # The separator between frames: vision_end, the next timestamp, vision_start.
        self.segments.append({"type": "video", "grid": [t, h // MERGE, w // MERGE],
                              "frame_separator": timestamps + 2, "markers": False})
        for frame in range(t):
            if frame:
                separator = [VISION_END] + text(self.generator, timestamps) + [VISION_START]
                self.ids += separator
                self.types += [0] * len(separator)
            self._media_tokens(VIDEO, 2, frame_tokens)
        self.segments.append({"type": "text", "length": 0})
        self._text([VISION_END])
        self.video_grids.append(tuple(grid))

    def _gemma_image(self) -> None:
        side = int(GEMMA_TOKENS_PER_IMAGE ** 0.5)
        self._text([GEMMA_BOI])
        self._media_tokens(GEMMA_IMAGE, 1, GEMMA_TOKENS_PER_IMAGE)
        self.segments.append({"type": "image", "grid": [1, side, side], "markers": False})
        self.image_grids.append((1, side, side))
        self._text([GEMMA_EOI])

    def inputs(self, model) -> dict:
        """The model's keyword arguments, with random pixels for the media."""
        ids = torch.tensor([self.ids])
        types = torch.tensor([self.types])
        if self.family == "gemma3":
            kwargs = {"input_ids": ids, "token_type_ids": types}
            if self.image_grids:
                size = model.config.vision_config.image_size
                kwargs["pixel_values"] = torch.randn(len(self.image_grids), 3, size, size,
                                                     generator=self.generator)
            return kwargs
        kwargs = {"input_ids": ids, "mm_token_type_ids": types}
        patch = model.config.vision_config.patch_size
        patch_values = 3 * TEMPORAL_PATCH * patch * patch
        for grids, key, pixels in ((self.image_grids, "image_grid_thw", "pixel_values"),
                                   (self.video_grids, "video_grid_thw", "pixel_values_videos")):
            if grids:
                kwargs[key] = torch.tensor(grids)
                patches = sum(t * h * w for t, h, w in grids)
                kwargs[pixels] = torch.randn(patches, patch_values, generator=self.generator)
        return kwargs
