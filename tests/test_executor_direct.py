"""A host run that is one function (one segment, or the serial function) is called directly by
``Executor.run``, outside the engine (``Executor._call_direct``): the same outputs and errors,
no push; ``set_weight`` still lands after the run in flight and before the next; with engine
hooks (a profiler) or GPU events the run goes through the engine as before."""

from __future__ import annotations

import threading

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import make_model
from engine.executor import Executor
from engine.executor import find_kernel
from engine.profiling import Profiler
from engine.run_errors import KernelFailure
from partition import load_model


def _scaled_relu(w: np.ndarray):
    """y = Relu(x * w), w a weight: one segment."""
    nodes = [helper.make_node("Mul", ["x", "w"], ["xw"], name="scale"),
             helper.make_node("Relu", ["xw"], ["y"], name="relu")]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
                       [numpy_helper.from_array(w, "w")])
    return model, load_model(model.SerializeToString())


def _pushes(ex: Executor, monkeypatch) -> list:
    seen: list = []
    real = ex.engine._push_block
    monkeypatch.setattr(ex.engine, "_push_block", lambda block, *a, **k: (seen.append(block.name), real(block, *a, **k))[1])
    return seen


def test_a_one_function_run_is_called_without_a_push_and_matches_onnxruntime(rng, monkeypatch):
    w = rng.standard_normal((2, 3)).astype(np.float32)
    model, graph = _scaled_relu(w)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with Executor(graph) as ex:
        pushed = _pushes(ex, monkeypatch)
        for _ in range(3):
            x = rng.standard_normal((2, 3)).astype(np.float32)
            np.testing.assert_allclose(ex.run({"x": x}).numpy_outputs()["y"], sess.run(None, {"x": x})[0],
                                       rtol=1e-6, atol=1e-6)
        assert pushed == []
    # a profiler records the engine's functions: those runs go through the engine
    with Executor(graph, hooks=Profiler()) as ex:
        pushed = _pushes(ex, monkeypatch)
        ex.run({"x": np.ones((2, 3), np.float32)})
        assert pushed, "a profiled run must be pushed"


def test_a_failing_node_in_a_direct_run_is_named_and_the_next_run_works(rng):
    _, graph = _scaled_relu(rng.standard_normal((2, 3)).astype(np.float32))
    calls = {"n": 0}

    def kernels(node, opset):
        kernel = find_kernel(node, opset)
        if node.op_type != "Relu":
            return kernel

        def flaky(xp, x, **attrs):
            calls["n"] += 1
            if calls["n"] == 1:
                raise ValueError("relu refused once")
            return kernel(xp, x, **attrs)
        return flaky
    with Executor(graph, kernels=kernels) as ex:
        with pytest.raises(KernelFailure, match="'relu' \\(Relu\\).*relu refused once"):
            ex.run({"x": np.ones((2, 3), np.float32)})
        out = ex.run({"x": np.ones((2, 3), np.float32)}).numpy_outputs()["y"]
    assert out.shape == (2, 3) and calls["n"] == 2


def test_set_weight_waits_for_the_run_in_flight_and_the_next_run_sees_it(rng):
    old = np.full((2, 3), 2.0, np.float32)
    _, graph = _scaled_relu(old)
    entered, go = threading.Event(), threading.Event()

    def kernels(node, opset):
        kernel = find_kernel(node, opset)
        if node.op_type != "Relu":
            return kernel

        def held(xp, x, **attrs):   # the run stops here, its Mul already read the weight
            entered.set()
            assert go.wait(30)
            return kernel(xp, x, **attrs)
        return held
    x = np.ones((2, 3), np.float32)
    with Executor(graph, kernels=kernels) as ex:
        out: dict = {}
        runner = threading.Thread(target=lambda: out.setdefault("y", ex.run({"x": x}).numpy_outputs()["y"]))
        runner.start()
        assert entered.wait(30)
        writer = threading.Thread(target=ex.set_weight, args=("w", np.full((2, 3), 5.0, np.float32)))
        writer.start()
        writer.join(0.3)
        assert writer.is_alive(), "set_weight overtook the run in flight"
        go.set()
        runner.join(30)
        writer.join(30)
        assert not writer.is_alive() and not runner.is_alive()
        np.testing.assert_array_equal(out["y"], 2.0 * x)              # the run kept the old weight
        np.testing.assert_array_equal(ex.run({"x": x}).numpy_outputs()["y"], 5.0 * x)   # the next, the new
