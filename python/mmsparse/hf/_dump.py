"""mmsparse.hf.dump: a model's post-RoPE Q, K, V per layer, written as the calibration file that
`mmsparse search --input` and `mmsparse run --input` read (docs/search.md, "Calibration files")."""

from __future__ import annotations

import json

import torch

from .._config import Layout
from . import _backend


class dump:  # noqa: N801  (used as a function: `with mmsparse.hf.dump(model, path):`)
    """Records the first prefill inside the block and writes `path` on leaving it:

        with mmsparse.hf.dump(model, "calib.safetensors", layers=[0, 14, 27]):
            model(**inputs)
        # mmsparse search --input calib.safetensors --output model.json

    Tensors "layers.<L>.q" [1, seq, q_heads, head_dim] and "layers.<L>.k", "layers.<L>.v"
    [1, seq, kv_heads, head_dim] in the model's dtype, the modality layout as JSON in the
    metadata ("mmsparse.layout"). layers: None for every layer. A model not enabled with
    mmsparse.hf.enable keeps transformers' SDPA while it is recorded.
    """

    def __init__(self, model, path, layers=None):
        if layers is not None and (isinstance(layers, (str, bytes)) or
                                   not all(isinstance(x, int) and x >= 0 for x in layers)):
            raise TypeError(f"layers: expected None or a list of layer indices >= 0, "
                            f"got {layers!r}")
        self.model = model
        self.path = str(path)
        self.layers = None if layers is None else sorted(set(layers))
        self.tensors: dict[str, torch.Tensor] = {}
        self.layout: Layout | None = None
        self._state = None
        self._enabled_here = False

    def __enter__(self) -> dump:
        state = getattr(self.model, _backend._STATE_ATTRIBUTE, None)
        if state is None:
            state = _backend.enable(self.model)
            state.passthrough = True
            self._enabled_here = True
        state.recorder = self._record
        self._state = state
        return self

    def _record(self, layer: int, query, key, value) -> None:
        if self.layers is not None and layer not in self.layers:
            return
        prefix = f"layers.{layer}."
        if prefix + "q" in self.tensors:
            return  # the first prefill only
        if query.shape[0] != 1:
            raise ValueError(f"dump: expected batch 1 (one prompt per calibration file), got "
                             f"{query.shape[0]}")
        for name, tensor in (("q", query), ("k", key), ("v", value)):
            self.tensors[prefix + name] = tensor.detach().transpose(1, 2).contiguous().cpu()
        if self.layout is None:
            layouts = self._state.layouts
            length = key.shape[2]
            self.layout = layouts[0] if layouts and layouts[0].length == length else \
                Layout.text_only(length)

    def __exit__(self, error_type, error, traceback) -> None:
        self._state.recorder = None
        if self._enabled_here:
            _backend.disable(self.model)
        if error_type is not None:
            return
        if not self.tensors:
            raise ValueError("dump: expected a prefill (a forward call with more than one token) "
                             "inside the block, got none")
        missing = [layer for layer in (self.layers or [])
                   if f"layers.{layer}.q" not in self.tensors]
        if missing:
            raise ValueError(f"layers: expected layers of the model, got {missing}, which the "
                             f"prefill did not run")
        from safetensors.torch import save_file

        metadata = {"mmsparse.layout": self.layout.to_json(),
                    "mmsparse.source": json.dumps({"model": type(self.model).__name__})}
        save_file(self.tensors, self.path, metadata=metadata)
