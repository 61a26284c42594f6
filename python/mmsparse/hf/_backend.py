"""The transformers attention backend "mmsparse": AttentionInterface / AttentionMaskInterface
entries, the per-model state the attention function reads, and the hooks that fill it.

The attention function is called per decoder layer with q [B, Hq, S, D] and k, v [B, Hkv, Skv, D]
after RoPE. Prefill of an unpadded batch runs mmsparse (the config's specs for module.layer_idx);
decode (q_len == 1), padded batches, dropout in training and sliding-window layers longer than
their window run transformers' SDPA with the model's own mask. The modality layout comes from the
multimodal model's inputs, read by a forward pre-hook (the language model is called with
input_ids=None), or from use_layout().
"""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
from collections.abc import Callable

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from .. import _attention, _core
from .._config import Layout, PatternConfig, as_config, as_layout
from . import _layout

NAME = "mmsparse"
_STATE_ATTRIBUTE = "_mmsparse_state"


@dataclasses.dataclass
class State:
    """What the attention function of one model needs; shared by the model's text layers."""

    config: PatternConfig | None  # None: dense (mmsparse's dense attention)
    model_config: object
    layouts: list[Layout] | None = None  # per batch element, for the current prefill
    padded: bool = False
    bidirectional_media: bool = False  # Gemma 3 images given with token_type_ids
    fixed_layout: Layout | None = None  # use_layout(): wins over the inputs
    passthrough: bool = False  # dump only: attention as transformers' SDPA computes it
    recorder: Callable | None = None  # dump: called with (layer, q, k, v) on prefill
    # Static plans by (specs, shapes, device, layout): layers with the same specs share one, and
    # repeated prefills of one shape reuse them. Dynamic plans depend on q and k: never kept.
    plans: dict = dataclasses.field(default_factory=dict)
    handles: list = dataclasses.field(default_factory=list)
    previous_implementation: object = None


def _register() -> None:
    AttentionInterface.register(NAME, attention_forward)
    AttentionMaskInterface.register(NAME, sdpa_mask)


def _text_config(model):
    config = model.config
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def _attention_modules(model, text_config) -> list[torch.nn.Module]:
    """The text backbone's attention modules: those holding the text config and a layer index."""
    modules = [m for m in model.modules()
               if getattr(m, "config", None) is text_config and hasattr(m, "layer_idx")
               and hasattr(m, "num_key_value_groups")]
    if not modules:
        raise ValueError(f"model: expected a transformers model with attention modules using "
                         f"AttentionInterface, found none in {type(model).__name__}")
    return modules


def _input_module(model) -> torch.nn.Module:
    """The module that receives input_ids with the media grids: the multimodal base model."""
    for module in model.modules():
        if hasattr(module, "language_model") and not hasattr(module, "lm_head"):
            return module
    return model


def _set_implementation(model, implementation) -> None:
    if _text_config(model) is model.config:
        model.set_attn_implementation(implementation)
    else:
        model.set_attn_implementation({"text_config": implementation})


def _pre_forward(state: State):
    def hook(module, args, kwargs):
        input_ids = kwargs.get("input_ids", args[0] if args else None)
        attention_mask = kwargs.get("attention_mask")
        mask_2d = attention_mask if isinstance(attention_mask, torch.Tensor) and \
            attention_mask.dim() == 2 else None
        state.padded = mask_2d is not None and not bool(mask_2d.all())
        state.layouts = None
        state.bidirectional_media = False
        if state.fixed_layout is not None:
            state.layouts = [state.fixed_layout]
            return
        if input_ids is None or input_ids.shape[-1] <= 1 or state.padded:
            return  # decode step, embeddings only, or padded: no layout
        token_type_ids = kwargs.get("token_type_ids")
        state.layouts = _layout.layout_from_inputs(
            state.model_config, input_ids, mm_token_type_ids=kwargs.get("mm_token_type_ids"),
            token_type_ids=token_type_ids, image_grid_thw=kwargs.get("image_grid_thw"),
            video_grid_thw=kwargs.get("video_grid_thw"))
        state.bidirectional_media = (
            _layout.has_bidirectional_media(state.model_config) and token_type_ids is not None
            and bool((token_type_ids == _layout.IMAGE).any()))
    return hook


def enable(model, config=None, *, pattern: str | None = None) -> State:
    """Runs the text backbone's prefill attention through mmsparse.

    config: a PatternConfig, JSON text, a dict or a path (what `mmsparse search` writes); pattern:
    one spec for every layer and head instead; neither: mmsparse's dense attention. The vision
    tower keeps its own attention. Returns the model's state; disable(model) undoes it.
    """
    if config is not None and pattern is not None:
        raise ValueError("config, pattern: expected at most one of them, got both")
    if pattern is not None:
        config = PatternConfig.uniform(pattern)
    config = as_config(config)
    if not hasattr(model, "set_attn_implementation") or not hasattr(model, "config"):
        raise ValueError(f"model: expected a transformers model (PreTrainedModel), got "
                         f"{type(model).__name__}")
    disable(model)
    _register()
    text_config = _text_config(model)
    modules = _attention_modules(model, text_config)
    state = State(config=config, model_config=model.config,
                  previous_implementation=text_config._attn_implementation)
    for module in modules:
        setattr(module, _STATE_ATTRIBUTE, state)
    state.handles.append(_input_module(model).register_forward_pre_hook(
        _pre_forward(state), with_kwargs=True))
    setattr(model, _STATE_ATTRIBUTE, state)
    _set_implementation(model, NAME)
    return state


def disable(model) -> None:
    """Restores the attention the text backbone had before enable()."""
    state = getattr(model, _STATE_ATTRIBUTE, None)
    if state is None:
        return
    for handle in state.handles:
        handle.remove()
    for module in model.modules():
        if getattr(module, _STATE_ATTRIBUTE, None) is state:
            delattr(module, _STATE_ATTRIBUTE)
    _set_implementation(model, state.previous_implementation or "sdpa")


@contextlib.contextmanager
def use_layout(model, layout):
    """Uses `layout` for the prefills inside the block instead of the one found from the inputs
    (for models called with inputs_embeds, such as a text backbone on its own)."""
    state = getattr(model, _STATE_ATTRIBUTE, None)
    if state is None:
        raise ValueError("model: expected a model enabled with mmsparse.hf.enable, got one that is "
                         "not")
    state.fixed_layout = as_layout(layout)
    try:
        yield state
    finally:
        state.fixed_layout = None


def _uses_sdpa(state: State, module, query, key, sliding_window, dropout) -> bool:
    if state.passthrough or query.shape[2] <= 1 or state.padded or (module.training and dropout):
        return True
    return sliding_window is not None and key.shape[2] > sliding_window


def _add_bidirectional_media(q, k, v, out, lse, layout: Layout, scale: float) -> None:
    """Adds, for queries inside an image, the keys after them in the same image (Gemma 3).

    q [B, S, Hq, D], k, v [B, S, Hkv, D], out [B, S, Hq, D], lse [B, Hq, S]: the causal part
    (what the plan covered) is merged with the strictly-upper part of each image block by LSE;
    the two cover disjoint pairs, so the result is attention over their union.
    """
    groups = q.shape[2] // k.shape[2]
    for segment in layout.segments():
        if segment["type"] != "image":
            continue
        begin, end = segment["begin"], segment["end"]
        q_block = q[:, begin:end].float()
        k_block = k[:, begin:end].float().repeat_interleave(groups, dim=2)
        v_block = v[:, begin:end].float().repeat_interleave(groups, dim=2)
        scores = torch.einsum("bqhd,bkhd->bhqk", q_block, k_block) * scale
        length = end - begin
        upper = torch.ones(length, length, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(~upper, float("-inf"))
        upper_lse = torch.logsumexp(scores, dim=-1)  # [B, H, L]; -inf on the last row
        weights = torch.nan_to_num(torch.exp(scores - upper_lse.unsqueeze(-1)))
        upper_out = torch.einsum("bhqk,bkhd->bqhd", weights, v_block)
        causal_lse = lse[:, :, begin:end]
        merged = torch.logaddexp(causal_lse, upper_lse)
        causal_weight = torch.exp(causal_lse - merged).transpose(1, 2).unsqueeze(-1)
        upper_weight = torch.nan_to_num(torch.exp(upper_lse - merged)).transpose(1, 2).unsqueeze(-1)
        block = causal_weight * out[:, begin:end].float() + upper_weight * upper_out
        out[:, begin:end] = block.to(out.dtype)
        lse[:, :, begin:end] = merged


_PLAN_CACHE_ENTRIES = 64


def _static_plan(state: State, layer: int, q, k, layout: Layout | None):
    """The layer's plan when its specs are all static, from the cache or built; else None."""
    if state.config is None:
        return None
    specs = _attention._resolve_specs("", state.config, layer, q.shape[2])
    if not specs or any(_core.is_dynamic(spec) for spec in specs):
        return None
    key = (tuple(specs), q.shape[1:], k.shape[1:], q.dtype, q.device,
           layout.to_json() if layout is not None else None)
    plan = state.plans.get(key)
    if plan is None:
        if len(state.plans) >= _PLAN_CACHE_ENTRIES:
            state.plans.clear()
        plan = _attention.prepare(q, k, pattern=specs, layout=layout)
        state.plans[key] = plan
    return plan


def _mmsparse_attention(state: State, layer: int, q, k, v, scale: float) -> torch.Tensor:
    """q [B, S, Hq, D], k, v [B, Skv, Hkv, D] (bshd views) -> out [B, S, Hq, D] contiguous."""
    layouts = state.layouts
    if layouts is not None and any(layout.length != k.shape[1] for layout in layouts):
        layouts = None  # a prefix in the cache: the inputs' layout does not cover every key
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    shared = layouts is None or all(layout == layouts[0] for layout in layouts)
    groups = [(slice(None), layouts[0] if layouts else None)] if shared else \
        [(slice(b, b + 1), layout) for b, layout in enumerate(layouts)]
    for rows, layout in groups:
        plan = _static_plan(state, layer, q[rows], k[rows], layout)
        if plan is not None:
            _, lse = plan.run(q[rows], k[rows], v[rows], out=out[rows], scale=scale,
                              return_lse=True)
        else:
            _, lse = _attention.attention(q[rows], k[rows], v[rows], config=state.config,
                                          layer=layer, layout=layout, scale=scale, out=out[rows],
                                          return_lse=True)
        if state.bidirectional_media and layout is not None:
            _add_bidirectional_media(q[rows], k[rows], v[rows], out[rows], lse, layout, scale)
    return out


def attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                      sliding_window=None, **kwargs):
    """AttentionInterface entry: (module, q, k, v, mask, ...) -> (out [B, S, H, D], None)."""
    state = getattr(module, _STATE_ATTRIBUTE, None)
    if state is None or _uses_sdpa(state, module, query, key, sliding_window, dropout):
        if state is not None and state.recorder is not None and query.shape[2] > 1:
            state.recorder(module.layer_idx, query, key, value)
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling,
                                      dropout=dropout, sliding_window=sliding_window, **kwargs)
    if state.recorder is not None:
        state.recorder(module.layer_idx, query, key, value)
    scale = float(scaling) if scaling is not None else query.shape[-1] ** -0.5
    try:
        out = _mmsparse_attention(state, module.layer_idx, query.transpose(1, 2),
                                  key.transpose(1, 2), value.transpose(1, 2), scale)
    except NotImplementedError as error:  # e.g. a head_dim the CUDA engine has no kernel for
        warnings.warn(f"mmsparse: {error}; this layer runs transformers' SDPA", stacklevel=2)
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling,
                                      dropout=dropout, sliding_window=sliding_window, **kwargs)
    return out, None
