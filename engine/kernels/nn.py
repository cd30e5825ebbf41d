"""Convolution and pooling kernels, N-D: numpy and cupy alike through ``xp``; on numpy
float32 the 1-D and 2-D convs and MaxPools run the compiled kernels (``native.py``)."""

from __future__ import annotations

import itertools
import math
from typing import Any, Callable, Sequence

import numpy as np

from . import device, gemm, geometry, native
from .conv_epilogue import AffineAfter, HardSwishAct, LeakyReluAct
from .conv_epilogue import epilogue as _epilogue
from .conv_epilogue import epilogue_compiled as _epilogue_compiled
from .conv_epilogue import epilogue_plan as _epilogue_plan
from .elementwise import same
from .reduce import mean_keepdims
from .registry import host_ints, register


def _zero_padded(xp: Any, x: Any, pads: Sequence[int]) -> Any:
    """``x`` with zero spatial padding; an allocation and one copy (``xp.pad`` is 10x slower)."""
    nsp = x.ndim - 2
    if not any(pads):
        return x
    shape = x.shape[:2] + tuple(x.shape[2 + i] + pads[i] + pads[i + nsp] for i in range(nsp))
    out = xp.zeros(shape, dtype=x.dtype)
    out[(Ellipsis,) + tuple(slice(pads[i], pads[i] + x.shape[2 + i]) for i in range(nsp))] = x
    return out


#: Largest im2col buffer Conv builds; above it, one matmul per kernel position.
_IM2COL_BYTES = 256 << 20


def _window(xp_arr: Any, offset: Sequence[int], dilations: Sequence[int], strides: Sequence[int],
            out_sp: Sequence[int]) -> Any:
    """The strided view of a padded array that kernel position ``offset`` sees."""
    index = [Ellipsis]
    for o, d, s, n in zip(offset, dilations, strides, out_sp):
        start = o * d
        index.append(slice(start, start + (n - 1) * s + 1, s))
    return xp_arr[tuple(index)]


#: Conv gathers its columns in one indexing call when one kernel position's copy is
#: at most this many elements: below it the ~2 us of Python per copy dominates; above
#: it, fancy indexing (~5 ns an element) loses to strided copies (ResNet-18's 7x7
#: stem: 39 ms gathered, a few ms copied).
_GATHER_PER_COPY = 1024

_INDEX_CACHE: dict[tuple, tuple] = {}


def _gather_index(xp: Any, kernel: Sequence[int], dilations: Sequence[int],
                  strides: Sequence[int], out_sp: Sequence[int]) -> tuple:
    """Index arrays (on ``xp``'s device) picking, per spatial axis, input position
    ``k * dilation + o * stride``; broadcast to ``kernel + out_sp`` they gather the
    columns in (kernel positions, output positions) order. Cached per geometry
    (a streaming model calls the same convs every step)."""
    key = (id(xp), tuple(kernel), tuple(dilations), tuple(strides), tuple(out_sp))
    index = _INDEX_CACHE.get(key)
    if index is None:
        if len(_INDEX_CACHE) > 256:  # many shapes (a sweep): start over, stay small
            _INDEX_CACHE.clear()
        index = _INDEX_CACHE[key] = _make_gather_index(xp, kernel, dilations, strides, out_sp)
    return index


def _make_gather_index(xp: Any, kernel: Sequence[int], dilations: Sequence[int],
                       strides: Sequence[int], out_sp: Sequence[int]) -> tuple:
    nsp = len(kernel)
    index = []
    for i in range(nsp):
        pos = xp.arange(kernel[i]).reshape(-1, 1) * dilations[i] + \
            xp.arange(out_sp[i]).reshape(1, -1) * strides[i]          # (k_i, o_i)
        shape = [1] * (2 * nsp)
        shape[i], shape[nsp + i] = kernel[i], out_sp[i]
        index.append(pos.reshape(shape))
    return tuple(index)


class Unfusable(Exception):
    """A fused Conv epilogue cannot apply to this call (the residual's shape or dtype
    differs from the conv's output): the caller runs the nodes as written."""


@register("Conv")
def conv(xp: Any, x: Any, w: Any, b: Any = None, *, auto_pad: str = "NOTSET", dilations: Any = None,
         group: int = 1, kernel_shape: Any = None, pads: Any = None, strides: Any = None) -> Any:
    return conv_fused(xp, x, w, b, None, False, auto_pad=auto_pad, dilations=dilations, group=group,
                      kernel_shape=kernel_shape, pads=pads, strides=strides)


def conv_fused(xp: Any, x: Any, w: Any, b: Any, residual: Any, relu: Any, *,
               auto_pad: str = "NOTSET", dilations: Any = None, group: int = 1,
               kernel_shape: Any = None, pads: Any = None, strides: Any = None,
               affine: Any = None) -> Any:
    """Conv, then ``* s + t`` per output channel when ``affine`` is ``(s, t)`` (a
    BatchNormalization folded in), then ``+ residual`` (same shape and dtype as the output, else ``Unfusable``)
    and the activation ``relu`` asks for: True ``max(., 0)`` (Relu), a ``(lo, hi)`` pair
    ``min(max(., lo), hi)`` (Clip; either bound None for none), a ``HardSwishAct`` or
    ``LeakyReluAct``, any of them in an ``AffineAfter`` (then ``* s + t`` per channel), False
    nothing. The
    epilogue of ``engine/fuse.py``'s Conv chains, in place on the conv's own output.
    Never writes into ``residual``."""
    g = geometry.conv(x.shape, w.shape, None if b is None else b.shape, kernel_shape=kernel_shape,
                      strides=strides, dilations=dilations, pads=pads, auto_pad=auto_pad, group=group)
    kernel, strides, dilations, pads, out_sp = g.kernel, g.strides, g.dilations, g.pads, g.out_sp
    group = int(group)
    n, c = x.shape[:2]
    m = w.shape[0]
    npos = math.prod(out_sp)  # (np.prod on a list costs more than a small conv's matmul)
    if residual is not None and (tuple(residual.shape) != (n, m, *out_sp)
                                 or residual.dtype != x.dtype):
        raise Unfusable(f"residual {tuple(residual.shape)} {residual.dtype}")
    if n * c * npos == 0 or w.size == 0:  # an empty batch, map or channel: sums of nothing
        return _empty_conv(xp, x, b, residual, relu, (n, m, *out_sp), affine)
    if xp is np and len(kernel) <= 2:
        got = _conv_compiled(x, w, b, group, kernel, strides, dilations, pads, out_sp)
        if got is not None:  # numpy float32: the compiled columns or depthwise kernel
            return _epilogue_compiled(*got, residual, relu, affine)
    y = None if xp is np else device.conv_library(xp, x, w, b, pads, strides, dilations, group, out_sp)
    if y is not None:  # cuDNN (kernels/device.py): the bias is in, the epilogue follows
        return _epilogue(xp, y, residual, relu, affine)
    cg, mg = c // group, m // group
    offsets = list(itertools.product(*(range(k) for k in kernel)))  # (the compiled path needs none)
    one_by_one = len(offsets) == 1 and not any(offsets[0])
    cols_fit = n * c * len(offsets) * npos * x.dtype.itemsize <= _IM2COL_BYTES
    cols = None if xp is np or one_by_one or not cols_fit else \
        device.im2col(xp, x, kernel, strides, dilations, pads, out_sp)
    if cols is not None:   # a device: the columns in one launch (the epilogue in one more, below)
        acc = gemm.matmul(xp, w.reshape(group, mg, cg * len(offsets)), cols.reshape(n, group, -1, npos))
        return _finish(xp, acc, x, b, residual, relu, affine, (n, m) + tuple(out_sp))
    # On a device the gather is a few launches whatever its size, where the copies are one
    # launch (~10-20 us of host time) per kernel position: 49 for a 7x7 stem.
    small = xp is not np or n * c * npos <= _GATHER_PER_COPY
    xpad = _zero_padded(xp, x, pads)
    xg = xpad.reshape((n, group, cg) + xpad.shape[2:])
    wg = w.reshape((group, mg, cg) + tuple(kernel))
    if one_by_one:
        # 1x1 kernel: the (strided) input is already the column matrix -- one
        # matmul, no window copy beyond what a stride needs.
        cols = _window(xg, offsets[0], dilations, strides, out_sp).reshape(n, group, cg, npos)
        acc = gemm.matmul(xp, wg.reshape(group, mg, cg), cols)
    elif small and cols_fit:
        # Small copies per kernel position (a 1D STFT-like conv has hundreds of
        # positions, a streaming step's maps a few outputs): one gather builds every
        # column at once instead of one ~2 us Python-driven copy per position.
        cols = xg[(Ellipsis,) + _gather_index(xp, kernel, dilations, strides, out_sp)]
        acc = gemm.matmul(xp, wg.reshape(group, mg, cg * len(offsets)), cols.reshape(n, group, -1, npos))
    elif cols_fit:
        # im2col: one copy of every window, then one batched matmul. Small feature maps
        # are dominated by per-call overhead, so fewer, larger calls win.
        cols = xp.empty((n, group, cg, len(offsets)) + tuple(out_sp), dtype=x.dtype)
        for j, o in enumerate(offsets):  # filled in place: cheaper than xp.stack's copies
            cols[:, :, :, j] = _window(xg, o, dilations, strides, out_sp)
        cols = cols.reshape(n, group, cg * len(offsets), npos)
        acc = gemm.matmul(xp, wg.reshape(group, mg, cg * len(offsets)), cols)
    else:
        acc = xp.zeros((n, group, mg, npos), dtype=x.dtype)
        for offset in offsets:
            patch = _window(xg, offset, dilations, strides, out_sp).reshape(n, group, cg, npos)
            # (G, Mg, Cg) @ (N, G, Cg, P) -> (N, G, Mg, P): one batched matmul per kernel position.
            acc += gemm.matmul(xp, wg[(Ellipsis,) + tuple(offset)], patch)
    return _finish(xp, acc, x, b, residual, relu, affine, (n, m) + tuple(out_sp))


def _finish(xp: Any, acc: Any, x: Any, b: Any, residual: Any, relu: Any, affine: Any,
            out_shape: tuple) -> Any:
    """The conv's (n, group, m/group, positions) products as its output, bias and epilogue
    applied: on a device in one generated kernel where it applies (``device.conv_epilogue``;
    a Clip's bounds passed as they are, device scalars included: reading them is a sync)."""
    if xp is not np:
        y = same(xp, acc.reshape(out_shape), x)
        bounds = (0, None) if relu is True else relu if isinstance(relu, tuple) else (None, None)
        # the generated device epilogue clamps; a hard swish, a LeakyRelu or an affine after the
        # activation takes the passes below
        if not isinstance(relu, (HardSwishAct, LeakyReluAct, AffineAfter)) \
                and device.conv_epilogue(xp, y, b, affine, residual, bounds):
            return y
    per_channel = (1, acc.shape[1], acc.shape[2], 1)
    if b is not None and acc.dtype == b.dtype:
        acc += b.reshape(per_channel)  # in place: acc is this call's own array
    elif b is not None:
        acc = acc + b.reshape(per_channel)
    return _epilogue(xp, same(xp, acc.reshape(out_shape), x), residual, relu, affine)


def _conv_compiled(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, group: int,
                   kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
                   pads: Sequence[int], out_sp: Sequence[int]) -> tuple[np.ndarray, Any] | None:
    """A 1-D or 2-D float32 conv through the compiled kernels (``_compiled_plan``), as
    ``(y, bias still to add)``; None where the compiled module does not apply."""
    if not native.applies(np, x):
        return None
    plan = _compiled_plan(tuple(x.shape), w, b, group, tuple(kernel), tuple(strides), tuple(dilations),
                          tuple(pads), tuple(out_sp))
    return None if plan is None else (plan[0](x), plan[1])


def _compiled_plan(x_shape: tuple, w: np.ndarray, b: np.ndarray | None, group: int, kernel: tuple,
                   strides: tuple, dilations: tuple, pads: tuple,
                   out_sp: tuple) -> tuple[Callable[[np.ndarray], np.ndarray], Any] | None:
    """The compiled conv (``_native_conv.c``) decided once for float32 inputs of shape ``x_shape``
    and these weights: ``(conv, bias still to add)``, ``conv(x) -> y``. Depthwise (each group one input
    channel) in one C pass, bias included; any other group count as the C im2col columns times
    the weight in one numpy matmul, whose BLAS spreads it over the cores, its bias left to the
    epilogue's one pass. None where the compiled module does not apply (the caller's numpy path
    runs). A 1-D depthwise conv runs as a 2-D one of height 1; other 1-D convs gained nothing
    measurable from the compiled columns (docs/kernels.md)."""
    if len(kernel) == 1:  # (N, C, L) as (N, C, 1, L): pads (begin, end) -> (0, begin, 0, end)
        if not (w.shape[1] == 1 and group == x_shape[1] > 1):
            return None
        inner = _compiled_plan((*x_shape[:2], 1, x_shape[2]), w[:, :, None], b, group, (1, *kernel),
                               (1, *strides), (1, *dilations), (0, pads[0], 0, pads[1]), (1, *out_sp))
        return _reshaped(inner, lambda x: x[:, :, None], (x_shape[0], w.shape[0], *out_sp))
    n, c = x_shape[:2]
    m, cg = w.shape[0], w.shape[1]
    if x_shape[3] == 1 and kernel[1] == 1 and out_sp[1] == 1 and kernel[0] > 1 and pads[1] == pads[3] == 0:
        # a column map and kernel (Magika's 5x1 over 512x1): the same conv along a row,
        # H and W swapped by reshapes alone -- the columns come out alike, 40x faster
        # (the compiled im2col walks rows: 5.5 ms -> 0.13 ms for Magika's)
        inner = _compiled_plan((n, c, 1, x_shape[2]), w.reshape(m, cg, 1, kernel[0]), b, group,
                               (1, kernel[0]), (1, strides[0]), (1, dilations[0]), (0, pads[0], 0, pads[2]),
                               (1, out_sp[0]))
        return _reshaped(inner, lambda x: x.reshape(n, c, 1, x_shape[2]), (n, m, out_sp[0], 1))
    geometry_ = (kernel, strides, dilations, pads, out_sp)
    if cg == 1 and group == c and group > 1:
        depthwise = native.depthwise_plan(x_shape, w, b, *geometry_)
        return None if depthwise is None else (depthwise, None)
    npos = out_sp[0] * out_sp[1]
    if not native.applies(np, w, b):
        return None
    mg, k = m // group, cg * kernel[0] * kernel[1]
    if kernel == (3, 3) and strides == (1, 1) and dilations == (1, 1) \
            and min(cg, mg) >= _WINOGRAD_MIN_CHANNELS:
        winograd = native.winograd_plan(x_shape, w, pads, out_sp, group)
        if winograd is not None:
            return winograd, b
    pointwise = kernel == (1, 1) and strides == (1, 1) and not any(pads)
    # Banded columns hold a band of rows at a time, whatever the whole would be: the cap on
    # the whole columns below is not theirs (it sent IS-Net's 128-channel 3x3 convs over
    # 512x512, 1.2 GB of columns, to one numpy matmul per kernel position: 1.17 s against
    # 0.6 s banded, 4.4x onnxruntime's CPU time on the whole model)
    if not pointwise and c * math.prod(kernel) * npos * 4 > _BAND_BYTES and out_sp[0] > 1:
        return (lambda x: _conv_banded(x, w, geometry_, (n, c, m, group, mg, k))), b
    if n * c * math.prod(kernel) * npos * 4 > _IM2COL_BYTES:
        return None
    columns = None if pointwise else native.im2col_plan(x_shape, *geometry_, scratch=True)
    if columns is None and not pointwise:
        return None
    weight, flat, shape = w.reshape(group, mg, k), (n, group, k, npos), (n, m, *out_sp)

    def conv(x: np.ndarray) -> np.ndarray:
        cols = x if columns is None else columns(x)  # pointwise: the input rows are the columns
        out = np.empty((n, group, mg, npos), dtype=np.float32)
        np.matmul(weight, cols.reshape(flat), out=out)
        return out.reshape(shape)
    return conv, b


def _reshaped(inner: tuple | None, to_inner: Callable[[np.ndarray], np.ndarray],
              shape: tuple) -> tuple[Callable[[np.ndarray], np.ndarray], Any] | None:
    """``inner``, a plan for a reshaped view of the input, with its output reshaped to ``shape``."""
    if inner is None:
        return None
    conv, bias = inner
    return (lambda x: conv(to_inner(x)).reshape(shape)), bias


def conv_fused_plan(x_shape: tuple, w: Any, b: Any, act: Any, affine: Any, *, auto_pad: str = "NOTSET",
                    dilations: Any = None, group: int = 1, kernel_shape: Any = None, pads: Any = None,
                    strides: Any = None) -> Callable[[np.ndarray, Any], np.ndarray | None] | None:
    """``conv_fused`` on the host decided once for float32 inputs of shape ``x_shape`` and these
    constants (weight, bias, activation, folded normalisation): ``run(x, residual)``, the
    compiled conv and epilogue with nothing re-derived per call (a fused chain calls it; about
    half a small conv's Python cost). ``run`` answers None for a call it does not take (a
    residual of another shape or dtype: the caller calls ``conv_fused``); None where the
    compiled path does not apply. Malformed geometry raises as ``conv_fused`` does."""
    g = geometry.conv(x_shape, w.shape, None if b is None else b.shape, kernel_shape=kernel_shape,
                      strides=strides, dilations=dilations, pads=pads, auto_pad=auto_pad, group=group)
    out_shape = (x_shape[0], w.shape[0], *g.out_sp)
    if len(g.kernel) > 2 or math.prod(x_shape) == 0 or math.prod(out_shape) == 0 or w.size == 0:
        return None
    planned = _compiled_plan(tuple(x_shape), w, b, int(group), g.kernel, g.strides, g.dilations, g.pads,
                             g.out_sp)
    if planned is None:
        return None
    conv, bias_left = planned
    epilogue = _epilogue_plan(out_shape, bias_left, act, affine)
    if epilogue is None:
        return None

    def run(x: np.ndarray, residual: Any) -> np.ndarray | None:
        if residual is not None and (residual.shape != out_shape or residual.dtype != _F32):
            return None
        y = conv(x)
        return y if epilogue(y, residual) else None   # (not taken: conv_fused's numpy passes)
    return run


_F32 = np.dtype(np.float32)

#: Fewer channels than this in or out of a group, a 3x3 conv keeps its columns: Winograd's 16
#: GEMMs then have too little to multiply (a stem's 3 input channels) for their transforms to pay.
_WINOGRAD_MIN_CHANNELS = 16

#: Columns larger than this are made and multiplied a band of output rows at a time, so
#: each band is still in cache when its GEMM reads it (PP-OCR det's 3x3 convs over
#: 96 x 120 x 160 made 66 MB of columns at once).
_BAND_BYTES = 4 << 20


def _conv_banded(x: np.ndarray, w: np.ndarray, geometry_: tuple, dims: tuple) -> np.ndarray:
    """``_conv_compiled``'s columns times weight, a band of output rows at a time: one
    band buffer reused, each band's product written into its rows of the output."""
    n, _c, m, group, mg, k = dims
    out_sp = geometry_[4]
    oh, ow = out_sp
    height = group * k  # the columns' rows: C kh kw
    rows = max(1, min(oh, _BAND_BYTES // (4 * height * ow)))
    flat = native.scratch_arrays((height * rows * ow,))[0]
    out = np.empty((n, group, mg, oh * ow), dtype=np.float32)
    w3 = w.reshape(group, mg, k)
    for img in range(n):
        for r0 in range(0, oh, rows):
            r1 = min(oh, r0 + rows)
            cols = flat[:height * (r1 - r0) * ow].reshape(height, -1)
            native.im2col_rows(x, cols, *geometry_, img, r0, r1)
            per_group = cols.reshape(group, k, -1)
            for g in range(group):   # BLAS writes the band's rows of the output itself (a row-strided
                # C matrix): the product made, then copied in, cost VGG-19 3% (227 -> 219 ms)
                np.matmul(w3[g], per_group[g], out=out[img, g, :, r0 * ow:r1 * ow])
    return out.reshape(n, m, *out_sp)


def _empty_conv(xp: Any, x: Any, b: Any, residual: Any, relu: bool, shape: tuple,
                affine: Any = None) -> Any:
    """A conv whose sums are empty: zeros, then the bias, residual and Relu (the
    general paths' reshapes have no answer for a zero-sized axis)."""
    y = xp.zeros(shape, dtype=x.dtype)
    if b is not None:
        y += b.reshape((1, -1) + (1,) * (len(shape) - 2)).astype(x.dtype)
    return _epilogue(xp, y, residual, relu, affine)


@register("ConvTranspose")
def conv_transpose(xp: Any, x: Any, w: Any, b: Any = None, *, auto_pad: str = "NOTSET",
                   dilations: Any = None, group: int = 1, kernel_shape: Any = None,
                   output_padding: Any = None, output_shape: Any = None, pads: Any = None,
                   strides: Any = None) -> Any:
    g = geometry.conv_transpose(x.shape, w.shape, None if b is None else b.shape,
                                kernel_shape=kernel_shape, strides=strides, dilations=dilations,
                                pads=pads, auto_pad=auto_pad, group=group,
                                output_padding=output_padding, output_shape=output_shape)
    kernel, strides, dilations, pads, out_sp, full = (g.kernel, g.strides, g.dilations, g.pads,
                                                      g.out_sp, g.full)
    group, nsp, in_sp = int(group), len(g.kernel), list(x.shape[2:])
    n, c = x.shape[:2]
    cg, mg = c // group, w.shape[1]
    npos = int(np.prod(in_sp, dtype=np.int64))
    xg = x.reshape(n, group, cg, npos)
    if list(strides) == list(kernel) and not any(d != 1 for d in dilations) and npos:
        y = _tiled_transpose(xp, xg, w, (n, group, cg, mg, nsp), kernel, in_sp, full)
    else:
        y = _scattered_transpose(xp, xg, w, (n, group, cg, mg, nsp), kernel, dilations, strides,
                                 in_sp, full)
    crop = tuple(slice(pads[i], pads[i] + out_sp[i]) for i in range(nsp))
    y = y[(Ellipsis,) + crop].reshape((n, group * mg) + tuple(out_sp))
    if b is not None:
        y = y + b.reshape((1, -1) + (1,) * nsp)
    return same(xp, y, x)


def _tiled_transpose(xp: Any, xg: Any, w: Any, dims: tuple, kernel: Sequence[int],
                     in_sp: Sequence[int], full: Sequence[int]) -> Any:
    """A ConvTranspose whose kernel equals its stride (an FPN's or a U-Net's 2x2 / 2
    upsampling): every output position has exactly one tap, so the result is one GEMM of
    every tap at once, then its tiles put in place by a transpose (PP-OCR det's two:
    ~5 ms each as one GEMM per tap and a scatter-add)."""
    n, group, cg, mg, nsp = dims
    k = int(np.prod(kernel, dtype=np.int64))
    wt = xp.swapaxes(w.reshape(group, cg, mg * k), -1, -2)            # (G, Mg*K, Cg)
    cols = gemm.matmul(xp, wt, xg).reshape((n, group, mg, *kernel, *in_sp))  # (N, G, Mg, k..., i...)
    # (N, G, Mg, k1..kd, i1..id) -> (N, G, Mg, i1, k1, ..., id, kd): tile i holds its taps
    order = [0, 1, 2] + [a for d in range(nsp) for a in (3 + nsp + d, 3 + d)]
    y = xp.ascontiguousarray(cols.transpose(order)).reshape((n, group, mg, *(i * kk for i, kk in zip(in_sp, kernel))))
    if tuple(y.shape[3:]) != tuple(full):  # output_padding: zeros past the last tile
        out = xp.zeros((n, group, mg) + tuple(full), dtype=y.dtype)
        out[(Ellipsis,) + tuple(slice(0, s) for s in y.shape[3:])] = y
        y = out
    return y


def _scattered_transpose(xp: Any, xg: Any, w: Any, dims: tuple, kernel: Sequence[int],
                         dilations: Sequence[int], strides: Sequence[int], in_sp: Sequence[int],
                         full: Sequence[int]) -> Any:
    """The general ConvTranspose: per kernel tap, one GEMM added into its strided window."""
    n, group, cg, mg, nsp = dims
    buf = xp.zeros((n, group, mg) + tuple(full), dtype=xg.dtype)
    wg = w.reshape((group, cg, mg) + tuple(kernel))
    for offset in itertools.product(*(range(k) for k in kernel)):
        wk = xp.swapaxes(wg[(Ellipsis,) + tuple(offset)], -1, -2)  # (G, Mg, Cg)
        contrib = gemm.matmul(xp, wk, xg).reshape((n, group, mg) + tuple(in_sp))
        _window(buf, offset, dilations, strides, in_sp)[...] += contrib
    return buf


# ---------------------------------------------------------------- pooling --
def _pool_geometry(op: str, x: Any, kernel: Sequence[int], strides: Any, dilations: Any,
                   pads: Any, auto_pad: str, ceil_mode: int) -> tuple:
    g = geometry.pool(op, x.shape, kernel_shape=kernel, strides=strides, dilations=dilations,
                      pads=pads, auto_pad=auto_pad, ceil_mode=ceil_mode)
    return g.kernel, g.strides, g.dilations, g.pads, g.out_sp, g.extra


def _padded(xp: Any, x: Any, pads: Sequence[int], extra: Sequence[int], fill: Any) -> Any:
    nsp = len(extra)
    if not any(pads) and not any(extra):
        return x
    lead = x.ndim - nsp
    shape = x.shape[:lead] + tuple(x.shape[lead + i] + pads[i] + pads[i + nsp] + extra[i] for i in range(nsp))
    out = xp.full(shape, fill, dtype=x.dtype)  # allocation + one copy: xp.pad is 10x slower
    out[(Ellipsis,) + tuple(slice(pads[i], pads[i] + x.shape[lead + i]) for i in range(nsp))] = x
    return out


def _lowest(dtype: Any) -> Any:
    dt = np.dtype(dtype)
    return -np.inf if dt.kind == "f" else np.iinfo(dt).min


@register("MaxPool")
def max_pool(xp: Any, x: Any, *, auto_pad: str = "NOTSET", ceil_mode: int = 0, dilations: Any = None,
             kernel_shape: Any, pads: Any = None, storage_order: int = 0, strides: Any = None,
             _n_outputs: int | None = None) -> tuple:
    kernel, strides, dilations, pads, out_sp, extra = _pool_geometry(
        "MaxPool", x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    if 0 in out_sp:  # no window (onnxruntime answers an empty output too)
        y = xp.zeros(x.shape[:2] + tuple(out_sp), dtype=x.dtype)
        return (y,) if _n_outputs == 1 else (y, xp.zeros(y.shape, dtype=np.int64))
    if xp is np and _n_outputs == 1:
        y = native.max_pool2d(np, x, tuple(kernel), tuple(strides), tuple(dilations), tuple(pads),
                              tuple(out_sp))
        if y is not None:  # 2-D float32: each plane reduced in cache, in C
            return (y,)
    if _n_outputs == 1:   # a device: one generated kernel (its values only)
        y = device.pool(xp, x, "MaxPool", kernel, strides, dilations, pads, out_sp)
        if y is not None:
            return (y,)
    xpad = _padded(xp, x, pads, extra, _lowest(x.dtype))
    best = None
    best_idx = None
    nsp = len(kernel)
    if _n_outputs == 1:  # nobody reads Indices: a plain running maximum is enough
        return (same(xp, _separable_max(xp, xpad, kernel, dilations, strides, out_sp), x),)
    for offset in itertools.product(*(range(k) for k in kernel)):
        win = _window(xpad, offset, dilations, strides, out_sp)
        idx = _flat_index(xp, x.shape, offset, dilations, strides, pads, out_sp, storage_order)
        if best is None:
            best, best_idx = win, xp.broadcast_to(idx, win.shape)
        else:
            better = win > best  # strictly greater: the first maximum wins, as ONNX
            best = xp.where(better, win, best)
            best_idx = xp.where(better, idx, best_idx)
    del nsp
    return same(xp, best, x), xp.asarray(best_idx, dtype=np.int64)


def _separable_max(xp: Any, xpad: Any, kernel: Sequence[int], dilations: Sequence[int],
                   strides: Sequence[int], out_sp: Sequence[int]) -> Any:
    """Window maxima one spatial axis at a time (a box's maximum is the maximum of
    its rows' maxima): sum(kernel) in-place passes instead of prod(kernel) -- 6
    instead of 9 for ResNet's 3x3 pool, over a narrower array after the first axis."""
    cur = xpad
    lead = xpad.ndim - len(kernel)
    for axis in range(len(kernel) - 1, -1, -1):  # the last (contiguous) axis first
        best = None
        for k in range(kernel[axis]):
            start = k * dilations[axis]
            index = [slice(None)] * cur.ndim
            index[lead + axis] = slice(start, start + (out_sp[axis] - 1) * strides[axis] + 1,
                                       strides[axis])
            win = cur[tuple(index)]
            if best is None:
                best = win.copy()
            else:
                xp.maximum(best, win, out=best)  # in place: no array per window
        cur = best
    return cur


def _flat_index(xp: Any, shape: Sequence[int], offset: Sequence[int], dilations: Sequence[int],
                strides: Sequence[int], pads: Sequence[int], out_sp: Sequence[int],
                storage_order: int) -> Any:
    """Flat index into the unpadded input of each window element, for MaxPool's Indices."""
    n, c = shape[:2]
    sp = list(shape[2:])
    nsp = len(sp)
    idx = 0
    stride_in = 1
    order = range(nsp) if storage_order else range(nsp - 1, -1, -1)
    for i in order:
        coord = xp.arange(out_sp[i]) * strides[i] + offset[i] * dilations[i] - pads[i]
        view = [1] * (nsp + 2)
        view[2 + i] = out_sp[i]
        idx = idx + coord.reshape(view) * stride_in
        stride_in *= sp[i]
    plane = int(np.prod(sp, dtype=np.int64))
    base = xp.arange(n * c).reshape((n, c) + (1,) * nsp) * plane
    return base + idx


@register("AveragePool")
def average_pool(xp: Any, x: Any, *, auto_pad: str = "NOTSET", ceil_mode: int = 0,
                 count_include_pad: int = 0, dilations: Any = None, kernel_shape: Any,
                 pads: Any = None, strides: Any = None) -> Any:
    kernel, strides, dilations, pads, out_sp, extra = _pool_geometry(
        "AveragePool", x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    if 0 in out_sp:  # no window (onnxruntime answers an empty output too)
        return xp.zeros(x.shape[:2] + tuple(out_sp), dtype=x.dtype)
    if tuple(kernel) == tuple(x.shape[2:]) and not any(pads) and not any(extra) \
            and all(d == 1 for d in dilations):
        # one window, the whole plane (Caffe2's and Keras' classifier heads): a GlobalAveragePool,
        # where the window sums took 6x onnxruntime's time (Inception v2's 7x7 over 1024 channels)
        return global_average_pool(xp, x)
    y = device.pool(xp, x, "AveragePool", kernel, strides, dilations, pads, out_sp, count_include_pad)
    if y is not None:   # a device: one generated kernel
        return y
    y = native.average_pool2d(xp, x, kernel, strides, dilations, pads, out_sp, count_include_pad)
    if y is not None:   # float32 numpy, 2-D: the compiled window sums
        return y
    xpad = _padded(xp, x, pads, extra, 0)
    # What a window counts: the input only, or the input and its explicit pads.
    ones = xp.ones((1, 1) + tuple(x.shape[2:]), dtype=x.dtype)
    if count_include_pad:
        ones = _padded(xp, ones, pads, [0] * len(kernel), 1)
        mask = _padded(xp, ones, [0] * len(pads), extra, 0)
    else:
        mask = _padded(xp, ones, pads, extra, 0)
    total = 0
    count = 0
    for offset in itertools.product(*(range(k) for k in kernel)):
        total = total + _window(xpad, offset, dilations, strides, out_sp)
        count = count + _window(mask, offset, dilations, strides, out_sp)
    return same(xp, total / count, x)


@register("LpPool")
def lp_pool(xp: Any, x: Any, *, auto_pad: str = "NOTSET", ceil_mode: int = 0, dilations: Any = None,
            kernel_shape: Any, p: int = 2, pads: Any = None, strides: Any = None) -> Any:
    kernel, strides, dilations, pads, out_sp, extra = _pool_geometry(
        "LpPool", x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    if 0 in out_sp:  # no window (onnxruntime answers an empty output too)
        return xp.zeros(x.shape[:2] + tuple(out_sp), dtype=x.dtype)
    xpad = _padded(xp, xp.abs(x) ** p, pads, extra, 0)
    total = 0
    for offset in itertools.product(*(range(k) for k in kernel)):
        total = total + _window(xpad, offset, dilations, strides, out_sp)
    return same(xp, total ** (1.0 / p), x)


def _spatial(x: Any) -> tuple:
    return tuple(range(2, x.ndim))


@register("GlobalAveragePool")
def global_average_pool(xp: Any, x: Any) -> Any:
    return same(xp, mean_keepdims(xp, x, _spatial(x)), x)


@register("GlobalMaxPool")
def global_max_pool(xp: Any, x: Any) -> Any:
    return same(xp, xp.max(x, axis=_spatial(x), keepdims=True), x)


@register("GlobalLpPool", since=2)
def global_lp_pool(xp: Any, x: Any, *, p: int = 2) -> Any:
    return same(xp, xp.sum(xp.abs(x) ** p, axis=_spatial(x), keepdims=True) ** (1.0 / p), x)


@register("MaxUnpool", since=9)
def max_unpool(xp: Any, x: Any, indices: Any, output_shape: Any = None, *, kernel_shape: Any,
               pads: Any = None, strides: Any = None) -> Any:
    shape_out = None if output_shape is None else host_ints(xp, output_shape)
    inferred = list(geometry.max_unpool(x.shape, kernel_shape=kernel_shape, strides=strides,
                                        pads=pads, output_shape=shape_out))
    out = xp.zeros(int(np.prod(inferred)), dtype=x.dtype)
    out[indices.reshape(-1)] = x.reshape(-1)
    out = out.reshape(inferred)
    if output_shape is None:
        return out
    # Indices address the inferred shape (as MaxPool produced them); a larger output_shape
    # places that block at the origin and pads with zeros (ONNX's reference and test data).
    if shape_out == inferred:
        return out
    padded = xp.zeros(shape_out, dtype=x.dtype)
    padded[tuple(slice(0, d) for d in inferred)] = out
    return padded
