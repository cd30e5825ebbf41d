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
        return (xp.maximum(x, 0),)

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
        gelus = [f for f in ex._fused.values() if f.node.op_type == "Gelu"]  # (and attention)
        assert len(gelus) == 2 and not any(s.node.op_type == "Erf" for s in ex._steps)
        lean = ex.run(feeds)
        kept = ex.run(feeds, keep_intermediates=True)
    np.testing.assert_allclose(lean.outputs["hidden"], want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(kept.outputs["hidden"], want, rtol=1e-4, atol=1e-4)
    assert erf_outs <= set(kept.values)
    assert not erf_outs & set(lean.values)


# ------------------------------------------------ short graphs run serially --
@pytest.mark.cpu_only(reason="only CPU functions run inline on the caller; on a GPU every function "
                              "runs on the GPU worker that owns its stream")
def test_a_short_graph_runs_serially_on_the_caller_after_its_first_run(monkeypatch):
    monkeypatch.setattr("engine.executor.SERIAL_BELOW_S", 60.0)  # "short", whatever the load
    seen: list[threading.Thread] = []

    def relu(xp, x, **_):
        seen.append(threading.current_thread())
        return (xp.maximum(x, 0),)
    nodes = [helper.make_node("Relu", ["x"], [f"b{i}"], name=f"branch{i}") for i in range(3)]
    g = load_model(make_model(nodes, [vi("x", [2])], [vi(f"b{i}", [2]) for i in range(3)])
                   .SerializeToString())
    with Executor(g, kernels=lambda node, opset: relu if node.op_type == "Relu" else None) as ex:
        assert len(ex._ops) == 3  # three independent segments
        ex({"x": np.array([-1, 1], np.float32)})
        first = list(seen)
        seen.clear()
        out = ex({"x": np.array([-1, 1], np.float32)})
    assert threading.current_thread() not in first  # the first run: on the workers
    assert seen == [threading.current_thread()] * 3  # then: one function, here
    assert all(out[f"b{i}"].tolist() == [0, 1] for i in range(3))


def test_a_failing_dead_end_branch_is_reported_in_serial_runs_too(monkeypatch):
    from engine.run_errors import KernelFailure

    monkeypatch.setattr("engine.executor.SERIAL_BELOW_S", 60.0)
    def boom(xp, x, **_):
        if x[0] > 0:
            raise ValueError("boom on purpose")
        return (x,)
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="ok"),
             helper.make_node("Boom", ["x"], ["dead"], name="dead_end", domain="test")]
    g = load_model(make_model(nodes, [vi("x", [2])], [vi("y", [2])]).SerializeToString())
    kernels = {"Relu": lambda xp, x, **_: (xp.maximum(x, 0),), "Boom": boom}
    with Executor(g, kernels=lambda node, opset: kernels.get(node.op_type)) as ex:
        ex({"x": np.array([-1, 1], np.float32)})  # fine: a short first run
        with pytest.raises(KernelFailure, match="dead_end"):
            ex({"x": np.array([1, 1], np.float32)})
        assert ex({"x": np.array([-2, 1], np.float32)})["y"].tolist() == [0, 1]  # clean after
