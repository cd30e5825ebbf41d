"""Activation kernels with attributes, and the softmax family."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import device, native
from .elementwise import erf, same
from .registry import register


@register("LeakyRelu")
def leaky_relu(xp: Any, x: Any, *, alpha: float = 0.01) -> Any:
    t = x * alpha
    return same(xp, leaky_relu_of(xp, x, t, alpha, out=t), x)


def leaky_relu_of(xp: Any, x: Any, t: Any, alpha: float, out: Any) -> Any:
    """LeakyRelu of ``x`` (``x < 0 ? t : x``) from ``t = x * alpha``, written into ``out``.
    With ``0 < alpha <= 1`` it is ``max(x, t)`` and with ``1 < alpha < inf`` ``min(x, t)``:
    one pass and no mask (a third of ``where``'s time on tf2onnx's LeakyRelu convs), the same
    numbers, NaN included (``alpha * x`` rounds towards ``x``'s side). ``alpha`` 0, infinite,
    negative or NaN would break that at 0 or infinity: ``where`` then."""
    if 0 < alpha <= 1:
        return xp.maximum(x, t, out=out)
    if 1 < alpha < math.inf:
        return xp.minimum(x, t, out=out)
    out[...] = xp.where(x < 0, t, x)
    return out


@register("Elu")
def elu(xp: Any, x: Any, *, alpha: float = 1.0) -> Any:
    return same(xp, xp.where(x > 0, x, alpha * (xp.exp(x) - 1)), x)


@register("Selu")
def selu(xp: Any, x: Any, *, alpha: float = 1.67326319217681884765625,
         gamma: float = 1.05070102214813232421875) -> Any:
    return same(xp, gamma * xp.where(x > 0, x, alpha * (xp.exp(x) - 1)), x)


@register("Celu", since=12)
def celu(xp: Any, x: Any, *, alpha: float = 1.0) -> Any:
    return same(xp, xp.maximum(x, 0) + xp.minimum(0, alpha * (xp.exp(x / alpha) - 1)), x)


@register("ThresholdedRelu", since=10)
def thresholded_relu(xp: Any, x: Any, *, alpha: float = 1.0) -> Any:
    return same(xp, xp.where(x > alpha, x, 0), x)


@register("HardSigmoid")
def hard_sigmoid(xp: Any, x: Any, *, alpha: float = 0.2, beta: float = 0.5) -> Any:
    return same(xp, xp.clip(alpha * x + beta, 0, 1), x)


@register("Shrink", since=9)
def shrink(xp: Any, x: Any, *, bias: float = 0.0, lambd: float = 0.5) -> Any:
    return same(xp, xp.where(x < -lambd, x + bias, xp.where(x > lambd, x - bias, 0)), x)


@register("PRelu")
def prelu(xp: Any, x: Any, slope: Any) -> Any:
    if slope.ndim == 1 and x.ndim > 1 and slope.shape[0] == x.shape[1] and slope.shape[0] != x.shape[-1]:
        # Older exporters give a per-channel slope; ONNX broadcasts it along axis 1.
        slope = slope.reshape((-1,) + (1,) * (x.ndim - 2))
    return same(xp, xp.where(x < 0, x * slope, x), x)


@register("Gelu", since=20)
def gelu(xp: Any, x: Any, *, approximate: str = "none") -> Any:
    if approximate == "tanh":
        inner = (2 / 3.141592653589793) ** 0.5 * (x + 0.044715 * x ** 3)
        return same(xp, 0.5 * x * (1 + xp.tanh(inner)), x)
    y = native.gelu(xp, x, 2 ** 0.5, 1.0, 0.5)
    return same(xp, 0.5 * x * (1 + erf(xp, x / 2 ** 0.5)), x) if y is None else y


@register("Swish", since=24)
def swish(xp: Any, x: Any, *, alpha: float = 1.0) -> Any:
    return same(xp, x / (1 + xp.exp(-alpha * x)), x)


# ---------------------------------------------------------------- softmax --
#: Spread of values (max - min) under which exp(x - max of all) stays a normal float.
_SHIFT_RANGE = {np.dtype(np.float32): 80.0, np.dtype(np.float64): 700.0}


def _softmax(xp: Any, x: Any, axis: Any) -> Any:
    last = axis in (-1, x.ndim - 1) and x.ndim > 1 and x.shape[-1] > 0
    fast = native.softmax_last(xp, x) if last else None
    if fast is not None:  # float32 numpy: each row's max, exp and sum in cache
        return fast
    fast = device.softmax_last(xp, x) if last else None
    if fast is not None:  # float32 on a device: one generated kernel
        return fast
    if xp is np and last and x.dtype in _SHIFT_RANGE and x.size >= 4096:
        # numpy reduces a short last axis row by row (~0.1 us a row: 48 us for the
        # 512 rows of 128 of an attention map). When every value is within
        # _SHIFT_RANGE of the largest, shifting all rows by that one maximum is as
        # exact (no exp overflows, none becomes subnormal), and row sums are a
        # matrix-vector product. -inf masks, NaN and wide ranges take the row path.
        hi, lo = x.max(), x.min()
        if hi - lo <= _SHIFT_RANGE[x.dtype]:
            e = x - hi
            np.exp(e, out=e)
            n = x.shape[-1]
            sums = (e.reshape(-1, n) @ np.ones(n, dtype=e.dtype)).reshape(x.shape[:-1] + (1,))
            e /= sums
            return e
    e = x - xp.max(x, axis=axis, keepdims=True)   # our own array: the rest in place
    xp.exp(e, out=e)
    e /= xp.sum(e, axis=axis, keepdims=True)
    return e


def _log_softmax(xp: Any, x: Any, axis: Any) -> Any:
    shifted = x - xp.max(x, axis=axis, keepdims=True)
    shifted -= xp.log(xp.sum(xp.exp(shifted), axis=axis, keepdims=True))
    return shifted


def _hardmax(xp: Any, x: Any, axis: int) -> Any:
    idx = xp.expand_dims(xp.argmax(x, axis=axis), axis)
    shape = [1] * x.ndim
    shape[axis] = x.shape[axis]
    return (xp.arange(x.shape[axis]).reshape(shape) == idx).astype(x.dtype)


def _coerced(fn: Any) -> Any:
    """Opsets < 13: the input is viewed as 2-D, [prod(shape[:axis]), prod(shape[axis:])]."""
    def kernel(xp: Any, x: Any, *, axis: int = 1) -> Any:
        if x.size == 0:  # an empty axis has no max to shift by; the output is empty too
            return x.copy()
        axis = axis % max(x.ndim, 1)
        lead = 1
        for d in x.shape[:axis]:
            lead *= d
        flat = x.reshape(lead, -1)
        return same(xp, fn(xp, flat, 1).reshape(x.shape), x)
    return kernel


def _single_axis(fn: Any) -> Any:
    def kernel(xp: Any, x: Any, *, axis: int = -1) -> Any:
        if x.size == 0:  # as above: nothing to normalise, and max() of nothing raises
            return x.copy()
        return same(xp, fn(xp, x, axis), x)
    return kernel


for _op, _fn in (("Softmax", _softmax), ("LogSoftmax", _log_softmax), ("Hardmax", _hardmax)):
    register(_op, since=1)(_coerced(_fn))
    register(_op, since=13)(_single_axis(_fn))
