"""Integer handles for objects that torch custom ops refer to.

A torch op's schema takes tensors and scalars, not Python objects: plans, configs and layouts are
passed to the ops as integers that name a live object here. The object keeps its handle for its
lifetime; the entry goes when the object is collected.
"""

from __future__ import annotations

import itertools
import threading
import weakref

_lock = threading.Lock()
_counter = itertools.count(1)
_objects: dict[int, weakref.ref] = {}

NONE = -1  # the handle of "no object"


def register(obj: object) -> int:
    with _lock:
        handle = next(_counter)
        _objects[handle] = weakref.ref(obj)
    weakref.finalize(obj, _forget, handle)
    return handle


def _forget(handle: int) -> None:
    with _lock:
        _objects.pop(handle, None)


def lookup(handle: int, kind: str):
    """The object of `handle`, or None for NONE; raises ValueError if it is gone."""
    if handle == NONE:
        return None
    ref = _objects.get(handle)
    obj = ref() if ref is not None else None
    if obj is None:
        raise ValueError(f"{kind}: expected a live object for handle {handle}, got one that was "
                         "garbage-collected (keep it referenced while compiled code uses it)")
    return obj
