"""Elementwise kernels: unary math, binary arithmetic, comparisons, logic, Cast, Where, Clip."""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from . import native
from .dtypes import np_dtype
from .registry import register


def same(xp: Any, result: Any, like: Any) -> Any:
    """``result`` as an xp array of ``like``'s dtype (ONNX keeps the input type)."""
    return xp.asarray(result, dtype=like.dtype)


def erf(xp: Any, x: Any) -> Any:
    """The error function; numpy has none.

    float64 goes element by element through math.erf (exact, slow). Narrower floats
    use a vectorised form computed in float64: the Taylor series below 0.5 (13th
    order, relative error < 1e-9) and Abramowitz & Stegun 7.1.26 above (absolute
    error < 1.5e-7, relative < 3e-7 there): within a few float32 ulps, and 100x
    faster on the GELU of a transformer block.
    """
    fast = native.erf(xp, x)  # float32 numpy: glibc's vector erff, a few ulps
    if fast is not None:
        return fast
    if xp is np and x.dtype == np.float64:
        flat = np.fromiter((math.erf(v) for v in x.ravel()), dtype=np.float64, count=x.size)
        return flat.reshape(x.shape)
    if xp is not np:
        try:  # cupy's own erf where cupyx is there (it ships with cupy)
            from cupyx.scipy.special import erf as cupy_erf  # type: ignore[import-not-found]
            return cupy_erf(x).astype(x.dtype)
        except ImportError:
            return _erf_vectorised(xp, x.astype(xp.float64)).astype(x.dtype)
    with np.errstate(invalid="ignore", over="ignore"):  # inf inputs: the series branch is discarded
        return _erf_vectorised(np, np.asarray(x, dtype=np.float64)).astype(x.dtype)


_ERF_TAYLOR = (1.0, -1.0 / 3, 1.0 / 10, -1.0 / 42, 1.0 / 216, -1.0 / 1320, 1.0 / 9360)
_ERF_AS = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def _erf_vectorised(xp: Any, x: Any) -> Any:
    a = xp.abs(x)
    x2 = x * x
    series = xp.zeros_like(x)
    for c in reversed(_ERF_TAYLOR):
        series = series * x2 + c
    small = (2.0 / math.sqrt(math.pi)) * x * series
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = xp.zeros_like(x)
    for c in reversed(_ERF_AS):
        poly = (poly + c) * t
    large = xp.copysign(1.0 - poly * xp.exp(-x2), x)
    return xp.where(a < 0.5, small, large)


def sigmoid(xp: Any, x: Any) -> Any:
    """``1 / (1 + exp(-x))``: float32 numpy in one compiled pass (``native.sigmoid``), else
    small arrays in one expression and large ones in place after the first array."""
    y = native.sigmoid(xp, x)
    if y is not None:
        return y
    if x.size < 4096:  # small: fewer Python-level calls win over fewer allocations
        return 1 / (1 + xp.exp(-x))
    t = xp.negative(x)
    xp.exp(t, out=t)
    t += 1
    xp.reciprocal(t, out=t)
    return t


def _unary(op: str, fn: Callable[[Any, Any], Any], since: int = 1) -> None:
    def kernel(xp: Any, x: Any) -> Any:
        return same(xp, fn(xp, x), x)
    kernel.__name__ = kernel.__qualname__ = op
    kernel.__doc__ = f"ONNX {op}."
    register(op, since=since)(kernel)


_UNARY: dict[str, Callable[[Any, Any], Any]] = {
    "Abs": lambda xp, x: xp.abs(x),
    "Neg": lambda xp, x: xp.negative(x),
    "Exp": lambda xp, x: xp.exp(x),
    "Log": lambda xp, x: xp.log(x),
    "Sqrt": lambda xp, x: xp.sqrt(x),
    "Reciprocal": lambda xp, x: xp.reciprocal(x),
    "Floor": lambda xp, x: xp.floor(x),
    "Ceil": lambda xp, x: xp.ceil(x),
    "Round": lambda xp, x: xp.round(x),  # half to even, as ONNX specifies
    "Sign": lambda xp, x: xp.sign(x),
    "Sin": lambda xp, x: xp.sin(x), "Cos": lambda xp, x: xp.cos(x), "Tan": lambda xp, x: xp.tan(x),
    "Asin": lambda xp, x: xp.arcsin(x), "Acos": lambda xp, x: xp.arccos(x),
    "Atan": lambda xp, x: xp.arctan(x), "Sinh": lambda xp, x: xp.sinh(x),
    "Cosh": lambda xp, x: xp.cosh(x), "Asinh": lambda xp, x: xp.arcsinh(x),
    "Acosh": lambda xp, x: xp.arccosh(x), "Atanh": lambda xp, x: xp.arctanh(x),
    "Tanh": lambda xp, x: xp.tanh(x),
    "Erf": erf,
    "Sigmoid": sigmoid,
    "Relu": lambda xp, x: xp.maximum(x, 0),
    "Softsign": lambda xp, x: x / (1 + xp.abs(x)),
    "Softplus": lambda xp, x: xp.logaddexp(x, 0),
    "Mish": lambda xp, x: x * xp.tanh(xp.logaddexp(x, 0)),
    "HardSwish": lambda xp, x: x * xp.clip(x / 6 + 0.5, 0, 1),
    "BitwiseNot": lambda xp, x: xp.invert(x),
    "Not": lambda xp, x: xp.logical_not(x),
}
for _name, _fn in _UNARY.items():
    _unary(_name, _fn)


@register("IsNaN", since=9)
def isnan(xp: Any, x: Any) -> Any:
    return xp.isnan(x)


@register("IsInf", since=10)
def isinf(xp: Any, x: Any, *, detect_negative: int = 1, detect_positive: int = 1) -> Any:
    neg = xp.isneginf(x) if detect_negative else xp.zeros(x.shape, dtype=bool)
    pos = xp.isposinf(x) if detect_positive else xp.zeros(x.shape, dtype=bool)
    return neg | pos


@register("Identity")
def identity(xp: Any, x: Any) -> Any:
    return x


# ------------------------------------------------------------- binary ops --
def _int_div(xp: Any, a: Any, b: Any) -> Any:
    """C-style integer division (truncates toward zero), as ONNX's Div on integers."""
    q = xp.floor_divide(a, b)
    fix = (xp.remainder(a, b) != 0) & ((a < 0) != (b < 0))
    return q + fix.astype(q.dtype)


def _div(xp: Any, a: Any, b: Any) -> Any:
    if np.dtype(a.dtype).kind in "iu":
        return _int_div(xp, a, b)
    return a / b


_BINARY: dict[str, Callable[[Any, Any, Any], Any]] = {
    "Add": lambda xp, a, b: a + b, "Sub": lambda xp, a, b: a - b,
    "Mul": lambda xp, a, b: a * b, "Div": _div,
    "BitwiseAnd": lambda xp, a, b: a & b, "BitwiseOr": lambda xp, a, b: a | b,
    "BitwiseXor": lambda xp, a, b: a ^ b,
}
_COMPARE: dict[str, Callable[[Any, Any, Any], Any]] = {
    "Equal": lambda xp, a, b: a == b, "Less": lambda xp, a, b: a < b,
    "Greater": lambda xp, a, b: a > b, "LessOrEqual": lambda xp, a, b: a <= b,
    "GreaterOrEqual": lambda xp, a, b: a >= b,
    "And": lambda xp, a, b: xp.logical_and(a, b), "Or": lambda xp, a, b: xp.logical_or(a, b),
    "Xor": lambda xp, a, b: xp.logical_xor(a, b),
}


def _binary(op: str, fn: Callable[[Any, Any, Any], Any], keep_type: bool) -> None:
    def kernel(xp: Any, a: Any, b: Any, *, broadcast: int = 1, axis: int | None = None) -> Any:
        # Opsets < 7 broadcast ``b`` from ``axis`` instead of numpy-style.
        if axis is not None and b.ndim < a.ndim:
            b = b.reshape(b.shape + (1,) * (a.ndim - (axis % a.ndim) - b.ndim))
        out = fn(xp, a, b)
        return same(xp, out, a) if keep_type else xp.asarray(out, dtype=bool)
    kernel.__name__ = kernel.__qualname__ = op
    kernel.__doc__ = f"ONNX {op}, numpy broadcasting."
    register(op)(kernel)


for _name, _fn in _BINARY.items():
    _binary(_name, _fn, True)
for _name, _fn in _COMPARE.items():
    _binary(_name, _fn, False)


@register("Pow")
def pow_(xp: Any, a: Any, b: Any) -> Any:
    # The result has the base's type even when the exponent's type differs.
    if np.dtype(a.dtype).kind in "iu" and np.dtype(b.dtype).kind == "f":
        return same(xp, xp.power(a.astype(np.float64), b), a)
    if np.dtype(a.dtype).kind in "iu":
        return same(xp, xp.power(a, b.astype(a.dtype)), a)
    if xp is np and b.size == 1 and a.dtype.kind == "f" and float(b.reshape(-1)[0]) == 3.0:
        # GPT-2's tanh GELU cubes its input: two products instead of a pow per element
        # (numpy fast-paths 2 and 0.5, not 3): 2 ms -> 0.1 ms on 128x1024, within an ulp.
        cube = a * a
        cube *= a
        return cube
    return same(xp, xp.power(a, b.astype(a.dtype)), a)


@register("Mod", since=10)
def mod(xp: Any, a: Any, b: Any, *, fmod: int = 0) -> Any:
    return same(xp, xp.fmod(a, b) if fmod else xp.mod(a, b), a)


@register("BitShift", since=11)
def bit_shift(xp: Any, a: Any, b: Any, *, direction: str) -> Any:
    return same(xp, xp.left_shift(a, b) if direction == "LEFT" else xp.right_shift(a, b), a)


def _variadic(op: str, fn: Callable[[Any, Any, Any], Any], mean: bool = False) -> None:
    def kernel(xp: Any, *xs: Any) -> Any:
        acc = xs[0]
        for x in xs[1:]:
            acc = fn(xp, acc, x)
        if mean:
            acc = acc / len(xs)
        return same(xp, acc, xs[0])
    kernel.__name__ = kernel.__qualname__ = op
    kernel.__doc__ = f"ONNX {op} over any number of broadcast inputs."
    register(op)(kernel)


_variadic("Sum", lambda xp, a, b: a + b)
_variadic("Mean", lambda xp, a, b: a + b, mean=True)
_variadic("Max", lambda xp, a, b: xp.maximum(a, b))
_variadic("Min", lambda xp, a, b: xp.minimum(a, b))


@register("Where", since=9)
def where(xp: Any, cond: Any, a: Any, b: Any) -> Any:
    return same(xp, xp.where(cond, a, b), a)


@register("Clip", since=1)
def clip_attrs(xp: Any, x: Any, *, min: float = -3.4028234663852886e38,  # noqa: A002
               max: float = 3.4028234663852886e38) -> Any:  # noqa: A002
    return same(xp, xp.minimum(xp.maximum(x, min), max), x)


@register("Clip", since=11)
def clip(xp: Any, x: Any, lo: Any = None, hi: Any = None) -> Any:
    if lo is not None and hi is not None:  # one pass, one new array: 5x the two ufuncs on 6 MB
        return same(xp, xp.clip(x, lo.astype(x.dtype), hi.astype(x.dtype)), x)
    out = x
    if lo is not None:
        out = xp.maximum(out, lo.astype(x.dtype))
    if hi is not None:
        out = xp.minimum(out, hi.astype(x.dtype))
    return same(xp, out, x)


# ------------------------------------------------------------------- Cast --
def _cast(xp: Any, x: Any, dtype: np.dtype, saturate: int = 1, round_mode: str = "up") -> Any:
    if dtype.kind == "U" or dtype == np.dtype(object):
        # Strings live on the host; ONNX formats floats like C's %g with 9 digits.
        host = np.asarray(x.get() if hasattr(x, "get") else x)
        return np.array([_to_str(v) for v in host.ravel()], dtype=object).reshape(host.shape)
    if x.dtype == object or x.dtype.kind == "U":
        host = np.asarray(x, dtype=object)
        return xp.asarray(np.array([_from_str(v, dtype) for v in host.ravel()], dtype=dtype)
                          .reshape(host.shape))
    if dtype.isbuiltin == 1:  # numpy's own type: none of the below (``.name`` is slow Python code)
        return x.astype(dtype)
    if dtype.name == "float8_e8m0fnu" and x.dtype.kind == "f":
        return _to_e8m0(xp, x, saturate, round_mode)
    if saturate and dtype.name in _SATURATING and x.dtype.kind == "f":
        # ONNX's saturate=1: values beyond the float8 range (infinities too) become the largest
        # finite value of the sign; NaN stays NaN. ml_dtypes alone would give NaN or inf.
        limit = float(_ml_finfo(dtype).max)
        x = xp.clip(x, -limit, limit)
    return x.astype(dtype)


#: float8 types that Cast / QuantizeLinear saturate into (ONNX's ``saturate`` attribute).
_SATURATING = frozenset({"float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"})


def _to_e8m0(xp: Any, x: Any, saturate: int, round_mode: str) -> Any:
    """float -> float8_e8m0fnu (a bare power of two, 2^-127 .. 2^127, no zero, no sign).

    ``round_mode`` "up"/"down" pick the power of two above/below; "nearest" rounds in linear
    space, ties up. With ``saturate``, zero, negatives and values beyond the
    range go to the nearest end of it; without, they become NaN as ml_dtypes makes them."""
    dtype = np.dtype(_ml_finfo_type("float8_e8m0fnu"))
    v = x.astype(xp.float64)
    if round_mode == "nearest":
        mant, k = xp.frexp(v)  # the midpoint between 2**(k-1) and 2**k is mant == 0.75; ties up
        e = xp.where(mant >= 0.75, k, k - 1).astype(xp.float64)
    else:
        mant, k = xp.frexp(v)  # v = mant * 2**k, mant in [0.5, 1)
        exact = mant == 0.5
        e = (k - 1 if round_mode == "down" else xp.where(exact, k - 1, k)).astype(xp.float64)
    e = xp.clip(e, -127, 127)
    out = xp.ldexp(xp.ones_like(v), e.astype(xp.int32))
    bad = ~(v > 0)  # zero, negatives and NaN
    if saturate:
        out = xp.where(xp.isnan(v), xp.nan, xp.where(bad, 2.0 ** -127, out))
        out = xp.where(xp.isposinf(v), 2.0 ** 127, out)
    else:
        out = xp.where(bad | xp.isinf(v), xp.nan, out)
    return out.astype(xp.float32).astype(dtype)


def _ml_finfo_type(name: str) -> Any:
    import ml_dtypes  # noqa: PLC0415 - only float8 casts need it; onnx depends on it
    return getattr(ml_dtypes, name)


def _ml_finfo(dtype: np.dtype) -> Any:
    import ml_dtypes  # noqa: PLC0415 - only float8 casts need it; onnx depends on it
    return ml_dtypes.finfo(dtype)


def _to_str(v: Any) -> str:
    # Eight significant digits, as onnxruntime writes every float type ("%.8g": '-0.30000001' for
    # float32's -0.3, '1.2345679e+08'); ONNX's text leaves the form open, and at nine a model
    # casting to string differed from onnxruntime at every element
    if isinstance(v, (float, np.floating)):
        return "%.8g" % float(v) if math.isfinite(v) else ("NaN" if math.isnan(v) else
                                                          ("INF" if v > 0 else "-INF"))
    return str(v)


def _from_str(v: Any, dtype: np.dtype) -> Any:
    s = v.decode() if isinstance(v, bytes) else str(v)
    return float(s) if dtype.kind == "f" else dtype.type(s)


@register("Cast", since=6)
def cast(xp: Any, x: Any, *, to: int, saturate: int = 1, round_mode: str = "up") -> Any:
    return _cast(xp, x, np_dtype(to), saturate, round_mode)


#: Ops the executor writes for itself (``engine/float16.py``), never found in a model file.
HOST_DOMAIN = "sglens.host"


@register("RoundToFloat16", domain=HOST_DOMAIN)
def round_to_float16(xp: Any, x: Any) -> Any:
    """A model's Cast to float16 where the host computes float16 in float32
    (``engine/float16.py``): the float16 value, stored as float32."""
    if xp is not np or x.dtype != np.float32:
        return _cast(xp, x, np.dtype(np.float16), 1, "up").astype(np.float32)
    # numpy's float32 -> float16 -> float32 converts element by element (7 ns an element here,
    # a third of a float16 ViT's run). In the normal range the float16 value is the float32 one
    # with its mantissa rounded to 10 bits, to nearest even, in the integer bits (~2 ns); zeros
    # come through. Subnormal, beyond-range, inf and NaN elements take numpy's conversion. Equal
    # to it on every float16 value, every midpoint between two and their neighbours, and 4M
    # random bit patterns (tests/test_float16_host.py checks the first three).
    bits = x.view(np.uint32)
    rounded = bits >> 13
    rounded &= 1
    rounded += 0xFFF
    rounded += bits
    rounded &= np.uint32(0xFFFFE000)
    out = rounded.view(np.float32)
    a = np.abs(x)
    special = ~(a <= 65504)
    special |= (a < 2.0 ** -14) & (a > 0)
    if special.any():
        out[special] = x[special].astype(np.float16).astype(np.float32)
    return out


@register("CastLike", since=15)
def cast_like(xp: Any, x: Any, like: Any, *, saturate: int = 1, round_mode: str = "up") -> Any:
    return _cast(xp, x, np.dtype(like.dtype), saturate, round_mode)
