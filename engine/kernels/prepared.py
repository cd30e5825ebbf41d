"""Forms prepared from weight arrays, made once per weight and kept while it lives.

An executor hands a node the same weight arrays on every run (weights are replaced by
``Executor.set_weight``, never written in place), so what a kernel derives from a weight
alone -- an LSTM's transposed, pre-scaled matrices (``rnn.py``), an 8-bit weight shifted by
its zero point in float32 (``integer.py``) -- is built on the first call and found again by
the arrays' identities. Each entry holds weak references to its arrays: when one dies its
entry goes with it, so an id reused by a new array never finds a stale form.

``LastPlan`` is the per-step form of the same idea: the plan of a step's last call, found again
while its input shape and its weights are the same objects.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable

#: (kind, ids of the arrays) -> (weak references to them, what was prepared from them).
_CACHE: dict[tuple, tuple[tuple, Any]] = {}
#: Entries die with their arrays; past this many live ones, the oldest goes (a DenseNet run
#: on weights it computes holds 58 Winograd forms of its 3x3 convs, besides other kinds: a
#: cache emptied at 64 made them again on every run).
_CACHE_MAX = 1024


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
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[key] = (refs, value)
    return value


class LastPlan:
    """A plan for a step's last call (``engine/fuse.py``'s conv chains: ``nn.conv_fused_plan``),
    reused while the input's shape and the arguments ``constants(args)`` picks (weights, which
    ``set_weight`` replaces: a new one plans again) are the same objects -- nothing re-derived
    (about half a small conv's Python cost). ``None`` where no plan applies, or where making it
    raised: the step's general path meets the same error and says what it is. One tuple holds
    the last plan, so a call never sees half of one."""

    __slots__ = ("constants", "make", "last")

    def __init__(self, constants: Callable[[tuple], tuple], make: Callable[[Any, tuple], Any]) -> None:
        self.constants, self.make = constants, make
        self.last: tuple = (None, (), None)   # (input shape, the constants, the plan)

    def __call__(self, x: Any, args: tuple) -> Any:
        shape, held, plan = self.last
        now = self.constants(args)
        if x.shape == shape and len(now) == len(held):
            for a, b in zip(now, held):   # a loop: all() over a generator costs more than a small conv's checks
                if a is not b:
                    break
            else:
                return plan
        try:
            plan = self.make(x, args)
        except Exception:  # noqa: BLE001 -- see the class text
            plan = None
        self.last = (x.shape, now, plan)
        return plan
