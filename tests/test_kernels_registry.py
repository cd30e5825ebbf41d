"""Registry, interpreter, control flow and kernel errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from engine.interpreter import run_graph
from engine.kernels import (KernelError, KernelNotFound, has_kernel, lookup, missing_kernels, register,
                            registered_ops)
from partition.errors import LensError
from partition.onnx_io import from_model_proto
from sample_models.generate import build_all, random_feeds
from test_kernels_harness import IR_VERSION, OPSET, assert_same, to_numpy, xp_param


def test_lookup_picks_highest_since_at_or_below_opset() -> None:
    assert lookup("Softmax", opset=11) is not lookup("Softmax", opset=13)
    assert lookup("Softmax", opset=17) is lookup("Softmax", opset=13)
    assert has_kernel("Conv") and not has_kernel("Scan", opset=7)


def test_lookup_unknown_op_names_op_and_domain() -> None:
    with pytest.raises(KernelNotFound) as err:
        lookup("NoSuchOp", "com.example")
    assert isinstance(err.value, LensError)
    assert "NoSuchOp" in str(err.value) and "com.example" in str(err.value) and "no kernel" in str(err.value)


def test_register_normalises_single_output_to_tuple() -> None:
    @register("LensTestDouble", domain="test.lens")
    def double(xp: Any, x: Any) -> Any:
        return x * 2

    out = lookup("LensTestDouble", "test.lens")(np, np.arange(3))
    assert isinstance(out, tuple) and len(out) == 1
    assert ("test.lens", "LensTestDouble", [1]) in registered_ops()


def _two_node_model(op2: str, domain: str = "") -> Any:
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node(op2, ["r"], ["y"], name="second", domain=domain or None)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    opsets = [helper.make_opsetid("", OPSET)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = IR_VERSION
    return model


def test_missing_kernels_lists_unknown_nodes_including_bodies() -> None:
    graph = from_model_proto(_two_node_model("Frobnicate", "com.example"), infer_shapes=False)
    assert missing_kernels(graph) == [("second", "Frobnicate")]
    for model in build_all().values():
        assert missing_kernels(from_model_proto(model)) == []


def test_kernel_error_names_node_op_and_shapes(rng: np.random.Generator) -> None:
    # Reshape to a size that cannot hold the data: the kernel raises inside run_graph.
    node = helper.make_node("Reshape", ["x", "s"], ["y"], name="bad_reshape")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                                            helper.make_tensor_value_info("s", TensorProto.INT64, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    g = from_model_proto(model)
    with pytest.raises(KernelError) as err:
        run_graph(g, {"x": rng.random((2, 3), dtype=np.float32), "s": np.array([7], np.int64)})
    msg = str(err.value)
    assert "bad_reshape" in msg and "Reshape" in msg and "(2, 3)" in msg
    assert err.value.__cause__ is not None


def test_run_graph_raises_kernel_not_found_before_computing() -> None:
    g = from_model_proto(_two_node_model("Frobnicate", "com.example"), infer_shapes=False)
    with pytest.raises(KernelNotFound, match="second"):
        run_graph(g, {"x": np.ones((2, 3), np.float32)})


def test_run_graph_reports_missing_feed() -> None:
    g = from_model_proto(_two_node_model("Relu"))
    with pytest.raises(KernelError, match="x"):
        run_graph(g, {})


@xp_param
@pytest.mark.parametrize("name", sorted(build_all()))
def test_sample_models_match_reference(name: str, xp: Any, rng: np.random.Generator) -> None:
    """Every sample model (control flow included) against ReferenceEvaluator on fresh inputs."""
    model = build_all()[name]
    feeds = random_feeds(model, seed=int(rng.integers(1 << 30)))
    expected = ReferenceEvaluator(model).run(None, feeds)
    graph = from_model_proto(model)
    got = run_graph(graph, {k: xp.asarray(v) for k, v in feeds.items()}, xp=xp)
    for out_name, e in zip(graph.outputs, expected):
        assert_same(to_numpy(got[out_name]), np.asarray(e), 1e-4, 1e-5, f"{name}:{out_name}")


def _body(nodes: list, inputs: list, outputs: list) -> Any:
    return helper.make_graph(nodes, "body", inputs, outputs)


def test_loop_with_scan_outputs_and_outer_scope(rng: np.random.Generator) -> None:
    f = TensorProto.FLOAT
    body = _body([helper.make_node("Add", ["acc_in", "outer"], ["acc_out"]),
                  helper.make_node("Identity", ["cond_in"], ["cond_out"]),
                  helper.make_node("Mul", ["acc_out", "outer"], ["scan_out"])],
                 [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                  helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                  helper.make_tensor_value_info("acc_in", f, [3])],
                 [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
                  helper.make_tensor_value_info("acc_out", f, [3]),
                  helper.make_tensor_value_info("scan_out", f, [3])])
    nodes = [helper.make_node("Loop", ["n", "c", "a0"], ["a", "s"], name="loop", body=body)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("n", TensorProto.INT64, []),
                                           helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                                           helper.make_tensor_value_info("a0", f, [3]),
                                           helper.make_tensor_value_info("outer", f, [3])],
                              [helper.make_tensor_value_info("a", f, [3]),
                               helper.make_tensor_value_info("s", f, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    feeds = {"n": np.array(int(rng.integers(1, 6)), np.int64), "c": np.array(True),
             "a0": rng.random(3, dtype=np.float32), "outer": rng.random(3, dtype=np.float32)}
    expected = ReferenceEvaluator(model).run(None, feeds)
    got = run_graph(from_model_proto(model), feeds)
    for name, e in zip(("a", "s"), expected):
        assert_same(got[name], np.asarray(e), 1e-6, 1e-6, name)


# --- one lookup for interpreter and executor (issue 10) ------------------------

def _reshape_v1_model(domain: str, node_domain: str) -> Any:
    """Reshape at opset 4: the shape is an attribute (Reshape-1), not an input (Reshape-5+)."""
    node = helper.make_node("Reshape", ["x"], ["y"], domain=node_domain, shape=[3, 2])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(domain, 4)])
    model.ir_version = IR_VERSION
    return model


@pytest.mark.parametrize("domain,node_domain", [("ai.onnx", ""), ("", "ai.onnx"), ("ai.onnx", "ai.onnx")])
def test_ai_onnx_spelling_resolves_to_the_same_kernel_in_interpreter_and_executor(domain: str,
                                                                                    node_domain: str, rng) -> None:
    from engine.executor import Executor, find_kernel  # noqa: PLC0415
    from engine.kernels import kernel_for  # noqa: PLC0415

    graph = from_model_proto(_reshape_v1_model(domain, node_domain))
    node = graph.nodes[0]
    assert find_kernel(node, graph.opset) is kernel_for("Reshape", node_domain, graph.opset)
    assert kernel_for("Reshape", node_domain, graph.opset) is lookup("Reshape", opset=4)
    x = rng.standard_normal((2, 3)).astype(np.float32)
    interp = run_graph(graph, {"x": x})["y"]
    with Executor(graph) as ex:
        execd = ex.run({"x": x}).numpy_outputs()["y"]
    np.testing.assert_array_equal(interp, x.reshape(3, 2))
    np.testing.assert_array_equal(execd, x.reshape(3, 2))


def test_function_defined_op_runs_its_onnx_body_and_matches_the_reference(rng) -> None:
    # SoftmaxCrossEntropyLoss has no hand-written kernel: it runs as its ONNX function body.
    scores = rng.standard_normal((3, 5)).astype(np.float32)
    labels = rng.integers(0, 5, size=3).astype(np.int64)
    node = helper.make_node("SoftmaxCrossEntropyLoss", ["s", "l"], ["y"], reduction="mean")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("s", TensorProto.FLOAT, [3, 5]),
                                            helper.make_tensor_value_info("l", TensorProto.INT64, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    want = ReferenceEvaluator(model).run(None, {"s": scores, "l": labels})[0]
    got = run_graph(from_model_proto(model), {"s": scores, "l": labels})["y"]
    assert_same(np.asarray(got), np.asarray(want), 1e-5, 1e-6, "SoftmaxCrossEntropyLoss")
