"""The compiled kernels (engine/kernels/_native.c, engine/kernels/native.py): built
wherever a C compiler is; the LSTM recurrence equal to the numpy loop it replaces
and to onnxruntime on fresh random inputs (odd hidden sizes exercise the loops'
remainders); erf and GELU against an exact erf, special values included, on both
paths; arrays of the wrong type or layout refused with an error instead of read
past."""

from __future__ import annotations

import math
import shutil
import sysconfig

import numpy as np
import onnxruntime as ort
import pytest

from engine.executor import Executor
from engine.fuse import gelu_kernel
from engine.kernels.elementwise import erf
from engine.kernels import native
from partition import load_model
from test_rnn_paths import _lstm_model

pytestmark = pytest.mark.cpu_only("the compiled recurrence is the numpy path's")


def test_the_extension_is_built_where_a_compiler_is() -> None:
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        pytest.skip(f"no C compiler ({compiler}): the numpy loop runs")
    assert native.available(), "setup.py's optional extension failed to build"


def _run(model, feeds: dict) -> list[np.ndarray]:
    with Executor(load_model(model.SerializeToString())) as ex:
        res = ex.run(feeds)
        return [np.asarray(res.outputs[n]) for n in ("Y", "Y_h", "Y_c")]


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("hs", [1, 5, 8, 23])
def test_native_equals_numpy_loop_and_onnxruntime(direction: str, hs: int, rng: np.random.Generator,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    if not native.available():
        pytest.skip("extension not built")
    seq, batch, din = int(rng.integers(1, 40)), int(rng.integers(1, 5)), int(rng.integers(2, 9))
    model, feeds = _lstm_model(rng, seq, batch, din, hs, direction, bool(rng.integers(2)), False)
    fast = _run(model, feeds)
    with monkeypatch.context() as m:
        m.setattr(native, "_lib", None)
        loop = _run(model, feeds)
    ref = ort.InferenceSession(model.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, feeds)
    for got, plain, want in zip(fast, loop, ref):
        np.testing.assert_allclose(got, plain, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_native_at_the_benchmark_size(rng: np.random.Generator) -> None:
    """Hidden 256, 100 steps, both directions on two threads: onnxruntime agrees."""
    if not native.available():
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
    if not native.available():
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
        native._lib.lstm_direction(*args)


def _exact_erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x.astype(np.float64))


@pytest.mark.parametrize("compiled", [True, False])
def test_erf_and_gelu_on_both_paths(compiled: bool, rng: np.random.Generator,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    if compiled and not native.available():
        pytest.skip("extension not built")
    if not compiled:
        monkeypatch.setattr(native, "_lib", None)
    x = np.concatenate([rng.standard_normal(3000) * 3, rng.uniform(-40, 40, 300),
                        [0.0, -0.0, 1e-40, -1e-30, 9.0, -9.0]]).astype(np.float32)
    x = x.reshape(3, -1)[:, ::2]  # a strided view: the compiled path copies it first
    got = erf(np, x)
    assert got.dtype == np.float32 and got.shape == x.shape
    np.testing.assert_allclose(got, _exact_erf(x), rtol=1e-6, atol=3e-7)
    for one, half in ((1.0, 0.5), (1.5, 0.25)):
        y = gelu_kernel(math.sqrt(2), one, half)(np, x)[0]
        want = half * x.astype(np.float64) * (one + _exact_erf(x / np.float32(math.sqrt(2))))
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=2e-6)


def test_compiled_erf_keeps_infinities_and_nan() -> None:
    if not native.available():
        pytest.skip("extension not built")
    got = erf(np, np.array([np.inf, -np.inf, np.nan], np.float32))
    assert got[0] == 1.0 and got[1] == -1.0 and np.isnan(got[2])


def test_compiled_erf_refuses_mismatched_arrays() -> None:
    if not native.available():
        pytest.skip("extension not built")
    with pytest.raises(ValueError, match="float32 arrays of one size"):
        native._lib.erf_f32(np.zeros(4, np.float32), np.zeros(5, np.float32))
    with pytest.raises(ValueError, match="float32"):
        native._lib.gelu_f32(np.zeros(4, np.float64), np.zeros(4, np.float64), 1.4, 1.0, 0.5)


def test_compiled_softmax_rows_agree_with_the_numpy_path_on_edge_rows(
        rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fully masked row, a NaN, +inf and a one-element row: the same as numpy's path."""
    if not native.available():
        pytest.skip("extension not built")
    from engine.kernels import kernel_for
    softmax = kernel_for("Softmax", "", {"": 17})
    x = rng.standard_normal((6, 70)).astype(np.float32)
    x[0] = -np.inf
    x[1, 5] = np.nan
    x[2, 7] = np.inf
    x[3, :60] = -np.inf
    got = softmax(np, x, axis=-1)[0]
    with monkeypatch.context() as m:
        m.setattr(native, "_lib", None)
        with np.errstate(invalid="ignore"):
            want = softmax(np, x, axis=-1)[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7, equal_nan=True)
    one = rng.standard_normal((5, 1)).astype(np.float32)
    assert np.array_equal(softmax(np, one, axis=-1)[0], np.ones_like(one))


def test_compiled_layer_norm_without_bias_matches_onnxruntime(rng: np.random.Generator) -> None:
    if not native.available():
        pytest.skip("extension not built")
    from engine.kernels import kernel_for
    from onnx import TensorProto, helper
    x = (rng.standard_normal((3, 17, 33)) * 5 - 2).astype(np.float32)
    scale = rng.standard_normal(33).astype(np.float32)
    got = kernel_for("LayerNormalization", "", {"": 17})(np, x, scale, axis=-1, epsilon=1e-3)
    f = TensorProto.FLOAT
    g = helper.make_graph([helper.make_node("LayerNormalization", ["x", "s"], ["y", "m", "i"],
                                            axis=-1, epsilon=1e-3)], "g",
                          [helper.make_tensor_value_info(n, f, None) for n in ("x", "s")],
                          [helper.make_tensor_value_info(n, f, None) for n in ("y", "m", "i")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x, "s": scale})
    for a, b in zip(got, want):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
