"""Forms prepared from weight arrays, made once per weight and kept while it lives.

An executor hands a node the same weight arrays on every run (weights are replaced by
``Executor.set_weight``, never written in place), so what a kernel derives from a weight
alone -- an LSTM's transposed, pre-scaled matrices (``rnn.py``), an 8-bit weight shifted by
its zero point in float32 (``integer.py``) -- is built on the first call and found again by
the arrays' identities. Each entry holds weak references to its arrays: when one dies its
entry goes with it, so an id reused by a new array never finds a stale form.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable

#: (kind, ids of the arrays) -> (weak references to them, what was prepared from them).
_CACHE: dict[tuple, tuple[tuple, Any]] = {}
_CACHE_MAX = 64


def prepared(kind: str, objs: tuple, build: Callable[[], Any]) -> Any:
    """``build()``, remembered while every array of ``objs`` (None allowed) lives."""
    key = (kind, *(id(o) for o in objs))
    hit = _CACHE.get(key)
    if hit is not None and all(ref() is o for ref, o in zip(hit[0], objs) if ref is not None):
        return hit[1]
    value = build()
    try:
        refs = tuple(None if o is None else
                     weakref.ref(o, lambda _ref, key=key: _CACHE.pop(key, None)) for o in objs)
    except TypeError:  # an array type without weak references (a numpy scalar): no cache
        return value
    if len(_CACHE) >= _CACHE_MAX:
        _CACHE.clear()
    _CACHE[key] = (refs, value)
    return value
