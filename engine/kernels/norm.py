"""Normalisation kernels: Batch/Layer/Instance/Group/RMS normalisation, LRN, LpNormalization, Dropout."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import device, gemm, geometry, native
from .elementwise import same
from .registry import register, to_host


def _channel(v: Any, ndim: int) -> Any:
    """A per-channel vector shaped to broadcast over [N, C, d1, ...]."""
    return v.reshape((1, -1) + (1,) * (ndim - 2))


@register("BatchNormalization")
def batch_norm(xp: Any, x: Any, scale: Any, bias: Any, mean: Any, var: Any, *,
               epsilon: float = 1e-5, momentum: float = 0.9, training_mode: int = 0,
               spatial: int = 1, is_test: int = 1, consumed_inputs: Any = None) -> tuple:
    if training_mode:
        axes = (0,) + tuple(range(2, x.ndim))
        bmean = xp.mean(x, axis=axes)
        bvar = xp.var(x, axis=axes)
        y = (x - _channel(bmean, x.ndim)) / xp.sqrt(_channel(bvar, x.ndim) + epsilon)
        y = y * _channel(scale, x.ndim) + _channel(bias, x.ndim)
        run_mean = mean * momentum + bmean * (1 - momentum)
        run_var = var * momentum + bvar * (1 - momentum)
        return same(xp, y, x), same(xp, run_mean, mean), same(xp, run_var, var)
    inv = scale / xp.sqrt(var + epsilon)
    y = x * _channel(inv, x.ndim) + _channel(bias - mean * inv, x.ndim)
    return same(xp, y, x)


def _normalize(xp: Any, x: Any, axes: tuple, epsilon: float) -> tuple:
    mean = xp.mean(x, axis=axes, keepdims=True)
    var = xp.mean((x - mean) ** 2, axis=axes, keepdims=True)
    inv = 1 / xp.sqrt(var + epsilon)
    return (x - mean) * inv, mean, inv


@register("InstanceNormalization", since=6)
def instance_norm(xp: Any, x: Any, scale: Any, bias: Any, *, epsilon: float = 1e-5) -> Any:
    y, _, _ = _normalize(xp, x, tuple(range(2, x.ndim)), epsilon)
    return same(xp, y * _channel(scale, x.ndim) + _channel(bias, x.ndim), x)


@register("LayerNormalization", since=17)
def layer_norm(xp: Any, x: Any, scale: Any, bias: Any = None, *, axis: int = -1,
               epsilon: float = 1e-5, stash_type: int = 1) -> tuple:
    axis = geometry.axis("axis", axis, x.ndim)
    fast = native.layer_norm(xp, x, scale, bias, axis, epsilon) if stash_type == 1 else None
    if fast is not None:  # float32 numpy: one compiled pass per row
        return fast
    fast = device.layer_norm(xp, x, scale, bias, axis, epsilon) if stash_type == 1 else None
    if fast is not None:  # float32 on a device: one generated kernel
        return fast
    axes = tuple(range(axis % x.ndim, x.ndim))
    # stash_type=1 computes the statistics in float32 even for half inputs.
    xc = x.astype(np.float32, copy=False) if stash_type == 1 and x.dtype != np.float64 else x
    n = 1
    for d in x.shape[axes[0]:]:
        n *= d
    lead = x.size // n if n else 0
    stat_shape = x.shape[:axes[0]] + (1,) * len(axes)
    if n and lead and xc.dtype in (np.float32, np.float64):
        # Row statistics as BLAS products (a mean and a sum of squares per row: 2
        # and 3 us on 128x256 where the reductions took 11 and 17).
        rows = xc.reshape(lead, n)
        mean = gemm.matmul(xp, rows, xp.full((n,), 1.0 / n, dtype=xc.dtype)).reshape(stat_shape)
        y = xc - mean                 # this call's own array: scaled and shifted in place
        y2 = y.reshape(lead, 1, n)
        var = gemm.matmul(xp, y2, y2.reshape(lead, n, 1)).reshape(stat_shape) / xc.dtype.type(n)
    else:
        mean = xp.mean(xc, axis=axes, keepdims=True)
        y = xc - mean
        var = xp.mean(y * y, axis=axes, keepdims=True)
    inv = 1 / xp.sqrt(var + epsilon)
    y *= inv
    if scale.ndim <= y.ndim and (bias is None or bias.ndim <= y.ndim):
        y *= scale                    # (a scale or bias of higher rank broadcasts y up)
        if bias is not None:
            y += bias
    else:
        y = y * scale + (bias if bias is not None else 0)
    stat_dtype = np.float32 if stash_type == 1 else x.dtype
    return same(xp, y, x), mean.astype(stat_dtype), inv.astype(stat_dtype)


@register("GroupNormalization", since=21)
def group_norm(xp: Any, x: Any, scale: Any, bias: Any, *, num_groups: int, epsilon: float = 1e-5,
               stash_type: int = 1) -> Any:
    n, c = x.shape[:2]
    g = x.reshape((n, num_groups, -1))
    y, _, _ = _normalize(xp, g.astype(np.float32) if stash_type == 1 else g, (2,), epsilon)
    y = y.reshape(x.shape)
    return same(xp, y * _channel(scale, x.ndim) + _channel(bias, x.ndim), x)


@register("RMSNormalization", since=23)
def rms_norm(xp: Any, x: Any, scale: Any, *, axis: int = -1, epsilon: float = 1e-5,
             stash_type: int = 1) -> Any:
    axes = tuple(range(axis % x.ndim, x.ndim))
    xc = x.astype(np.float32) if stash_type == 1 and x.dtype != np.float64 else x
    rms = xp.sqrt(xp.mean(xc * xc, axis=axes, keepdims=True) + epsilon)
    return same(xp, (xc / rms) * scale, x)


@register("MeanVarianceNormalization", since=9)
def mvn(xp: Any, x: Any, *, axes: list[int] | None = None) -> Any:
    ax = tuple(axes) if axes is not None else (0, 2, 3)
    mean = xp.mean(x, axis=ax, keepdims=True)
    std = xp.sqrt(xp.mean(x * x, axis=ax, keepdims=True) - mean * mean)
    return same(xp, (x - mean) / (std + 1e-9), x)


@register("LpNormalization")
def lp_norm(xp: Any, x: Any, *, axis: int = -1, p: int = 2) -> Any:
    norm = xp.sum(xp.abs(x), axis=axis, keepdims=True) if p == 1 else \
        xp.sqrt(xp.sum(x * x, axis=axis, keepdims=True))
    return same(xp, xp.where(norm == 0, 0, x / xp.where(norm == 0, 1, norm)), x)


@register("LRN")
def lrn(xp: Any, x: Any, *, size: int, alpha: float = 1e-4, beta: float = 0.75, bias: float = 1.0) -> Any:
    sq = x * x
    c = x.shape[1]
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    padded = xp.pad(sq, [(0, 0), (lo, hi)] + [(0, 0)] * (x.ndim - 2))
    acc = sum(padded[:, i:i + c] for i in range(size))
    return same(xp, x / (bias + alpha / size * acc) ** beta, x)


@register("Dropout")
def dropout(xp: Any, x: Any, ratio: Any = None, training_mode: Any = None, *, seed: int | None = None,
            is_test: int = 0, consumed_inputs: Any = None) -> tuple:
    train = training_mode is not None and bool(to_host(xp, training_mode).reshape(-1)[0])
    r = 0.0 if ratio is None or isinstance(ratio, float) else float(to_host(xp, ratio).reshape(-1)[0])
    if not train or r == 0.0:
        # Inference (and ratio 0) is the identity; the mask keeps everything.
        return x, xp.ones(x.shape, dtype=bool)
    rng = np.random.default_rng(seed)
    mask = xp.asarray(rng.uniform(0, 1, x.shape) >= r)
    return same(xp, mask * x / (1 - r), x), mask
