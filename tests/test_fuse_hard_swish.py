"""HardSwish as exporters write it (Add -> Clip -> Mul -> Div) runs as one step
(engine/fuse.py ``_fuse_hard_swish``), with the graph's own results: checked against
onnxruntime on fresh random inputs, NaN and infinities included."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.executor import Executor
from engine.fuse import FUSED_DOMAIN
from partition import load_model

from conftest import make_model

F = TensorProto.FLOAT


def _model(last: str = "div", shift_first: bool = False, clip_is_output: bool = False):
    consts = {"three": 3.0, "zero": 0.0, "six": 6.0, "sixth": 1 / 6}
    inits = [numpy_helper.from_array(np.array(v, np.float32), k) for k, v in consts.items()]
    nodes = [helper.make_node("Add", ["three", "x"] if shift_first else ["x", "three"], ["a"], name="add"),
             helper.make_node("Clip", ["a", "zero", "six"], ["c"], name="clip"),
             helper.make_node("Mul", ["x", "c"], ["m"], name="mul")]
    out = "m"
    if last == "div":
        nodes.append(helper.make_node("Div", ["m", "six"], ["y"], name="div"))
        out = "y"
    elif last == "mul":
        nodes.append(helper.make_node("Mul", ["m", "sixth"], ["y"], name="scale"))
        out = "y"
    outs = [helper.make_tensor_value_info(out, F, None)]
    if clip_is_output:
        outs.append(helper.make_tensor_value_info("c", F, None))
    return make_model(nodes, [helper.make_tensor_value_info("x", F, [2, 3, 5, 4])], outs, initializers=inits)


def _run(model, feeds, **kw):
    with Executor(load_model(model.SerializeToString()), **kw) as ex:
        got = ex.run(feeds).numpy_outputs()
        kinds = [s.node.op_type for s in ex._steps if s.node.domain == FUSED_DOMAIN]
    return got, kinds


def _feeds(rng):
    x = (rng.standard_normal((2, 3, 5, 4)) * 4).astype(np.float32)
    x[0, 0, 0, :] = [np.nan, np.inf, -np.inf, -3.0]
    return {"x": x}


@pytest.mark.parametrize("last", ["div", "mul", "none"])
@pytest.mark.parametrize("shift_first", [False, True])
def test_hard_swish_chains_are_one_step_matching_onnxruntime(last, shift_first, rng):
    model = _model(last, shift_first)
    feeds = _feeds(rng)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got, kinds = _run(model, feeds)
    assert kinds == ["HardSwish"]
    name = model.graph.output[0].name
    np.testing.assert_allclose(got[name], want[0], rtol=1e-6, atol=1e-6)


def test_a_clip_read_elsewhere_keeps_the_chain_as_written(rng):
    model = _model(clip_is_output=True)
    feeds = _feeds(rng)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got, kinds = _run(model, feeds)
    assert "HardSwish" not in kinds
    np.testing.assert_allclose(got["y"], want[0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got["c"], want[1], rtol=1e-6, atol=1e-6)


def test_the_debugger_sees_every_tensor_of_a_fused_hard_swish(rng):
    model = _model()
    feeds = _feeds(rng)
    with Executor(load_model(model.SerializeToString()), keep_intermediates=True) as ex:
        values = ex.run(feeds).values
    assert {"a", "c", "m", "y"} <= set(values)


def test_a_new_shift_reaches_the_fused_step(rng):
    model = _model()
    feeds = _feeds(rng)
    with Executor(load_model(model.SerializeToString())) as ex:
        ex.run(feeds)
        ex.set_weight("three", np.array(1.0, np.float32))
        got = ex.run(feeds).numpy_outputs()["y"]
    x = feeds["x"]
    want = x * np.clip(x + np.float32(1), np.float32(0), np.float32(6)) / np.float32(6)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
