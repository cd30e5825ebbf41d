"""Sequence and optional kernels. A sequence is a python list of arrays; an empty optional is None."""

from __future__ import annotations

from typing import Any

import numpy as np

from partition.ir import Graph

from .dtypes import np_dtype
from .registry import register, register_control_flow, to_host


def _pos(xp: Any, p: Any, n: int, default: int) -> int:
    i = default if p is None else int(to_host(xp, p).reshape(-1)[0])
    return i + n if i < 0 else i


@register("SequenceConstruct", since=11)
def sequence_construct(xp: Any, *xs: Any) -> tuple:
    return (list(xs),)


@register("SequenceEmpty", since=11)
def sequence_empty(xp: Any, *, dtype: int | None = None) -> tuple:
    return ([],)


@register("SequenceInsert", since=11)
def sequence_insert(xp: Any, seq: list, tensor: Any, position: Any = None) -> tuple:
    out = list(seq)
    out.insert(_pos(xp, position, len(seq), len(seq)), tensor)
    return (out,)


@register("SequenceAt", since=11)
def sequence_at(xp: Any, seq: list, position: Any) -> Any:
    return seq[_pos(xp, position, len(seq), 0)]


@register("SequenceErase", since=11)
def sequence_erase(xp: Any, seq: list, position: Any = None) -> tuple:
    out = list(seq)
    del out[_pos(xp, position, len(seq), len(seq) - 1)]
    return (out,)


@register("SequenceLength", since=11)
def sequence_length(xp: Any, seq: list) -> Any:
    return xp.asarray(np.array(len(seq), dtype=np.int64))


@register("SplitToSequence", since=11)
def split_to_sequence(xp: Any, x: Any, split: Any = None, *, axis: int = 0, keepdims: int = 1) -> tuple:
    axis = axis % x.ndim
    if split is None:
        parts = [xp.take(x, i, axis=axis) for i in range(x.shape[axis])]
        return ([xp.expand_dims(p, axis) for p in parts] if keepdims else parts,)
    sizes = [int(v) for v in to_host(xp, split).reshape(-1)]
    if to_host(xp, split).ndim == 0:
        n = sizes[0]
        sizes = [n] * (x.shape[axis] // n) + ([x.shape[axis] % n] if x.shape[axis] % n else [])
    points = list(np.cumsum(sizes)[:-1])
    return (list(xp.split(x, points, axis=axis)),)


@register("ConcatFromSequence", since=11)
def concat_from_sequence(xp: Any, seq: list, *, axis: int, new_axis: int = 0) -> Any:
    return xp.stack(seq, axis=axis) if new_axis else xp.concatenate(seq, axis=axis)


@register("Optional", since=15)
def optional(xp: Any, x: Any = None, *, type: Any = None) -> tuple:  # noqa: A002
    return (x,)


@register("OptionalHasElement", since=15)
def optional_has_element(xp: Any, x: Any = None) -> Any:
    return xp.asarray(np.array(x is not None))


@register("OptionalGetElement", since=15)
def optional_get_element(xp: Any, x: Any) -> tuple:
    if x is None:
        raise ValueError("OptionalGetElement on an empty optional")
    return (x,)


@register_control_flow("SequenceMap", since=17)
def sequence_map(xp: Any, seq: list, *extra: Any, subgraphs: dict[str, Graph], run_graph: Any,
                 body: Any = None) -> tuple:
    graph = subgraphs["body"]
    outs: list[list[Any]] = [[] for _ in graph.outputs]
    for i in range(len(seq)):
        args = [seq[i]] + [e[i] if isinstance(e, list) else e for e in extra]
        for k, v in enumerate(run_graph(graph, args)):
            outs[k].append(v)
    return tuple(outs)


__all__ = ["np_dtype"]
