"""Sum-kind reductions over a short last axis as slice adds (``kernels/reduce.py``), and the
real-signal STFT / DFT on ``rfft`` with the pair as a view (``kernels/signal.py``): faster
forms that must give the numbers the plain forms gave, bit for bit, and ONNX's reference
evaluator's within float rounding."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from engine.kernels import lookup
from engine.kernels.signal import dft17, stft

OPS = ["ReduceSum", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceMean", "ReduceLogSum"]
PLAIN = {  # the forms the kernels had: numpy's own reduction over the axis
    "ReduceSum": lambda x: np.sum(x, axis=-1, keepdims=True),
    "ReduceSumSquare": lambda x: np.sum(x * x, axis=-1, keepdims=True),
    "ReduceL1": lambda x: np.sum(np.abs(x), axis=-1, keepdims=True),
    "ReduceL2": lambda x: np.sqrt(np.sum(x * x, axis=-1, keepdims=True)),
    "ReduceMean": lambda x: np.sum(x, axis=-1, keepdims=True) / x.dtype.type(x.shape[-1]),
    "ReduceLogSum": lambda x: np.log(np.sum(x, axis=-1, keepdims=True)),
}


def _kernel(op: str):
    kernel = lookup(op, "", 18)
    return lambda xp, x, axes: kernel(xp, x, axes, keepdims=1)[0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [2, 3, 5, 7, 8, 11])
@pytest.mark.parametrize("op", OPS)
def test_a_short_last_axis_gives_numpys_sums_bit_for_bit(op, n, dtype, rng):
    x = (rng.standard_normal((3, 40, 17, n)) * 3).astype(dtype)
    if op == "ReduceLogSum":
        x = np.abs(x)
    got = _kernel(op)(np, x, np.array([-1], np.int64))
    np.testing.assert_array_equal(got, PLAIN[op](x))
    model = helper.make_model(helper.make_graph(
        [helper.make_node(op, ["x", "axes"], ["y"], keepdims=1)], "g",
        [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), list(x.shape)),
         helper.make_tensor_value_info("axes", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), None)]),
        opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x, "axes": np.array([-1], np.int64)})
    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-6)


def test_a_small_or_integer_or_other_axis_reduction_is_numpys(rng):
    """The slice form is taken only where it pays and is exact: other cases are numpy's call."""
    for x, axes in ((rng.standard_normal((2, 3)).astype(np.float32), [-1]),         # tiny
                    (rng.integers(0, 9, (40, 40, 3)).astype(np.int64), [-1]),         # integers
                    (rng.standard_normal((40, 3, 40)).astype(np.float32), [1])):      # not the last axis
        got = _kernel("ReduceSum")(np, x, np.array(axes, np.int64))
        np.testing.assert_array_equal(got, np.sum(x, axis=tuple(axes), keepdims=True))


@pytest.mark.parametrize("keepdims", [1, 0])
@pytest.mark.parametrize("op", OPS)
def test_a_reduction_planned_on_constant_axes_sums_the_same_way(op, keepdims, rng, monkeypatch):
    """The executor's specialised call (axes a constant: ``engine/specialize.py``, its sum
    chosen per shape by ``kernels.reduce.sum_for``) takes the registry's short-axis form:
    the same numbers, bit for bit, kept axis or not."""
    from engine.executor import Executor
    from engine.kernels import reduce
    from onnx import numpy_helper
    from partition import load_model
    x = (rng.standard_normal((3, 40, 17, 2)) * 3).astype(np.float32)
    if op == "ReduceLogSum":
        x = np.abs(x)
    model = helper.make_model(helper.make_graph(
        [helper.make_node(op, ["x", "axes"], ["y"], keepdims=keepdims, name="reduce")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([-1], np.int64), "axes")]),
        opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    short: list[tuple] = []
    real = reduce._slice_sum
    monkeypatch.setattr(reduce, "_slice_sum", lambda v: short.append(v.shape) or real(v))
    with Executor(load_model(model.SerializeToString())) as ex:
        for _ in range(2):  # planned at the first run, the plan's call at the second
            got = ex.run({"x": x}).numpy_outputs()["y"]
            want = PLAIN[op](x)
            np.testing.assert_array_equal(got, want if keepdims else want[..., 0])
    assert len(short) == 2, "the reduction did not sum through the registry's short-axis form"


def _plain_pair(z, dtype):
    return np.stack([np.real(z), np.imag(z)], axis=-1).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("signal_rank", [2, 3])
def test_stft_of_real_samples_is_the_full_transforms_half(signal_rank, dtype, rng):
    x = rng.standard_normal((2, 3000)).astype(dtype)
    window = np.hanning(400).astype(dtype)
    step = np.array(160, np.int64)
    got = stft(np, x if signal_rank == 2 else x[..., None], step, window)
    starts = np.arange((3000 - 400) // 160 + 1)[:, None] * 160 + np.arange(400)[None, :]
    full = np.fft.fft(x[:, starts] * window.reshape(1, 1, -1), n=400, axis=-1)[..., :201]
    assert got.dtype == dtype and got.shape == (2, 17, 201, 2)
    # the same spectrum; rfft's DC and Nyquist bins have an imaginary part of exactly 0, as a
    # real signal's do, where the full transform leaves rounding there (~1e-15 in float64)
    atol = 2e-4 if dtype == np.float32 else 1e-11
    np.testing.assert_allclose(got, _plain_pair(full, dtype), rtol=1e-5, atol=atol)
    assert not got[:, :, 0, 1].any() and not got[:, :, 200, 1].any()
    two_sided = stft(np, x[..., None], step, window, onesided=0)
    assert two_sided.shape == (2, 17, 400, 2)
    np.testing.assert_allclose(two_sided[:, :, :201], got, rtol=1e-5, atol=atol)


def test_dft_of_a_real_input_onesided_is_the_full_transforms_half(rng):
    x = rng.standard_normal((3, 64, 1)).astype(np.float32)
    got = dft17(np, x, None, axis=1, onesided=1)
    full = np.fft.fft(x[..., 0], axis=1)[:, :33]
    np.testing.assert_allclose(got, _plain_pair(full, np.float32), rtol=1e-5, atol=1e-5)
    assert got.shape == (3, 33, 2) and not got[:, 0, 1].any() and not got[:, 32, 1].any()
