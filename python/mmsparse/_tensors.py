"""torch tensors as engine views: the tensor's own memory (data_ptr, sizes and strides), no copy.

Validation here raises TypeError / ValueError naming the argument before the engine is called;
the engine checks again and names the argument the same way.
"""

from __future__ import annotations

import torch

from . import _core

_DTYPE_NAMES = {
    torch.float32: "float32",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.int32: "int32",
    torch.int64: "int64",
    torch.uint8: "uint8",
}
FLOATING = (torch.float32, torch.float16, torch.bfloat16)
_DLPACK_CPU = 1
_DLPACK_CUDA = 2
TENSOR_LAYOUTS = ("bshd", "bhsd")


def require_tensor(name: str, value, ndim: int | None = None, dims: str = "") -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(value).__name__}")
    if ndim is not None and value.dim() != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions {dims}, got {value.dim()} "
                         f"({list(value.shape)})")
    return value


def device_code(device: torch.device) -> tuple[int, int]:
    if device.type == "cpu":
        return _DLPACK_CPU, 0
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return _DLPACK_CUDA, index
    raise ValueError(f"device: expected cpu or cuda, got {device}")


def view(name: str, tensor: torch.Tensor) -> _core.View:
    """The engine's view of `tensor`'s memory; the tensor must outlive the call."""
    dtype = _DTYPE_NAMES.get(tensor.dtype)
    if dtype is None:
        raise ValueError(f"{name} dtype: expected one of {', '.join(_DTYPE_NAMES.values())}, "
                         f"got {tensor.dtype}")
    device_type, device_index = device_code(tensor.device)
    return _core.View(tensor.data_ptr(), dtype, device_type, device_index, list(tensor.shape),
                      list(tensor.stride()))


def as_bshd(name: str, tensor: torch.Tensor, tensor_layout: str) -> torch.Tensor:
    """[batch, seq, heads, head_dim] view of a tensor given in `tensor_layout` (a view, no copy)."""
    if tensor_layout not in TENSOR_LAYOUTS:
        raise ValueError(f"tensor_layout: expected 'bshd' or 'bhsd', got {tensor_layout!r}")
    dims = "[batch, seq, heads, head_dim]" if tensor_layout == "bshd" else \
        "[batch, heads, seq, head_dim]"
    require_tensor(name, tensor, 4, dims)
    return tensor if tensor_layout == "bshd" else tensor.transpose(1, 2)


def check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """q [B, Sq, Hq, D], k and v [B, Skv, Hkv, D] (bshd views)."""
    if q.dtype not in FLOATING:
        raise ValueError(f"q dtype: expected float32, float16 or bfloat16, got {q.dtype}")
    for name, tensor in (("k", k), ("v", v)):
        if tensor.dtype != q.dtype:
            raise ValueError(f"{name} dtype: expected {q.dtype} (the dtype of q), "
                             f"got {tensor.dtype}")
        if tensor.device != q.device:
            raise ValueError(f"{name} device: expected {q.device} (the device of q), "
                             f"got {tensor.device}")
    if k.shape[0] != q.shape[0]:
        raise ValueError(f"k batch: expected {q.shape[0]} (batch of q), got {k.shape[0]}")
    if k.shape[3] != q.shape[3]:
        raise ValueError(f"k head_dim: expected {q.shape[3]} (head_dim of q), got {k.shape[3]}")
    if v.shape != k.shape:
        raise ValueError(f"v shape: expected {list(k.shape)} (the shape of k), got {list(v.shape)}")
    q_heads, kv_heads = q.shape[2], k.shape[2]
    if kv_heads <= 0 or q_heads <= 0 or q_heads % kv_heads != 0:
        raise ValueError(f"q heads: expected a positive multiple of kv_heads = {kv_heads} (GQA), "
                         f"got {q_heads}")
    if q.device.type == "cuda":
        for name, tensor in (("q", q), ("k", k), ("v", v)):
            if tensor.stride(3) != 1:
                raise ValueError(f"{name} strides: expected a contiguous last dimension (stride 1) "
                                 f"on CUDA, got strides {list(tensor.stride())}")


def check_output(name: str, tensor, shape: list[int], dtype: torch.dtype,
                 device: torch.device) -> torch.Tensor:
    require_tensor(name, tensor)
    if list(tensor.shape) != shape:
        raise ValueError(f"{name} shape: expected {shape}, got {list(tensor.shape)}")
    if tensor.dtype != dtype:
        raise ValueError(f"{name} dtype: expected {dtype}, got {tensor.dtype}")
    if tensor.device != device:
        raise ValueError(f"{name} device: expected {device} (the device of q), got {tensor.device}")
    return tensor


def stream_of(device: torch.device) -> int:
    """torch's current CUDA stream on `device` as an integer (0 for the CPU)."""
    if device.type != "cuda":
        return 0
    return torch.cuda.current_stream(device).cuda_stream


def cpu_threads() -> int:
    return torch.get_num_threads()
