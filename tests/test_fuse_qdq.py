"""A QuantizeLinear read only by a DequantizeLinear with the same parameters runs as one step
(engine/fuse_qdq.py): bit for bit the pair's result, onnxruntime's within rounding."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.executor import Executor
from partition import load_model

from conftest import make_model

F = TensorProto.FLOAT


def _qdq_model(zp: np.ndarray, scale: np.ndarray, *, second_reader: bool = False,
               other_scale: bool = False):
    """x -> Q -> DQ -> Neg -> y (the zero point's dtype picks int8 or uint8; per channel on axis 1
    when the scale is a vector); optionally a second reader of the int8 tensor, or a DQ whose scale
    is another tensor of equal value."""
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="quantize", axis=1),
             helper.make_node("DequantizeLinear", ["q", "s2" if other_scale else "s", "z"], ["dq"],
                              name="dequantize", axis=1),
             helper.make_node("Neg", ["dq"], ["y"], name="negate")]
    outputs = [helper.make_tensor_value_info("y", F, None)]
    if second_reader:
        nodes.append(helper.make_node("Cast", ["q"], ["q32"], name="also", to=F))
        outputs.append(helper.make_tensor_value_info("q32", F, None))
    inits = [numpy_helper.from_array(scale, "s"), numpy_helper.from_array(zp, "z"),
             numpy_helper.from_array(scale.copy(), "s2")]
    return make_model(nodes, [helper.make_tensor_value_info("x", F, [2, 4, 8])], outputs, initializers=inits)


CASES = [
    (np.array(3, np.int8), np.array(0.05, np.float32)),
    (np.array(128, np.uint8), np.array(0.02, np.float32)),
    (np.array([0, -5, 7, 2], np.int8), np.array([0.01, 0.03, 0.002, 0.1], np.float32)),   # per channel
]


@pytest.mark.parametrize("zp,scale", CASES)
def test_the_pair_runs_as_one_step_bit_for_bit_as_written(rng, zp, scale):
    model = _qdq_model(zp, scale)
    x = (rng.standard_normal((2, 4, 8)) * 8).astype(np.float32)   # past the int8 range: clipped
    x.flat[:4] = [0.025, -0.075, 0.125, 0.175]   # ties at scale 0.05: round to even
    graph = load_model(model.SerializeToString())
    with Executor(graph) as fused, Executor(graph, plan="nodes") as written:
        assert [s.node.op_type for s in fused._steps] == ["FakeQuantize", "Neg"]
        got = fused.run({"x": x}).numpy_outputs()["y"]
        np.testing.assert_array_equal(got, written.run({"x": x}).numpy_outputs()["y"])
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, ref, rtol=0, atol=float(scale.max()) * 1.001)   # at most one step apart


@pytest.mark.parametrize("change", ["second_reader", "other_scale"])
def test_a_pair_that_is_not_plain_runs_as_written(rng, change):
    model = _qdq_model(*CASES[0], **{change: True})
    with Executor(load_model(model.SerializeToString())) as ex:
        assert "FakeQuantize" not in [s.node.op_type for s in ex._steps]


def test_the_debugger_sees_the_integer_tensor(rng):
    model = _qdq_model(*CASES[0])
    x = rng.standard_normal((2, 4, 8)).astype(np.float32)
    with Executor(load_model(model.SerializeToString()), keep_intermediates=True) as ex:
        values = ex.run({"x": x}).values
    assert values["q"].dtype == np.int8 and values["dq"].dtype == np.float32


def test_a_scalar_runs_as_a_pair_and_as_written(rng):
    """A 0-d tensor quantized (PP-OCR's scalar Constants, once onnxruntime's quantizer puts them in
    QDQ): numpy's divide of two 0-d arrays is a scalar, which the in-place steps refused, so the
    quantized PP-OCR models failed to run. Oracle: onnxruntime."""
    scale, zp = np.array(0.05, np.float32), np.array(3, np.int8)
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="quantize"),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dequantize")]
    model = make_model(nodes, [helper.make_tensor_value_info("x", F, [])], [helper.make_tensor_value_info("y", F, [])],
                       initializers=[numpy_helper.from_array(scale, "s"), numpy_helper.from_array(zp, "z")])
    x = np.array(rng.standard_normal() * 3, np.float32)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    graph = load_model(model.SerializeToString())
    for plan in ("segments", "nodes"):   # fused into one step, and as written
        with Executor(graph, plan=plan) as ex:
            got = ex.run({"x": x}).numpy_outputs()["y"]
        assert got.shape == () and got.dtype == np.float32
        np.testing.assert_allclose(got, ref, rtol=0, atol=float(scale) * 1.001)
