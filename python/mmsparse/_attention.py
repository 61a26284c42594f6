"""mmsparse.attention and the plan/run split (mmsparse.prepare, Plan.run).

Tensors are [batch, seq, heads, head_dim] ("bshd", FlashAttention's order) or, with
tensor_layout="bhsd", [batch, heads, seq, head_dim] (transformers' order); any strides, no copies.
The work is done by the torch ops of _ops.py, so that both calls trace under torch.compile and
replay inside CUDA graphs; the op bodies are the functions _run_attention and _run_plan here.
"""

from __future__ import annotations

import math

import torch

from . import _core, _handles
from . import _tensors as tensors
from ._config import Layout, PatternConfig, as_config, as_layout

_SPEC_SEPARATOR = ";"  # pattern specs never contain it (names, ':', ',', '=', digits)


def _check_scale(scale) -> float:
    if scale is None:
        return 0.0
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(f"scale: expected a float or None, got {type(scale).__name__}")
    if not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale: expected a finite value > 0 (None = 1/sqrt(head_dim)), "
                         f"got {scale}")
    return float(scale)


def _check_layer(layer) -> int:
    if isinstance(layer, bool) or not isinstance(layer, int):
        raise TypeError(f"layer: expected an int, got {type(layer).__name__}")
    if layer < 0:
        raise ValueError(f"layer: expected >= 0, got {layer}")
    return layer


def _pattern_text(pattern) -> str:
    """One spec for every head, or one per query head, as the ops' string argument."""
    if pattern is None:
        return ""
    if isinstance(pattern, str):
        if not pattern.strip():
            raise ValueError("pattern: expected a pattern spec such as "
                             "'a-shape:sink=128,local=4096', got an empty string")
        return pattern
    if isinstance(pattern, (list, tuple)) and pattern and all(isinstance(p, str) for p in pattern):
        return _SPEC_SEPARATOR.join(pattern)
    raise TypeError(f"pattern: expected a spec string or a list of spec strings (one per query "
                    f"head), got {type(pattern).__name__}")


def _handle(obj) -> int:
    return _handles.NONE if obj is None else obj._handle


def _resolve_specs(pattern: str, config: PatternConfig | None, layer: int, heads: int) -> list[str]:
    """The layer's specs (canonical), one entry when every head has the same; [] means dense."""
    if config is not None:
        specs = config.layer_specs(layer, heads)
    elif pattern:
        specs = [_core.parse_spec(text) for text in pattern.split(_SPEC_SEPARATOR)]
        if len(specs) not in (1, heads):
            raise ValueError(f"pattern: expected 1 spec or {heads} (one per query head), "
                             f"got {len(specs)}")
    else:
        return []
    if all(_core.parse_spec(spec).split(":")[0] == "dense" for spec in specs):
        return []
    return specs[:1] if len(set(specs)) == 1 else specs


def _check_layout(layout: Layout | None, kv_len: int) -> None:
    if layout is not None and layout.length != kv_len:
        raise ValueError(f"layout: expected {kv_len} tokens (kv_len of k), got a layout of "
                         f"{layout.length}")


def _build(specs: list[str], q: torch.Tensor, k: torch.Tensor, layout: Layout | None,
           scale: float) -> _core.PreparedPlan:
    """The plan of `specs` for q [B, Sq, Hq, D], k [B, Skv, Hkv, D] (bshd views)."""
    _check_layout(layout, k.shape[1])
    dynamic = any(_core.is_dynamic(spec) for spec in specs)
    device_type, device_index = tensors.device_code(q.device)
    tile_rows = _core.preferred_tile_rows(device_type, device_index, q.shape[3])
    batch = q.shape[0] if dynamic else 1
    native_layout = layout._native if layout is not None else None
    shape = (batch, q.shape[2], q.shape[1], k.shape[1], tile_rows)
    q_view = k_view = host_q = host_k = None
    keep_alive = []
    if dynamic:
        q_view, k_view = tensors.view("q", q), tensors.view("k", k)
        # Once per distinct spec: a config repeats specs over heads, and each answer plans the
        # spec's section on the host (for a grid with item sinks, its groups over the layout).
        on_device = q.device.type == "cuda" and all(
            _core.builds_plan_on_device(spec, *shape, native_layout, device_type, device_index)
            for spec in dict.fromkeys(specs) if _core.is_dynamic(spec))
        if q.device.type == "cuda" and not on_device:
            # Heads the GPU does not estimate are built on the host from host copies.
            keep_alive = [q.detach().cpu(), k.detach().cpu()]
            host_q, host_k = tensors.view("q", keep_alive[0]), tensors.view("k", keep_alive[1])
            if len(specs) == 1:
                q_view, k_view = host_q, host_k
    return _core.prepare(specs, *shape, native_layout, device_type, device_index,
                         tensors.stream_of(q.device), q_view, k_view, host_q, host_k, scale)


def _run_attention(q, k, v, out, lse, pattern: str, config_handle: int, layer: int,
                   layout_handle: int, causal: bool, scale: float) -> None:
    """The body of torch.ops.mmsparse.attention_: plans (if sparse) and runs, into out and lse."""
    config = _handles.lookup(config_handle, "config")
    layout = _handles.lookup(layout_handle, "layout")
    specs = _resolve_specs(pattern, config, layer, q.shape[2])
    views = [tensors.view(name, t) for name, t in (("q", q), ("k", k), ("v", v), ("out", out),
                                                    ("lse", lse))]
    stream = tensors.stream_of(q.device)
    if not specs:
        _core.attention_dense(*views, scale, causal, stream, tensors.cpu_threads())
        return
    if not causal:
        raise ValueError("causal: expected True with a sparse pattern or config (a plan carries "
                         "its own causal mask), got False")
    plan = _build(specs, q, k, layout, scale)
    _core.attention_planned(plan, *views, scale, stream, tensors.cpu_threads())


def _run_plan(q, k, v, out, lse, plan_handle: int, scale: float) -> None:
    """The body of torch.ops.mmsparse.run_plan_."""
    plan = _handles.lookup(plan_handle, "plan")
    if plan.device != q.device:
        raise ValueError(f"q device: expected {plan.device} (the plan's device), got {q.device}")
    views = [tensors.view(name, t) for name, t in (("q", q), ("k", k), ("v", v), ("out", out),
                                                    ("lse", lse))]
    _core.attention_planned(plan._native, *views, scale, tensors.stream_of(q.device),
                            tensors.cpu_threads())


def _inputs(q, k, v, tensor_layout: str):
    qb = tensors.as_bshd("q", q, tensor_layout)
    kb = tensors.as_bshd("k", k, tensor_layout)
    vb = tensors.as_bshd("v", v, tensor_layout)
    tensors.check_qkv(qb, kb, vb)
    return qb, kb, vb


def _outputs(q: torch.Tensor, out, tensor_layout: str):
    """out as a bshd view (given or new, in the caller's tensor_layout) and a new lse."""
    batch, q_len, heads, head_dim = q.shape
    if out is None:
        if tensor_layout == "bshd":
            out = torch.empty((batch, q_len, heads, head_dim), dtype=q.dtype, device=q.device)
        else:
            out = torch.empty((batch, heads, q_len, head_dim), dtype=q.dtype, device=q.device)
    else:
        expected = [batch, q_len, heads, head_dim] if tensor_layout == "bshd" else \
            [batch, heads, q_len, head_dim]
        tensors.check_output("out", out, expected, q.dtype, q.device)
    out_bshd = out if tensor_layout == "bshd" else out.transpose(1, 2)
    lse = torch.empty((batch, heads, q_len), dtype=torch.float32, device=q.device)
    return out, out_bshd, lse


def attention(q, k, v, *, pattern=None, config=None, layer: int = 0, layout=None,
              causal: bool = True, scale: float | None = None, return_lse: bool = False,
              out: torch.Tensor | None = None, tensor_layout: str = "bshd"):
    """Attention over torch tensors, dense or sparse.

    q [batch, q_len, q_heads, head_dim], k and v [batch, kv_len, kv_heads, head_dim] (or
    [batch, heads, seq, head_dim] with tensor_layout="bhsd"); float32, float16 or bfloat16; CPU
    (the reference backend) or CUDA (the engine, on torch's current stream); q_heads a multiple of
    kv_heads. Causal masking is bottom-right aligned when kv_len > q_len.

    pattern: a spec ("a-shape:sink=128,local=4096") or one per query head; config: a
    PatternConfig (or JSON / path) whose specs for `layer` are used; neither: dense. layout: the
    modality layout (mmsparse.Layout) of the kv_len tokens, needed by boundary modes and the SF
    patterns' frame sizes. Returns out (in the tensor_layout of q), and lse [batch, q_heads, q_len]
    (float32, natural log) when return_lse. Under torch.compile pass PatternConfig and Layout
    objects (converting a dict or a path is not traced).
    """
    qb, kb, vb = _inputs(q, k, v, tensor_layout)
    if pattern is not None and config is not None:
        raise ValueError("pattern, config: expected at most one of them, got both")
    config = as_config(config)
    layout = as_layout(layout)
    if not isinstance(causal, bool):
        raise TypeError(f"causal: expected a bool, got {type(causal).__name__}")
    out, out_bshd, lse = _outputs(qb, out, tensor_layout)
    torch.ops.mmsparse.attention_(qb, kb, vb, out_bshd, lse, _pattern_text(pattern),
                                  _handle(config), _check_layer(layer), _handle(layout), causal,
                                  _check_scale(scale))
    return (out, lse) if return_lse else out


class Plan:
    """A plan prepared once (built, validated and on a CUDA device uploaded) and run many times.

    Plan.run enqueues attention only, so it can be captured in a CUDA graph and traced by
    torch.compile; the plan must stay alive while compiled code or a graph uses it.
    """

    def __init__(self, native: _core.PreparedPlan, device: torch.device, specs: list[str],
                 layout: Layout | None):
        self._native = native
        self.device = device
        self.specs = specs
        self.layout = layout
        self._handle = _handles.register(self)

    @property
    def shape(self) -> tuple[int, int, int, int, int]:
        """(batch, heads, q_len, kv_len, tile_rows); batch 1 serves every batch element."""
        return self._native.shape

    def density(self) -> float:
        """Computed pairs over causal pairs, averaged over head slots (builds the host plan)."""
        batch, heads, q_len, kv_len, _ = self.shape
        offset = kv_len - q_len
        causal_pairs = sum(min(kv_len, i + offset + 1) for i in range(q_len))
        counts = self._native.pair_counts()
        return sum(counts) / (len(counts) * causal_pairs) if causal_pairs else 0.0

    @property
    def num_passes(self) -> int:
        """The plan's passes (plan.h): tile geometries whose pairs are disjoint."""
        return self._native.num_passes

    def pass_arrays(self, pass_index: int = 0) -> dict:
        """One pass's records as read-only numpy views of the host plan (built or downloaded on
        the first call), for tile-level converters: head_run_offsets, runs [n, 3] (start, count,
        step), head_tile_offsets, tiles [n, 2] (order begin, end), tile_masks, masks [m, 9]
        (fields in mask_fields), and per tile in CSR form spans [n, 2] (begin, end), strided_spans
        [n, 3] (begin, last + 1, step) and columns. Needs numpy."""
        return self._native.pass_arrays(pass_index)

    def run(self, q, k, v, *, out=None, scale: float | None = None, return_lse: bool = False,
            tensor_layout: str = "bshd"):
        qb, kb, vb = _inputs(q, k, v, tensor_layout)
        out, out_bshd, lse = _outputs(qb, out, tensor_layout)
        torch.ops.mmsparse.run_plan_(qb, kb, vb, out_bshd, lse, self._handle, _check_scale(scale))
        return (out, lse) if return_lse else out

    def __repr__(self) -> str:
        return f"Plan(shape={self.shape}, device={self.device}, specs={self.specs})"


def prepare(q, k, *, pattern=None, config=None, layer: int = 0, layout=None,
            scale: float | None = None, tensor_layout: str = "bshd") -> Plan:
    """The plan for q and k's shapes (and, for dynamic patterns, their values): see attention().

    Plan outside CUDA graph capture, run inside. Dense (no pattern or config) gives a dense plan.
    """
    qb = tensors.as_bshd("q", q, tensor_layout)
    kb = tensors.as_bshd("k", k, tensor_layout)
    tensors.check_qkv(qb, kb, kb)
    if pattern is not None and config is not None:
        raise ValueError("pattern, config: expected at most one of them, got both")
    config = as_config(config)
    layout = as_layout(layout)
    specs = _resolve_specs(_pattern_text(pattern), config, _check_layer(layer), qb.shape[2])
    specs = specs or ["dense"]
    native = _build(specs, qb, kb, layout, _check_scale(scale))
    return Plan(native, qb.device, specs, layout)
