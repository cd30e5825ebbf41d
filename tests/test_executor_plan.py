"""How the executor cuts a graph into engine functions (``engine/plan.py``), its
options object, Constant folding and inline bodies; outputs checked against
onnxruntime on fresh random inputs."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from engine.executor import ExecOptions, Executor
from engine.plan import segments
from engine.run_errors import RunError
from partition import load_model

from conftest import make_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from real_models import build  # noqa: E402  (real-shaped models built with onnx.helper)

F = TensorProto.FLOAT


def vi(name, shape, t=F):
    return helper.make_tensor_value_info(name, t, shape)


# ------------------------------------------------------------ the plan --
def test_chain_is_one_segment_fork_keeps_its_other_branches_apart():
    # a -> b -> {c, d} ; e = c + d ; f reads only the graph input
    reads = [("x",), ("a",), ("b",), ("b",), ("c", "d"), ("x",)]
    outs = [("a",), ("b",), ("c",), ("d",), ("e",), ("f",)]
    local = {"a", "b", "c", "d", "e", "f"}
    assert segments(reads, outs, local, "segments") == [[0, 1, 2], [3], [4], [5]]
    assert segments(reads, outs, local, "nodes") == [[i] for i in range(6)]


def test_options_object_and_keyword_overrides():
    g = load_model(make_model([helper.make_node("Relu", ["x"], ["y"], name="r")],
                              [vi("x", [2])], [vi("y", [2])]).SerializeToString())
    opts = ExecOptions(plan="nodes", timing=False)
    with Executor(g, None, opts, workers=1) as ex:
        assert ex.options.plan == "nodes" and ex.options.workers == 1 and not ex.timing
        assert ex({"x": np.array([-1, 2], np.float32)})["y"].tolist() == [0, 2]
    with pytest.raises(TypeError):
        Executor(g, no_such_option=1)
    with pytest.raises(RunError, match="unknown plan 'bogus'"):
        Executor(g, plan="bogus")


# ------------------------------------------------- against onnxruntime --
@pytest.mark.parametrize("plan", ["segments", "nodes"])
@pytest.mark.parametrize("name", ["transformer2", "vad_stream", "lstm_tagger"])
def test_real_shaped_models_match_onnxruntime(name, plan, rng):
    model, feeds = build(name, seed=int(rng.integers(1 << 30)))
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = ref.run(None, feeds)
    graph = load_model(model.SerializeToString())
    with Executor(graph, plan=plan) as ex:
        got = ex(feeds)
        got2 = ex(feeds)  # a second run reuses the binding (and folded constants)
    for w, g in zip(want, [got[t] for t in graph.outputs]):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
    for t in graph.outputs:
        np.testing.assert_array_equal(got[t], got2[t])


def test_constant_nodes_are_folded_at_bind_time():
    c = helper.make_node("Constant", [], ["k"], name="k",
                         value=helper.make_tensor("kv", F, [2], [3.0, -4.0]))
    g = load_model(make_model([c, helper.make_node("Mul", ["x", "k"], ["y"], name="m")],
                              [vi("x", [2])], [vi("y", [2])]).SerializeToString())
    with Executor(g) as ex:
        assert [s.node.name for s in ex._steps] == ["m"]
        res = ex.run({"x": np.array([1, 2], np.float32)})
    assert res.outputs["y"].tolist() == [3.0, -8.0]
    assert set(res.node_seconds) == {"m"}


# ---------------------------------------------------------- inline bodies --
def _if_graph_and_kernels(seen: list[threading.Thread]):
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"], name="then_relu")],
                               "then", [], [vi("t", [2])])
    else_g = helper.make_graph([helper.make_node("Relu", ["x"], ["e"], name="else_relu")],
                               "else", [], [vi("e", [2])])
    g = load_model(make_model([helper.make_node("If", ["c"], ["y"], name="if",
                                                then_branch=then_g, else_branch=else_g)],
                              [vi("c", [], TensorProto.BOOL), vi("x", [2])],
                              [vi("y", [2])]).SerializeToString())

    def relu(xp, x, **_):
        seen.append(threading.current_thread())
        return (np.maximum(x, 0),)

    def if_(xp, cond, *, subgraphs, run_graph, **_):
        seen.append(threading.current_thread())
        return tuple(run_graph(subgraphs["then_branch" if bool(cond) else "else_branch"], []))
    kernels = {"Relu": relu, "If": if_}
    return g, lambda node, opset: kernels.get(node.op_type)


@pytest.mark.parametrize("plan", ["segments", "nodes"])
def test_if_body_runs_inline_under_segments_and_on_the_engine_under_nodes(plan):
    seen: list[threading.Thread] = []
    g, kernels = _if_graph_and_kernels(seen)
    with Executor(g, kernels=kernels, plan=plan, workers=2) as ex:
        y = ex({"c": np.array(True), "x": np.array([-1, 5], np.float32)})["y"]
    assert y.tolist() == [0, 5]
    if_thread, body_thread = seen
    assert (if_thread is body_thread) == (plan == "segments")


# ------------------------------------------------------------ GELU fusion --
def test_gelu_chains_are_fused_and_the_debugger_still_sees_every_tensor(rng):
    model, feeds = build("transformer2", seed=int(rng.integers(1 << 30)))
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    graph = load_model(model.SerializeToString())
    erf_outs = {n.outputs[0] for n in graph.nodes if n.op_type == "Erf"}
    with Executor(graph, plan="nodes") as ex:
        assert not ex._fused
    with Executor(graph) as ex:
        assert len(ex._fused) == 2 and not any(s.node.op_type == "Erf" for s in ex._steps)
        lean = ex.run(feeds)
        kept = ex.run(feeds, keep_intermediates=True)
    np.testing.assert_allclose(lean.outputs["hidden"], want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(kept.outputs["hidden"], want, rtol=1e-4, atol=1e-4)
    assert erf_outs <= set(kept.values)
    assert not erf_outs & set(lean.values)
