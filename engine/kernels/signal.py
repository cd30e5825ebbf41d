"""DFT and STFT on ``xp.fft`` (numpy.fft on the CPU, cupy.fft on the GPU).

ONNX carries complex signals as a trailing dimension of 2 (real, imaginary); a trailing
dimension of 1 is a real signal. Outputs always carry the pair, in the input's dtype.
"""

from __future__ import annotations

from typing import Any

from .registry import host_ints, register


def _complex(xp: Any, x: Any) -> Any:
    """[..., 1] or [..., 2] as a complex array without the trailing dimension."""
    if x.shape[-1] == 1:
        return x[..., 0]
    if x.shape[-1] != 2:
        raise ValueError(f"the last dimension of a signal must be 1 (real) or 2 (complex), got {x.shape[-1]}")
    return x[..., 0] + 1j * x[..., 1]


def _pair(xp: Any, z: Any, dtype: Any) -> Any:
    return xp.stack([xp.real(z), xp.imag(z)], axis=-1).astype(dtype)


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
    z = _complex(xp, signal)  # [batch, samples]
    n_frames = (z.shape[1] - length) // step + 1
    starts = xp.arange(n_frames)[:, None] * step + xp.arange(length)[None, :]
    frames = z[:, starts]  # [batch, frames, length]
    if window is not None:
        frames = frames * window.reshape(1, 1, -1)
    out = xp.fft.fft(frames, n=length, axis=-1)
    if onesided:
        out = out[..., :length // 2 + 1]
    return _pair(xp, out, signal.dtype)
