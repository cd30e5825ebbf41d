"""SiLU as exporters write it, ``Mul(x, Sigmoid(x))``, runs as one step (engine/fuse.py
``_fuse_silu``) with the graph's own results: checked against onnxruntime on fresh
random inputs, NaN and infinities included; a sigmoid read elsewhere keeps both nodes."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from engine.executor import Executor
from engine.fuse import FUSED_DOMAIN
from partition import load_model

from conftest import make_model

F = TensorProto.FLOAT
pytestmark = pytest.mark.cpu_only("SiLU is fused on the host only; a device fuses the chain itself")


def _model(x_first: bool = True, sigmoid_is_output: bool = False, gate: bool = False,
           dtype: int = F):
    """x -> Conv(1x1) -> c; s = Sigmoid(c); m = Mul(c, s) [-> Mul(m, x): Llama's gated MLP]."""
    w = numpy_helper.from_array(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3, 1, 1), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("Sigmoid", ["c"], ["s"], name="sig"),
             helper.make_node("Mul", ["c", "s"] if x_first else ["s", "c"], ["m"], name="mul")]
    out, shape = "m", [2, 4, 5, 6]
    if dtype != F:   # the activation in another float type: the numpy path, as written
        nodes = [helper.make_node("Cast", ["x"], ["c"], name="cast", to=dtype)] + nodes[1:]
        shape = [2, 3, 5, 6]
    if gate:
        nodes.append(helper.make_node("Mul", ["m", "c"], ["y"], name="gate"))
        out = "y"
    outs = [helper.make_tensor_value_info(out, dtype, None)]
    if sigmoid_is_output:
        outs.append(helper.make_tensor_value_info("s", dtype, None))
    return make_model(nodes, [helper.make_tensor_value_info("x", F, [2, 3, 5, 6])], outs,
                      initializers=[] if dtype != F else [w])


def _feeds(rng):
    x = (rng.standard_normal((2, 3, 5, 6)) * 6).astype(np.float32)
    x[0, :, 0, :3] = [[np.nan, np.inf, -np.inf]] * 3
    return {"x": x}


def _check(model, rng, kinds_want):
    """Against ONNX's reference evaluator (float64 maths, rounded once: ours within float32
    rounding), and against onnxruntime under the project's match rule (its MLAS logistic is an
    approximation, ~1e-7 absolute on the sigmoid, times |x| and the gate's |x| again)."""
    feeds = _feeds(rng)
    want = ReferenceEvaluator(model).run(None, feeds)
    loose = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    with Executor(load_model(model.SerializeToString())) as ex:
        got = ex.run(feeds).numpy_outputs()
        kinds = [s.node.op_type for s in ex._steps if s.node.domain == FUSED_DOMAIN]
    assert ("Silu" in kinds) == kinds_want, kinds
    for o, w, lo in zip(model.graph.output, want, loose):
        assert got[o.name].dtype == w.dtype
        half = w.dtype == np.float16   # two roundings in float16: 2 ulps (2^-9 relative)
        np.testing.assert_allclose(got[o.name].astype(np.float64), w.astype(np.float64),
                                   rtol=4e-3 if half else 2e-6, atol=1e-3 if half else 1e-6)
        np.testing.assert_allclose(got[o.name].astype(np.float64), lo.astype(np.float64),
                                   rtol=4e-3 if half else 1e-3, atol=1e-3 if half else 1e-4)


@pytest.mark.parametrize("x_first", [True, False])
@pytest.mark.parametrize("gate", [False, True])
def test_silu_is_one_step_matching_onnxruntime(x_first, gate, rng):
    _check(_model(x_first=x_first, gate=gate), rng, True)


def test_a_sigmoid_read_elsewhere_keeps_both_nodes(rng):
    _check(_model(sigmoid_is_output=True), rng, False)


def test_a_half_precision_silu_takes_the_numpy_path(rng):
    _check(_model(dtype=TensorProto.FLOAT16), rng, True)


def test_the_debugger_sees_the_sigmoid_of_a_fused_silu(rng):
    model = _model()
    with Executor(load_model(model.SerializeToString()), keep_intermediates=True) as ex:
        values = ex.run(_feeds(rng)).values
    assert {"c", "s", "m"} <= set(values)
