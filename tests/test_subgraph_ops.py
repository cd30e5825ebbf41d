"""Subgraph operators: which executor ran each subgraph and why, weight caching by version."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine import create_engine
from engine.executor import Executor
from engine.run_errors import ExecutorUnavailableError
from engine.subgraph_ops import tensorrt_available
from partition import load_model
from partition.runner import partition
from sample_models.generate import build_all

from conftest import make_model
from test_executor import kernels, vi

F = TensorProto.FLOAT


def ort_run(model: onnx.ModelProto, feeds):
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))


def mlp():
    model = build_all()["mlp.onnx"]
    return model, load_model(model.SerializeToString())


def all_ops(graph):
    return sorted({n.op_type for n in graph.nodes})


def test_onnxruntime_executor_runs_every_subgraph_and_says_so(rng):
    model, g = mlp()
    part = partition(g, "default", ops=all_ops(g))
    feeds = {"input": rng.standard_normal((3, 64)).astype(np.float32)}
    with Executor(part.graph, executor="onnxruntime") as ex:
        res = ex.run(feeds)
    assert [r.executor for r in res.subgraphs] == ["onnxruntime"] * len(part.subgraphs)
    assert all(r.reason == "requested" and r.requested == "onnxruntime" for r in res.subgraphs)
    ref = ort_run(model, feeds)
    np.testing.assert_allclose(res.numpy_outputs()["probs"], ref["probs"], rtol=1e-4, atol=1e-6)


def test_auto_on_cpu_prefers_onnxruntime_with_reason(rng):
    model, g = mlp()
    part = partition(g, "default", ops=all_ops(g))
    with Executor(part.graph, executor="auto") as ex:
        res = ex.run({"input": rng.standard_normal((2, 64)).astype(np.float32)})
    for r in res.subgraphs:
        assert r.executor == "onnxruntime" and r.requested == "auto"
        assert r.reason.startswith("auto: ") and "onnxruntime session built" in r.reason
        assert "tensorrt" in r.reason  # why not TensorRT is said too


def test_tensorrt_by_name_is_never_substituted():
    ok, _ = tensorrt_available()
    _, g = mlp()
    part = partition(g, "default", ops=all_ops(g))
    with Executor(part.graph, executor="tensorrt") as ex:
        if ok:
            pytest.skip("tensorrt imports here: covered by test_executor_gpu.py")
        with pytest.raises(ExecutorUnavailableError, match="tensorrt") as err:
            ex.run({"input": np.zeros((1, 64), np.float32)})
    # the web page shows this message too: it names the choice in both the page's and the CLI's words
    assert "choose the subgraph runtime auto" in str(err.value) and "--subgraph-runtime" in str(err.value)
    assert "--executor" not in str(err.value)


def _custom_op_graph():
    """Relu -> test.Sleepy-free custom op 'Twice' -> Relu: onnxruntime cannot run 'Twice'."""
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r1"),
             helper.make_node("Twice", ["a"], ["b"], name="twice", domain="test.domain"),
             helper.make_node("Relu", ["b"], ["y"], name="r2")]
    m = make_model(nodes, [vi("x", [4])], [vi("y", [4])])
    m.opset_import.append(helper.make_opsetid("test.domain", 1))
    return load_model(m.SerializeToString())


def twice_kernels(node, opset):
    if node.op_type == "Twice":
        return lambda xp, x, **_: (2 * x,)
    return kernels(node, opset)


def test_auto_falls_back_to_engine_when_onnxruntime_cannot_build():
    g = _custom_op_graph()
    part = partition(g, "default", ops=["Relu", "Twice"])
    x = np.array([-1, 0, 1, 2], np.float32)
    with Executor(part.graph, executor="auto", kernels=twice_kernels) as ex:
        res = ex.run({"x": x})
    (rec,) = res.subgraphs
    assert rec.executor == "engine"
    assert "onnxruntime session failed" in rec.reason
    np.testing.assert_allclose(res.outputs["y"], 2 * np.maximum(x, 0))
    with Executor(part.graph, executor="onnxruntime", kernels=twice_kernels) as ex, \
            pytest.raises(ExecutorUnavailableError, match="onnxruntime could not build"):
        ex.run({"x": x})


def test_engine_executor_nests_on_the_same_one_worker_engine():
    """Subgraph bodies run as child graphs on the parent's engine (the control-flow design hazard)."""
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r1"),
             helper.make_node("Add", ["a", "x"], ["b"], name="add1"),
             helper.make_node("Mul", ["b", "b"], ["c"], name="mul"),   # not selected: splits the graph
             helper.make_node("Relu", ["c"], ["d"], name="r2"),
             helper.make_node("Add", ["d", "a"], ["y"], name="add2")]
    g = load_model(make_model(nodes, [vi("x", [3])], [vi("y", [3])]).SerializeToString())
    part = partition(g, "default", ops=["Relu", "Add"])
    assert len(part.subgraphs) == 2
    x = np.array([-1, 2, 3], np.float32)
    a = np.maximum(x, 0)
    want = np.maximum((a + x) ** 2, 0) + a
    engine = create_engine("threaded", num_cpu_workers=1)
    with Executor(part.graph, engine, executor="engine", kernels=kernels) as ex:
        for _ in range(3):
            res = ex.run({"x": x})
            np.testing.assert_allclose(res.outputs["y"], want)
    engine.shutdown()
    assert [r.executor for r in res.subgraphs] == ["engine", "engine"]
    assert {"r1", "add1", "r2", "add2", "mul"} <= set(res.node_seconds)


def test_weights_converted_once_and_rebuilt_when_their_version_changes(rng):
    model, g = mlp()
    part = partition(g, "default", ops=all_ops(g))
    feeds = {"input": rng.standard_normal((2, 64)).astype(np.float32)}
    weight = next(t for t in part.graph.initializers if part.graph.initializers[t].value.ndim == 2)
    with Executor(part.graph, executor="onnxruntime") as ex:
        ops = [s for s in _subgraph_ops(ex)]
        for _ in range(3):
            res = ex.run(feeds)
        assert all(op.builds == 1 for op in ops), "weights converted once, reused while unchanged"
        assert not any(r.weights_rebuilt for r in res.subgraphs)
        v0 = ex.weight_version(weight)
        new = rng.standard_normal(part.graph.initializers[weight].value.shape).astype(np.float32)
        ex.set_weight(weight, new)
        assert ex.weight_version(weight) == v0 + 1
        res = ex.run(feeds)
        rebuilt = [r.node for r in res.subgraphs if r.weights_rebuilt]
        readers = [op.node.name for op in ops if weight in op.node.inputs]
        assert rebuilt == readers and rebuilt, "exactly the operators reading the weight rebuild"
        ex.run(feeds)
        assert sum(op.builds for op in ops) == len(ops) + len(readers)
    # the new weight is really used: compare with onnxruntime on the modified model
    m2 = onnx.ModelProto()
    m2.CopyFrom(model)
    for init in m2.graph.initializer:
        if init.name == weight:
            init.CopyFrom(numpy_helper.from_array(new, weight))
    np.testing.assert_allclose(res.numpy_outputs()["probs"], ort_run(m2, feeds)["probs"],
                               rtol=1e-4, atol=1e-6)


def _subgraph_ops(ex: Executor):
    from engine.subgraph_ops import SubgraphOp
    return [step.call.__self__ for step in ex._steps
            if isinstance(getattr(step.call, "__self__", None), SubgraphOp)]


def test_unknown_executor_name():
    from engine.run_errors import RunError
    _, g = mlp()
    for spelling in ("subgraph_runtime", "executor"):   # executor= is the older name, still accepted
        with pytest.raises(RunError, match="unknown subgraph runtime 'tvm'"):
            Executor(g, **{spelling: "tvm"})
