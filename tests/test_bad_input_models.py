"""Third-party model shapes that failed to run (issue 9), each against onnxruntime as the oracle:
a dim stored as -1 (Paddle exports), a scalar BOOL graph input, Softmax/LogSoftmax over an
empty axis."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from engine.compare import compare
from engine.executor import Executor
from engine.inputs import check_feeds, random_inputs
from partition import load_model
from partition.onnx_io import to_model_proto
from tests.conftest import make_model

ROOT = Path(__file__).resolve().parents[1]
F = TensorProto.FLOAT


def sglens(*args: str) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).parent / "sglens"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "sglens"]
    return subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))


def ort_run(model: onnx.ModelProto, feeds) -> dict[str, np.ndarray]:
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))


def engine_run(model: onnx.ModelProto, feeds) -> dict[str, np.ndarray]:
    with Executor(load_model(model.SerializeToString())) as ex:
        return ex(feeds)


# --------------------------------------------------------------- -1 dims --
def minus_one_model() -> onnx.ModelProto:
    """x: float [-1, 3] (as Paddle writes a dynamic batch) -> Relu -> ReduceSum over axis 1."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("ReduceSum", ["r"], ["y"], keepdims=0, axes=[1], name="sum")]
    model = make_model(nodes, [helper.make_tensor_value_info("x", F, [-1, 3])],
                       [helper.make_tensor_value_info("y", F, [-1])], opset=12)
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_value == -1
    return model


def test_minus_one_dim_is_symbolic_everywhere(rng, tmp_path) -> None:
    model = minus_one_model()
    graph = load_model(model.SerializeToString())
    assert graph.info("x").shape == (None, 3)                    # IR import
    x = rng.standard_normal((5, 3)).astype(np.float32)
    feeds = check_feeds(graph, {"x": x})                          # --inputs shape check
    notes: list[str] = []
    assert random_inputs(graph, default_dim=2, notes=notes)["x"].shape == (2, 3) and notes  # random inputs
    np.testing.assert_allclose(engine_run(model, feeds)["y"], ort_run(model, {"x": x})["y"], rtol=1e-6)
    reexported = to_model_proto(graph)                            # export keeps it dynamic
    np.testing.assert_allclose(ort_run(reexported, {"x": x})["y"], ort_run(model, {"x": x})["y"], rtol=1e-6)
    path = tmp_path / "paddle.onnx"
    onnx.save_model(model, str(path))
    np.savez(tmp_path / "in.npz", x=x)
    done = sglens("compare", str(path), "--ops", "Relu", "--inputs", str(tmp_path / "in.npz"))
    assert done.returncode == 0 and "OK" in done.stdout, done.stderr + done.stdout


# ------------------------------------------------------------ scalar bool --
def bool_model() -> onnx.ModelProto:
    nodes = [helper.make_node("Neg", ["x"], ["n"], name="neg"),
             helper.make_node("Where", ["flag", "x", "n"], ["y"], name="where"),
             helper.make_node("Not", ["flag"], ["nf"], name="not")]
    return make_model(nodes, [helper.make_tensor_value_info("flag", TensorProto.BOOL, []),
                              helper.make_tensor_value_info("x", F, [4])],
                      [helper.make_tensor_value_info("y", F, [4]), helper.make_tensor_value_info("nf", TensorProto.BOOL, [])])


def test_scalar_bool_input_runs_and_compares(rng, tmp_path) -> None:
    model = bool_model()
    graph = load_model(model.SerializeToString())
    feeds = random_inputs(graph, seed=3)
    assert isinstance(feeds["flag"], np.ndarray) and feeds["flag"].shape == () and feeds["flag"].dtype == bool
    for flag in (True, False):
        x = rng.standard_normal(4).astype(np.float32)
        f = {"flag": np.array(flag), "x": x}
        want, got = ort_run(model, f), engine_run(model, f)
        np.testing.assert_array_equal(got["y"], want["y"])
        np.testing.assert_array_equal(got["nf"], want["nf"])
    c = compare(graph, model, feeds, repeat=1)   # the web run path calls this with random_inputs
    assert c.ok
    path = tmp_path / "flag.onnx"
    onnx.save_model(model, str(path))
    for command in ("run", "compare"):
        done = sglens(command, str(path), "--ops", "Neg")
        assert done.returncode == 0, done.stderr


# ----------------------------------------------------------- empty softmax --
@pytest.mark.parametrize("opset,axis", [(13, 1), (11, 1), (11, 2)])
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
def test_softmax_over_an_empty_axis(op, opset, axis) -> None:
    x_shape = [2, 0, 3]
    nodes = [helper.make_node(op, ["x"], ["y"], axis=axis, name="sm"),
             helper.make_node("Shape", ["y"], ["s"], name="shape")]
    model = make_model(nodes, [helper.make_tensor_value_info("x", F, x_shape)],
                       [helper.make_tensor_value_info("y", F, None),
                        helper.make_tensor_value_info("s", TensorProto.INT64, None)], opset=opset)
    x = np.zeros(x_shape, np.float32)
    want, got = ort_run(model, {"x": x}), engine_run(model, {"x": x})
    assert got["y"].shape == want["y"].shape and got["y"].dtype == want["y"].dtype
    np.testing.assert_array_equal(got["s"], want["s"])
