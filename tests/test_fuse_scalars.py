"""Every chain the executor fuses, on a 0-d tensor. numpy turns a ufunc's result on 0-d arrays into
a scalar, which the fused kernels' in-place steps (``out=``) refuse: a scalar through a Paddle hard
swish (Add-Clip-Mul-Div) failed its run, and the same for a quantized scalar Constant in a QDQ
PP-OCR (tests/test_fuse_qdq.py). Oracle: onnxruntime, on a fresh random scalar."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.executor import Executor
from partition import load_model

from conftest import make_model

F = TensorProto.FLOAT


def _const(name: str, value: float):
    return numpy_helper.from_array(np.array(value, np.float32), name)


CHAINS = {
    "gelu": ([helper.make_node("Div", ["x", "s2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
              helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", ["x", "a"], ["m"]),
              helper.make_node("Mul", ["m", "half"], ["y"])],
             [_const("s2", 1.4142135), _const("one", 1.0), _const("half", 0.5)]),
    "silu": ([helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["x", "s"], ["y"])], []),
    "paddle_hard_swish": ([helper.make_node("Add", ["x", "three"], ["a"]),
                           helper.make_node("Clip", ["a", "lo", "hi"], ["c"]),
                           helper.make_node("Mul", ["x", "c"], ["m"]), helper.make_node("Div", ["m", "six"], ["y"])],
                          [_const("three", 3.0), _const("lo", 0.0), _const("hi", 6.0), _const("six", 6.0)])
}


@pytest.mark.parametrize("name", list(CHAINS))
def test_a_fused_chain_takes_a_scalar(name, rng):
    nodes, inits = CHAINS[name]
    model = make_model(nodes, [helper.make_tensor_value_info("x", F, [])],
                       [helper.make_tensor_value_info("y", F, [])], initializers=inits)
    x = np.array(rng.uniform(-4, 4), np.float32)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    with Executor(load_model(model.SerializeToString())) as ex:
        fused = [s.node.op_type for s in ex._steps]
        got = ex.run({"x": x}).numpy_outputs()["y"]
    assert len(fused) < len(nodes), f"the chain was not fused: {fused}"   # the premise
    assert got.shape == () and got.dtype == np.float32
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
