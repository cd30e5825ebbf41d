"""Numpy-only paths of Conv, MatMul and MaxPool that cut one large kernel over the cores.

The generic kernels (``nn.py``, ``linalg.py``) are written once against ``xp``;
they call in here only when ``xp is numpy``, and only for the cases below, so
cupy never sees this module. Splitting is ``engine/kernels/blas.py``'s ``run_split``:
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

A fused Conv chain (``engine/fuse.py``) passes its residual and Relu: each slice
adds them to its own block right after its GEMM and bias (``_Epilogue``).

MaxPool (no Indices): blocks of planes, each padded and reduced in cache, over the
cores when the pool is as long as a large conv (``max_pool``).

MatMul / Gemm: a matrix right operand (a Linear layer) is split by output
columns (each slice packs all of the smaller left operand) or rows; equal batch
shapes (attention heads) by batches; anything else runs as ``xp.matmul``.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from . import blas
from . import native

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


def conv2d_native(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, pads: Sequence[int],
                  kernel: Sequence[int], dilations: Sequence[int], strides: Sequence[int],
                  out_sp: Sequence[int], residual: np.ndarray | None = None,
                  relu: bool = False) -> np.ndarray | None:
    """A 2-D float32 conv of one group on the compiled pool (``native.conv2d``): row
    bands over the cores when the work is large and a core is free, one thread
    otherwise; None where the compiled module does not apply."""
    n, c = x.shape[:2]
    macs = n * w.shape[0] * c * math.prod(kernel) * math.prod(out_sp)
    with blas.LargeKernel(macs) as ways:
        return native.conv2d(np, x, w, b, residual, relu, tuple(kernel), tuple(strides),
                             tuple(dilations), tuple(pads), tuple(out_sp), ways)


def conv_split(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, pads: Sequence[int],
               offsets: list[tuple[int, ...]], dilations: Sequence[int], strides: Sequence[int],
               out_sp: Sequence[int], residual: np.ndarray | None = None,
               relu: bool = False) -> np.ndarray | None:
    """Conv of one group as (N, M, prod(out_sp)), bias added, then ``residual`` (the
    output's shape) added and Relu applied when asked (``engine/fuse.py``'s Conv
    chains: each slice's epilogue runs on its own rows while they are in cache);
    None when the work is too small to split or no core is free (the caller's
    path runs)."""
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
        tail = _Epilogue(bias, None if residual is None else residual.reshape(n, m, npos), relu)
        if bands >= ways:
            blas.run_split(_band_slice(x, w2, tail, out, geometry, rest, bands), bands, ways)
        else:
            cols = _columns(x, *geometry, 0, out_sp[0])
            parts = min(ways, max(1, m // 8))
            blas.run_split(_channel_slice(w2, tail, cols, out, parts), parts, ways)
        return out


class _Epilogue:
    """What a slice adds to its block of the output after its GEMM: the bias (M, 1),
    the residual (N, M, positions), then Relu -- all in place on the block."""

    __slots__ = ("bias", "residual", "relu")

    def __init__(self, bias: np.ndarray | None, residual: np.ndarray | None, relu: bool) -> None:
        self.bias, self.residual, self.relu = bias, residual, relu

    def apply(self, dst: np.ndarray, channels: slice, positions: slice) -> None:
        if self.bias is not None:
            dst += self.bias[channels]
        if self.residual is not None:
            dst += self.residual[:, channels, positions]
        if self.relu:
            np.maximum(dst, 0, out=dst)


def _bounds(total: int, parts: int, i: int) -> tuple[int, int]:
    return total * i // parts, total * (i + 1) // parts


_ALL = slice(None)


def _band_slice(x: np.ndarray, w2: np.ndarray, tail: _Epilogue, out: np.ndarray,
                geometry: tuple, rest: int, bands: int) -> Callable[[int], None]:
    out_sp = geometry[-1]

    def run(i: int) -> None:
        r0, r1 = _bounds(out_sp[0], bands, i)
        cols = _columns(x, *geometry, r0, r1)
        rows = slice(r0 * rest, r1 * rest)
        dst = out[:, :, rows]
        np.matmul(w2, cols, out=dst)
        tail.apply(dst, _ALL, rows)
    return run


def _channel_slice(w2: np.ndarray, tail: _Epilogue, cols: np.ndarray, out: np.ndarray,
                   parts: int) -> Callable[[int], None]:
    def run(i: int) -> None:
        m0, m1 = _bounds(w2.shape[0], parts, i)
        dst = out[:, m0:m1]
        np.matmul(w2[m0:m1], cols, out=dst)
        tail.apply(dst, slice(m0, m1), _ALL)
    return run


_BLAS_TYPES = (np.dtype(np.float32), np.dtype(np.float64))


def matmul_split(a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """``a @ b`` cut over the cores, or None (too small, no core free, a shape or
    dtype this does not cover: the caller's ``xp.matmul`` runs). Covers a matrix
    ``b`` under any ``a`` (a Linear layer: rows or columns of the output per
    slice) and equal batch shapes (attention heads: batches per slice)."""
    if a.dtype not in _BLAS_TYPES or b.dtype != a.dtype or a.ndim < 2 or b.ndim < 2 \
            or not a.size or not b.size:
        return None  # (empty: nothing to split, and reshape(-1, 0) has no answer)
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
        if b.ndim == 2:  # the compiled pool first: its slices need no GIL
            y = native.gemm(np, a2, b, ways)
            if y is not None:
                return y.reshape(a.shape[:-1] + (cols,))
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


# ---------------------------------------------------------------- MaxPool --
#: A MaxPool input element costs about as much time as this many GEMM multiply-adds
#: (ResNet-18's pool: 0.87 ms for 0.8M elements; its GEMMs ~0.017 ns a MAC), so a
#: pool is split over the cores from the same amount of work as a conv.
_POOL_MACS_PER_ELEMENT = 150
#: Input bytes per block of planes: a block is padded and reduced while in L2
#: (8-16 planes of 112x112 float32 measured best: 0.87 against 1.25 ms unblocked).
_POOL_BLOCK_BYTES = 512 << 10


def max_pool(x: np.ndarray, kernel: Sequence[int], dilations: Sequence[int],
             strides: Sequence[int], pads: Sequence[int], extra: Sequence[int],
             out_sp: Sequence[int], fill: Any) -> np.ndarray:
    """MaxPool's values (no indices) over ``x`` (N, C, *spatial): blocks of planes,
    each padded with ``fill`` (pads begin..., end..., plus ``extra`` at the end of
    each axis for ceil mode) and reduced one spatial axis at a time, the first
    (outer, contiguous rows) first; blocks over the cores when large enough."""
    n, c = x.shape[:2]
    with blas.LargeKernel(x.size * _POOL_MACS_PER_ELEMENT) as ways:
        y = native.max_pool2d(np, x, tuple(kernel), tuple(strides), tuple(dilations), tuple(pads),
                              tuple(out_sp), ways)
        if y is not None:  # 2-D float32: the compiled pool
            return y
        planes = n * c
        out = np.empty((n, c, *out_sp), dtype=x.dtype)
        xs = x.reshape(planes, *x.shape[2:])
        outs = out.reshape(planes, *out_sp)
        per = max(1, _POOL_BLOCK_BYTES // max(1, xs[0].nbytes))
        blocks = min(planes, max(ways, -(-planes // per)))  # at least one block a thread

        def run(i: int) -> None:
            p0, p1 = _bounds(planes, blocks, i)
            _separable_max_into(_pad_planes(xs[p0:p1], pads, extra, fill), kernel, dilations,
                                strides, out_sp, outs[p0:p1])
        blas.run_split(run, blocks, ways)
    return out


def _pad_planes(x: np.ndarray, pads: Sequence[int], extra: Sequence[int], fill: Any) -> np.ndarray:
    nsp = x.ndim - 1
    if not any(pads) and not any(extra):
        return x
    shape = (x.shape[0],) + tuple(x.shape[1 + i] + pads[i] + pads[i + nsp] + extra[i]
                                  for i in range(nsp))
    out = np.full(shape, fill, dtype=x.dtype)
    out[(slice(None),) + tuple(slice(pads[i], pads[i] + x.shape[1 + i]) for i in range(nsp))] = x
    return out


def _separable_max_into(cur: np.ndarray, kernel: Sequence[int], dilations: Sequence[int],
                        strides: Sequence[int], out_sp: Sequence[int], dst: np.ndarray) -> None:
    """Window maxima one axis at a time, the outer axis first (its windows are whole
    contiguous rows: vectorised; the strided last axis then runs on fewer rows); the
    last axis writes into ``dst``."""
    nsp = len(kernel)
    for axis in range(nsp):
        wins = []
        for k in range(kernel[axis]):
            start = k * dilations[axis]
            index: list[Any] = [slice(None)] * cur.ndim
            index[1 + axis] = slice(start, start + (out_sp[axis] - 1) * strides[axis] + 1,
                                    strides[axis])
            wins.append(cur[tuple(index)])
        best = dst if axis == nsp - 1 else np.empty(wins[0].shape, dtype=cur.dtype)
        if len(wins) == 1:
            np.copyto(best, wins[0])
        else:
            np.maximum(wins[0], wins[1], out=best)
            for win in wins[2:]:
                np.maximum(best, win, out=best)
        cur = best
