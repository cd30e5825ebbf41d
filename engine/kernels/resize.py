"""Resize and Upsample: separable per-axis interpolation (nearest, linear, cubic, antialias).

Coordinates and weights are computed on the host per axis (small vectors); the
data is gathered and weighted on the device. The neighbour and weight rules
follow ONNX's own reference implementation so results agree to rounding.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable

import numpy as np

from . import geometry
from .device import resident
from .registry import register, to_host

Coeffs = Callable[[float, float], np.ndarray]


def _nearest(mode: str) -> Coeffs:
    def fn(ratio: float, scale: float) -> np.ndarray:
        if float(ratio).is_integer():
            return np.array([0.0, 1.0])
        if mode == "round_prefer_floor":
            return np.array([ratio <= 0.5, ratio > 0.5], dtype=np.float64)
        if mode == "round_prefer_ceil":
            return np.array([ratio < 0.5, ratio >= 0.5], dtype=np.float64)
        return np.array([1.0, 0.0]) if mode == "floor" else np.array([0.0, 1.0])
    return fn


def _linear(antialias: bool) -> Coeffs:
    def fn(ratio: float, scale: float) -> np.ndarray:
        if not antialias:
            return np.array([1 - ratio, ratio])
        s = min(scale, 1.0)
        start = int(np.floor(-1 / s) + 1)
        args = (np.arange(start, start + 2 - 2 * start) - ratio) * s
        c = np.clip(1 - np.abs(args), 0, 1)
        return c / c.sum()
    return fn


def _cubic(a: float, antialias: bool) -> Coeffs:
    def kernel(x: float) -> float:
        x = abs(x)
        if x <= 1:
            return (a + 2) * x ** 3 - (a + 3) * x ** 2 + 1
        return a * x ** 3 - 5 * a * x ** 2 + 8 * a * x - 4 * a if x < 2 else 0.0

    def fn(ratio: float, scale: float) -> np.ndarray:
        if not antialias:
            return np.array([kernel(ratio + 1), kernel(ratio), kernel(1 - ratio), kernel(2 - ratio)])
        s = min(scale, 1.0)
        start = int(np.floor(-2 / s) + 1)
        c = np.array([kernel(s * (i - ratio)) for i in range(start, 2 - start)])
        return c / c.sum()
    return fn


def _source_coords(mode: str, n_out: int, scale: float, n_in: int, roi: list[float] | None) -> tuple:
    """Where each output position samples the input (ONNX coordinate_transformation_mode)."""
    y = np.arange(n_out, dtype=np.float64)
    width = scale * n_in
    extrapolated = None
    if mode == "align_corners":
        x = np.zeros(n_out) if width == 1 else y * (n_in - 1) / (width - 1)
    elif mode == "asymmetric":
        x = y / scale
    elif mode == "tf_crop_and_resize":
        lo, hi = roi if roi is not None else (0.0, 1.0)
        x = np.full(n_out, (hi - lo) * (n_in - 1) / 2) if width == 1 else \
            y * (hi - lo) * (n_in - 1) / (width - 1)
        x = x + lo * (n_in - 1)
        extrapolated = (x < 0) | (x > n_in - 1)
    elif mode == "pytorch_half_pixel":
        x = np.full(n_out, -0.5) if width == 1 else (y + 0.5) / scale - 0.5
    elif mode == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif mode == "half_pixel_symmetric":
        offset = n_in / 2 * (1 - n_out / width)
        x = offset + (y + 0.5) / scale - 0.5
    else:
        raise ValueError(f"unknown coordinate_transformation_mode '{mode}'")
    return x, extrapolated


def _axis_weights(coeffs: Coeffs, n_out: int, scale: float, n_in: int, ct_mode: str,
                  roi: list[float] | None, exclude_outside: bool) -> tuple:
    x, extrapolated = _source_coords(ct_mode, n_out, scale, n_in, roi)
    base = np.floor(x)
    ratios = np.where(x == base, 1.0, x - base)
    w = np.stack([coeffs(float(r), scale) for r in ratios])
    n = w.shape[1]
    pad = int(math.ceil(n / 2))
    xp_ = x + pad
    p = np.floor(xp_).astype(np.int64)
    frac = xp_ - p
    if n % 2 == 0:
        off = np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        off = np.where(frac <= 0.5, -((n - 1) // 2), -((n - 1) // 2) + 1)
    idx = (p + off)[:, None] + np.arange(n)[None, :] - pad
    if exclude_outside:
        w = np.where((idx < 0) | (idx >= n_in), 0.0, w)
        total = w.sum(axis=1, keepdims=True)
        w = w / np.where(total == 0, 1.0, total)
    return np.clip(idx, 0, n_in - 1), w, extrapolated


@functools.lru_cache(maxsize=256)
def _axis_plan(kind: tuple, n_out: int, scale: float, n_in: int, ct_mode: str,
               roi: tuple[float, float] | None, exclude_outside: bool) -> tuple:
    """``(tap columns, extrapolated, nearest source)`` of one axis, computed once per
    geometry (a Python loop over output positions: ~1 ms for a 640-wide map) and kept
    read-only. ``tap columns``: per tap, its source index and float64 weight over the
    output positions (contiguous: ``_resize_axis`` gathers and weighs one tap at a time);
    ``nearest source`` (nearest mode) is the one tap each output copies."""
    coeffs = (_nearest(kind[1]) if kind[0] == "nearest" else _linear(kind[1]) if kind[0] == "linear"
              else _cubic(kind[1], kind[2]))
    idx, w, extrapolated = _axis_weights(coeffs, n_out, scale, n_in, ct_mode,
                                         None if roi is None else list(roi), exclude_outside)
    src = idx[np.arange(n_out), w.argmax(axis=1)] if kind[0] == "nearest" else None
    columns = tuple((np.ascontiguousarray(idx[:, k]), np.ascontiguousarray(w[:, k]))
                    for k in range(idx.shape[1]))
    for a in (extrapolated, src, *(a for col in columns for a in col)):
        if a is not None:
            a.flags.writeable = False
    return columns, extrapolated, src


def _resize_axis(xp: Any, data: Any, axis: int, n_out: int, plan: tuple, extrapolation: float) -> Any:
    if n_out == 0:
        shape = list(data.shape)
        shape[axis] = 0
        return xp.zeros(shape, dtype=data.dtype)
    columns, extrapolated, src = plan
    if src is not None:  # nearest: a copy of one tap, in the input's own dtype
        return xp.take(data, resident(xp, src), axis=axis)
    # One gather and one multiply-add per tap (2 for linear, 4 for cubic), in the data's
    # float type: gathering every tap at once and summing over that middle axis was a
    # strided float64 reduction, 50 ms for one of SegFormer's 256x16x16 -> 64x64 upsamplings.
    wshape = (1,) * axis + (n_out,) + (1,) * (data.ndim - axis - 1)
    out = None
    for taps, weights in columns:
        part = xp.take(data, resident(xp, taps), axis=axis)
        part *= resident(xp, weights).astype(data.dtype, copy=False).reshape(wshape)
        out = part if out is None else xp.add(out, part, out=out)
    if extrapolated is not None and extrapolated.any():
        mshape = (1,) * axis + (n_out,) + (1,) * (data.ndim - axis - 1)
        out = xp.where(resident(xp, extrapolated).reshape(mshape), extrapolation, out)
    return out


_OWN_FLOAT = (np.dtype(np.float32), np.dtype(np.float64))


def _saturate(xp: Any, y: Any, dtype: Any) -> Any:
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return xp.clip(xp.round(y), info.min, info.max).astype(dt)
    return y.astype(dt)


def resize_nd(xp: Any, x: Any, scales: list[float] | None, sizes: list[int] | None, *,
              roi: list[float] | None = None, axes: list[int] | None = None, mode: str = "nearest",
              coordinate_transformation_mode: str = "half_pixel", cubic_coeff_a: float = -0.75,
              exclude_outside: int = 0, extrapolation_value: float = 0.0, nearest_mode: str = "round_prefer_floor",
              antialias: int = 0, keep_aspect_ratio_policy: str = "stretch") -> Any:
    r = x.ndim
    axes = geometry.resize_axes(r, axes)
    sc, out_shape = geometry.resize_output(x.shape, scales, sizes, axes, keep_aspect_ratio_policy)
    full_roi = None
    if roi is not None and len(roi):
        n = len(roi) // 2
        full_roi = [[0.0, 1.0] for _ in range(r)]
        for i, a in enumerate(axes if n == len(axes) else range(r)):
            full_roi[a] = [roi[i], roi[i + n]]
    kind = (("nearest", nearest_mode) if mode == "nearest" else ("linear", bool(antialias))
            if mode == "linear" else ("cubic", float(cubic_coeff_a), bool(antialias)))
    plans = []
    for a in axes:
        a_roi = tuple(full_roi[a]) if full_roi is not None else None
        if math.isclose(sc[a], 1.0) and out_shape[a] == x.shape[a] and \
                (a_roi is None or (math.isclose(a_roi[0], 0.0) and math.isclose(a_roi[1], 1.0))):
            continue
        plans.append((a, _axis_plan(kind, out_shape[a], float(sc[a]), x.shape[a],
                                    coordinate_transformation_mode, a_roi, bool(exclude_outside))))
    # Axes that shrink first (less to carry through the others), then the last axis before the
    # outer ones: the largest pass then gathers whole rows, not single floats along a row
    # (SegFormer's 256 x 16 x 16 -> 128 x 128 bilinear upsampling: 17 -> 11.6 ms standalone).
    plans.sort(key=lambda p: (sc[p[0]], -p[0]))
    # Nearest without weights to apply (no excluded taps, nothing extrapolated) copies
    # input values: no float64 round trip (ppocr-det's 6 upsamplings: 147 -> ~10 ms).
    copies = mode == "nearest" and not exclude_outside and \
        all(p[1] is None or not p[1].any() for _, p in plans)
    # float32 and float64 data are weighted in their own type (as onnxruntime does); integer
    # and half data in float64, rounded and saturated back at the end
    y = x if copies or x.dtype in _OWN_FLOAT else x.astype(np.float64)
    for a, plan in plans:
        y = _resize_axis(xp, y, a, out_shape[a], plan if copies else plan[:2] + (None,),
                         extrapolation_value)
    return y if copies or y.dtype == x.dtype else _saturate(xp, y, x.dtype)


def _floats(xp: Any, a: Any) -> list[float] | None:
    if a is None or a.size == 0:
        return None
    return [float(v) for v in to_host(xp, a).reshape(-1)]


@register("Resize", since=10)
def resize_v10(xp: Any, x: Any, scales: Any, *, mode: str = "nearest") -> Any:
    return resize_nd(xp, x, _floats(xp, scales), None, mode=mode,
                     coordinate_transformation_mode="asymmetric", nearest_mode="floor")


@register("Resize", since=11)
def resize(xp: Any, x: Any, roi: Any = None, scales: Any = None, sizes: Any = None, **attrs: Any) -> Any:
    sz = _floats(xp, sizes)
    return resize_nd(xp, x, _floats(xp, scales), None if sz is None else [int(v) for v in sz],
                     roi=_floats(xp, roi), **attrs)


@register("Upsample", since=7)
def upsample_v7(xp: Any, x: Any, *, scales: list[float], mode: str = "nearest") -> Any:
    return resize_nd(xp, x, list(scales), None, mode=mode, coordinate_transformation_mode="asymmetric",
                     nearest_mode="floor")


@register("Upsample", since=9)
def upsample(xp: Any, x: Any, scales: Any, *, mode: str = "nearest") -> Any:
    return resize_nd(xp, x, _floats(xp, scales), None, mode=mode,
                     coordinate_transformation_mode="asymmetric", nearest_mode="floor")
