"""Quantisation kernels: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, QLinear* (the
*Integer products: ``integer.py``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import native
from .dtypes import np_dtype
from .nn import conv
from .registry import register


def _broadcast_param(p: Any, x: Any, axis: int, block_size: int) -> Any:
    """A scale or zero point shaped to broadcast over x: scalar, per-axis or blocked."""
    if p.ndim == 0 or p.size == 1 and block_size == 0:
        return p.reshape(())
    axis = axis % x.ndim
    if block_size:
        return p.repeat(block_size, axis=axis)[tuple(slice(0, d) for d in x.shape)]
    shape = [1] * x.ndim
    shape[axis] = p.size
    return p.reshape(shape)


_SMALL_INTS = ("int4", "uint4", "int2", "uint2")


def _divided(xp: Any, x: Any, s: Any) -> Any:
    """``x / s`` as a new float32 array (the caller's to work in, in place)."""
    if x.dtype.kind in "fiu":
        v = xp.divide(x, s, dtype=np.float32)
        # a 0-d x (a quantized scalar Constant: PP-OCR's in QDQ) gives a numpy scalar, which no
        # ``out=`` takes: the steps after this work in place
        return np.array(v) if isinstance(v, np.generic) else v
    v = x.astype(np.float32)   # bfloat16 and friends (ml_dtypes) have no divide loop into float32
    v /= s
    return v


def _integer_range(dtype: np.dtype) -> tuple[int, int] | None:
    """The range of an integer quantized type (numpy's, or ml_dtypes' int4 / int2), else None."""
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
    elif dtype.name in _SMALL_INTS:
        import ml_dtypes  # noqa: PLC0415 - int4/int2 are not numpy integer kinds
        info = ml_dtypes.iinfo(dtype)
    else:
        return None
    return int(info.min), int(info.max)


def _quantized(xp: Any, x: Any, s: Any, z: Any, low: int, high: int) -> Any:
    """``rint(x / s) + z`` clipped to ``[low, high]``: one new float32 array, every step in
    place (a QDQ model quantizes each activation: BERT-mini in QDQ has 146 QuantizeLinear, a
    third of its run when each step made an array)."""
    v = _divided(xp, x, s)
    xp.rint(v, out=v)
    if z is not None:
        v = xp.add(v, z, out=v)
    # float32 bounds: Python ints make clip promote and take a slow loop (2x here)
    return xp.clip(v, np.float32(low), np.float32(high), out=v)


@register("QuantizeLinear", since=10)
def quantize_linear(xp: Any, x: Any, scale: Any, zero_point: Any = None, *, axis: int = 1,
                    block_size: int = 0, saturate: int = 1, output_dtype: int = 0,
                    precision: int = 0) -> Any:
    if zero_point is not None:
        dtype = np.dtype(zero_point.dtype)
    else:
        dtype = np_dtype(output_dtype) if output_dtype else np.dtype(np.uint8)
    s = _broadcast_param(scale, x, axis, block_size).astype(np.float32, copy=False)
    z = None if zero_point is None else _broadcast_param(zero_point, x, axis, block_size).astype(np.float32)
    bounds = _integer_range(dtype)
    if bounds is not None:
        return _quantized(xp, x, s, z, *bounds).astype(dtype)
    v = _divided(xp, x, s)   # float8: not rounded here; the cast rounds
    if z is not None:
        v = xp.add(v, z, out=v)
    if saturate and dtype.name in ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"):
        import ml_dtypes  # noqa: PLC0415 - float8 limits
        limit = float(ml_dtypes.finfo(dtype).max)  # ONNX's saturate: out of range -> largest finite
        v = xp.clip(v, -limit, limit, out=v)
    return v.astype(dtype)


@register("DequantizeLinear", since=10)
def dequantize_linear(xp: Any, x: Any, scale: Any, zero_point: Any = None, *, axis: int = 1,
                      block_size: int = 0, output_dtype: int = 0) -> Any:
    s = _broadcast_param(scale, x, axis, block_size)
    v = x.astype(np.float32)   # this call's own array: the rest in place
    if zero_point is not None:
        v = xp.subtract(v, _broadcast_param(zero_point, x, axis, block_size).astype(np.float32), out=v)
    v = xp.multiply(v, s.astype(np.float32, copy=False), out=v)
    out_dtype = np_dtype(output_dtype) if output_dtype else s.dtype
    return v.astype(out_dtype, copy=False)


def fake_quantize(xp: Any, x: Any, scale: Any, zero_point: Any, *, axis: int, low: float,
                  high: float) -> Any:
    """``DequantizeLinear(QuantizeLinear(x, scale, zp), scale, zp)`` for an integer zero point:
    the same float32 steps on one array in place, no integer array between (``engine/fuse_qdq.py``);
    per tensor on numpy, the compiled one-pass form (``native.fake_quantize``), bit for bit."""
    y = native.fake_quantize(xp, x, scale, zero_point, low, high)
    if y is not None:
        return y
    s = _broadcast_param(scale, x, axis, 0).astype(np.float32, copy=False)
    z = _broadcast_param(zero_point, x, axis, 0).astype(np.float32)
    v = _quantized(xp, x, s, z, low, high)
    v = xp.subtract(v, z, out=v)
    v = xp.multiply(v, s, out=v)
    return v.astype(scale.dtype, copy=False)


@register("DynamicQuantizeLinear", since=11)
def dynamic_quantize_linear(xp: Any, x: Any) -> tuple:
    lo = xp.minimum(xp.min(x), 0)
    hi = xp.maximum(xp.max(x), 0)
    scale = ((hi - lo) / 255).astype(np.float32)
    zp = xp.clip(xp.rint(0 - lo / scale), 0, 255).astype(np.uint8)
    # The quantized values in one compiled pass on float32 numpy (native.fake_quantize), else
    # the same steps in place on one temporary; then the cast to uint8. A dynamically quantized
    # model quantizes every activation before each ConvInteger / MatMulInteger (ddddocr's CRNN:
    # 22 a run, 5.4 ms of 40 in numpy's seven passes and four temporaries).
    q = native.fake_quantize(xp, x, scale, zp, 0, 255, dequantize=False)
    if q is None:
        q = xp.divide(x, scale)
        q = xp.rint(q, out=q)
        q += zp.astype(q.dtype)
        q = xp.clip(q, 0, 255, out=q)
    return q.astype(np.uint8), scale.reshape(()), zp.reshape(())


def _dequant_rows(xp: Any, q: Any, scale: Any, zp: Any, axis: int) -> Any:
    """A QLinear operand back in float32; per-row (axis -2) or per-column (axis -1) params."""
    s = scale.astype(np.float32)
    z = zp.astype(np.float32)
    if s.ndim and s.size > 1:
        shape = [1] * q.ndim
        shape[axis] = s.size
        s, z = s.reshape(shape), z.reshape(shape) if z.size > 1 else z
    return (q.astype(np.float32) - z) * s


@register("QLinearMatMul", since=10)
def qlinear_matmul(xp: Any, a: Any, a_scale: Any, a_zp: Any, b: Any, b_scale: Any, b_zp: Any,
                   y_scale: Any, y_zp: Any) -> Any:
    fa = _dequant_rows(xp, a, a_scale, a_zp, -2)
    fb = _dequant_rows(xp, b, b_scale, b_zp, -1)
    y = xp.matmul(fa.astype(np.float64), fb.astype(np.float64))
    return quantize_linear(xp, y.astype(np.float32), y_scale, y_zp)


@register("QLinearConv", since=10)
def qlinear_conv(xp: Any, x: Any, x_scale: Any, x_zp: Any, w: Any, w_scale: Any, w_zp: Any,
                 y_scale: Any, y_zp: Any, b: Any = None, **attrs: Any) -> Any:
    fx = (x.astype(np.float64) - x_zp.astype(np.float64)) * x_scale.astype(np.float64)
    ws = w_scale.astype(np.float64).reshape((-1,) + (1,) * (w.ndim - 1)) if w_scale.size > 1 else \
        w_scale.astype(np.float64)
    wz = w_zp.astype(np.float64).reshape((-1,) + (1,) * (w.ndim - 1)) if w_zp.size > 1 else \
        w_zp.astype(np.float64)
    fw = (w.astype(np.float64) - wz) * ws
    fb = None if b is None else b.astype(np.float64) * (x_scale.astype(np.float64) * ws.reshape(-1))
    y = conv(xp, fx, fw, fb, **attrs)
    return quantize_linear(xp, y.astype(np.float32), y_scale, y_zp)
