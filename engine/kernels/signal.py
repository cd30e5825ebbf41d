"""DFT and STFT on ``xp.fft`` (numpy.fft on the CPU, cupy.fft on the GPU).

ONNX carries complex signals as a trailing dimension of 2 (real, imaginary); a trailing
dimension of 1 is a real signal. Outputs always carry the pair, in the input's dtype.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .dtypes import np_dtype
from .registry import host_ints, register, to_host


def _complex(xp: Any, x: Any) -> Any:
    """[..., 1] or [..., 2] as a complex array without the trailing dimension."""
    if x.shape[-1] == 1:
        return x[..., 0]
    if x.shape[-1] != 2:
        raise ValueError(f"the last dimension of a signal must be 1 (real) or 2 (complex), got {x.shape[-1]}")
    return x[..., 0] + 1j * x[..., 1]


def _pair(xp: Any, z: Any, dtype: Any) -> Any:
    """``z`` as ONNX's trailing (real, imaginary) pair in ``dtype``: on the host the complex
    array's own memory seen as floats (36 us -> 1 us for a 98-frame spectrum), elsewhere a stack."""
    if xp is np and np.dtype(dtype) in _COMPLEX_OF:
        z = np.ascontiguousarray(z, dtype=_COMPLEX_OF[np.dtype(dtype)])
        return z.view(dtype).reshape(z.shape + (2,))
    return xp.stack([xp.real(z), xp.imag(z)], axis=-1).astype(dtype)


_COMPLEX_OF = {np.dtype(np.float32): np.dtype(np.complex64), np.dtype(np.float64): np.dtype(np.complex128)}


def _dft(xp: Any, x: Any, length: Any, axis: int, inverse: int, onesided: int) -> Any:
    axis = axis % x.ndim
    if axis == x.ndim - 1:
        raise ValueError("DFT axis must not be the last (real/imaginary) dimension")
    n = host_ints(xp, length)[0] if length is not None else None
    if n is None:
        n = 2 * (x.shape[axis] - 1) if (inverse and onesided) else x.shape[axis]
    z = _complex(xp, x)
    if inverse and onesided:
        return xp.fft.irfft(z, n=n, axis=axis)[..., None].astype(x.dtype)
    if onesided and not inverse and x.shape[-1] == 1:   # real input: the half spectrum alone
        return _pair(xp, xp.fft.rfft(z, n=n, axis=axis), x.dtype)
    out = (xp.fft.ifft if inverse else xp.fft.fft)(z, n=n, axis=axis)
    if onesided and not inverse:
        out = xp.take(out, xp.arange(n // 2 + 1), axis=axis)
    return _pair(xp, out, x.dtype)


@register("DFT", since=17)
def dft17(xp: Any, x: Any, dft_length: Any = None, *, axis: int = 1, inverse: int = 0,
          onesided: int = 0) -> Any:
    return _dft(xp, x, dft_length, axis, inverse, onesided)


@register("DFT", since=20)
def dft20(xp: Any, x: Any, dft_length: Any = None, axis: Any = None, *, inverse: int = 0,
          onesided: int = 0) -> Any:
    ax = -2 if axis is None else host_ints(xp, axis)[0]
    return _dft(xp, x, dft_length, ax, inverse, onesided)


@register("STFT", since=17)
def stft(xp: Any, signal: Any, frame_step: Any, window: Any = None, frame_length: Any = None, *,
         onesided: int = 1) -> Any:
    step = host_ints(xp, frame_step)[0]
    if frame_length is not None:
        length = host_ints(xp, frame_length)[0]
    elif window is not None:
        length = window.shape[0]
    else:
        raise ValueError("STFT needs a window or a frame_length")
    # [batch, samples]. ONNX asks for [batch, samples, 1] (real) or [..., 2]; onnxruntime also
    # reads a 2-D signal as real samples, and exporters rely on it (onnx-asr's whisper and NeMo
    # preprocessors, written with onnxscript, pass the waveform as it comes)
    z = signal if signal.ndim == 2 else _complex(xp, signal)
    n_frames = (z.shape[1] - length) // step + 1
    starts = xp.arange(n_frames)[:, None] * step + xp.arange(length)[None, :]
    frames = z[:, starts]  # [batch, frames, length]
    if window is not None:
        frames = frames * window.reshape(1, 1, -1)
    if onesided and not xp.iscomplexobj(frames):   # real samples: the half spectrum alone (4.5x faster)
        return _pair(xp, xp.fft.rfft(frames, n=length, axis=-1), signal.dtype)
    out = xp.fft.fft(frames, n=length, axis=-1)
    if onesided:
        out = out[..., :length // 2 + 1]
    return _pair(xp, out, signal.dtype)


@register("MelWeightMatrix", since=17)
def mel_weight_matrix(xp: Any, num_mel_bins: Any, dft_length: Any, sample_rate: Any, lower_edge_hertz: Any,
                      upper_edge_hertz: Any, *, output_datatype: int = 1) -> Any:
    """[dft_length // 2 + 1, num_mel_bins] triangular filters, equally spaced on the mel
    scale (mel = 2595 log10(1 + hz / 700)), with ONNX's integer bin placement. Small and
    made from scalars: built on the host, then moved to ``xp``."""
    bins, length = int(host_ints(xp, num_mel_bins)[0]), int(host_ints(xp, dft_length)[0])
    rate = float(to_host(xp, sample_rate).reshape(-1)[0])
    lo_hz = float(to_host(xp, lower_edge_hertz).reshape(-1)[0])
    hi_hz = float(to_host(xp, upper_edge_hertz).reshape(-1)[0])
    lo_mel, hi_mel = (2595 * np.log10(1 + f / 700) for f in (lo_hz, hi_hz))
    points = np.arange(bins + 2) * ((hi_mel - lo_mel) / (bins + 2)) + lo_mel
    hz = 700 * (10 ** (points / 2595) - 1)
    edges = (((length + 1) * hz) // rate).astype(np.int64)
    out = np.zeros((length // 2 + 1, bins))
    for i in range(bins):
        left, centre, right = int(edges[i]), int(edges[i + 1]), int(edges[i + 2])
        if centre == left:
            out[centre, i] = 1
        else:
            j = np.arange(left, centre + 1)
            out[j, i] = (j - left) / (centre - left)
        if right > centre:
            j = np.arange(centre, right)
            out[j, i] = (right - j) / (right - centre)
    return xp.asarray(out.astype(np_dtype(output_datatype)))
