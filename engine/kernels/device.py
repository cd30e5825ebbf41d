"""The kernels' device seam: host-built constants made resident, library calls where cupy has them.

Kernels are written once against ``xp`` (numpy or cupy). A few build small host arrays
from static facts on every call (Resize's per-axis gather indices and weights, say):
``resident`` uploads each distinct one once and hands back the same device array after,
so a warm run copies nothing to the device but its graph inputs.
"""

from __future__ import annotations

import importlib
import math
import threading
import weakref
from collections import OrderedDict
from typing import Any, Sequence

import numpy as np

#: Host constants kept per process (an LRU): the largest one kept, and all of them together.
MAX_BYTES = 1 << 20
MAX_TOTAL_BYTES = 64 << 20

_lock = threading.Lock()
_cache: "OrderedDict[tuple, Any]" = OrderedDict()
_total = 0


def resident(xp: Any, host: np.ndarray) -> Any:
    """``xp.asarray(host)``, uploaded once per distinct value (same dtype, shape and bytes)."""
    if xp is np:
        return host
    host = np.asarray(host, order="C")   # not ascontiguousarray: it makes a 0-d array 1-d
    if host.nbytes > MAX_BYTES:
        return xp.asarray(host)
    key = (id(xp), host.dtype.str, host.shape, host.tobytes())
    with _lock:
        found = _cache.get(key)
        if found is not None:
            _cache.move_to_end(key)
            return found
    global _total
    made = xp.asarray(host)
    with _lock:
        if key not in _cache:
            _cache[key] = made
            _total += 2 * host.nbytes  # the key's bytes and the device copy
        while _total > MAX_TOTAL_BYTES:
            (_, _, _, old), _ = _cache.popitem(last=False)
            _total -= 2 * len(old)
    return made


# ------------------------------------------------------------ library kernels --
# Thin and unverified on a real GPU (none is lent to this project): written against
# cupy's cuDNN wrapper as Chainer calls it, ``cupy.cudnn.convolution_forward(x, W, b, y,
# pad, stride, dilation, groups, auto_tune=, tensor_core=)``. Where that module is
# missing (cupy without cuDNN, cupy >= 14 dropped it) or a call fails, the kernels keep
# their own path (im2col windows + ``xp.matmul``, which is cuBLAS on cupy).

_libraries: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()  # xp -> cuDNN or None
_CUDNN_DTYPES = frozenset({np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)})


def cudnn_of(xp: Any) -> Any:
    """cupy's cuDNN module for ``xp``, or None (numpy, no cuDNN, or it failed before)."""
    if xp is np:
        return None
    key = xp
    if key not in _libraries:
        mod = getattr(xp, "cudnn", None)
        if mod is None:
            try:
                mod = importlib.import_module(f"{xp.__name__}.cudnn")
            except Exception:  # ImportError, or cuDNN libraries missing at load time
                mod = None
        _libraries[key] = mod
    return _libraries[key]


def conv_library(xp: Any, x: Any, w: Any, b: Any, pads: list[int], strides: list[int],
                 dilations: list[int], group: int, out_sp: list[int]) -> Any:
    """Conv through cuDNN where it takes this case (1-3 spatial axes, symmetric pads, float
    dtypes): the output, else None (the caller runs its own path)."""
    cudnn = cudnn_of(xp)
    nsp = len(out_sp)
    if cudnn is None or not 1 <= nsp <= 3 or x.dtype not in _CUDNN_DTYPES or w.dtype != x.dtype \
            or list(pads[:nsp]) != list(pads[nsp:]):
        return None
    pad, stride, dil = tuple(pads[:nsp]), tuple(strides), tuple(dilations)
    y = xp.empty((x.shape[0], w.shape[0], *out_sp), dtype=x.dtype)
    xs, ws, ys = xp.ascontiguousarray(x), xp.ascontiguousarray(w), y
    if nsp == 1:  # cuDNN's smallest case is 2-D: a unit axis after the one there is
        xs, ws, ys = xs[..., None], ws[..., None], y[..., None]
        pad, stride, dil = pad + (0,), stride + (1,), dil + (1,)
    bias = None if b is None else xp.ascontiguousarray(b.astype(x.dtype, copy=False))
    try:
        cudnn.convolution_forward(xs, ws, bias, ys, pad, stride, dil, int(group),
                                  auto_tune=True, tensor_core="auto")
    except Exception:  # noqa: BLE001 - a library that cannot run here: our own path from now on
        _libraries[xp] = None
        return None
    return y


# GELU as one elementwise kernel (cupy compiles it once per dtype and caches it): the
# xp form makes about twenty passes, each a launch. Unverified on a GPU, as above.
_GELU_SRC = "y = half * x * (one + erf(x / div))"
_GELU_DTYPES = frozenset({np.dtype(np.float32), np.dtype(np.float64)})
_elementwise: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()


def gelu(xp: Any, x: Any, div: float, one: float, half: float) -> Any:
    """``half * x * (one + erf(x / div))`` in one kernel launch, or None (numpy, another
    dtype, or no ``ElementwiseKernel`` in this cupy)."""
    if xp is np or x.dtype not in _GELU_DTYPES:
        return None
    kernel = _elementwise.get(xp)
    if kernel is None:
        make = getattr(xp, "ElementwiseKernel", None)
        if make is None:
            return None
        kernel = _elementwise[xp] = make("T x, T div, T one, T half", "T y", _GELU_SRC, "sglens_gelu")
    f = x.dtype.type
    return kernel(x, f(div), f(one), f(half))


# One GRU time step as one kernel (linear_before_reset=1, the exporters' and PyTorch's
# GRU: the default Sigmoid/Tanh, no clip, every sequence running). The step as written is
# about 25 launches (two gate slices, two sigmoids of four passes each, the candidate,
# the blend, two copies); here it is the recurrent GEMM (``hr = h @ R^T``, its bias added
# inside) and this kernel, which also writes the new state into ``h`` (each element read
# before it is written, by the same thread) and into the step's output row ``y``.
_GRU_STEP_SRC = """
const int row = i / hs, j = i - row * hs, g = row * 3 * hs;
const T z = 1 / (1 + exp(-(wx[g + j] + hr[g + j] + rb[j])));
const T r = 1 / (1 + exp(-(wx[g + hs + j] + hr[g + hs + j] + rb[hs + j])));
const T n = tanh(wx[g + 2 * hs + j] + r * (hr[g + 2 * hs + j] + rb[2 * hs + j]));
const T v = (1 - z) * n + z * h[i];
h[i] = v;
y[i] = v;
"""
# One LSTM time step as one kernel (ONNX gate order i, o, f, c; the default Sigmoid, Tanh,
# Tanh; no peepholes, clip or coupling; every sequence running). The step as written is ten
# launches (the bias add, a tanh over the gates, the sigmoid's scale and shift, three
# products and sums for the cell, its tanh, the output product). ``gr`` is the recurrent
# product h @ R^T and ``xw`` the input projection with both biases, row ``row`` of it at
# ``row * xs`` (xs = 0: one bias row for every batch entry, the streaming step's form); the
# i, o, f columns of both come halved (kernels/rnn.py's cached weights), so each sigmoid is
# tanh(v) / 2 + 1/2, exactly as the xp form computes it. The new cell state overwrites
# ``c`` (each element read before it is written, by the same thread); the new hidden state
# goes to ``y``, the step's output row, which the next step's GEMM reads as h.
_LSTM_STEP_SRC = """
const int row = i / hs, j = i - row * hs, g = row * 4 * hs, xr = row * xs;
const T ig = tanh(gr[g + j] + xw[xr + j]) * (T)0.5 + (T)0.5;
const T og = tanh(gr[g + hs + j] + xw[xr + hs + j]) * (T)0.5 + (T)0.5;
const T fg = tanh(gr[g + 2 * hs + j] + xw[xr + 2 * hs + j]) * (T)0.5 + (T)0.5;
const T cell = fg * c[i] + ig * tanh(gr[g + 3 * hs + j] + xw[xr + 3 * hs + j]);
c[i] = cell;
y[i] = og * tanh(cell);
"""
_made: dict[tuple[int, str], Any] = {}   # (id(xp), kernel name) -> kernel, or False where it did not compile
_ran: set[int] = set()   # ids of kernels that compiled and ran here (each lives in _made)


class KernelUnavailable(RuntimeError):
    """A generated kernel that did not compile here: the caller runs its general form."""


def _generated(xp: Any, name: str, make: Any) -> Any:
    """The kernel ``make(xp)`` builds (once per cupy), as a function that launches it; None
    where this cupy cannot make it or it did not compile here before.

    cupy compiles at the first launch. If that fails (an NVRTC or cupy that rejects the
    source), nothing was written yet: the launch raises ``KernelUnavailable`` once, with a
    warning saying why, and the caller runs its general form from then on."""
    key = (id(xp), name)
    kernel = _made.get(key)
    if kernel is False:
        return None
    if kernel is None:
        try:
            kernel = _made[key] = make(xp)
        except AttributeError:   # no ElementwiseKernel / RawKernel in this cupy (the fake's case)
            return None

    def launch(*args: Any, **kw: Any) -> Any:
        try:
            result = kernel(*args, **kw)
        except Exception as exc:  # noqa: BLE001 - cupy's compile errors share no base class
            if id(kernel) in _ran:
                raise
            _made[key] = False
            import warnings  # noqa: PLC0415
            warnings.warn(f"the generated kernel {name} did not compile ({type(exc).__name__}: "
                          f"{str(exc)[:200]}); its op runs its general form", RuntimeWarning, stacklevel=3)
            raise KernelUnavailable(str(exc)) from exc
        _ran.add(id(kernel))
        return result   # the outputs cupy allocated (None where all were passed raw)
    return launch


def gru_step(xp: Any, dtype: Any) -> Any:
    """``step(wx, hr, rb, hs, h, y)`` for C-contiguous (batch, 3*hs) ``wx`` (input
    projection with its bias) and ``hr`` (h @ R^T), (3*hs,) ``rb``, (batch, hs) ``h`` and
    ``y``; or None (numpy, another dtype, no ``ElementwiseKernel`` in this cupy, or it did
    not compile here before: see ``_generated``)."""
    if xp is np or np.dtype(dtype) not in _GELU_DTYPES:
        return None
    launch = _generated(xp, "sglens_gru_step", lambda cp: cp.ElementwiseKernel(
        "raw T wx, raw T hr, raw T rb, int32 hs", "raw T h, raw T y", _GRU_STEP_SRC, "sglens_gru_step"))
    if launch is None:
        return None

    def step(wx: Any, hr: Any, rb: Any, hs: int, h: Any, y: Any) -> None:
        launch(wx, hr, rb, np.int32(hs), h, y, size=h.size)
    return step


def lstm_step(xp: Any, dtype: Any) -> Any:
    """``step(gr, xw, hs, xs, c, y)`` for C-contiguous (rows, 4*hs) ``gr``, ``xw`` read at
    ``row * xs``, (rows, hs) ``c`` and ``y`` (see ``_LSTM_STEP_SRC``); or None (numpy,
    another dtype, no ``ElementwiseKernel`` in this cupy, or it did not compile here before)."""
    if xp is np or np.dtype(dtype) not in _GELU_DTYPES:
        return None
    launch = _generated(xp, "sglens_lstm_step", lambda cp: cp.ElementwiseKernel(
        "raw T gr, raw T xw, int32 hs, int32 xs", "raw T c, raw T y", _LSTM_STEP_SRC,
        "sglens_lstm_step"))
    if launch is None:
        return None

    def step(gr: Any, xw: Any, hs: int, xs: int, c: Any, y: Any) -> None:
        launch(gr, xw, np.int32(hs), np.int32(xs), c, y, size=c.size)
    return step


# A convolution's columns in one launch (1-D and 2-D): element i of the (n, c*kh*kw, oh*ow)
# column matrix is the input element under tap (ky, kx) of output position (oy, ox), or 0
# in the padding. As written the gather is three launches (a zeroed padded copy, the copy
# in, the indexed read); a host-built index for it would be one upload per shape, tens of
# MB for a large map.
_WINDOW_HEAD = """
long long r = i;
const long long ox = r % ow; r /= ow;
const long long oy = r % oh; r /= oh;
"""   # output position (oy, ox); ``r`` goes on to the rest of the index
_IM2COL_SRC = _WINDOW_HEAD + """
const long long kx = r % kw; r /= kw;
const long long ky = r % kh; r /= kh;
const long long ch = r % c; r /= c;
const long long iy = oy * sh - ph + ky * dh, ix = ox * sw - pw + kx * dw;
y = (iy >= 0 && iy < h && ix >= 0 && ix < w) ? x[((r * c + ch) * h + iy) * w + ix] : (T)0;
"""


def _window_geometry(x: Any, kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
                     pads: Sequence[int], out_sp: Sequence[int]) -> tuple[int, ...]:
    """(h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow, ph_end, pw_end) of a 1-D or 2-D window
    op, in the window kernels' parameter order: a 1-D one is a 2-D one of height 1."""
    if len(kernel) == 1:
        return (1, x.shape[2], 1, kernel[0], 1, strides[0], 0, pads[0], 1, dilations[0], 1, out_sp[0],
                0, pads[1])
    return (*x.shape[2:], *kernel, *strides, pads[0], pads[1], *dilations, *out_sp, pads[2], pads[3])


def im2col(xp: Any, x: Any, kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
           pads: Sequence[int], out_sp: Sequence[int]) -> Any:
    """The (n, c * prod(kernel), prod(out_sp)) columns of a 1-D or 2-D convolution's input
    in one generated kernel, or None (numpy, 3-D, another dtype, or no kernel here)."""
    if xp is np or x.dtype not in _GELU_DTYPES or len(kernel) not in (1, 2):
        return None
    launch = _generated(xp, "sglens_im2col", lambda cp: cp.ElementwiseKernel(
        "raw T x, int64 c, int64 h, int64 w, int64 kh, int64 kw, int64 sh, int64 sw, int64 ph, "
        "int64 pw, int64 dh, int64 dw, int64 oh, int64 ow", "T y", _IM2COL_SRC, "sglens_im2col"))
    if launch is None:
        return None
    n, c = x.shape[:2]
    geometry = _window_geometry(x, kernel, strides, dilations, pads, out_sp)[:12]
    cols = xp.empty((n, c * math.prod(kernel), math.prod(out_sp)), dtype=x.dtype)
    try:
        launch(xp.ascontiguousarray(x), np.int64(c), *(np.int64(v) for v in geometry), cols)
    except KernelUnavailable:
        return None
    return cols


# Max and average pooling, one generated kernel each (1-D and 2-D): an output element loops
# over its window, reading only positions inside the input (the padding is -inf for the
# maximum, zeros for the sum). As written a 3x3 MaxPool is eight launches, a 2x2 average 14.
_MAX_POOL_SRC = _WINDOW_HEAD + """
T m = lowest;
for (long long ky = 0; ky < kh; ++ky) {
  const long long iy = oy * sh - ph + ky * dh;
  for (long long kx = 0; kx < kw; ++kx) {
    const long long ix = ox * sw - pw + kx * dw;
    if (iy >= 0 && iy < h && ix >= 0 && ix < w) {
      const T v = x[(r * h + iy) * w + ix];
      m = (v != v || v > m) ? v : m;   /* numpy's maximum: a NaN wins */
    }
  }
}
y = m;
"""
_AVG_POOL_SRC = _WINDOW_HEAD + """
T s = 0;
long long n = 0;
for (long long ky = 0; ky < kh; ++ky) {
  const long long iy = oy * sh - ph + ky * dh;
  for (long long kx = 0; kx < kw; ++kx) {
    const long long ix = ox * sw - pw + kx * dw;
    const bool inside = iy >= 0 && iy < h && ix >= 0 && ix < w;
    if (inside) s += x[(r * h + iy) * w + ix];
    if (with_pads ? (iy >= -ph && iy < h + ph_end && ix >= -pw && ix < w + pw_end) : inside) ++n;
  }
}
y = s / (T)n;
"""
_POOL_PARAMS = ("raw T x, int64 h, int64 w, int64 kh, int64 kw, int64 sh, int64 sw, int64 ph, int64 pw, "
                "int64 dh, int64 dw, int64 oh, int64 ow")


def pool(xp: Any, x: Any, op: str, kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
         pads: Sequence[int], out_sp: Sequence[int], count_include_pad: int = 0) -> Any:
    """MaxPool (its values only) or AveragePool of a 1-D or 2-D ``x`` in one generated kernel,
    or None (numpy, 3-D, another dtype, or no kernel here). ``pads`` are the explicit ones
    (begin..., end...); ``out_sp`` includes what ceil_mode adds."""
    if xp is np or x.dtype not in _GELU_DTYPES or len(kernel) not in (1, 2):
        return None
    avg = op == "AveragePool"
    name = "sglens_avg_pool" if avg else "sglens_max_pool"
    params = _POOL_PARAMS + (", int64 ph_end, int64 pw_end, bool with_pads" if avg else ", T lowest")
    launch = _generated(xp, name, lambda cp: cp.ElementwiseKernel(
        params, "T y", _AVG_POOL_SRC if avg else _MAX_POOL_SRC, name))
    if launch is None:
        return None
    geometry = [np.int64(v) for v in _window_geometry(x, kernel, strides, dilations, pads, out_sp)]
    y = xp.empty(x.shape[:2] + tuple(out_sp), dtype=x.dtype)
    extra = ([*geometry[12:], np.bool_(bool(count_include_pad))] if avg else [x.dtype.type(-np.inf)])
    try:
        launch(xp.ascontiguousarray(x), *geometry[:12], *extra, y)
    except KernelUnavailable:
        return None
    return y


def _clamp(v: str, lo: str | None, hi: str | None) -> list[str]:
    """Source lines clamping ``v`` as numpy's maximum then minimum do (a NaN bound or value
    gives NaN; lo > hi gives hi)."""
    return [f"{v} = ({b} != {b} || {v} {op} {b}) ? {b} : {v};" for b, op in ((lo, "<"), (hi, ">")) if b]


def hard_swish(xp: Any, last: str, x: Any, shift: Any, lo: Any, hi: Any, scale: Any = None) -> Any:
    """``engine/fuse.py``'s HardSwish, ``x * clip(x + shift, lo, hi)`` then ``/ scale``
    (``last`` "Div"), ``* scale`` ("Mul") or nothing (""), in one generated kernel with the
    same operations in the same order (four launches as written); None where it cannot."""
    if xp is np or x.dtype not in _GELU_DTYPES:
        return None
    args = [x, shift, lo, hi] + ([scale] if last else [])
    if any(not isinstance(a, xp.ndarray) or a.dtype != x.dtype for a in args):
        return None
    tail = {"Div": "y = t / scale;", "Mul": "y = t * scale;", "": "y = t;"}[last]
    name = f"sglens_hard_swish{last.lower()}"
    launch = _generated(xp, name, lambda cp: cp.ElementwiseKernel(
        "T x, T shift, T lo, T hi" + (", T scale" if last else ""), "T y",
        "\n".join(["T t = x + shift;", *_clamp("t", "lo", "hi"), "t = t * x;", tail]), name))
    if launch is None:
        return None
    try:
        return launch(*args)
    except KernelUnavailable:
        return None


def conv_epilogue(xp: Any, y: Any, bias: Any, affine: Any, residual: Any, bounds: Any) -> bool:
    """A convolution's epilogue on its own output ``y`` (n, m, ...) in one generated kernel:
    ``+ bias`` and ``* scale + shift`` per channel, ``+ residual``, then clamped to
    ``bounds`` (lo, hi; either None; a number or a one-element device array). False where it cannot (numpy, another dtype, no
    kernel here): the caller runs the passes as written. The same operations in the same
    order (a GPU may contract ``* scale + shift`` into one rounding)."""
    if xp is np or y.dtype not in _GELU_DTYPES or not y.flags.c_contiguous:
        return False
    if bias is None and affine is None and residual is None and bounds[0] is None and bounds[1] is None:
        return True   # nothing to do
    per_channel = (1, -1) + (1,) * (y.ndim - 2)
    args, params, lines = [], [], ["T v = y;"]
    for name, value, line in (("b", bias, "v = v + b;"), ("s", None if affine is None else affine[0], None),
                              ("t", None if affine is None else affine[1], "v = v * s + t;"),
                              ("r", residual, "v = v + r;")):
        if value is not None:
            args.append(value.reshape(per_channel) if name != "r" else value)
            params.append(f"T {name}")
            if line:
                lines.append(line)
    for name, value in zip(("lo", "hi"), bounds):
        if value is None:
            continue
        if hasattr(value, "shape"):   # a device scalar (a Clip's bound input): as a 0-d operand
            if value.size != 1:
                return False
            value = value.reshape(())
        else:
            value = y.dtype.type(value)
        args.append(value)
        params.append(f"T {name}")
    lines += _clamp("v", *(name if value is not None else None for name, value in zip(("lo", "hi"), bounds)))
    if any(getattr(a, "dtype", y.dtype) != y.dtype for a in args):
        return False
    lines.append("y = v;")
    name = "sglens_conv_epilogue_" + "_".join(p.split()[1] for p in params)
    launch = _generated(xp, name, lambda cp: cp.ElementwiseKernel(
        ", ".join(params), "T y", "\n".join(lines), name))
    if launch is None:
        return False
    try:
        launch(*args, y)
    except KernelUnavailable:
        return False
    return True


# LayerNormalization over trailing axes as one kernel: a block per row computes the mean,
# then the mean of squared deviations (the reference's two passes, in float), then writes
# the normalized, scaled and shifted row and the row's mean and 1/std. The form as written
# is about 14 launches (row sums as GEMVs, centring, squares, sqrt, reciprocal, scale, shift).
_LAYER_NORM_SRC = r"""
extern "C" __global__ void sglens_layer_norm_f32(
        const float* x, const float* scale, const float* bias, float* y, float* mean_out,
        float* inv_out, int n, float eps, int has_bias) {
    __shared__ float part[256];
    const long long row = blockIdx.x;
    const float* xr = x + row * n;
    float* yr = y + row * n;
    float s = 0.f;
    for (int j = threadIdx.x; j < n; j += blockDim.x) s += xr[j];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    const float mean = part[0] / n;
    __syncthreads();
    float v = 0.f;
    for (int j = threadIdx.x; j < n; j += blockDim.x) { const float d = xr[j] - mean; v += d * d; }
    part[threadIdx.x] = v;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    const float inv = 1.f / sqrtf(part[0] / n + eps);
    for (int j = threadIdx.x; j < n; j += blockDim.x)
        yr[j] = (xr[j] - mean) * inv * scale[j] + (has_bias ? bias[j] : 0.f);
    if (threadIdx.x == 0) { mean_out[row] = mean; inv_out[row] = inv; }
}
"""
_ROW_THREADS = 256   # a block per row: the sources' shared ``part[256]``


def _layer_norm_rows(xp: Any) -> Any:
    """``rows(x, scale, bias, y, mean, inv, n, eps)`` over C-contiguous float32 rows of
    length ``n`` (``kernels/norm.py`` checks the shapes), or None: see ``_generated``."""
    launch = _generated(xp, "sglens_layer_norm_f32",
                        lambda cp: cp.RawKernel(_LAYER_NORM_SRC, "sglens_layer_norm_f32"))
    if launch is None:
        return None

    def rows(x: Any, scale: Any, bias: Any, y: Any, mean: Any, inv: Any, n: int, eps: float) -> None:
        launch((mean.size,), (_ROW_THREADS,), (x, scale, bias if bias is not None else scale, y, mean, inv,
                                               np.int32(n), np.float32(eps), np.int32(bias is not None)))
    return rows


def layer_norm(xp: Any, x: Any, scale: Any, bias: Any, axis: int, eps: float) -> tuple | None:
    """LayerNormalization (stash_type 1) of float32 ``x`` over its axes from ``axis`` as one
    kernel: (y, mean, inv_std) as the op returns them; None where it does not apply
    (numpy, another dtype, a scale or bias that broadcasts, no kernel here or it did not
    compile)."""
    if xp is np or x.dtype != np.float32 or x.size == 0:
        return None
    n = math.prod(x.shape[axis:])
    if scale.size != n or scale.dtype != np.float32 or (
            bias is not None and (bias.size != n or bias.dtype != np.float32)):
        return None
    rows = _layer_norm_rows(xp)
    if rows is None:
        return None
    xc = xp.ascontiguousarray(x)
    y = xp.empty(x.shape, dtype=np.float32)
    stat_shape = x.shape[:axis] + (1,) * (x.ndim - axis)
    mean = xp.empty(stat_shape, dtype=np.float32)
    inv = xp.empty(stat_shape, dtype=np.float32)
    try:
        rows(xc, xp.ascontiguousarray(scale), None if bias is None else xp.ascontiguousarray(bias),
             y, mean, inv, n, eps)
    except KernelUnavailable:   # it did not compile here: the op's general form
        return None
    return y, mean, inv


# Softmax over the last axis as one kernel: a block per row takes the row's maximum (NaN
# propagating, as numpy's max does), the sum of exp(x - max), then writes each quotient.
# The form as written is five launches (max, subtract, exp, sum, divide). A row of -inf
# gives NaN, as the reference's -inf - -inf does.
_SOFTMAX_SRC = r"""
extern "C" __global__ void sglens_softmax_last_f32(const float* x, float* y, int n) {
    __shared__ float part[256];
    const long long row = blockIdx.x;
    const float* xr = x + row * n;
    float* yr = y + row * n;
    float m = __int_as_float(0xff800000);   /* -inf: NVRTC has no math.h, so no INFINITY */
    for (int j = threadIdx.x; j < n; j += blockDim.x) { const float v = xr[j]; m = (v != v || v > m) ? v : m; }
    part[threadIdx.x] = m;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) {
            const float a = part[threadIdx.x], b = part[threadIdx.x + w];
            part[threadIdx.x] = (b != b || b > a) ? b : a;
        }
        __syncthreads();
    }
    m = part[0];
    __syncthreads();
    float s = 0.f;
    for (int j = threadIdx.x; j < n; j += blockDim.x) s += expf(xr[j] - m);
    part[threadIdx.x] = s;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    s = part[0];
    for (int j = threadIdx.x; j < n; j += blockDim.x) yr[j] = expf(xr[j] - m) / s;
}
"""


def _softmax_rows(xp: Any) -> Any:
    """``rows(x, y, n)`` over C-contiguous float32 rows of length ``n``, or None: see ``_generated``."""
    launch = _generated(xp, "sglens_softmax_last_f32",
                        lambda cp: cp.RawKernel(_SOFTMAX_SRC, "sglens_softmax_last_f32"))
    if launch is None:
        return None

    def rows(x: Any, y: Any, n: int) -> None:
        launch((x.size // n,), (_ROW_THREADS,), (x, y, np.int32(n)))
    return rows


def softmax_last(xp: Any, x: Any) -> Any:
    """Softmax of float32 ``x`` over its last axis as one kernel, or None (numpy, another
    dtype, an empty axis, no kernel here or it did not compile)."""
    if xp is np or x.dtype != np.float32 or x.ndim < 1 or x.size == 0 or x.shape[-1] == 0:
        return None
    rows = _softmax_rows(xp)
    if rows is None:
        return None
    xc = xp.ascontiguousarray(x)
    y = xp.empty(x.shape, dtype=np.float32)
    try:
        rows(xc, y, x.shape[-1])
    except KernelUnavailable:   # it did not compile here: the op's general form
        return None
    return y
