"""MatMulInteger and ConvInteger are exact: checked on fresh random 8-bit operands at the sizes a
dynamically quantized transformer or CNN has, against ONNX's reference evaluator (integer
arithmetic) -- not onnxruntime, whose u8s8 kernels on CPUs without VNNI saturate 16-bit pair
sums (a quantized BERT-mini's key projection: -11623 where the exact sum is -11626)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from test_kernels_harness import check, xp_param


def _u8(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.integers(0, 256, size=shape).astype(np.uint8)


def _s8(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.integers(-128, 128, size=shape).astype(np.int8)


@xp_param
@pytest.mark.parametrize("per_column", [False, True])
def test_matmul_integer_is_exact_at_transformer_sizes(per_column: bool, xp: Any, rng: np.random.Generator) -> None:
    k = int(rng.integers(700, 1100))       # products up to 255*128, sums past 2^24: float32 would round
    a = _u8(rng, (1, 16, k))
    b = _s8(rng, (k, 24))
    a_zp = np.array(rng.integers(0, 256), np.uint8)
    b_zp = _s8(rng, (24,)) if per_column else np.array(0, np.int8)
    a[0, 0] = 255                          # one row at the extreme: |sum| ~ 255 * 128 * k
    b[:, 0] = -128
    got = check("MatMulInteger", {"a": a, "b": b, "a_zp": a_zp, "b_zp": b_zp}, xp=xp, rtol=0, atol=0)[0]
    want = (a.astype(np.int64) - int(a_zp)) @ (b.astype(np.int64) - b_zp.astype(np.int64))
    assert got.dtype == np.int32 and np.array_equal(got, want)


@xp_param
def test_conv_integer_is_exact(xp: Any, rng: np.random.Generator) -> None:
    x = _u8(rng, (1, 16, 9, 11))
    w = _s8(rng, (8, 16, 3, 3))
    check("ConvInteger", {"x": x, "w": w, "x_zp": np.array(rng.integers(0, 256), np.uint8)}, xp=xp,
          rtol=0, atol=0, pads=[1, 1, 1, 1])
