"""Reference attention in plain torch: the masks the patterns stand for, and SDPA."""

from __future__ import annotations

import torch


def causal_mask(q_len: int, kv_len: int) -> torch.Tensor:
    """[q_len, kv_len] bool, bottom-right aligned as the engine (and FlashAttention) align it."""
    query = torch.arange(q_len)[:, None] + (kv_len - q_len)
    return torch.arange(kv_len)[None, :] <= query


def a_shape_mask(q_len: int, kv_len: int, sink: int, local: int) -> torch.Tensor:
    """Sink keys and a window of `local` keys up to the query (the a-shape pattern)."""
    query = torch.arange(q_len)[:, None] + (kv_len - q_len)
    key = torch.arange(kv_len)[None, :]
    return causal_mask(q_len, kv_len) & ((key < sink) | (query - key < local))


def sdpa(q, k, v, mask=None, scale=None, causal=True):
    """q [B, Sq, Hq, D], k, v [B, Skv, Hkv, D] -> [B, Sq, Hq, D], in float64 for a tight bound."""
    if mask is None and causal:
        mask = causal_mask(q.shape[1], k.shape[1])
    if mask is not None:
        mask = mask.to(q.device)
    out = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2).double(), k.transpose(1, 2).double(), v.transpose(1, 2).double(),
        attn_mask=mask, scale=scale, enable_gqa=True)
    return out.transpose(1, 2)


def lse(q, k, mask=None, scale=None):
    """[B, Hq, Sq] natural-log sum of exp(scores) over the kept keys."""
    groups = q.shape[2] // k.shape[2]
    scale = scale if scale is not None else q.shape[-1] ** -0.5
    keys = k.double().repeat_interleave(groups, dim=2)
    scores = torch.einsum("bqhd,bkhd->bhqk", q.double(), keys) * scale
    if mask is None:
        mask = causal_mask(q.shape[1], k.shape[1])
    return torch.logsumexp(scores.masked_fill(~mask.to(q.device), float("-inf")), dim=-1)


def qkv(generator, batch=1, q_len=200, kv_len=None, q_heads=4, kv_heads=2, head_dim=32,
        dtype=torch.float32, device="cpu"):
    kv_len = q_len if kv_len is None else kv_len
    shapes = ((batch, q_len, q_heads, head_dim), (batch, kv_len, kv_heads, head_dim),
              (batch, kv_len, kv_heads, head_dim))
    return [torch.randn(shape, generator=generator).to(dtype=dtype, device=device)
            for shape in shapes]
