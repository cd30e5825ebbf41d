"""The compiled LSTM recurrence (engine/kernels/_rnn_native.c): built wherever a C
compiler is, equal to the numpy loop it replaces and to onnxruntime on fresh random
inputs (odd hidden sizes exercise the loops' remainders), and refusing arrays of
the wrong type or layout with an error instead of reading past them."""

from __future__ import annotations

import shutil
import sysconfig

import numpy as np
import onnxruntime as ort
import pytest

from engine.executor import Executor
from engine.kernels import rnn
from partition import load_model
from test_rnn_paths import _lstm_model

pytestmark = pytest.mark.cpu_only("the compiled recurrence is the numpy path's")


def test_the_extension_is_built_where_a_compiler_is() -> None:
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        pytest.skip(f"no C compiler ({compiler}): the numpy loop runs")
    assert rnn._rnn_native is not None, "setup.py's optional extension failed to build"


def _run(model, feeds: dict) -> list[np.ndarray]:
    with Executor(load_model(model.SerializeToString())) as ex:
        res = ex.run(feeds)
        return [np.asarray(res.outputs[n]) for n in ("Y", "Y_h", "Y_c")]


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("hs", [1, 5, 8, 23])
def test_native_equals_numpy_loop_and_onnxruntime(direction: str, hs: int, rng: np.random.Generator,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    if rnn._rnn_native is None:
        pytest.skip("extension not built")
    seq, batch, din = int(rng.integers(1, 40)), int(rng.integers(1, 5)), int(rng.integers(2, 9))
    model, feeds = _lstm_model(rng, seq, batch, din, hs, direction, bool(rng.integers(2)), False)
    native = _run(model, feeds)
    with monkeypatch.context() as m:
        m.setattr(rnn, "_rnn_native", None)
        loop = _run(model, feeds)
    ref = ort.InferenceSession(model.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, feeds)
    for got, plain, want in zip(native, loop, ref):
        np.testing.assert_allclose(got, plain, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_native_at_the_benchmark_size(rng: np.random.Generator) -> None:
    """Hidden 256, 100 steps, both directions on two threads: onnxruntime agrees."""
    if rnn._rnn_native is None:
        pytest.skip("extension not built")
    model, feeds = _lstm_model(rng, 100, 1, 128, 256, "bidirectional", False, False)
    got = _run(model, feeds)
    ref = ort.InferenceSession(model.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, feeds)
    for g, w in zip(got, ref):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=2e-5)


def _args(seq: int = 3, batch: int = 2, hs: int = 4, dtype=np.float32) -> list:
    return [np.zeros((seq, batch, 4 * hs), dtype), np.zeros((hs, 4 * hs), dtype),
            np.zeros((batch, hs), dtype), np.zeros((batch, hs), dtype),
            np.zeros((seq, batch, hs), dtype), False]


@pytest.mark.parametrize("case,message", [
    ("float64", "float32"),
    ("2-D xs", "3-D"),
    ("transposed rt", "C-contiguous"),
    ("short h", "shapes do not match"),
    ("read-only ys", "read-only"),
])
def test_bad_arrays_are_refused(case: str, message: str) -> None:
    if rnn._rnn_native is None:
        pytest.skip("extension not built")
    args = _args(dtype=np.float64) if case == "float64" else _args()
    if case == "2-D xs":
        args[0] = args[0][0]
    elif case == "transposed rt":
        args[1] = np.zeros((16, 4), np.float32).T
    elif case == "short h":
        args[2] = np.zeros((1, 4), np.float32)
    elif case == "read-only ys":
        args[4].flags.writeable = False
    with pytest.raises((ValueError, BufferError), match=message):
        rnn._rnn_native.lstm_direction(*args)
