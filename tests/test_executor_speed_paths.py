"""The executor's speed paths (issue 13) keep results and the device contract.

- Weights a kernel reads on the host (Reshape's shape, Slice's starts, ...) get a
  host copy at bind time: a device run reads none of them back per call.
- A bidirectional LSTM is split into two directions the engine runs in parallel;
  results match onnxruntime, and ``set_weight`` reaches both halves.
- The choice between parallel segments and one serial function is measured.
Checked against onnxruntime on fresh random inputs; no timings asserted.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import make_model
from engine.executor import Executor
from engine.kernels import native
from engine.kernels.rnn import directions_in_parallel
from engine.plan import ModeChooser
from fake_cupy import FakeArray, install
from partition import load_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from real_models import build  # noqa: E402


def _ort(model, feeds):
    if any(a.name == "layout" and a.i for n in model.graph.node for a in n.attribute):
        from onnx.reference import ReferenceEvaluator  # onnxruntime refuses layout 1
        ref = ReferenceEvaluator(model)
        return dict(zip(ref.output_names, ref.run(None, feeds)))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def test_shape_weights_are_not_read_back_from_the_device(monkeypatch, rng):
    fake = install(monkeypatch)
    model, feeds = build("transformer2", seed=int(rng.integers(1 << 30)))
    graph = load_model(model.SerializeToString())
    reshapes = [n for n in graph.nodes if n.op_type == "Reshape"]
    assert len(reshapes) == 8 and all(n.inputs[1] in graph.initializers for n in reshapes)
    with Executor(graph, device="gpu") as ex:
        before = dict(fake.syncs)
        res = ex.run(feeds)
        assert fake.syncs == before, f"device->host reads during the run: {fake.syncs}"
        assert all(isinstance(v, FakeArray) for v in res.outputs.values())
        got = res.numpy_outputs()["hidden"]
    np.testing.assert_allclose(got, _ort(model, feeds)["hidden"], rtol=1e-4, atol=1e-4)


def _bilstm(rng, seq=7, batch=3, din=5, hidden=4, layout=0):
    w = numpy_helper.from_array(rng.standard_normal((2, 4 * hidden, din)).astype(np.float32), "W")
    r = numpy_helper.from_array(rng.standard_normal((2, 4 * hidden, hidden)).astype(np.float32), "R")
    b = numpy_helper.from_array(rng.standard_normal((2, 8 * hidden)).astype(np.float32), "B")
    h0 = numpy_helper.from_array(rng.standard_normal((2, batch, hidden)).astype(np.float32), "H0")
    if layout:
        h0 = numpy_helper.from_array(rng.standard_normal((batch, 2, hidden)).astype(np.float32), "H0")
    node = helper.make_node("LSTM", ["X", "W", "R", "B", "", "H0"], ["Y", "Y_h", "Y_c"], name="lstm",
                            hidden_size=hidden, direction="bidirectional", layout=layout)
    relu = helper.make_node("Relu", ["Y"], ["out"], name="relu")
    xshape = [batch, seq, din] if layout else [seq, batch, din]
    f = TensorProto.FLOAT
    model = make_model([node, relu], [helper.make_tensor_value_info("X", f, xshape)],
                       [helper.make_tensor_value_info(t, f, None) for t in ("out", "Y_h", "Y_c")],
                       [w, r, b, h0])
    return model, {"X": rng.standard_normal(xshape).astype(np.float32)}


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("layout", [0, 1])
def test_a_bidirectional_lstm_runs_as_two_directions_and_matches_onnxruntime(rng, layout, compiled,
                                                                            monkeypatch):
    """Split into two LSTM nodes for the engine's workers, unless the kernel runs the
    two directions on two cores itself (the compiled recurrence, numpy)."""
    if not compiled:
        monkeypatch.setattr(native, "_lib", None)
    model, feeds = _bilstm(rng, layout=layout)
    graph = load_model(model.SerializeToString())
    want = _ort(model, feeds)
    with Executor(graph, workers=2) as ex:
        dirs = [s.node.attrs.get("direction") for s in ex._steps if s.node.op_type == "LSTM"]
        itself = directions_in_parallel(ex.xp)
        assert itself == (compiled and native.available() and ex.xp is np)
        assert dirs == (["bidirectional"] if itself else ["forward", "reverse"])
        for _ in range(5):  # parallel and serial runs (the ModeChooser tries both)
            got = ex(feeds)
            for k, v in want.items():
                np.testing.assert_allclose(got[k], v, rtol=1e-5, atol=1e-5)
        # A new recurrent weight reaches both halves.
        r2 = rng.standard_normal((2, 16, 4)).astype(np.float32)
        ex.set_weight("R", r2)
        model.graph.initializer[1].CopyFrom(numpy_helper.from_array(r2, "R"))
        got, want = ex(feeds), _ort(model, feeds)
        for k, v in want.items():
            np.testing.assert_allclose(got[k], v, rtol=1e-5, atol=1e-5)
    with Executor(graph, plan="nodes") as ex:  # the node plan shows the node as written
        assert [s.node.name for s in ex._steps] == ["lstm", "relu"]


def test_the_mode_chooser_alternates_then_keeps_the_faster():
    m = ModeChooser(runs=2)
    seen = []
    for t_par, t_ser in ((5.0, 3.0), (4.0, 3.5)):
        seen.append(m.serial())
        m.record(False, t_par)
        seen.append(m.serial())
        m.record(True, t_ser)
    assert seen == [False, True, False, True] and m.choice is True and m.serial()
    m2 = ModeChooser(runs=1)
    m2.record(False, 1.0)
    m2.record(True, 2.0)
    assert m2.serial() is False
