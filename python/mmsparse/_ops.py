"""The torch ops: mmsparse::attention_ and mmsparse::run_plan_ write into out and lse.

Mutating ops with fake implementations, so that torch.compile (fullgraph) traces them and CUDA
graphs capture them (they enqueue on torch's current stream and allocate nothing).
"""

from __future__ import annotations

import torch

from . import _attention


@torch.library.custom_op("mmsparse::attention_", mutates_args=("out", "lse"))
def attention_(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
               lse: torch.Tensor, pattern: str, config: int, layer: int, layout: int, causal: bool,
               scale: float) -> None:
    _attention._run_attention(q, k, v, out, lse, pattern, config, layer, layout, causal, scale)


@attention_.register_fake
def _attention_fake(q, k, v, out, lse, pattern, config, layer, layout, causal, scale) -> None:
    return None


@torch.library.custom_op("mmsparse::run_plan_", mutates_args=("out", "lse"))
def run_plan_(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
              lse: torch.Tensor, plan: int, scale: float) -> None:
    _attention._run_plan(q, k, v, out, lse, plan, scale)


@run_plan_.register_fake
def _run_plan_fake(q, k, v, out, lse, plan, scale) -> None:
    return None
