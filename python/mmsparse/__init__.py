"""mmsparse: sparse attention for long-context vision-language model prefill.

    import mmsparse
    out = mmsparse.attention(q, k, v, pattern="a-shape:sink=128,local=4096")
    plan = mmsparse.prepare(q, k, config="model.json", layer=3, layout=layout)
    out = plan.run(q, k, v)

transformers models: mmsparse.hf.enable(model, config=...). The CLI: python -m mmsparse.
"""

from __future__ import annotations

import torch  # noqa: F401  (first: its CUDA runtime is the one the extension then shares)

from . import _core
from ._attention import Plan, attention, prepare
from ._config import Layout, PatternConfig
from . import _ops  # noqa: F401  (registers torch.ops.mmsparse.*)

__version__ = _core.build_info()["version"]


def build_info() -> dict:
    """What this build contains: version, compiler, CUDA, attention backends."""
    return _core.build_info()


def known_patterns() -> list[dict]:
    """The pattern names with their default specs and whether they are dynamic."""
    return _core.known_patterns()


__all__ = ["Layout", "PatternConfig", "Plan", "attention", "build_info", "known_patterns",
           "prepare"]
