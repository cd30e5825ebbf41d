"""Numpy-only paths of Conv and MatMul that cut one large GEMM over the cores.

The generic kernels (``nn.py``, ``linalg.py``) are written once against ``xp``;
they call in here only when ``xp is numpy``, and only for the cases below, so
cupy never sees this module. Splitting is ``engine/blas.py``'s ``run_split``:
the calling thread and idle helpers take slices from a shared counter, each
slice a single-threaded BLAS call that releases the GIL.

Conv (one group, im2col): a slice is a band of output rows. It builds the
columns of its band only, zero padding applied on the fly (so nothing serial
precedes the bands: no padded copy, no shared column matrix to wait for), and
writes its GEMM straight into its rows of the output (``np.matmul(..., out=
view)``: BLAS takes the row stride, no copy), bias added while the band is hot.
Maps too small for bands (ResNet-18's 7x7 layer: 49 output positions) are split
by output channels instead, over one column matrix. More bands than threads
(smaller column matrices) measured slower: 40.4 against 36.7 ms a ResNet-18 run.

MatMul / Gemm: a matrix right operand (a Linear layer) is split by output
columns (each slice packs all of the smaller left operand) or rows; equal batch
shapes (attention heads) by batches; anything else runs as ``xp.matmul``.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from .. import blas

#: Output positions a row band should have at least: narrower GEMMs lose BLAS
#: efficiency (ResNet-18's 7x7 maps: 49 columns ran at 2/3 of peak).
_MIN_BAND = 192


def _columns(x: np.ndarray, pads: Sequence[int], offsets: list[tuple[int, ...]],
             dilations: Sequence[int], strides: Sequence[int], out_sp: Sequence[int],
             r0: int, r1: int) -> np.ndarray:
    """im2col of output rows ``r0:r1`` (first spatial axis) of a conv over ``x``
    (N, C, *spatial) with zero padding ``pads`` (begin..., end...) applied on the
    fly: (N, C * K, positions), C major, K minor (the weight's (M, C, *kernel)
    flattened). Each kernel position copies the window part that lies inside the
    input and zeroes the strips that fall in the padding -- no padded copy of the
    input, which was a serial pass before every conv."""
    n, c = x.shape[:2]
    band = [r1 - r0, *out_sp[1:]]
    if len(offsets) == 1 and not any(offsets[0]) and not any(pads) and all(s == 1 for s in strides):
        return x[:, :, r0:r1].reshape(n, c, -1)  # 1x1, stride 1: the input rows are the columns
    cols = np.empty((n, c, len(offsets), *band), dtype=x.dtype)
    for j, o in enumerate(offsets):
        dst = cols[:, :, j]
        box = _inside(x.shape[2:], pads, o, dilations, strides, out_sp, r0, r1)
        if box is None:
            dst[...] = 0
            continue
        src: list[Any] = [slice(None), slice(None)]
        keep: list[Any] = [slice(None), slice(None)]
        for i, (lo, hi, first) in enumerate(box):
            if lo > 0:
                dst[tuple(keep + [slice(0, lo)])] = 0
            if hi < band[i]:
                dst[tuple(keep + [slice(hi, None)])] = 0
            keep.append(slice(None))
            src.append(slice(first, first + (hi - lo - 1) * strides[i] + 1, strides[i]))
        dst[tuple([slice(None), slice(None)] + [slice(lo, hi) for lo, hi, _ in box])] = x[tuple(src)]
    return cols.reshape(n, c * len(offsets), -1)


def _inside(in_sp: Sequence[int], pads: Sequence[int], o: Sequence[int], dilations: Sequence[int],
            strides: Sequence[int], out_sp: Sequence[int], r0: int,
            r1: int) -> list[tuple[int, int, int]] | None:
    """Per spatial axis, the band-local output range [lo, hi) whose input index
    ``q * stride + o * dilation - pad`` falls inside the input, and the input index
    of ``lo``; None when some axis has no such position."""
    box = []
    nsp = len(out_sp)
    for i in range(nsp):
        start = o[i] * dilations[i] - pads[i]          # input index of output position 0
        q0, q1 = (r0, r1) if i == 0 else (0, out_sp[i])
        lo = max(q0, -(start // strides[i]))            # ceil(-start / stride)
        hi = min(q1, (in_sp[i] - 1 - start) // strides[i] + 1)
        if lo >= hi:
            return None
        box.append((lo - q0, hi - q0, lo * strides[i] + start))
    return box


def conv_split(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, pads: Sequence[int],
               offsets: list[tuple[int, ...]], dilations: Sequence[int], strides: Sequence[int],
               out_sp: Sequence[int]) -> np.ndarray | None:
    """Conv of one group as (N, M, prod(out_sp)), bias added, or None when the
    work is too small to split or no core is free (the caller's path runs)."""
    n, c = x.shape[:2]
    m = w.shape[0]
    npos = math.prod(out_sp)
    macs = n * m * c * len(offsets) * npos
    with blas.LargeKernel(macs) as ways:
        if ways <= 1:
            return None
        dtype = np.result_type(x.dtype, w.dtype)
        out = np.empty((n, m, npos), dtype=dtype)
        w2 = w.reshape(m, -1)
        bias = None if b is None else b.reshape(m, 1)
        rest = npos // out_sp[0]
        bands = min(ways, out_sp[0], npos // _MIN_BAND)
        geometry = (pads, offsets, dilations, strides, out_sp)
        if bands >= ways:
            blas.run_split(_band_slice(x, w2, bias, out, geometry, rest, bands), bands, ways)
        else:
            cols = _columns(x, *geometry, 0, out_sp[0])
            parts = min(ways, max(1, m // 8))
            blas.run_split(_channel_slice(w2, bias, cols, out, parts), parts, ways)
        return out


def _bounds(total: int, parts: int, i: int) -> tuple[int, int]:
    return total * i // parts, total * (i + 1) // parts


def _band_slice(x: np.ndarray, w2: np.ndarray, bias: np.ndarray | None, out: np.ndarray,
                geometry: tuple, rest: int, bands: int) -> Callable[[int], None]:
    out_sp = geometry[-1]

    def run(i: int) -> None:
        r0, r1 = _bounds(out_sp[0], bands, i)
        cols = _columns(x, *geometry, r0, r1)
        dst = out[:, :, r0 * rest:r1 * rest]
        np.matmul(w2, cols, out=dst)
        if bias is not None:
            dst += bias
    return run


def _channel_slice(w2: np.ndarray, bias: np.ndarray | None, cols: np.ndarray, out: np.ndarray,
                   parts: int) -> Callable[[int], None]:
    def run(i: int) -> None:
        m0, m1 = _bounds(w2.shape[0], parts, i)
        dst = out[:, m0:m1]
        np.matmul(w2[m0:m1], cols, out=dst)
        if bias is not None:
            dst += bias[m0:m1]
    return run


_BLAS_TYPES = (np.dtype(np.float32), np.dtype(np.float64))


def matmul_split(a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """``a @ b`` cut over the cores, or None (too small, no core free, a shape or
    dtype this does not cover: the caller's ``xp.matmul`` runs). Covers a matrix
    ``b`` under any ``a`` (a Linear layer: rows or columns of the output per
    slice) and equal batch shapes (attention heads: batches per slice)."""
    if a.dtype not in _BLAS_TYPES or b.dtype != a.dtype or a.ndim < 2 or b.ndim < 2:
        return None
    k = a.shape[-1]
    if b.shape[-2] != k:
        return None  # let matmul raise its own shape error
    if b.ndim == 2:
        a2 = a.reshape(-1, k)  # a view for contiguous activations
        rows, cols = a2.shape[0], b.shape[1]
        batch = 1
    elif a.shape[:-2] == b.shape[:-2]:
        batch, rows, cols = math.prod(a.shape[:-2]), a.shape[-2], b.shape[-1]
    else:
        return None
    with blas.LargeKernel(batch * rows * cols * k) as ways:
        if ways <= 1:
            return None
        out = np.empty(a.shape[:-1] + (b.shape[-1],), dtype=a.dtype)
        if b.ndim == 2:
            fn, parts = _linear_slice(a2, b, out.reshape(-1, cols), ways)
        else:
            a3, b3 = a.reshape(batch, rows, k), b.reshape(batch, k, cols)
            o3 = out.reshape(batch, rows, cols)
            parts = min(ways, batch)
            if parts < 2:
                return None

            def fn(i: int) -> None:
                s0, s1 = _bounds(batch, parts, i)
                np.matmul(a3[s0:s1], b3[s0:s1], out=o3[s0:s1])
        blas.run_split(fn, parts, ways)
        return out


def _linear_slice(a2: np.ndarray, b: np.ndarray, out2: np.ndarray,
                  ways: int) -> tuple[Callable[[int], None], int]:
    rows, cols = out2.shape
    if cols >= rows:  # slices of output columns: each packs all of the (smaller) a
        def by_cols(i: int) -> None:
            c0, c1 = _bounds(cols, ways, i)
            np.matmul(a2, b[:, c0:c1], out=out2[:, c0:c1])
        return by_cols, ways

    def by_rows(i: int) -> None:
        r0, r1 = _bounds(rows, ways, i)
        np.matmul(a2[r0:r1], b, out=out2[r0:r1])
    return by_rows, ways
