"""MatMulInteger and ConvInteger: exact int32 results at float32 BLAS speed.

numpy has no integer BLAS (an int32 matmul is a plain loop: a dynamically quantized
BERT-mini took 887 ms against onnxruntime's 11), so the products run in floating point,
arranged to stay exact. The operands are 8-bit (the ops' types are int8 and uint8), so an
operand shifted by its zero point is at most 255 in magnitude and one product at most
255**2 = 65,025. A sum of ``EXACT_K`` = 256 such products stays below
256 * 65,025 = 16,646,400 < 2**24, and so does every partial sum of it: float32 holds each
exactly, whatever order the BLAS adds in and with or without FMA. A product over a longer K
is cut into float32 products over K-chunks of 256, each converted to int32 exactly and
summed in int32 (the ops' accumulator type, wrapping as theirs does).

Measured on ddddocr's dynamically quantized CRNN (``common_old.onnx`` in the ddddocr wheel):
its MatMulInteger, (28, 1, 1024) x (1024, 8210), took 132 ms in float64 with the weight
converted on every call, as 28 separate row-products; one 2-D float32 product over chunks
with the shifted weight prepared once takes 9 ms (one float64 product with a prepared weight:
14 ms). The shifted weight is kept per weight array (``prepared.py``): 4 bytes an element
beside the model's 1.

The 256 bound is the worst case, every product at 255**2. A tighter one holds for each
output: every partial sum of it, in any order, is a sum of some of its products, so its
magnitude is at most ``255 * sum(|w|)`` over that output's weights. Where that stays below
2**24 for every output of a weight (checked once per weight), one float32 product over the
whole K is exact: no chunks, and grouped convolutions stay in float32. Real quantized
weights are far from the extremes: ddddocr's CRNN has K up to 1,024 and row sums of |w| up
to 14,801 (255 times that is 3.8 million), so none of its products is cut any more: its CPU
time a run went from 45.8-46.3 to 38.9-40.9 ms (``bench/real_engine.py --models
ddddocr_crnn_int8 --cpu``, before and after alternately, twice).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .nn import conv
from .prepared import prepared
from .registry import register

#: The longest K a float32 product of 8-bit operands sums exactly (see the module's text).
EXACT_K = 256
#: Integers of smaller magnitude are exact in float32.
FLOAT32_EXACT = 2 ** 24
#: The largest magnitude of an 8-bit value shifted by an 8-bit zero point.
SHIFTED_MAX = 255


def _eight_bit(op: str, *arrays: Any) -> None:
    for a in arrays:
        if a is not None and np.dtype(a.dtype) not in (np.dtype(np.int8), np.dtype(np.uint8)):
            raise ValueError(f"{op} takes int8 or uint8 operands and zero points, got "
                             f"{np.dtype(a.dtype).name}; quantize the model's tensors to 8 bits")


def _shifted(xp: Any, x: Any, zero: Any, axis_shape: tuple | None = None) -> Any:
    """``x - zero`` in float32 (exact for 8-bit values); ``zero`` reshaped to ``axis_shape``."""
    v = x.astype(np.float32)
    if zero is None:
        return v
    z = zero.astype(np.float32)
    if axis_shape is not None and z.ndim and z.size > 1:
        z = z.reshape(axis_shape)
    return v - z


def sums_exactly(xp: Any, w: Any, k_axis: int) -> bool:
    """True where one float32 product over the whole K is exact: ``SHIFTED_MAX`` times the
    largest sum of ``|w|`` along ``k_axis`` (one output's weights) is below 2**24."""
    if w.size == 0:
        return True
    return float(xp.abs(w).sum(axis=k_axis).max()) * SHIFTED_MAX < FLOAT32_EXACT


def exact_product(xp: Any, a: Any, b: Any, whole: bool = False) -> Any:
    """``a @ b`` as int32, for float32 operands holding integers of magnitude <= 255;
    ``whole``: one product over K is exact (``sums_exactly``), else K-chunks of ``EXACT_K``."""
    if a.ndim > 2 and b.ndim == 2 and a.flags.c_contiguous:
        # Stacked rows times one matrix: one 2-D product, not one per row (numpy's
        # matmul streams the whole matrix once per stacked row).
        flat = exact_product(xp, a.reshape(-1, a.shape[-1]), b, whole)
        return flat.reshape(a.shape[:-1] + b.shape[1:])
    k = a.shape[-1]
    step = max(k, 1) if whole else EXACT_K
    acc = None
    for k0 in range(0, max(k, 1), step):
        part = xp.matmul(a[..., k0:k0 + step], b[..., k0:k0 + step, :]).astype(np.int32)
        acc = part if acc is None else acc + part
    return acc


@register("MatMulInteger", since=10)
def matmul_integer(xp: Any, a: Any, b: Any, a_zero: Any = None, b_zero: Any = None) -> Any:
    _eight_bit("MatMulInteger", a, b, a_zero, b_zero)
    # a_zero: a scalar, or one per row of a (1-D, M); b_zero: a scalar, or one per column of b.
    fa = _shifted(xp, a, a_zero, (-1, 1))

    def shifted_b() -> tuple[Any, bool]:
        if b_zero is None or b_zero.ndim == 0 or b_zero.size == 1:
            fb = _shifted(xp, b, b_zero)
        else:
            fb = _shifted(xp, b, b_zero, b_zero.shape[:-1] + (1, b_zero.shape[-1]))
        return fb, sums_exactly(xp, fb, -2)
    fb, whole = prepared("matmul-integer-b", (b, b_zero), shifted_b)
    return exact_product(xp, fa, fb, whole)


@register("ConvInteger", since=10)
def conv_integer(xp: Any, x: Any, w: Any, x_zp: Any = None, w_zp: Any = None, **attrs: Any) -> Any:
    _eight_bit("ConvInteger", x, w, x_zp, w_zp)
    # Shifted first, so the padding is the zero point (0 once shifted), as onnxruntime pads.
    fx = _shifted(xp, x, x_zp)

    def shifted_w() -> tuple[Any, bool]:
        fw = _shifted(xp, w, w_zp, (-1,) + (1,) * (w.ndim - 1))
        return fw, sums_exactly(xp, fw.reshape(fw.shape[0], -1), -1)
    fw, whole = prepared("conv-integer-w", (w, w_zp), shifted_w)
    channels, taps = int(w.shape[1]), math.prod(int(d) for d in w.shape[2:])
    if whole or channels * taps <= EXACT_K:
        return conv(xp, fx, fw, **attrs).astype(np.int32)
    if int(attrs.get("group", 1)) != 1 or taps > EXACT_K:
        # Grouped, or one filter of more than 256 taps: float64 sums stay exact below 2**53.
        return conv(xp, fx.astype(np.float64), fw.astype(np.float64), **attrs).astype(np.int32)
    # Input channels in chunks of at most 256 products per output element, summed in int32.
    step = EXACT_K // taps
    acc = None
    for c0 in range(0, channels, step):
        part = conv(xp, fx[:, c0:c0 + step], fw[:, c0:c0 + step], **attrs).astype(np.int32)
        acc = part if acc is None else acc + part
    return acc
