"""FlexAttention (domain ai.onnx.preview), and the kernel of attention found as a pattern
(``attention``, see engine/fuse_attention.py).

FlexAttention: scaled dot-product attention whose scores and
probabilities may each pass through a user graph (``score_mod``, ``prob_mod``).

A control-flow kernel: the graphs run through the caller's ``run_graph``, so they can read
outer-scope tensors and run on the same ``xp`` as everything else.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, Sequence

import numpy as np

from partition.ir import Graph

from . import gemm
from .dtypes import np_dtype
from .registry import register_control_flow

PREVIEW = "ai.onnx.preview"


@register_control_flow("FlexAttention", domain=PREVIEW)
def flex_attention(xp: Any, q: Any, k: Any, v: Any, *, subgraphs: dict[str, Graph],
                   run_graph: Callable[[Graph, list], list], scale: float | None = None,
                   softmax_precision: int | None = None, score_mod: Any = None, prob_mod: Any = None) -> Any:
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(f"FlexAttention takes rank-4 Q, K, V; got {q.shape}, {k.shape}, {v.shape}")
    hq, hkv = q.shape[1], k.shape[1]
    if hq != hkv:
        if hq % hkv:
            raise ValueError(f"FlexAttention: {hq} query heads are not a multiple of {hkv} key/value heads")
        k, v = xp.repeat(k, hq // hkv, axis=1), xp.repeat(v, hq // hkv, axis=1)
    if scale is None:
        scale = 1.0 / float(np.sqrt(q.shape[-1]))
    # Both sides scaled by sqrt(scale), in the input's precision (as ONNX's reference does).
    root = np.sqrt(np.float32(scale)).astype(q.dtype)
    scores = gemm.matmul(xp, q * root, xp.swapaxes(k * root, -1, -2))
    compute = np_dtype(softmax_precision) if softmax_precision else (
        np.dtype(np.float64) if q.dtype == np.float64 else np.dtype(np.float32))
    scores = scores.astype(compute)
    if "score_mod" in subgraphs:
        scores = run_graph(subgraphs["score_mod"], [scores])[0].astype(compute)
    scores = scores - xp.max(scores, axis=-1, keepdims=True)
    e = xp.exp(scores)
    probs = e / xp.sum(e, axis=-1, keepdims=True)
    if "prob_mod" in subgraphs:
        probs = run_graph(subgraphs["prob_mod"], [probs])[0].astype(compute)
    return gemm.matmul(xp, probs, v.astype(compute)).astype(v.dtype)


# ----------------------------------------------- attention as a pattern --
#: One operation on the attention scores between the two products, as
#: ``engine/fuse_attention.py`` found it: (op, the positions in the fused step's
#: arguments of its other operands, where the scores sit among the node's inputs).
ScoreStep = tuple[str, tuple[int, ...], int]

_IN_PLACE = {"Mul": "multiply", "Div": "divide", "Add": "add", "Sub": "subtract"}


def attention(xp: Any, args: Sequence[Any], steps: Sequence[ScoreStep],
              softmax: Callable[[Any], Any],
              matmul: Callable[[Any, Any], Any] | None = None) -> Any | None:
    """``softmax(ops(q @ k)) @ v`` for args (q, k, v, operands...): the scores are one
    array that every step updates in place (a scale, a mask added, a Where's fill),
    where the nodes as written make a new array per step. ``matmul`` is the products'
    kernel (the engine's MatMul, which cuts a large one over the cores; ``xp.matmul``
    if None). None when a step does not fit in place (its result would broadcast past
    the scores or change their dtype, a Where's condition is not boolean): the caller
    runs the nodes as written."""
    product = matmul or partial(gemm.matmul, xp)
    q, k, v = args[0], args[1], args[2]
    scores = product(q, k)
    for op, others, at in steps:
        if not _apply(xp, scores, op, [args[i] for i in others], at):
            return None
    return product(softmax(scores), v)


def _inside(scores: Any, other: Any) -> bool:
    """Whether ``other`` broadcasts to the scores' shape (not past it)."""
    try:
        shape = np.broadcast_shapes(tuple(scores.shape), tuple(getattr(other, "shape", ())))
    except ValueError:
        return False
    return shape == tuple(scores.shape)


def _fits(xp: Any, scores: Any, other: Any) -> bool:
    """Whether ``other`` goes into the scores in place: their shape and dtype kept."""
    return _inside(scores, other) and xp.result_type(scores, other) == scores.dtype


def _apply(xp: Any, scores: Any, op: str, others: list[Any], at: int) -> bool:
    if op in _IN_PLACE:
        other = others[0]
        if not _fits(xp, scores, other):
            return False
        ufunc = getattr(xp, _IN_PLACE[op])
        if at == 0:
            ufunc(scores, other, out=scores)
        else:
            ufunc(other, scores, out=scores)
        return True
    # Where(cond, x, y) with the scores as x (at 1) or y (at 2): the other side's
    # values copied in where the condition picks them.
    cond, fill = others
    if getattr(cond, "dtype", None) != np.bool_ or not _fits(xp, scores, fill) \
            or not _inside(scores, cond):
        return False
    xp.copyto(scores, fill, where=xp.logical_not(cond) if at == 1 else cond)
    return True
