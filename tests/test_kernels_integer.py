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


@xp_param
def test_matmul_integer_is_exact_where_every_product_is_largest(xp: Any, rng: np.random.Generator) -> None:
    # |a - a_zp| = |b - b_zp| = 255 everywhere: every K-chunk's sum is 256 * 255**2, the largest a
    # float32 chunk holds (a chunk of 259 would round); K not a multiple of the chunk.
    k = int(rng.integers(1000, 1300))
    a = np.full((3, 5, k), 255, np.uint8)
    b = np.full((k, 7), 255, np.uint8)
    b[:, 3] = 0                             # a column of -255 after its zero point
    b_zp = np.array([0, 0, 0, 255, 0, 0, 0], np.uint8)
    got = check("MatMulInteger", {"a": a, "b": b, "a_zp": np.array(0, np.uint8), "b_zp": b_zp},
                xp=xp, rtol=0, atol=0)[0]
    assert int(got[0, 0, 0]) == k * 255 * 255 and int(got[0, 0, 3]) == -k * 255 * 255


@xp_param
def test_matmul_integer_stacked_rows_and_per_row_zero_points(xp: Any, rng: np.random.Generator) -> None:
    # (rows, 1, K) x (K, N), the shape of a sequence model's quantized Gemm; then per-row a_zp.
    k, n = int(rng.integers(300, 700)), int(rng.integers(20, 60))
    a = _u8(rng, (int(rng.integers(5, 30)), 1, k))
    check("MatMulInteger", {"a": a, "b": _u8(rng, (k, n)), "a_zp": np.array(rng.integers(0, 256), np.uint8),
                            "b_zp": np.array(rng.integers(0, 256), np.uint8)}, xp=xp, rtol=0, atol=0)
    # Per-row a_zp: ONNX's reference evaluator broadcasts it along the last axis (a bug), so
    # the oracle here is the integer product itself.
    from test_kernels_harness import node_model, run_ours
    m = int(rng.integers(2, 9))
    a2, b2, a_zp = _s8(rng, (m, k)), _s8(rng, (k, n)), _s8(rng, (m,))
    feeds = {"a": a2, "b": b2, "a_zp": a_zp}
    got = run_ours(node_model("MatMulInteger", feeds, 1, 17), feeds, xp)[0]
    assert np.array_equal(got, (a2.astype(np.int64) - a_zp.astype(np.int64)[:, None]) @ b2.astype(np.int64))


@xp_param
@pytest.mark.parametrize("channels,kernel,group", [(48, 3, 1), (300, 1, 1), (64, 3, 2), (2, 17, 1)])
def test_conv_integer_is_exact_past_one_chunk(channels: int, kernel: int, group: int, xp: Any,
                                              rng: np.random.Generator) -> None:
    # channels * taps past 256: input channels in chunks (group 1), float64 otherwise (grouped, or
    # a 17x17 filter); operands at their extremes in a corner so the sums are large.
    x = _u8(rng, (1, channels, kernel + 6, kernel + 5))
    w = _s8(rng, (8, channels // group, kernel, kernel))
    x[0, :, :kernel, :kernel] = 255
    w[0] = -128
    check("ConvInteger", {"x": x, "w": w, "x_zp": np.array(rng.integers(0, 256), np.uint8),
                          "w_zp": np.array(rng.integers(-128, 128), np.int8)},
          xp=xp, rtol=0, atol=0, pads=[1, 1, 1, 1], group=group, strides=[1, 2])


def test_integer_products_refuse_operands_wider_than_8_bits(rng: np.random.Generator) -> None:
    from engine.kernels.integer import matmul_integer
    with pytest.raises(ValueError, match="int8 or uint8.*int16"):
        matmul_integer(np, rng.integers(0, 9, (2, 3)).astype(np.int16), _u8(rng, (3, 2)))


def test_a_weight_is_shifted_once_and_the_form_dies_with_it(rng: np.random.Generator) -> None:
    import gc

    from engine.kernels import integer, prepared
    a, b, b_zp = _u8(rng, (4, 300)), _u8(rng, (300, 6)), np.array(7, np.uint8)
    built: list[int] = []
    real = integer._shifted

    def counting(*args: Any) -> Any:
        built.append(args[1].shape[0])
        return real(*args)
    integer._shifted = counting
    try:
        first = integer.matmul_integer(np, a, b, None, b_zp)
        again = integer.matmul_integer(np, a, b, None, b_zp)
    finally:
        integer._shifted = real
    assert built == [4, 300, 4]             # a each call, b once
    assert np.array_equal(first, again)
    assert np.array_equal(first, a.astype(np.int64) @ (b.astype(np.int64) - 7))
    keys = [k for k in prepared._CACHE if k[0] == "matmul-integer-b" and k[1] == id(b)]
    assert keys
    del b
    gc.collect()
    assert not any(k in prepared._CACHE for k in keys)


def _spy_convs(monkeypatch: pytest.MonkeyPatch) -> list[np.dtype]:
    """The dtype of each convolution ConvInteger hands to the float kernel."""
    from engine.kernels import integer
    seen: list[np.dtype] = []
    real = integer.conv

    def spy(xp: Any, x: Any, w: Any, *args: Any, **kw: Any) -> Any:
        seen.append(np.dtype(x.dtype))
        return real(xp, x, w, *args, **kw)
    monkeypatch.setattr(integer, "conv", spy)
    return seen


@pytest.mark.parametrize("group", [1, 2])
def test_conv_integer_sums_the_whole_filter_in_float32_where_its_weights_allow(
        group: int, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch) -> None:
    # 64 channels of 3x3 (K = 576 > 256): with |w| <= 40 each output's sum of |w| is at most
    # 23,040 and 255 times that stays below 2**24, so one float32 convolution is exact -- and
    # the inputs at their extreme make the sums large (~2.6 million).
    seen = _spy_convs(monkeypatch)
    x = np.full((1, 64, 7, 8), 255, np.uint8)
    x[0, :, 3:] = _u8(rng, (64, 4, 8))
    w = rng.integers(-40, 41, size=(8, 64 // group, 3, 3)).astype(np.int8)
    w[0] = 40
    check("ConvInteger", {"x": x, "w": w, "x_zp": np.array(0, np.uint8)}, rtol=0, atol=0,
          pads=[1, 1, 1, 1], group=group)
    assert seen == [np.dtype(np.float32)]               # one convolution, not chunks or float64


def test_conv_integer_cuts_the_filter_where_one_float32_sum_could_round(
        rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch) -> None:
    # |w - w_zp| = 255 everywhere: 255 * 255 * 576 is past 2**24, so the channels go in chunks
    # of 28 (28 * 9 = 252 products) and the result is still exact.
    seen = _spy_convs(monkeypatch)
    x = np.full((1, 64, 5, 5), 255, np.uint8)
    w = np.full((4, 64, 3, 3), -128, np.int8)
    w[1] = 127
    check("ConvInteger", {"x": x, "w": w, "x_zp": np.array(0, np.uint8), "w_zp": np.array(127, np.int8)},
          rtol=0, atol=0)
    assert len(seen) == -(-64 // 28) and all(d == np.float32 for d in seen)


def test_one_product_is_chosen_by_each_outputs_sum_of_weights() -> None:
    from engine.kernels.integer import FLOAT32_EXACT, SHIFTED_MAX, sums_exactly
    limit = (FLOAT32_EXACT - 1) // SHIFTED_MAX          # the largest sum of |w| still exact
    col = np.zeros((1000, 3), np.float32)
    col[:, 1] = -1
    col[: limit % 1000, 2] = 1
    col[:, 2] += limit // 1000                            # column 2 sums to exactly ``limit``
    assert sums_exactly(np, col, -2)
    col[0, 2] += 1
    assert not sums_exactly(np, col, -2)
    assert sums_exactly(np, np.zeros((0, 4), np.float32), -2)


@xp_param
@pytest.mark.parametrize("sign", ["mixed", "positive", "negative"])
def test_dynamic_quantize_linear_matches_the_reference(sign: str, xp: Any, rng: np.random.Generator) -> None:
    # Fresh activations (both signs, or one: the range then includes 0), with values on the
    # rounding ties x / scale = k + 0.5 that round to even.
    x = (rng.standard_normal((2, 7, 9, 13)) * rng.uniform(0.1, 30)).astype(np.float32)
    if sign != "mixed":
        x = np.abs(x) if sign == "positive" else -np.abs(x)
    lo, hi = min(float(x.min()), 0.0), max(float(x.max()), 0.0)
    scale = np.float32((np.float32(hi) - np.float32(lo)) / np.float32(255))
    x.flat[:4] = np.array([0.5, 1.5, 2.5, -0.5], np.float32) * scale
    x.flat[:4] = np.clip(x.flat[:4], lo, hi)
    check("DynamicQuantizeLinear", {"x": x}, xp=xp, n_outputs=3, rtol=0, atol=0)


def test_dynamic_quantize_linear_compiled_pass_equals_numpys(rng: np.random.Generator,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.kernels import native, quant
    if not native.available():
        pytest.skip("the compiled kernels were not built")
    for _ in range(5):
        x = (rng.standard_normal(int(rng.integers(1, 5000))) * rng.uniform(0.01, 100)).astype(np.float32)
        x[:: max(1, x.size // 7)] = np.round(x[:: max(1, x.size // 7)])   # exact values among them
        got = quant.dynamic_quantize_linear(np, x)
        with monkeypatch.context() as m:
            m.setattr(native, "fake_quantize", lambda *a, **k: None)    # numpy's in-place steps
            want = quant.dynamic_quantize_linear(np, x)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and np.array_equal(g, w)
    x = np.array([np.nan, 1.0, -1.0], np.float32)          # NaN: both paths give the same bytes
    with np.errstate(invalid="ignore"):
        got = quant.dynamic_quantize_linear(np, x)
        with monkeypatch.context() as m:
            m.setattr(native, "fake_quantize", lambda *a, **k: None)
            want = quant.dynamic_quantize_linear(np, x)
    assert all(np.array_equal(g, w, equal_nan=g.dtype.kind == "f") for g, w in zip(got, want))
