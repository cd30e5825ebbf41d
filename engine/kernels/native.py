"""The compiled kernels (``_native*.c``, built by ``setup.py`` where a C compiler is)
and when they apply: numpy arrays of float32, never cupy's. Each function returns
None when it does not apply, and its caller runs its numpy path (the same maths,
slower), so a checkout built without a compiler loses speed, not results.
"""

from __future__ import annotations

import importlib.util
import math
import os
import threading
from types import ModuleType
from typing import Any, Callable

import numpy as np

#: A build of the module to load instead of the installed one: ``make test-sanitize``
#: points it at the copy built with -fsanitize=address,undefined (build/sanitize/).
LIBRARY_ENV = "SGLENS_NATIVE_LIBRARY"


def _load() -> ModuleType | None:
    path = os.environ.get(LIBRARY_ENV)
    if path:  # an explicit build: failing to load it is an error, not a silent numpy run
        spec = importlib.util.spec_from_file_location(f"{__package__}._native", path)
        if spec is None or spec.loader is None:
            raise ImportError(f"{LIBRARY_ENV}={path}: not a loadable extension module")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    try:
        from . import _native
    except ImportError:  # pragma: no cover -- built without a C compiler
        return None
    return _native


_lib = _load()

_F32 = np.dtype(np.float32)


def available() -> bool:
    """Whether the compiled module was built and imports."""
    return _lib is not None


def applies(xp: Any, *arrays: Any) -> bool:
    """Whether the compiled kernels take these arrays: built, numpy, every one float32
    (None, an absent optional input, is no obstacle)."""
    if _lib is None or xp is not np:
        return False
    # A loop, not all() over a generator: this runs three times per conv call (~3 us each as a
    # generator, a tenth of a small conv's whole call); numpy's float32 dtype is one object.
    for a in arrays:
        if a is not None:
            dtype = getattr(a, "dtype", None)
            if dtype is not _F32 and dtype != _F32:
                return False
    return True


def erf(xp: Any, x: Any) -> np.ndarray | None:
    """erf of a float32 numpy array through glibc's vector erff (a few ulps)."""
    if not applies(xp, x):
        return None
    x = np.ascontiguousarray(x)
    out = np.empty_like(x)
    _lib.erf_f32(x, out)
    return out


def sigmoid(xp: Any, x: Any, times_x: bool = False) -> np.ndarray | None:
    """``1 / (1 + exp(-x))`` of a float32 numpy array in one pass; ``times_x``: SiLU, ``x`` times it."""
    if not applies(xp, x):
        return None
    x = np.ascontiguousarray(x)
    out = np.empty_like(x)
    _lib.sigmoid_f32(x, out, times_x)
    return out


def gelu(xp: Any, x: Any, div: float, one: float, half: float) -> np.ndarray | None:
    """``half * x * (one + erf(x / div))`` of a float32 numpy array in one pass."""
    if not applies(xp, x):
        return None
    x = np.ascontiguousarray(x)
    out = np.empty_like(x)
    _lib.gelu_f32(x, out, div, one, half)
    return out


def fake_quantize(xp: Any, x: Any, scale: Any, zero_point: Any, low: float,
                  high: float, dequantize: bool = True) -> np.ndarray | None:
    """``(clip(rint(x / s) + z, low, high) - z) * s`` of a float32 numpy array in one pass, for one
    float32 scale and one zero point (a per-tensor Q -> DQ pair); with ``dequantize=False`` the
    quantized values ``clip(rint(x / s) + z, low, high)``, still float32; None otherwise."""
    if not applies(xp, x, scale) or scale.size != 1 or zero_point.size != 1:
        return None
    x = np.ascontiguousarray(x)
    out = np.empty_like(x)
    _lib.quantize_f32(x, out, float(scale.reshape(())), float(zero_point.reshape(())),
                      float(low), float(high), dequantize)
    return out


def softmax_last(xp: Any, x: Any) -> np.ndarray | None:
    """Softmax over the last axis of a float32 numpy array, row by row in cache."""
    if not applies(xp, x) or x.ndim == 0 or x.shape[-1] == 0:
        return None
    x = np.ascontiguousarray(x)
    out = np.empty_like(x)
    _lib.softmax_f32(x, out, x.shape[-1])
    return out


def layer_norm(xp: Any, x: Any, scale: Any, bias: Any, axis: int,
               epsilon: float) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """LayerNormalization of a float32 numpy array over its axes from ``axis`` on, when
    scale (and bias) hold exactly the normalised shape: (y, mean, inv_std), the
    statistics shaped as ONNX's (1 on the normalised axes)."""
    if not applies(xp, x) or x.ndim == 0:
        return None
    axis %= x.ndim
    norm_shape = x.shape[axis:]
    if not all(isinstance(a, np.ndarray) and a.dtype == _F32 and a.shape == norm_shape
               for a in (scale, *(() if bias is None else (bias,)))):
        return None
    n = int(np.prod(norm_shape))
    if n == 0 or x.size == 0:
        return None
    x = np.ascontiguousarray(x)
    y = np.empty_like(x)
    stat_shape = x.shape[:axis] + (1,) * len(norm_shape)
    mean = np.empty(stat_shape, _F32)
    inv = np.empty(stat_shape, _F32)
    _lib.layer_norm_f32(x, np.ascontiguousarray(scale),
                        None if bias is None else np.ascontiguousarray(bias), y, mean, inv, n,
                        epsilon)
    return y, mean, inv


def _conv_geometry(kernel: tuple, strides: tuple, dilations: tuple, pads: tuple,
                   out_sp: tuple) -> tuple:
    return (kernel[0], kernel[1], strides[0], strides[1], dilations[0], dilations[1],
            pads[0], pads[1], out_sp[0], out_sp[1])


def im2col(xp: Any, x: Any, kernel: tuple, strides: tuple, dilations: tuple, pads: tuple,
           out_sp: tuple) -> np.ndarray | None:
    """The im2col matrix of a 2-D conv over a float32 numpy ``x`` (N, C, H, W):
    (N, C * kh * kw, OH * OW), C major, kernel positions minor (the weight's
    (M, C / group, kh, kw) flattened per group), padding as zeros; None when the
    compiled module does not apply."""
    plan = im2col_plan(x.shape, kernel, strides, dilations, pads, out_sp) if applies(xp, x) else None
    return None if plan is None else plan(x)


def im2col_plan(x_shape: tuple, kernel: tuple, strides: tuple, dilations: tuple, pads: tuple,
                out_sp: tuple, scratch: bool = False) -> Callable[[np.ndarray], np.ndarray] | None:
    """``im2col`` decided once for float32 inputs of shape ``x_shape``: ``cols(x)``; None when
    the compiled module does not apply. The caller passes float32 arrays of that shape (the C
    kernel refuses others by their sizes). ``scratch``: the columns are this thread's scratch
    (``scratch_arrays``), for a caller done with them before its next compiled conv."""
    if not (_lib is not None and len(x_shape) == 4 and len(kernel) == 2 and math.prod(x_shape)):
        return None
    n, c = x_shape[:2]
    shape = (n, c * kernel[0] * kernel[1], out_sp[0] * out_sp[1])
    geometry = _conv_geometry(kernel, strides, dilations, pads, out_sp)

    def cols(x: np.ndarray) -> np.ndarray:
        out = scratch_arrays(shape)[0] if scratch else np.empty(shape, dtype=_F32)
        _lib.im2col_f32(np.ascontiguousarray(x), out, geometry)
        return out
    return cols


def im2col_rows(x: np.ndarray, cols: np.ndarray, kernel: tuple, strides: tuple, dilations: tuple,
                pads: tuple, out_sp: tuple, img: int, r0: int, r1: int) -> None:
    """The columns of output rows ``r0..r1`` of image ``img`` of a 2-D conv, written into
    ``cols`` ((C kh kw, (r1 - r0) OW) float32, C-contiguous); the caller checked
    ``applies``."""
    _lib.im2col_rows_f32(np.ascontiguousarray(x), cols,
                         _conv_geometry(kernel, strides, dilations, pads, out_sp), img, r0, r1)


#: ``_native_conv.c``'s DW_MAX_PADDED: the padded plane's most elements per element of
#: the input and output planes.
_DW_MAX_PADDED = 16


def depthwise_conv2d(xp: Any, x: Any, w: Any, b: Any, kernel: tuple, strides: tuple,
                     dilations: tuple, pads: tuple, out_sp: tuple) -> np.ndarray | None:
    """A 2-D conv whose every group reads one input channel (``group == C``; W is
    (M, 1, kh, kw), M a multiple of C), bias added: (N, M, OH, OW) float32, or None
    when the compiled module does not apply."""
    plan = depthwise_plan(x.shape, w, b, kernel, strides, dilations, pads, out_sp) \
        if applies(xp, x) else None
    return None if plan is None else plan(x)


def depthwise_plan(x_shape: tuple, w: Any, b: Any, kernel: tuple, strides: tuple, dilations: tuple,
                   pads: tuple, out_sp: tuple) -> Callable[[np.ndarray], np.ndarray] | None:
    """``depthwise_conv2d`` decided once for float32 inputs of shape ``x_shape`` and this weight
    and bias (reshaped here, once): ``conv(x)``; None when the compiled module does not apply."""
    if not (applies(np, w, b) and len(x_shape) == 4 and len(kernel) == 2 and math.prod(x_shape)
            and w.size):
        return None
    # the kernel's padded copy of a plane: rows and columns its windows read (huge strides
    # or pads around a small input would make it far larger than the planes: numpy's path)
    hp = (out_sp[0] - 1) * strides[0] + (kernel[0] - 1) * dilations[0] + 1
    wp = (out_sp[1] - 1) * strides[1] + (kernel[1] - 1) * dilations[1] + 1
    if hp * wp > _DW_MAX_PADDED * (x_shape[2] * x_shape[3] + out_sp[0] * out_sp[1]) + 65536:
        return None
    n, m = x_shape[0], w.shape[0]
    flat, shape = (n, m, out_sp[0] * out_sp[1]), (n, m, *out_sp)
    weight = np.ascontiguousarray(w).reshape(m, -1)
    bias = None if b is None else np.ascontiguousarray(b).reshape(m)
    geometry = _conv_geometry(kernel, strides, dilations, pads, out_sp)

    def conv(x: np.ndarray) -> np.ndarray:
        out = np.empty(flat, dtype=_F32)
        _lib.depthwise_conv2d_f32(np.ascontiguousarray(x), weight, out, bias, geometry)
        return out.reshape(shape)
    return conv


#: Winograd's transformed input and products are 4x the input and the output (16 values a
#: 2x2 tile): past this, the banded columns (``nn._conv_banded``) keep the memory down.
WINOGRAD_MAX_BYTES = 64 << 20
#: Winograd's filter transform G g G^T (F(2x2, 3x3)).
_WINOGRAD_G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])


def winograd_plan(x_shape: tuple, w: Any, pads: tuple, out_sp: tuple,
                  group: int = 1) -> Callable[[np.ndarray], np.ndarray] | None:
    """A 3x3 conv of stride 1 and no dilation as F(2x2, 3x3) (``_native_winograd.c``), decided
    once for float32 inputs of shape ``x_shape`` and this weight: the input tiles transformed in
    C, 16 GEMMs a group by numpy's matmul (BLAS's threads), the output tiles in C. The weight's
    transform is made once per weight (``prepared``). None when it does not apply."""
    if not (applies(np, w) and len(x_shape) == 4 and w.shape[2:] == (3, 3) and math.prod(x_shape)):
        return None
    from .prepared import prepared
    n, c = x_shape[:2]
    m, (oh, ow) = w.shape[0], out_sp
    th, tw = -(-oh // 2), -(-ow // 2)
    tiles = n * th * tw
    if 16 * max(c, m) * tiles * 4 > WINOGRAD_MAX_BYTES:
        return None
    if c % group or m % group or w.shape[1] * group != c:
        return None
    u = prepared("winograd", (w,), lambda: _winograd_weight(w).reshape(16, group, m // group, c // group))
    geometry = (pads[0], pads[1], th, tw)
    # a group's channels are consecutive: (16, C, tiles) is (16, G, C / G, tiles) as it lies
    v_shape, m_shape = (16, group, c // group, tiles), (16, group, m // group, tiles)

    def conv(x: np.ndarray) -> np.ndarray:
        v, products = scratch_arrays(v_shape, m_shape)
        _lib.winograd_input_f32(np.ascontiguousarray(x), v.reshape(16, c, tiles), geometry)
        np.matmul(u, v, out=products)
        out = np.empty((n, m, oh, ow), dtype=_F32)
        _lib.winograd_output_f32(products.reshape(16, m, tiles), out)
        return out
    return conv


_THREAD = threading.local()


def scratch_arrays(*shapes: tuple) -> list[np.ndarray]:
    """Float32 arrays of these shapes, carved from one buffer this thread reuses from call to
    call (grown to the largest asked): nothing a caller keeps. A fresh array of a few MB is a
    few hundred page faults: the Winograd form of a 64-channel 3x3 conv over 56 x 56 took 3.6 ms
    with arrays of its own, 1.5 ms with these."""
    sizes = [math.prod(s) for s in shapes]
    buf = getattr(_THREAD, "buf", None)
    if buf is None or buf.size < sum(sizes):
        buf = _THREAD.buf = np.empty(sum(sizes), dtype=_F32)
    views, start = [], 0
    for shape, size in zip(shapes, sizes):
        views.append(buf[start:start + size].reshape(shape))
        start += size
    return views


def _winograd_weight(w: np.ndarray) -> np.ndarray:
    """(16, M, C / G): G g G^T of each 3x3 filter, in float64 then rounded once."""
    u = np.einsum("ij,mcjk,lk->ilmc", _WINOGRAD_G, np.asarray(w, dtype=np.float64), _WINOGRAD_G)
    return np.ascontiguousarray(u.reshape(16, *w.shape[:2]), dtype=_F32)


def channel_epilogue(y: np.ndarray, scale: Any, shift: Any, residual: Any,
                     lo: float, hi: float, swish: tuple | None = None,
                     leaky: float | None = None, post: tuple | None = None) -> bool:
    """``y`` (N, M, ...) float32, in place, in one pass: ``y * scale + shift`` per channel
    (either None), ``+ residual``, clamped to ``[lo, hi]`` as ONNX's Clip (no NaN bound), after
    a LeakyRelu of slope ``leaky`` if given, or, with ``swish`` ``(a, b, lo, hi, post, c)``,
    ``y * clip(y * a + b, lo, hi)`` then ``/ c`` (post 1) or ``* c`` (post 2); then, with
    ``post`` ``(scale, shift)``, ``y * scale + shift`` per channel again; False (nothing
    written) where the compiled module does not apply."""
    if not (applies(np, y) and y.flags.c_contiguous and y.flags.writeable):
        return False
    plan = epilogue_plan(y.shape, scale, shift, lo, hi, swish, leaky, post)
    return plan is not None and plan(y, residual)


def epilogue_plan(y_shape: tuple, scale: Any, shift: Any, lo: float, hi: float,
                  swish: tuple | None = None, leaky: float | None = None,
                  post: tuple | None = None) -> Callable[[np.ndarray, Any], bool] | None:
    """``channel_epilogue`` decided once for outputs of shape ``y_shape`` and these per-channel
    constants: ``apply(y, residual)`` (False, nothing written, for a residual that is not
    float32); None when the compiled module does not apply. ``y``: a fresh C-contiguous float32
    array of that shape (a conv's own output)."""
    post = post or (None, None)
    if not (applies(np, scale, shift, *post) and len(y_shape) >= 2 and math.prod(y_shape)):
        return None
    n, m = y_shape[:2]
    scale = None if scale is None else np.ascontiguousarray(scale).reshape(m)
    shift = None if shift is None else np.ascontiguousarray(shift).reshape(m)
    post_scale, post_shift = (None if v is None else np.ascontiguousarray(v).reshape(m) for v in post)

    def apply(y: np.ndarray, residual: Any) -> bool:
        if residual is not None:
            if not applies(np, residual):
                return False
            residual = np.ascontiguousarray(residual).reshape(n, m, -1)
        _lib.channel_epilogue_f32(y.reshape(n, m, -1), scale, shift, residual, lo, hi, swish, leaky,
                                  post_scale, post_shift)
        return True
    return apply


def average_pool2d(xp: Any, x: Any, kernel: tuple, strides: tuple, dilations: tuple, pads: tuple,
                   out_sp: tuple, count_include_pad: int) -> np.ndarray | None:
    """AveragePool of a 4-D float32 numpy array: the window sums by the depthwise kernel with a
    weight of ones (zeros where a window leaves the input), divided by each window's count --
    the taps inside the input, or inside the input and its explicit pads -- made per axis (a
    window's count is its rows' times its columns'). The numpy path added the kh kw shifted
    windows one new array at a time, twice (values and counts): Inception v2's 3x3 pools over
    256-576 channels, ~1.8 ms each, ten a run. None when it does not apply."""
    if not (applies(xp, x) and x.ndim == 4 and len(kernel) == 2 and x.size):
        return None
    c = x.shape[1]
    plan = depthwise_plan(x.shape, np.ones((c, 1, *kernel), _F32), None, kernel, strides, dilations,
                          pads, out_sp)
    if plan is None:
        return None
    total = plan(x)
    counts = [_window_counts(x.shape[2 + i], kernel[i], strides[i], dilations[i], pads[i], pads[i + 2],
                             out_sp[i], count_include_pad) for i in range(2)]
    total /= np.multiply.outer(*counts).astype(_F32)
    return total


def _window_counts(size: int, k: int, stride: int, dilation: int, pad: int, pad_end: int, out: int,
                   include_pad: int) -> np.ndarray:
    """Per output position along one axis, how many of the window's taps a pool counts: those
    inside [0, size), or inside [-pad, size + pad_end) with ``include_pad``."""
    lo, hi = (-pad, size + pad_end) if include_pad else (0, size)
    pos = np.arange(out)[:, None] * stride - pad + np.arange(k)[None, :] * dilation
    return np.count_nonzero((pos >= lo) & (pos < hi), axis=1)


def max_pool2d(xp: Any, x: Any, kernel: tuple, strides: tuple, dilations: tuple, pads: tuple,
               out_sp: tuple) -> np.ndarray | None:
    """MaxPool values of a 4-D float32 numpy array (positions outside the input
    skipped, as ONNX's -inf padding); None when it does not apply."""
    if not (applies(xp, x) and x.ndim == 4 and len(kernel) == 2 and x.size):
        return None
    n, c = x.shape[:2]
    out = np.empty((n, c, *out_sp), dtype=_F32)
    _lib.maxpool2d_f32(np.ascontiguousarray(x).reshape(n * c, *x.shape[2:]),
                       out.reshape(n * c, *out_sp),
                       (kernel[0], kernel[1], strides[0], strides[1], dilations[0], dilations[1],
                        pads[0], pads[1]))
    return out
