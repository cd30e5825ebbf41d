"""The LSTM kernel's fast path (one GEMM input projection, pre-scaled gates, a cached
transposed recurrent weight) against onnxruntime, on sequences long enough to matter,
run repeatedly through one executor, and after the recurrent weight is replaced."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.executor import Executor
from engine.kernels.rnn import lstm
from partition import load_model


def _lstm_model(rng: np.random.Generator, seq: int, batch: int, din: int, hs: int,
                direction: str, with_state: bool, with_lens: bool) -> tuple:
    nd = 2 if direction == "bidirectional" else 1
    w = (rng.standard_normal((nd, 4 * hs, din)) * 0.3).astype(np.float32)
    r = (rng.standard_normal((nd, 4 * hs, hs)) * 0.3).astype(np.float32)
    b = (rng.standard_normal((nd, 8 * hs)) * 0.3).astype(np.float32)
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(r, "R"),
             numpy_helper.from_array(b, "B")]
    ins = ["X", "W", "R", "B", "L" if with_lens else "", "H0" if with_state else "",
           "C0" if with_state else ""]
    while ins[-1] == "":
        ins.pop()
    node = helper.make_node("LSTM", ins, ["Y", "Y_h", "Y_c"], name="lstm", hidden_size=hs,
                            direction=direction)
    F = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("X", F, [seq, batch, din])]
    feeds = {"X": rng.standard_normal((seq, batch, din)).astype(np.float32)}
    if with_lens:
        inputs.append(helper.make_tensor_value_info("L", TensorProto.INT32, [batch]))
        feeds["L"] = rng.integers(1, seq + 1, batch).astype(np.int32)
    if with_state:
        for n in ("H0", "C0"):
            inputs.append(helper.make_tensor_value_info(n, F, [nd, batch, hs]))
            feeds[n] = rng.standard_normal((nd, batch, hs)).astype(np.float32)
    g = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info(n, F, None)
                                                for n in ("Y", "Y_h", "Y_c")], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model, feeds


def _ort(model, feeds: dict) -> list:
    return ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("with_state,with_lens", [(True, False), (False, False), (True, True)])
def test_lstm_matches_onnxruntime_run_after_run(direction: str, with_state: bool, with_lens: bool,
                                                rng: np.random.Generator) -> None:
    seq, batch = int(rng.integers(9, 30)), int(rng.integers(1, 4))
    model, feeds = _lstm_model(rng, seq, batch, int(rng.integers(3, 12)), int(rng.integers(4, 20)),
                               direction, with_state, with_lens)
    with Executor(load_model(model.SerializeToString())) as ex:
        for _ in range(3):  # the cached recurrent weight serves later runs
            x = rng.standard_normal(feeds["X"].shape).astype(np.float32)
            feeds = {**feeds, "X": x}
            got = ex(feeds)
            for name, want in zip(("Y", "Y_h", "Y_c"), _ort(model, feeds)):
                np.testing.assert_allclose(got[name], want, rtol=1e-4, atol=1e-5, err_msg=name)


def test_a_replaced_recurrent_weight_is_used(rng: np.random.Generator) -> None:
    model, feeds = _lstm_model(rng, 12, 2, 5, 8, "bidirectional", True, False)
    with Executor(load_model(model.SerializeToString())) as ex:
        ex(feeds)
        r2 = (rng.standard_normal((2, 32, 8)) * 0.3).astype(np.float32)
        ex.set_weight("R", r2)
        got = ex(feeds)
    model.graph.initializer[1].CopyFrom(numpy_helper.from_array(r2, "R"))
    for name, want in zip(("Y", "Y_h", "Y_c"), _ort(model, feeds)):
        np.testing.assert_allclose(got[name], want, rtol=1e-4, atol=1e-5, err_msg=name)


def test_the_kernel_leaves_its_inputs_alone(rng: np.random.Generator) -> None:
    x = rng.standard_normal((10, 2, 3)).astype(np.float32)
    w, r = (rng.standard_normal((1, 16, k)).astype(np.float32) for k in (3, 4))
    b, h0, c0 = (rng.standard_normal(s).astype(np.float32) for s in ((1, 32), (1, 2, 4), (1, 2, 4)))
    before = [a.copy() for a in (x, w, r, b, h0, c0)]
    lstm(np, x, w, r, b, None, h0, c0, hidden_size=4)
    lstm(np, x, w, r, b, None, h0, c0, hidden_size=4)
    for a, want in zip((x, w, r, b, h0, c0), before):
        np.testing.assert_array_equal(a, want)


def test_a_hidden_size_of_one_leaves_a_weight_view_alone(rng: np.random.Generator) -> None:
    """With hidden 1 the transposed recurrent weight is itself contiguous: a view of the
    weight (here a slice of a larger array, as the executor's per-direction weights are)
    that the kernel must copy before scaling it."""
    big = rng.standard_normal((2, 4, 1)).astype(np.float32)
    before = big.copy()
    x = rng.standard_normal((3, 1, 2)).astype(np.float32)
    w = rng.standard_normal((1, 4, 2)).astype(np.float32)
    lstm(np, x, w, big[1:], None, hidden_size=1)
    np.testing.assert_array_equal(big, before)


@pytest.mark.parametrize("direction", ["forward", "reverse"])
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("with_state", [True, False])
def test_a_streaming_step_matches_onnxruntime(direction: str, batch: int, with_state: bool,
                                              rng: np.random.Generator) -> None:
    """seq 1, one direction: the stacked-weights step (cached on W, R and B)."""
    model, feeds = _lstm_model(rng, 1, batch, 6, 10, direction, with_state, False)
    with Executor(load_model(model.SerializeToString())) as ex:
        for k in range(3):
            if k == 2:  # a replaced weight: the cached stack must not be reused
                b2 = (rng.standard_normal((1, 80)) * 0.3).astype(np.float32)
                ex.set_weight("B", b2)
                model.graph.initializer[2].CopyFrom(numpy_helper.from_array(b2, "B"))
            feeds = {**feeds, "X": rng.standard_normal(feeds["X"].shape).astype(np.float32)}
            got = ex(feeds)
            for name, want in zip(("Y", "Y_h", "Y_c"), _ort(model, feeds)):
                np.testing.assert_allclose(got[name], want, rtol=1e-4, atol=1e-5, err_msg=name)


def test_a_streaming_step_without_bias_and_its_inputs_untouched(rng: np.random.Generator) -> None:
    x = rng.standard_normal((1, 2, 3)).astype(np.float32)
    w, r = (rng.standard_normal((1, 16, k)).astype(np.float32) for k in (3, 4))
    h0, c0 = (rng.standard_normal((1, 2, 4)).astype(np.float32) for _ in range(2))
    before = [a.copy() for a in (x, w, r, h0, c0)]
    y, yh, yc = lstm(np, x, w, r, None, None, h0, c0, hidden_size=4)
    zero_b = np.zeros((1, 32), np.float32)  # the general path, for comparison
    y2, yh2, yc2 = lstm(np, np.concatenate([x, x]), w, r, zero_b, None, h0, c0, hidden_size=4)
    np.testing.assert_allclose(y[0], y2[0], rtol=1e-6, atol=1e-7)
    for a, want in zip((x, w, r, h0, c0), before):
        np.testing.assert_array_equal(a, want)
