"""The compiled kernels (``_native.c``, built by ``setup.py`` where a C compiler is)
and when they apply: numpy arrays of float32, never cupy's. Each function returns
None when it does not apply, and its caller runs its numpy path (the same maths,
slower), so a checkout built without a compiler loses speed, not results.
"""

from __future__ import annotations

from typing import Any

import numpy as np

try:
    from . import _native as _lib
except ImportError:  # pragma: no cover -- built without a C compiler
    _lib = None

_F32 = np.dtype(np.float32)


def available() -> bool:
    """Whether the compiled module was built and imports."""
    return _lib is not None


def _applies(xp: Any, x: Any) -> bool:
    return _lib is not None and xp is np and getattr(x, "dtype", None) == _F32


def erf(xp: Any, x: Any) -> np.ndarray | None:
    """erf of a float32 numpy array through glibc's vector erff (a few ulps)."""
    if not _applies(xp, x):
        return None
    x = np.ascontiguousarray(x)
    out = np.empty_like(x)
    _lib.erf_f32(x, out)
    return out


def gelu(xp: Any, x: Any, div: float, one: float, half: float) -> np.ndarray | None:
    """``half * x * (one + erf(x / div))`` of a float32 numpy array in one pass."""
    if not _applies(xp, x):
        return None
    x = np.ascontiguousarray(x)
    out = np.empty_like(x)
    _lib.gelu_f32(x, out, div, one, half)
    return out


def softmax_last(xp: Any, x: Any) -> np.ndarray | None:
    """Softmax over the last axis of a float32 numpy array, row by row in cache."""
    if not _applies(xp, x) or x.ndim == 0 or x.shape[-1] == 0:
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
    if not _applies(xp, x) or x.ndim == 0:
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


def lstm_direction(xs: np.ndarray, rt: np.ndarray, h: np.ndarray, c: np.ndarray,
                   ys: np.ndarray, reverse: bool) -> None:
    """One direction of the common LSTM (see ``_native.c``); the caller checked
    ``available()`` and the dtypes. Releases the GIL for the whole sequence."""
    _lib.lstm_direction(xs, rt, h, c, ys, reverse)


def spin_wait(counter: np.ndarray, seen: int, seconds: float) -> bool:
    """Spin, the GIL released, until ``counter[0] != seen`` (True) or ``seconds``
    pass (False); False at once without the compiled module (the caller blocks)."""
    if _lib is None:
        return False
    return bool(_lib.spin_wait(counter, seen, seconds))
