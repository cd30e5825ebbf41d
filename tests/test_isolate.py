"""The first node out of tolerance, run alone on onnxruntime's own inputs (engine/isolate.py):
whether the difference came in through its inputs, or which kernel departs, judged by ONNX's
reference evaluator. Real sessions and kernels; a wrong kernel is injected through the
executor's kernel finder, a departing onnxruntime by handing ``isolate`` its output changed."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from engine.compare import compare
from engine.executor import find_kernel
from engine.isolate import isolate
from engine.tolerance import Tolerance
from partition import load_model

from conftest import make_model
from test_executor import vi


def _quantized():
    """x -> Mul(w) -> QuantizeLinear(scale 0.05) -> DequantizeLinear -> y: a float difference
    below tolerance before the Q node moves values across a rounding step after it."""
    inits = [numpy_helper.from_array(np.array([1.0, 2.0, 3.0], np.float32), "w"),
             numpy_helper.from_array(np.array(0.05, np.float32), "s"),
             numpy_helper.from_array(np.array(0, np.int8), "z")]
    nodes = [helper.make_node("Mul", ["x", "w"], ["m"], name="mul"),
             helper.make_node("QuantizeLinear", ["m", "s", "z"], ["q"], name="quant"),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dequant")]
    return make_model(nodes, [vi("x", [64, 3])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 3])],
                      initializers=inits)


def _kernels(offset: float, op: str):
    def find(node, opset):
        kernel = find_kernel(node, opset)
        if node.op_type != op:
            return kernel
        return lambda xp, *args, **attrs: tuple(v + np.float32(offset) for v in _tuple(kernel(xp, *args, **attrs)))
    return find


def _tuple(r):
    return r if isinstance(r, tuple) else (r,)


def test_a_difference_from_upstream_is_said_to_come_in_through_the_inputs(rng):
    model = _quantized()
    g = load_model(model.SerializeToString())
    # values on the rounding step's edges, and a Mul 1e-5 off: within tolerance, across a step after
    x = ((rng.integers(-40, 40, size=(64, 3)) + 0.5) * 0.05 / np.array([1, 2, 3])).astype(np.float32)
    c = compare(g, model, {"x": x}, executor="engine", kernels=_kernels(1e-5, "Mul"), repeat=1)
    d = c.first_divergent_node
    assert not c.ok and d["node"] == "quant"
    assert "came in through its inputs" in d["isolated"]["finding"]
    assert d["isolated"]["reference"] is None             # no oracle needed: ours equals onnxruntime
    assert "alone: fed onnxruntime's own inputs" in c.text()


def test_a_wrong_kernel_is_named_by_the_reference_evaluator(rng):
    model = _quantized()
    g = load_model(model.SerializeToString())
    x = rng.standard_normal((64, 3)).astype(np.float32)
    c = compare(g, model, {"x": x}, executor="engine", kernels=_kernels(0.5, "Mul"), repeat=1)
    d = c.first_divergent_node
    assert d["node"] == "mul"
    assert "agrees with onnxruntime: our kernel is wrong" in d["isolated"]["finding"]
    ref = d["isolated"]["reference"]
    assert not ref["vs_ours"]["m"]["match"] and ref["vs_onnxruntime"]["m"]["match"]


def test_a_departing_onnxruntime_is_named_when_the_reference_agrees_with_ours(rng):
    """As a quantized BERT's MatMulInteger on onnxruntime's saturating u8s8 kernels: handed an
    onnxruntime output 3 off in one element, the exact integer reference sides with ours."""
    a = rng.integers(0, 256, size=(4, 300)).astype(np.uint8)
    b = rng.integers(-128, 128, size=(300, 5)).astype(np.int8)
    node = helper.make_node("MatMulInteger", ["a", "b"], ["y"], name="mmi")
    model = make_model([node], [helper.make_tensor_value_info("a", TensorProto.UINT8, [4, 300]),
                                helper.make_tensor_value_info("b", TensorProto.INT8, [300, 5])],
                       [helper.make_tensor_value_info("y", TensorProto.INT32, [4, 5])])
    g = load_model(model.SerializeToString())
    exact = (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32)
    departed = exact.copy()
    departed[1, 2] += 3
    got = isolate(g.nodes[0], g.opset, {"a": a, "b": b, "y": departed}, None, Tolerance())
    assert "agrees with ours: onnxruntime's kernel departs" in got["finding"]
    assert got["reference"]["vs_ours"]["y"]["match"] and not got["ours_vs_onnxruntime"]["y"]["match"]
    same = isolate(g.nodes[0], g.opset, {"a": a, "b": b, "y": exact}, None, Tolerance())
    assert "exactly onnxruntime's output" in same["finding"]
