"""The GPU path without a GPU: kernels, the ONNX node suite and the executor on ``--device gpu``
run on the strict cupy stand-in (tests/fake_cupy.py), checked against numpy / onnxruntime.

Anything that mixes host and device arrays, calls a numpy-only function through ``xp``,
or hands a device array to numpy fails here as it would on cupy. What this cannot check:
real CUDA streams and kernels, and cupy-only code paths (cupyx) -- see docs/kernels.md.
"""

from __future__ import annotations

import operator

import numpy as np
import onnxruntime as ort
import pytest

from engine.compare import errors
from engine.executor import Executor, missing_ops
from engine.inputs import random_inputs
from engine.onnx_backend import run_node_suite
from fake_cupy import DeviceConversionError, FakeArray, FakeCupy, install
from partition import load_model
from partition.runner import partition
from sample_models.generate import build_all

MODELS = build_all()


# --- the stand-in is as strict as cupy ----------------------------------------

def test_fake_refuses_implicit_conversions() -> None:
    cp = FakeCupy()
    a = cp.asarray(np.arange(6.0).reshape(2, 3))
    assert not isinstance(a, np.ndarray) and isinstance(a, cp.ndarray)
    for bad in (lambda: np.asarray(a), lambda: np.array(a), lambda: a + np.ones(3), lambda: np.ones(3) * a,
                lambda: cp.add(a, np.ones(3)), lambda: np.concatenate([a]), lambda: operator.index(a[0, 0]),
                lambda: a.__setitem__(0, np.ones(3))):
        with pytest.raises(TypeError):
            bad()
    with pytest.raises(AttributeError, match="numpy-only"):
        cp.errstate  # noqa: B018
    np.testing.assert_array_equal(a.get(), cp.asnumpy(a))
    assert isinstance(a.sum(), FakeArray) and a.sum().shape == ()  # 0-d device array, not a numpy scalar
    assert float(a.sum()) == 15.0 and cp.syncs["float"] == 1      # an explicit read, counted
    a[:] = np.zeros((2, 3))                                         # whole-array upload: allowed, as in cupy
    assert (a * 2 + 1).get().tolist() == [[1.0] * 3] * 2


# --- every ONNX node case on the stand-in --------------------------------------

@pytest.mark.slow
def test_node_suite_passes_the_same_cases_on_the_fake_device(monkeypatch: pytest.MonkeyPatch) -> None:
    on_numpy = run_node_suite()
    install(monkeypatch)
    on_fake = run_node_suite(device="gpu")   # the executor's GPU path, over the stand-in
    lost = sorted(set(on_numpy.passed) - set(on_fake.passed))
    assert not lost, f"{len(lost)} cases pass on numpy but not on the cupy stand-in: " + \
        "; ".join(f"{n}: {on_fake.failed.get(n, '?')}" for n in lost[:10])


# --- the executor on --device gpu ----------------------------------------------

def _setup(name: str, seed: int):
    model = MODELS[name]
    graph = load_model(model.SerializeToString())
    feeds = random_inputs(graph, {}, seed=seed, default_dim=2)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return graph, feeds, dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def _check(outputs: dict, ref: dict) -> None:
    for name, want in ref.items():
        got = outputs[name]
        assert isinstance(got, np.ndarray)
        assert errors(got, want)["match"], f"output {name} differs from onnxruntime"


@pytest.mark.parametrize("name", list(MODELS))
def test_executor_on_fake_gpu_matches_onnxruntime(name: str, monkeypatch: pytest.MonkeyPatch,
                                                 rng: np.random.Generator) -> None:
    fake = install(monkeypatch)
    graph, feeds, ref = _setup(name, int(rng.integers(1 << 30)))
    if missing_ops(graph):
        pytest.fail(f"no kernel for {missing_ops(graph)}")
    with Executor(graph, device="gpu") as ex:
        res = ex.run(feeds)
        # Device->host reads during the run are only explicit copies (registry.to_host / .get()
        # for shape tensors and control-flow conditions), never an implicit float()/bool()/item().
        implicit = {k: n for k, n in fake.syncs.items() if k != "get"}
        assert not implicit, f"implicit device->host syncs during the run: {implicit}"
        assert all(isinstance(v, FakeArray) for v in res.outputs.values())  # results stay on the device
        _check(res.numpy_outputs(), ref)
    assert fake.cuda.log, "the GPU run recorded no CUDA events"


@pytest.mark.parametrize("name", list(MODELS))
def test_partitioned_engine_subgraphs_on_fake_gpu(name: str, monkeypatch: pytest.MonkeyPatch,
                                                 rng: np.random.Generator) -> None:
    install(monkeypatch)
    graph, feeds, ref = _setup(name, int(rng.integers(1 << 30)))
    ops = sorted({n.op_type for n in graph.nodes})
    result = partition(graph, "default", ops=ops[::2] or ops)
    if missing_ops(result.graph):
        pytest.fail(f"no kernel for {missing_ops(result.graph)}")
    with Executor(result.graph, device="gpu", executor="engine") as ex:
        res = ex.run(feeds)
        _check(res.numpy_outputs(), ref)
    assert len(res.subgraphs) == len(result.subgraphs)


@pytest.mark.parametrize("name", ["if_model.onnx", "loop_model.onnx", "scan_rnn.onnx"])
def test_control_flow_bodies_nest_on_one_gpu_worker(name: str, monkeypatch: pytest.MonkeyPatch,
                                                    rng: np.random.Generator) -> None:
    """The control-flow design's hazard on the GPU side: every body waits on the only GPU worker."""
    from engine import create_engine  # noqa: PLC0415

    install(monkeypatch)
    graph, feeds, ref = _setup(name, int(rng.integers(1 << 30)))
    eng = create_engine("threaded", num_cpu_workers=1, num_gpu_workers=1, num_copy_workers=1)
    try:
        with Executor(graph, eng, device="gpu") as ex:
            _check(ex.run(feeds).numpy_outputs(), ref)
    finally:
        eng.shutdown()


def test_an_engine_side_failure_is_named_not_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    # Found with the stand-in: when something outside a kernel failed on the GPU path
    # (here cupy's Event.done, removed as an older cupy might lack it), the run said only
    # "failed without a node error", hiding the AttributeError.
    from engine.run_errors import RunError  # noqa: PLC0415

    fake = install(monkeypatch)
    monkeypatch.delattr(fake.cuda.Event, "done")
    graph, feeds, _ = _setup("resnet_small.onnx", 1)
    with Executor(graph, device="gpu") as ex, pytest.raises(RunError) as info:
        ex.run(feeds)
    assert "AttributeError" in str(info.value) and "done" in str(info.value)
