"""Nodes without a kernel of ours run in single-node onnxruntime sessions, and say so."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from engine.executor import Executor, find_kernel
from engine.ort_fallback import LABEL, OrtFallback, _SingleNodeKernel
from engine.run_errors import RunError
from partition import load_model

from conftest import make_model


def _model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])
    nodes = [helper.make_node("Gelu", ["x"], ["g"], name="gelu", domain="com.microsoft"),
             helper.make_node("Erf", ["g"], ["e"], name="erf"),
             helper.make_node("Add", ["e", "x"], ["y"], name="add")]
    model = make_model(nodes, [x], [y])
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return model


def _without_erf(node, opset):
    return None if node.op_type == "Erf" else find_kernel(node, opset)


def test_nodes_without_kernels_run_on_onnxruntime_and_are_named(rng):
    model = _model()
    g = load_model(model.SerializeToString())
    fallback = OrtFallback(_without_erf)
    feeds = {"x": rng.standard_normal((5, 8)).astype(np.float32)}
    with Executor(g, kernels=fallback) as ex:
        got = ex.run(feeds).numpy_outputs()["y"]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert "erf" in fallback.nodes and fallback.nodes["erf"] == "Erf"
    assert all(r["executor"] == LABEL for r in fallback.report())
    with Executor(g, kernels=fallback) as ex:   # a second shape reuses the typed, shapeless session
        ex.run({"x": rng.standard_normal((2, 8)).astype(np.float32)})


def test_without_the_fallback_the_missing_op_is_named():
    g = load_model(_model().SerializeToString())
    with pytest.raises(Exception, match="Erf"):
        Executor(g, kernels=_without_erf)


def test_an_op_nobody_can_run_names_the_node():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    model = make_model([helper.make_node("Frobnicate", ["x"], ["y"], name="frob", domain="acme")], [x], [y])
    model.opset_import.append(helper.make_opsetid("acme", 1))
    g = load_model(model.SerializeToString())
    with Executor(g, kernels=OrtFallback()) as ex:
        with pytest.raises(RunError, match="frob.*no executor here can run this node"):
            ex.run({"x": np.ones(2, np.float32)})


def test_compare_completes_and_lists_the_fallback_nodes(rng):
    from engine.compare import compare
    model = _model()
    g = load_model(model.SerializeToString())
    c = compare(g, model, {"x": rng.standard_normal((3, 8)).astype(np.float32)},
                kernels=_without_erf, repeat=1)
    assert c.ok
    listed = [r["node"] for r in c.fallback_nodes]
    assert "erf" in listed and "add" not in listed
    assert all(_without_erf(g.node_by_name[n], g.opset) is None for n in listed)
    assert any("ran on onnxruntime" in n for n in c.notes)


def _hash_model():
    """A contrib op onnxruntime's CPU provider runs and our engine never will: hashing is no numeric kernel,
    and the engine's kernels cover the standard ONNX domains only."""
    x = helper.make_tensor_value_info("x", TensorProto.INT32, ["n"])
    y = helper.make_tensor_value_info("y", TensorProto.INT32, ["n"])
    nodes = [helper.make_node("MurmurHash3", ["x"], ["h"], name="hash", domain="com.microsoft", seed=7, positive=0),
             helper.make_node("Neg", ["h"], ["y"], name="neg")]
    model = make_model(nodes, [x], [y])
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return model


def test_sglens_run_completes_and_notes_the_fallback(tmp_path):
    import json
    import subprocess
    import sys
    path = tmp_path / "hash.onnx"
    path.write_bytes(_hash_model().SerializeToString())
    g = load_model(str(path))
    assert find_kernel(g.node_by_name["hash"], g.opset) is None, "MurmurHash3 got a kernel: pick another contrib op"
    done = subprocess.run([sys.executable, "-m", "sglens", "run", str(path), "--dim", "n=3", "--json"],
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    notes = json.loads(done.stdout)["notes"]
    assert any("hash (com.microsoft.MurmurHash3)" in n and "onnxruntime" in n for n in notes), notes


def test_the_check_names_every_op_nobody_can_run_before_anything_runs():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    nodes = [helper.make_node("Frobnicate", ["x"], ["a"], name="frob", domain="acme"),
             helper.make_node("Relu", ["a"], ["b"], name="relu"),
             helper.make_node("Twiddle", ["b"], ["y"], name="twiddle", domain="acme")]
    model = make_model(nodes, [x], [y])
    model.opset_import.append(helper.make_opsetid("acme", 1))
    g = load_model(model.SerializeToString())
    with pytest.raises(RunError, match=r"acme.Frobnicate \(node 'frob'\), acme.Twiddle \(node 'twiddle'\)"):
        OrtFallback().check(g)
    OrtFallback().check(load_model(_model().SerializeToString()))   # Gelu: onnxruntime has it


def _planned_model():
    """A Transpose of a constant (folded at bind), a Reshape by a constant shape
    (specialised), then Erf, which the test's finder lacks."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [8, 4], np.arange(32, dtype=np.float32) / 32)
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [-1, 8])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [helper.make_node("Constant", [], ["w"], name="w", value=w),
             helper.make_node("Transpose", ["w"], ["wt"], name="wt", perm=[1, 0]),
             helper.make_node("MatMul", ["x", "wt"], ["m"], name="mm"),
             helper.make_node("Reshape", ["m", "shape"], ["r"], name="reshape"),
             helper.make_node("Erf", ["r"], ["y"], name="erf")]
    return make_model(nodes, [x], [y], initializers=[shape])


def test_nodes_with_our_kernels_keep_their_bind_time_plans_beside_the_fallback(rng):
    """Every CLI, web and bench run passes OrtFallback as the kernel finder; the nodes
    it answers with our kernels are folded and specialised as without it (they once
    all ran unplanned), and the node it hands to onnxruntime runs as it is."""
    model = _planned_model()
    feeds = {"x": rng.standard_normal((3, 4)).astype(np.float32)}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    g = load_model(model.SerializeToString())
    fallback = OrtFallback(_without_erf)
    with Executor(g) as plain, Executor(g, kernels=fallback) as ex:
        np.testing.assert_allclose(ex.run(feeds).numpy_outputs()["y"], want, rtol=1e-5, atol=1e-6)
        assert fallback.nodes == {"erf": "Erf"}
        assert "wt" in ex._folded and ex._folded == plain._folded
        calls = {s.node.name: s.call.__qualname__ for s in ex._steps}
        plain_calls = {s.node.name: s.call.__qualname__ for s in plain._steps}
        assert calls["reshape"] == plain_calls["reshape"] and "_kernel_call" not in calls["reshape"]
        assert "_kernel_call" in calls["erf"]


def _weighted_model(w: np.ndarray):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
             helper.make_node("Relu", ["m"], ["y"], name="relu")]
    return make_model(nodes, [x], [y], initializers=[helper.make_tensor(
        "w", TensorProto.FLOAT, list(w.shape), w.ravel())])


def _without_matmul(node, opset):
    return None if node.op_type == "MatMul" else find_kernel(node, opset)


def _oracle(w, feeds):
    model = _weighted_model(w)
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def test_a_fallback_node_holds_its_weights_as_initializers_and_runs_on_the_callers_thread(rng):
    """onnxruntime prepares an initializer once (a quantized LSTM packs its matrices); fed
    as an input on every call, it is prepared on every call. The session is one thread:
    an intra-op pool that spins beside the engine took a core for the whole run."""
    w = rng.standard_normal((4, 3)).astype(np.float32)
    g = load_model(_weighted_model(w).SerializeToString())
    feeds = {"x": rng.standard_normal((5, 4)).astype(np.float32)}
    with Executor(g, kernels=OrtFallback(_without_matmul)) as ex:
        np.testing.assert_allclose(ex.run(feeds).numpy_outputs()["y"], _oracle(w, feeds), rtol=1e-5, atol=1e-6)
        kernel = next(s.call for s in ex._steps if s.node.name == "mm").direct[0]
        (session,) = kernel._sessions.values()
        assert [i.name for i in session.get_inputs()] == ["x"]
        assert session.get_session_options().intra_op_num_threads == 1
        # A weight replaced after bind time is fed, not the one the session holds.
        w2 = rng.standard_normal((4, 3)).astype(np.float32)
        ex.set_weight("w", w2)
        np.testing.assert_allclose(ex.run(feeds).numpy_outputs()["y"], _oracle(w2, feeds), rtol=1e-5, atol=1e-6)


def test_a_fallback_session_serves_every_shape_of_one_dtype_and_a_new_dtype_gets_its_own(rng):
    """The sessions are shapeless and typed: kept per input dtype, whatever the shapes."""
    from partition.ir import Node
    kernel = _SingleNodeKernel(Node("neg", "Neg", ("x",), ("y",)), {"": 17})
    for shape, dtype in (((2, 3), np.float32), ((5,), np.float32), ((4, 1), np.float64), ((3,), np.int32)):
        x = (rng.standard_normal(shape) * 10).astype(dtype)
        (y,) = kernel(np, x)
        assert y.dtype == dtype and y.shape == shape
        np.testing.assert_array_equal(y, -x)
    assert len(kernel._sessions) == 3
