"""The compiled kernels (``_native.c``, built by ``setup.py`` where a C compiler is)
and when they apply: numpy arrays of float32, never cupy's. Each function returns
None when it does not apply, and its caller runs its numpy path (the same maths,
slower), so a checkout built without a compiler loses speed, not results.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import threading
from types import ModuleType
from typing import Any

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
    return _lib is not None and xp is np and all(
        a is None or getattr(a, "dtype", None) == _F32 for a in arrays)


def erf(xp: Any, x: Any) -> np.ndarray | None:
    """erf of a float32 numpy array through glibc's vector erff (a few ulps)."""
    if not applies(xp, x):
        return None
    x = np.ascontiguousarray(x)
    out = np.empty_like(x)
    _lib.erf_f32(x, out)
    return out


def gelu(xp: Any, x: Any, div: float, one: float, half: float) -> np.ndarray | None:
    """``half * x * (one + erf(x / div))`` of a float32 numpy array in one pass."""
    if not applies(xp, x):
        return None
    x = np.ascontiguousarray(x)
    out = np.empty_like(x)
    _lib.gelu_f32(x, out, div, one, half)
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


def spin_wait(counter: np.ndarray, seen: int, seconds: float) -> bool:
    """Spin, the GIL released, until ``counter[0] != seen`` (True) or ``seconds``
    pass (False); False at once without the compiled module (the caller blocks)."""
    if _lib is None:
        return False
    return bool(_lib.spin_wait(counter, seen, seconds))


# ------------------------------------------------------- the pool's BLAS --
#: CBLAS sgemm names to look for in the process's BLAS, and whether each takes
#: 64-bit integers: numpy's own OpenBLAS (scipy-openblas64), then generic builds.
_SGEMM_NAMES = (("scipy_cblas_sgemm64_", True), ("cblas_sgemm64_", True),
                ("scipy_cblas_sgemm", False), ("cblas_sgemm", False))
_blas_lock = threading.Lock()
_blas_state: list[bool] = []  # [found], once looked up


def _pool_ready() -> bool:
    """Whether the pool's GEMMs have a BLAS: numpy's own, found once through
    threadpoolctl (the libraries this process loaded) and handed to the module."""
    if _lib is None:
        return False
    if _blas_state:
        return _blas_state[0]
    with _blas_lock:
        if not _blas_state:
            _blas_state.append(_find_sgemm())
    return _blas_state[0]


def _find_sgemm() -> bool:
    from threadpoolctl import threadpool_info
    for info in threadpool_info():
        if info.get("user_api") != "blas":
            continue
        try:
            lib = ctypes.CDLL(info["filepath"])
        except OSError:
            continue
        for name, ilp64 in _SGEMM_NAMES:
            fn = getattr(lib, name, None)
            if fn is not None:
                _lib.set_sgemm(ctypes.cast(fn, ctypes.c_void_p).value, ilp64)
                return True
    return False


def gemm(xp: Any, a: Any, b: Any, ways: int) -> np.ndarray | None:
    """``a @ b`` for 2-D float32 numpy arrays (either may be a transposed view) on
    ``ways`` threads of the compiled pool; None when it does not apply."""
    if not (applies(xp, a, b) and a.ndim == 2 and b.ndim == 2
            and a.shape[1] == b.shape[0] and a.size and b.size and _pool_ready()):
        return None  # (an empty operand has no leading dimension BLAS accepts: numpy's path)
    if not (_blas_operand(a) and _blas_operand(b)):
        return None
    out = np.empty((a.shape[0], b.shape[1]), dtype=_F32)
    _lib.gemm_f32(a, b, out, ways)
    return out


def _blas_operand(a: np.ndarray) -> bool:
    """BLAS reads it in place: a unit stride along one axis."""
    s0, s1 = a.strides
    return (s1 == 4 and s0 >= 4 * max(a.shape[1], 1)) or (s0 == 4 and s1 >= 4 * max(a.shape[0], 1))


def conv2d(xp: Any, x: Any, w: Any, b: Any, residual: Any, relu: bool, kernel: tuple,
           strides: tuple, dilations: tuple, pads: tuple, out_sp: tuple,
           ways: int) -> np.ndarray | None:
    """A 2-D convolution of one group, float32 numpy, with the fused chain's
    epilogue (bias, residual, Relu), on ``ways`` threads of the compiled pool:
    (N, M, OH, OW), or None when it does not apply."""
    if not (applies(xp, x, w, b, residual) and x.ndim == 4 and len(kernel) == 2
            and x.size and w.size and _pool_ready()):
        return None
    n, m = x.shape[0], w.shape[0]
    npos = out_sp[0] * out_sp[1]
    out = np.empty((n, m, npos), dtype=_F32)
    geometry = (kernel[0], kernel[1], strides[0], strides[1], dilations[0], dilations[1],
                pads[0], pads[1], out_sp[0], out_sp[1])
    _lib.conv2d_f32(np.ascontiguousarray(x), np.ascontiguousarray(w).reshape(m, -1), out,
                    None if b is None else np.ascontiguousarray(b).reshape(m),
                    None if residual is None else np.ascontiguousarray(residual).reshape(n, m, npos),
                    relu, geometry, ways)
    return out.reshape(n, m, *out_sp)


def pool_stats() -> tuple[int, int]:
    """(jobs posted to the compiled pool, slices its worker threads ran) so far."""
    return (0, 0) if _lib is None else tuple(_lib.pool_stats())


def max_pool2d(xp: Any, x: Any, kernel: tuple, strides: tuple, dilations: tuple, pads: tuple,
               out_sp: tuple, ways: int) -> np.ndarray | None:
    """MaxPool values of a 4-D float32 numpy array (planes over ``ways`` threads of
    the compiled pool; positions outside the input skipped, as ONNX's -inf
    padding); None when it does not apply."""
    if not (applies(xp, x) and x.ndim == 4 and len(kernel) == 2 and x.size):
        return None
    n, c = x.shape[:2]
    out = np.empty((n, c, *out_sp), dtype=_F32)
    _lib.maxpool2d_f32(np.ascontiguousarray(x).reshape(n * c, *x.shape[2:]),
                       out.reshape(n * c, *out_sp),
                       (kernel[0], kernel[1], strides[0], strides[1], dilations[0], dilations[1],
                        pads[0], pads[1]), ways)
    return out
