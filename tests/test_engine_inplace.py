"""Elementwise steps written into a dying MatMul/Gemm product (engine/inplace.py), against
onnxruntime on fresh random inputs: the in-place form where it applies, the kernel as written
where the product is read twice, is a graph output, is kept for the debugger, or where the
second operand broadcasts beyond it."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.executor import Executor
from engine.inplace import in_place_steps
from partition import load_model

from conftest import make_model

F = TensorProto.FLOAT


def _ort(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def _linear_model(rng, op: str, bias_shape: tuple, extra_reader: bool = False,
                  product_out: bool = False):
    w = numpy_helper.from_array(rng.standard_normal((8, 6)).astype(np.float32), "W")
    b = numpy_helper.from_array((rng.standard_normal(bias_shape) + 3).astype(np.float32), "B")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["p"], name="mm"),
             helper.make_node(op, ["p", "B"], ["y"], name="ew"),
             helper.make_node("Relu", ["y"], ["out"], name="relu")]
    outs = [helper.make_tensor_value_info("out", F, None)]
    if extra_reader:
        nodes.append(helper.make_node("Neg", ["p"], ["q"], name="neg"))
        outs.append(helper.make_tensor_value_info("q", F, None))
    if product_out:
        outs.append(helper.make_tensor_value_info("p", F, None))
    model = make_model(nodes, [helper.make_tensor_value_info("x", F, [3, 8])], outs, [w, b])
    return model, {"x": rng.standard_normal((3, 8)).astype(np.float32)}


def _check(model, feeds, **kw):
    want = _ort(model, feeds)
    graph = load_model(model.SerializeToString())
    with Executor(graph, **kw) as ex:
        for _ in range(3):  # a run reuses nothing it wrote into
            got = ex.run(feeds)
            for k, v in want.items():
                np.testing.assert_allclose(got.outputs[k], v, rtol=1e-5, atol=1e-5)
        return ex, got


@pytest.mark.cpu_only(reason="the in-place rewrite of a step is a CPU (numpy out=) path; "
                              "device runs keep fresh outputs")
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
def test_a_linear_layers_elementwise_step_runs_in_place_and_matches_onnxruntime(rng, op):
    model, feeds = _linear_model(rng, op, (6,))
    ex, _ = _check(model, feeds)
    # the Relu after it too: the elementwise result is fresh and read by it alone
    assert [ex._steps[i].node.name for i in in_place_steps(ex._steps, ex.graph.outputs)] == \
        ["ew", "relu"]
    assert ex._steps[1].call.__name__ == "in_place"


def test_a_product_read_twice_or_returned_is_left_alone(rng):
    for kw in ({"extra_reader": True}, {"product_out": True}):
        model, feeds = _linear_model(rng, "Add", (6,), **kw)
        ex, _ = _check(model, feeds)
        names = [ex._steps[i].node.name for i in in_place_steps(ex._steps, ex.graph.outputs)]
        assert "ew" not in names


def test_kept_intermediates_show_the_product_before_the_addition(rng):
    model, feeds = _linear_model(rng, "Add", (6,))
    ex, got = _check(model, feeds, keep_intermediates=True)
    np.testing.assert_allclose(got.values["p"], feeds["x"] @ numpy_helper.to_array(
        model.graph.initializer[0]), rtol=1e-5, atol=1e-5)


def test_an_operand_broadcasting_beyond_the_product_takes_the_kernel(rng):
    # p is (3, 6); B (2, 3, 6) makes y (2, 3, 6): no room in p, the kernel as written runs.
    model, feeds = _linear_model(rng, "Mul", (2, 3, 6))
    _check(model, feeds)


def test_the_transformer_matches_onnxruntime_with_its_biases_added_in_place(rng):
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from real_models import build
    model, feeds = build("transformer2", seed=int(rng.integers(1 << 30)))
    graph = load_model(model.SerializeToString())
    want = _ort(model, feeds)
    with Executor(graph) as ex:
        # Per layer: the biases of 6 Linear layers (the scaling of the attention scores is
        # in place inside the fused attention, engine/fuse_attention.py). The in-place forms
        # are the CPU's: on a device (the fake-GPU run) a bias Add and the residual Add after
        # it are one generated kernel (engine/fuse_elementwise.py), so fewer steps qualify.
        assert len(in_place_steps(ex._steps, graph.outputs)) == (12 if ex.xp is np else 8)
        assert sum(f.node.op_type == "Attention" for f in ex._fused.values()) == 2
        for _ in range(2):
            got = ex(feeds)
            np.testing.assert_allclose(got["hidden"], want["hidden"], rtol=1e-4, atol=1e-4)


@pytest.mark.cpu_only(reason="the in-place rewrite is a CPU (numpy out=) path; reads weights back")
def test_a_chain_reuses_one_buffer_and_never_writes_into_a_weight_or_a_view(rng):
    """MatMul > Add > Mul > Relu > Tanh run in the product's buffer; an Add whose input
    is a view of a weight (Reshape) or a graph input allocates as written; the weights
    are unchanged after several runs."""
    w = rng.standard_normal((8, 6)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B"),
             numpy_helper.from_array(np.array([6], np.int64), "shape")]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["p"], name="mm"),
             helper.make_node("Add", ["p", "B"], ["q"], name="add"),
             helper.make_node("Mul", ["q", "q2"], ["r"], name="mul"),
             helper.make_node("Relu", ["r"], ["s"], name="relu"),
             helper.make_node("Tanh", ["s"], ["t"], name="tanh"),
             helper.make_node("Reshape", ["B", "shape"], ["bv"], name="view"),
             helper.make_node("Add", ["bv", "t"], ["u"], name="add view"),
             helper.make_node("Neg", ["x2"], ["v"], name="neg input")]
    model = make_model(nodes, [helper.make_tensor_value_info("x", F, [3, 8]),
                               helper.make_tensor_value_info("q2", F, [3, 6]),
                               helper.make_tensor_value_info("x2", F, [6])],
                       [helper.make_tensor_value_info("u", F, None),
                        helper.make_tensor_value_info("v", F, None)], inits)
    feeds = {"x": rng.standard_normal((3, 8)).astype(np.float32),
             "q2": rng.standard_normal((3, 6)).astype(np.float32),
             "x2": rng.standard_normal(6).astype(np.float32)}
    x2 = feeds["x2"].copy()
    ex, _ = _check(model, feeds)
    names = [ex._steps[i].node.name for i in in_place_steps(ex._steps, ex.graph.outputs)]
    assert names == ["add", "mul", "relu", "tanh"]
    np.testing.assert_array_equal(ex._weights["B"], b)
    np.testing.assert_array_equal(ex._weights["W"], w)
    np.testing.assert_array_equal(feeds["x2"], x2)
