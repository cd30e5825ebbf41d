"""Reductions (axes as attribute before opset 13/18, as an input after) and ArgMax/ArgMin."""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from . import geometry
from .registry import host_ints, register


def _identity(dtype: Any, kind: str) -> Any:
    """What an empty reduction yields: ONNX uses the op's identity element."""
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return kind in ("min", "prod")
    if kind == "max":
        return -np.inf if dt.kind == "f" else np.iinfo(dt).min
    if kind == "min":
        return np.inf if dt.kind == "f" else np.iinfo(dt).max
    if kind == "logsumexp" or kind == "logsum":
        return -np.inf
    return 1 if kind == "prod" else 0


def sum_keepdims(xp: Any, x: Any, ax: tuple) -> Any:
    """``xp.sum(x, axis=ax, keepdims=True)``. Over a short last axis (2 to 7 long: a complex
    pair's power after an STFT, a point's xyz) as slice adds: numpy's reduction there runs
    its inner loop once per output element, 12x slower on onnx-asr's Kaldi fbank power (25k
    pairs: 521 -> 43 us). Numpy adds fewer than 8 terms in order, as the slices do: the same
    sums, bit for bit (``tests/test_kernels_reduce_short_axis.py``)."""
    if x.dtype in WIDE_FLOATS and _short_last_axis(xp, x.shape, ax):
        return _slice_sum(x)
    return x.sum(axis=ax, keepdims=True)  # the array's method: xp.sum adds numpy's Python wrapper


def sum_for(xp: Any, shape: tuple, ax: tuple, keepdims: bool) -> Callable[[Any], Any]:
    """``sum_keepdims`` of float arrays of ``shape`` over ``ax`` (the axes kept or not),
    its form chosen once for the shape (reductions planned per shape call it,
    ``engine/specialize.py``): the short-axis adds, or on the host numpy's ``add.reduce``
    itself -- the reduction ``x.sum`` runs, without its Python wrapper and a reshape
    after (1.1 us of a 2.8 us ReduceSumSquare over 16x30 floats, skl2onnx's kNN step)."""
    if _short_last_axis(xp, shape, ax):
        if keepdims:
            return _slice_sum
        out = tuple(d for i, d in enumerate(shape) if i not in ax)
        return lambda x: _slice_sum(x).reshape(out)
    if xp is np:   # positional: a ufunc method parses keywords slower (1.94 -> 1.70 us on 16x30)
        add = np.add.reduce
        return lambda x: add(x, ax, None, None, keepdims)
    return lambda x: x.sum(axis=ax, keepdims=keepdims)


def _short_last_axis(xp: Any, shape: tuple, ax: tuple) -> bool:
    """Whether a float sum over ``ax`` of ``shape`` takes ``_slice_sum``."""
    n = shape[-1] if shape else 0
    return xp is np and 1 < n < 8 and ax == (len(shape) - 1,) and math.prod(shape) >= 512


def _slice_sum(x: Any) -> Any:
    """The sum over a short last axis as slice adds, in numpy's order."""
    out = x[..., 0:1].copy()
    for i in range(1, x.shape[-1]):
        out += x[..., i:i + 1]
    return out


#: The float dtypes summed as they are (float16 accumulates wider, integers to int64).
WIDE_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))

_OPS: dict[str, tuple[str, Callable[[Any, Any, tuple], Any]]] = {
    "ReduceSum": ("sum", sum_keepdims),
    "ReduceMean": ("mean", lambda xp, x, ax: mean_keepdims(xp, x, ax)),
    "ReduceMax": ("max", lambda xp, x, ax: xp.max(x, axis=ax, keepdims=True)),
    "ReduceMin": ("min", lambda xp, x, ax: xp.min(x, axis=ax, keepdims=True)),
    "ReduceProd": ("prod", lambda xp, x, ax: xp.prod(x, axis=ax, keepdims=True)),
    "ReduceL1": ("sum", lambda xp, x, ax: sum_keepdims(xp, xp.abs(x), ax)),
    "ReduceL2": ("sum", lambda xp, x, ax: xp.sqrt(sum_keepdims(xp, x * x, ax))),
    "ReduceSumSquare": ("sum", lambda xp, x, ax: sum_keepdims(xp, x * x, ax)),
    "ReduceLogSum": ("logsum", lambda xp, x, ax: xp.log(sum_keepdims(xp, x, ax))),
    "ReduceLogSumExp": ("logsumexp", lambda xp, x, ax: _logsumexp(xp, x, ax)),
}


#: Each reduction op's function ``(xp, x, axes) -> kept-dims result`` (the specialised path's too).
REDUCTIONS = {op: fn for op, (_, fn) in _OPS.items()}


def mean_keepdims(xp: Any, x: Any, ax: tuple) -> Any:
    """``xp.mean`` as its own two steps (a sum, then an in-place divide by the count):
    the same float32/float64 result without its ~5 us of Python around them."""
    if x.dtype not in (np.float32, np.float64):
        return xp.mean(x, axis=ax, keepdims=True)
    s = sum_keepdims(xp, x, ax)
    count = 1
    for a in ax:
        count *= x.shape[a]
    s /= x.dtype.type(count)
    return s


def _logsumexp(xp: Any, x: Any, ax: tuple) -> Any:
    m = xp.max(x, axis=ax, keepdims=True)
    m = xp.where(xp.isfinite(m), m, 0)
    return xp.log(xp.sum(xp.exp(x - m), axis=ax, keepdims=True)) + m


def _reduce(xp: Any, op: str, x: Any, axes: list[int] | None, keepdims: int, noop: int) -> Any:
    kind, fn = _OPS[op]
    if not axes:
        if noop:
            return x
        axes = list(range(x.ndim))
    ax = tuple(sorted(geometry.axes("axes", axes, x.ndim))) if x.ndim else ()
    if any(x.shape[a] == 0 for a in ax):
        shape_ = [1 if i in ax else d for i, d in enumerate(x.shape)]
        out = xp.full(shape_, _identity(x.dtype, kind), dtype=x.dtype)
    else:
        out = fn(xp, x, ax)
    if not keepdims:
        out = out.reshape([d for i, d in enumerate(out.shape) if i not in ax])
    return xp.asarray(out, dtype=x.dtype)


def _make(op: str) -> None:
    def kernel(xp: Any, x: Any, axes_in: Any = None, *, axes: list[int] | None = None,
               keepdims: int = 1, noop_with_empty_axes: int = 0) -> Any:
        chosen = host_ints(xp, axes_in) if axes_in is not None else (list(axes) if axes else None)
        return _reduce(xp, op, x, chosen, keepdims, noop_with_empty_axes)
    kernel.__name__ = kernel.__qualname__ = op
    kernel.__doc__ = f"ONNX {op}; axes from the attribute (old opsets) or the second input."
    register(op)(kernel)


for _op in _OPS:
    _make(_op)


def _arg(xp: Any, x: Any, axis: int, keepdims: int, select_last_index: int, largest: bool) -> Any:
    fn = xp.argmax if largest else xp.argmin
    if select_last_index:
        flipped = xp.flip(x, axis)
        idx = x.shape[axis] - 1 - fn(flipped, axis=axis)
    else:
        idx = fn(x, axis=axis)
    if keepdims:
        idx = xp.expand_dims(idx, axis)
    return xp.asarray(idx, dtype=np.int64)


@register("ArgMax")
def argmax(xp: Any, x: Any, *, axis: int = 0, keepdims: int = 1, select_last_index: int = 0) -> Any:
    return _arg(xp, x, axis, keepdims, select_last_index, True)


@register("ArgMin")
def argmin(xp: Any, x: Any, *, axis: int = 0, keepdims: int = 1, select_last_index: int = 0) -> Any:
    return _arg(xp, x, axis, keepdims, select_last_index, False)
