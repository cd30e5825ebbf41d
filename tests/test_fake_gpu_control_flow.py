"""Control flow and subgraph operators on the strict cupy stand-in (tests/fake_cupy.py), with the
engine's own kernels, checked against onnxruntime on fresh random inputs.

``test_executor.py`` checks the executor's mechanics with a tiny kernel set of its own; here the
same graphs (a Loop with a dynamic trip count and condition, nested If > Loop three deep, an If
whose branches read outer-scope tensors computed by ReduceSum) run on the real kernels with every
value on the fake device, so a kernel or the executor reading a device array implicitly fails.
The executor test files themselves run under the ``--fake-gpu`` plugin mode in ``make test``.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from engine.executor import Executor
from fake_cupy import FakeArray, install
from partition import load_model
from partition.runner import partition

from conftest import make_model
from test_executor import _if_graph, _loop_graph, one_worker_engine, vi

def _ort(graph_model, feeds):
    sess = ort.InferenceSession(graph_model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def _model_of(graph) -> object:
    from partition.onnx_io import to_model_proto  # noqa: PLC0415 - only here

    return to_model_proto(graph)


def _run_on_fake(monkeypatch, graph, feeds, engine=None, **kw):
    fake = install(monkeypatch)
    with Executor(graph, engine, device="gpu", **kw) as ex:
        res = ex.run(feeds)
        # device->host reads during the run: only explicit copies (.get() through to_host, for
        # conditions, trip counts and axes), no float()/bool()/int()/item() on a device array
        implicit = {k: n for k, n in fake.syncs.items() if k != "get"}
        assert not implicit, f"implicit device->host syncs during the run: {implicit}"
        assert all(isinstance(v, FakeArray) for v in res.outputs.values())
        return res.numpy_outputs(), fake


@pytest.mark.parametrize("inner", [False, True], ids=["flat", "nested3deep"])
@pytest.mark.parametrize("M,go,step", [(100, True, 1.5), (3, True, 1.0), (1, True, 20.0), (5, False, 1.0)],
                         ids=["condition-stops", "trip-count-stops", "one-iteration", "zero-iterations"])
def test_loop_dynamic_trip_count_and_condition_on_fake_gpu(M, go, step, inner, monkeypatch, rng):
    g = _loop_graph(inner)
    feeds = {"M": np.array(M, np.int64), "go": np.array(go),
             "acc0": rng.standard_normal(1).astype(np.float32), "step": np.array([step], np.float32)}
    want = _ort(_model_of(g), feeds)
    got, _ = _run_on_fake(monkeypatch, g, feeds, one_worker_engine())
    np.testing.assert_allclose(got["acc"], want["acc"], rtol=1e-5)
    np.testing.assert_allclose(got["trace"], want["trace"], rtol=1e-5)


@pytest.mark.parametrize("plan", ["segments", "nodes"])
def test_if_with_outer_scope_reads_on_fake_gpu(plan, monkeypatch, rng):
    g = _if_graph()
    for _ in range(4):  # both branches, on fresh inputs
        feeds = {"x": rng.standard_normal(3).astype(np.float32)}
        want = _ort(_model_of(g), feeds)
        got, _ = _run_on_fake(monkeypatch, g, feeds, plan=plan)
        np.testing.assert_allclose(got["y"], want["y"], rtol=1e-6)


def test_reduce_sum_axes_input_on_fake_gpu(monkeypatch, rng):
    """ReduceSum (opset 13+) takes its axes as a tensor input, a graph input here: read on the host."""
    model = make_model([helper.make_node("ReduceSum", ["x", "axes"], ["y"], name="sum", keepdims=0)],
                       [vi("x", [2, 3, 4]), vi("axes", [1], TensorProto.INT64)], [vi("y", None)])
    g = load_model(model.SerializeToString())
    for axis in (0, 2, -1):
        feeds = {"x": rng.standard_normal((2, 3, 4)).astype(np.float32), "axes": np.array([axis], np.int64)}
        got, _ = _run_on_fake(monkeypatch, g, feeds)
        # a sum of four N(0, 1) values can cancel to ~1e-3, where float32 rounding (~1e-7) is 1e-4 relative
        np.testing.assert_allclose(got["y"], _ort(model, feeds)["y"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("executor", ["engine", "auto"])
def test_subgraph_operators_run_control_flow_on_fake_gpu(executor, monkeypatch, rng):
    """A partitioned Loop graph: each subgraph operator runs its part on the fake device."""
    g = _loop_graph(inner=True)
    result = partition(g, "default", ops=["Loop"])
    feeds = {"M": np.array(7, np.int64), "go": np.array(True),
             "acc0": rng.standard_normal(1).astype(np.float32), "step": np.array([0.75], np.float32)}
    got, _ = _run_on_fake(monkeypatch, result.graph, feeds, executor=executor)
    want = _ort(_model_of(g), feeds)
    np.testing.assert_allclose(got["acc"], want["acc"], rtol=1e-5)
    np.testing.assert_allclose(got["trace"], want["trace"], rtol=1e-5)
