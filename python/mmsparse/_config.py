"""Modality layouts and per-model pattern configs, as Python objects over the engine's."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence

from . import _core, _handles

Grid = tuple[int, int, int]


def _json_text(value: str | dict) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _grid_tuples(name: str, grids) -> list[Grid]:
    result = []
    for index, grid in enumerate(grids if grids is not None else ()):
        values = [int(x) for x in (grid.tolist() if hasattr(grid, "tolist") else grid)]
        if len(values) != 3:
            raise ValueError(f"{name}[{index}]: expected (t, h, w), got {values}")
        result.append((values[0], values[1], values[2]))
    return result


class Layout:
    """The modality layout of a token sequence: text, image and video segments with their grids.

    Build one from segments (``Layout.from_segments([{"type": "text", "length": 20}, {"type":
    "video", "grid": [8, 12, 20], "frame_separator": 3}])``), from JSON (what ``to_json`` and the
    CLI write), from per-token types and grids (``from_token_types``), or from a model's inputs
    (``mmsparse.hf.layout_from_inputs``). Grids are after spatial merging: tokens per frame h × w.
    """

    def __init__(self, native: _core.ModalityLayout):
        if not isinstance(native, _core.ModalityLayout):
            raise TypeError("layout: expected a _core.ModalityLayout (use Layout.from_segments, "
                            f"from_json or from_token_types), got {type(native).__name__}")
        self._native = native
        self._handle = _handles.register(self)

    @classmethod
    def from_json(cls, text: str | dict) -> Layout:
        return cls(_core.ModalityLayout.from_json(_json_text(text)))

    @classmethod
    def from_segments(cls, segments: Sequence[dict]) -> Layout:
        """Compact form: [{"type": "text", "length": n}, {"type": "image", "grid": [t, h, w],
        "markers": bool}, {"type": "video", "grid": [t, h, w], "frame_separator": n, "markers":
        bool}]."""
        if isinstance(segments, (str, bytes)) or not isinstance(segments, Iterable):
            raise TypeError(f"segments: expected a list of dicts, got {type(segments).__name__}")
        return cls.from_json({"segments": list(segments)})

    @classmethod
    def from_token_types(cls, token_types, image_grids=(), video_grids=()) -> Layout:
        """token_types: per token 0 text, 1 image, 2 video (transformers' mm_token_type_ids)."""
        types = token_types.tolist() if hasattr(token_types, "tolist") else list(token_types)
        return cls(_core.ModalityLayout.from_token_types(
            [int(t) for t in types], _grid_tuples("image_grids", image_grids),
            _grid_tuples("video_grids", video_grids)))

    @classmethod
    def text_only(cls, length: int) -> Layout:
        return cls(_core.ModalityLayout.text_only(int(length)))

    @property
    def length(self) -> int:
        return self._native.length

    def segments(self) -> list[dict]:
        return self._native.segments()

    def media(self) -> list[dict]:
        return self._native.media()

    def token_types(self) -> list[int]:
        return self._native.token_types()

    def is_mixed(self) -> bool:
        return self._native.is_mixed()

    def to_json(self) -> str:
        return self._native.to_json()

    def __eq__(self, other) -> bool:
        return isinstance(other, Layout) and self._native == other._native

    def __repr__(self) -> str:
        kinds = [f"{s['type']}[{s['begin']}:{s['end']}]" for s in self.segments()[:6]]
        more = "" if len(self.segments()) <= 6 else f", ... ({len(self.segments())} segments)"
        return f"Layout(length={self.length}, {', '.join(kinds)}{more})"


def as_layout(value, name: str = "layout") -> Layout | None:
    """None, a Layout, a dict or JSON text, or a list of compact segments."""
    if value is None or isinstance(value, Layout):
        return value
    if isinstance(value, (str, dict)):
        return Layout.from_json(value)
    if isinstance(value, (list, tuple)):
        return Layout.from_segments(value)
    raise TypeError(f"{name}: expected a mmsparse.Layout, JSON text, a dict or a list of "
                    f"segments, got {type(value).__name__}")


class PatternConfig:
    """A per-model pattern config (JSON, what ``mmsparse search`` writes): a spec per layer and
    query head. ``PatternConfig.load(path)``, ``PatternConfig.from_json(text_or_dict)``, or
    ``PatternConfig.uniform("a-shape:sink=128,local=4096")`` for one spec everywhere."""

    def __init__(self, native: _core.PatternConfig):
        self._native = native
        self._handle = _handles.register(self)

    @classmethod
    def from_json(cls, text: str | dict) -> PatternConfig:
        return cls(_core.PatternConfig.from_json(_json_text(text)))

    @classmethod
    def load(cls, path: str | os.PathLike) -> PatternConfig:
        with open(path, encoding="utf-8") as file:
            return cls.from_json(file.read())

    @classmethod
    def uniform(cls, spec: str) -> PatternConfig:
        return cls.from_json({"schema_version": 2, "default": _core.parse_spec(spec)})

    def layer_specs(self, layer: int, heads: int) -> list[str]:
        return self._native.layer_specs(int(layer), int(heads))

    @property
    def search_seq_len(self) -> int:
        """The calibration length a searched config was made on (0 if not recorded)."""
        return self._native.search_seq_len

    def to_json(self) -> str:
        return self._native.to_json()


def as_config(value, name: str = "config") -> PatternConfig | None:
    """None, a PatternConfig, a dict, JSON text or a path to a JSON file."""
    if value is None or isinstance(value, PatternConfig):
        return value
    if isinstance(value, dict):
        return PatternConfig.from_json(value)
    is_json = isinstance(value, str) and value.lstrip().startswith("{")
    if isinstance(value, os.PathLike) or (isinstance(value, str) and not is_json):
        if not os.path.exists(value):
            raise ValueError(f"{name}: expected a PatternConfig, JSON text or an existing file, "
                             f"got the path {str(value)!r}, which does not exist")
        return PatternConfig.load(value)
    if isinstance(value, str):
        return PatternConfig.from_json(value)
    raise TypeError(f"{name}: expected a mmsparse.PatternConfig, dict, JSON text or a path, got "
                    f"{type(value).__name__}")
