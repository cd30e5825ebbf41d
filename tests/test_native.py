"""The compiled kernels (engine/kernels/_native.c, engine/kernels/native.py): built
wherever a C compiler is; the LSTM recurrence (the whole family: test_rnn_fuzz.py) equal
to the numpy loop it replaces
and to onnxruntime on fresh random inputs (odd hidden sizes exercise the loops'
remainders); erf and GELU against an exact erf, special values included, on both
paths; arrays of the wrong type or layout refused with an error instead of read
past."""

from __future__ import annotations

import math
import shutil
import sysconfig
import time

import numpy as np
import onnxruntime as ort
import pytest

from engine.kernels import blas
from engine.executor import Executor
from engine.fuse import gelu_kernel
from engine.kernels import native
from engine.kernels.elementwise import erf
from partition import load_model
from test_kernels_harness import check
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


def _check_against_numpy_and_onnxruntime(model, feeds: dict, fast: list[np.ndarray],
                                         monkeypatch: pytest.MonkeyPatch, plain_atol: float) -> None:
    """``fast`` (the compiled run's Y, Y_h, Y_c) equals the numpy path's and onnxruntime's."""
    with monkeypatch.context() as m:
        m.setattr(native, "_lib", None)
        loop = _run(model, feeds)
    ref = ort.InferenceSession(model.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, feeds)
    for got, plain, want in zip(fast, loop, ref):
        np.testing.assert_allclose(got, plain, rtol=1e-5, atol=plain_atol)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("hs", [1, 5, 8, 23])
def test_native_equals_numpy_loop_and_onnxruntime(direction: str, hs: int, rng: np.random.Generator,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    if not native.available():
        pytest.skip("extension not built")
    seq, batch, din = int(rng.integers(1, 40)), int(rng.integers(1, 5)), int(rng.integers(2, 9))
    model, feeds = _lstm_model(rng, seq, batch, din, hs, direction, bool(rng.integers(2)), False)
    _check_against_numpy_and_onnxruntime(model, feeds, _run(model, feeds), monkeypatch, 1e-5)


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


def test_a_helper_spins_after_a_job_then_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Between jobs a helper waits in the compiled spin (without the GIL) for
    ``SPIN_SECONDS``, then blocks; only jobs posted while one spins are judged."""
    if not native.available():
        pytest.skip("the compiled module was not built")
    monkeypatch.setattr(blas, "SPIN_SECONDS", 0.3)
    monkeypatch.setattr(blas, "_CORES", 2)
    judged: list[float] = []
    monkeypatch.setattr(blas, "_record_gain", judged.append)
    monkeypatch.setattr(blas, "_MIN_JUDGED", 0.0)
    done: list[int] = []
    blas.run_split(done.append, 2, 2)
    assert sorted(done) == [0, 1]
    deadline = time.monotonic() + 5
    while blas._spinning[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert blas._spinning[0] == 1  # the helper is spinning for the next job
    blas.run_split(done.append, 2, 2)
    assert sorted(done) == [0, 0, 1, 1] and len(judged) >= 1  # posted to a spinning helper
    deadline = time.monotonic() + 5
    while blas._spinning[0] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert blas._spinning[0] == 0  # the spin ended: the helper blocks on the queue


@pytest.fixture
def pool_split(monkeypatch: pytest.MonkeyPatch) -> None:
    """Large-kernel splitting on for any size, as on a 2-core machine."""
    if not native.available():
        pytest.skip("extension not built")
    monkeypatch.setattr(blas, "_split_on", True)
    monkeypatch.setattr(blas, "_CORES", 2)
    monkeypatch.setattr(blas, "SPLIT_MIN_MACS", 0)
    monkeypatch.setattr(blas, "_skip_until", 0.0)


@pytest.mark.parametrize("seed", range(16))
@pytest.mark.parametrize("split", [True, False])
def test_compiled_conv_random_geometry(seed: int, split: bool, monkeypatch: pytest.MonkeyPatch,
                                       request: pytest.FixtureRequest) -> None:
    """2-D convs on the compiled pool, one thread and split, against onnxruntime:
    random kernels, strides, dilations, pads up to twice the kernel (whole windows
    in the padding), auto_pad, batches, 1x1 (no columns) and small maps (channel
    slices over one column matrix)."""
    if split:
        request.getfixturevalue("pool_split")
    elif not native.available():
        pytest.skip("extension not built")
    rng = np.random.default_rng(seed)
    k = tuple(int(v) for v in rng.integers(1, 5, 2)) if seed % 4 else (1, 1)
    sp = tuple(int(v) for v in rng.integers(3, 40, 2))
    attrs: dict = {"kernel_shape": list(k), "strides": [int(v) for v in rng.integers(1, 4, 2)]}
    if rng.random() < 0.7:
        attrs["dilations"] = [int(v) for v in rng.integers(1, 3, 2)]
        attrs["pads"] = [int(rng.integers(0, 2 * kk + 1)) for kk in k * 2]
    else:
        attrs["auto_pad"] = str(rng.choice(["SAME_UPPER", "SAME_LOWER", "VALID"]))
    c, m = int(rng.integers(1, 20)), int(rng.integers(1, 40))
    x = rng.standard_normal((int(rng.integers(1, 4)), c) + sp).astype(np.float32)
    w = rng.standard_normal((m, c) + k).astype(np.float32)
    ran: list[bool] = []
    real = native.conv2d

    def spy(*args, **kwargs):
        y = real(*args, **kwargs)
        ran.append(y is not None)
        return y
    monkeypatch.setattr(native, "conv2d", spy)
    check("Conv", {"x": x, "w": w, "b": rng.standard_normal(m).astype(np.float32)}, rtol=1e-4,
          atol=1e-4, oracle="onnxruntime", **attrs)
    if x.shape[0] * c * math.prod(_out_sp(sp, attrs)) > 1024:  # tinier: the gather path
        assert ran and all(ran), "the conv did not run compiled"


def _out_sp(sp: tuple, attrs: dict) -> list[int]:
    k, s = attrs["kernel_shape"], attrs["strides"]
    d = attrs.get("dilations", [1] * len(sp))
    if attrs.get("auto_pad", "VALID") != "VALID":
        return [-(-n // st) for n, st in zip(sp, s)]
    pads = attrs.get("pads", [0] * 2 * len(sp))
    return [(n + pads[i] + pads[i + len(sp)] - (k[i] - 1) * d[i] - 1) // s[i] + 1
            for i, n in enumerate(sp)]


def test_compiled_conv_epilogue_matches_onnxruntime(pool_split: None,
                                                    rng: np.random.Generator) -> None:
    """Conv + Add + Relu (a ResNet block's tail), fused: bias, residual and Relu
    applied per band on the pool."""
    from engine.kernels.nn import conv_fused
    x = rng.standard_normal((2, 8, 21, 19)).astype(np.float32)
    w = rng.standard_normal((12, 8, 3, 3)).astype(np.float32)
    b = rng.standard_normal(12).astype(np.float32)
    res = rng.standard_normal((2, 12, 21, 19)).astype(np.float32)
    kept = res.copy()
    got = conv_fused(np, x, w, b, res, True, pads=[1, 1, 1, 1])
    from onnx import TensorProto, helper
    f = TensorProto.FLOAT
    g = helper.make_graph([helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
                           helper.make_node("Add", ["c", "r"], ["s"]),
                           helper.make_node("Relu", ["s"], ["y"])], "g",
                          [helper.make_tensor_value_info(n, f, None) for n in ("x", "w", "b", "r")],
                          [helper.make_tensor_value_info("y", f, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x, "w": w, "b": b, "r": res})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(res, kept)  # the residual was read, never written


@pytest.mark.parametrize("shapes", [((64, 96), (96, 80)), ((3, 40, 64), (64, 50)),
                                    ((7, 300), (300, 9)), ((200, 33), (33, 1))])
def test_compiled_gemm_matches_onnxruntime(shapes: tuple, pool_split: None,
                                           rng: np.random.Generator) -> None:
    a = rng.standard_normal(shapes[0]).astype(np.float32)
    b = rng.standard_normal(shapes[1]).astype(np.float32)
    before = native.pool_stats()[0]
    check("MatMul", {"a": a, "b": b}, rtol=1e-4, atol=1e-4, oracle="onnxruntime")
    check("Gemm", {"a": a.reshape(-1, a.shape[-1]), "b": np.ascontiguousarray(b.T),
                   "c": rng.standard_normal(b.shape[1]).astype(np.float32)},
          rtol=1e-4, atol=1e-4, oracle="onnxruntime", transB=1, alpha=0.5, beta=2.0)
    assert native.pool_stats()[0] > before, "the matmul did not run on the pool"


def test_the_pool_workers_take_part(pool_split: None, rng: np.random.Generator) -> None:
    """Over many large convs a worker thread runs some slices (it cannot be forced
    to win the race for a given slice, but it must not sit idle every time)."""
    from engine.kernels.nn import conv
    x = rng.standard_normal((1, 32, 64, 64)).astype(np.float32)
    w = rng.standard_normal((32, 32, 3, 3)).astype(np.float32)
    before = native.pool_stats()[1]
    for _ in range(20):
        conv(np, x, w, pads=[1, 1, 1, 1])
    assert native.pool_stats()[1] > before


def test_compiled_gemm_and_conv_refuse_bad_arrays() -> None:
    if not native.available() or not native._pool_ready():
        pytest.skip("extension or BLAS not found")
    z = np.zeros
    with pytest.raises(ValueError, match="shapes"):
        native._lib.gemm_f32(z((3, 4), np.float32), z((5, 2), np.float32), z((3, 2), np.float32), 1)
    with pytest.raises(ValueError, match="unit stride"):
        native._lib.gemm_f32(z((6, 8), np.float32)[::2, ::2], z((4, 2), np.float32),
                             z((3, 2), np.float32), 1)
    with pytest.raises(ValueError, match="do not agree"):
        native._lib.conv2d_f32(z((1, 2, 5, 5), np.float32), z((3, 17), np.float32),
                               z((1, 3, 9), np.float32), None, None, False,
                               (3, 3, 1, 1, 1, 1, 0, 0, 3, 3), 1)
    with pytest.raises(ValueError, match="float32"):
        native._lib.conv2d_f32(z((1, 2, 5, 5)), z((3, 18)), z((1, 3, 9)), None, None, False,
                               (3, 3, 1, 1, 1, 1, 0, 0, 3, 3), 1)


@pytest.mark.parametrize("seed", range(24))
def test_compiled_max_pool_random_geometry(seed: int, pool_split: None) -> None:
    """2-D MaxPool on the compiled pool against onnxruntime: kernels, strides,
    dilations, pads and ceil mode at random; with a NaN in the input against the
    numpy path: a window holding a NaN is NaN, as numpy's maximum (onnxruntime and
    ONNX's reference evaluator let a NaN through in some windows and not in others,
    by the order they compare in: NaN in MaxPool is left open by the standard)."""
    rng = np.random.default_rng(seed)
    k = [int(v) for v in rng.integers(1, 4, 2)]
    attrs: dict = {"kernel_shape": k, "strides": [int(v) for v in rng.integers(1, 3, 2)],
                   "dilations": [int(v) for v in rng.integers(1, 3, 2)],
                   "pads": [int(rng.integers(0, kk // 2 + 1)) for kk in k * 2],
                   "ceil_mode": int(rng.integers(0, 2))}
    x = rng.standard_normal((int(rng.integers(1, 3)), int(rng.integers(1, 9)),
                             int(rng.integers(8, 30)), int(rng.integers(8, 30)))).astype(np.float32)
    if seed % 3 == 0:
        x[0, 0, 3, 4] = np.nan
    ran: list[bool] = []
    real = native.max_pool2d

    def spy(*args, **kwargs):
        y = real(*args, **kwargs)
        ran.append(y is not None)
        return y
    with pytest.MonkeyPatch.context() as m:
        m.setattr(native, "max_pool2d", spy)
        if seed % 3:
            check("MaxPool", {"x": x}, rtol=0, atol=0, oracle="onnxruntime", **attrs)
        else:
            from engine.kernels import kernel_for
            pool = kernel_for("MaxPool", "", {"": 17})
            got = pool(np, x, _n_outputs=1, **attrs)[0]
            assert ran == [True], "the pool did not run compiled"
            m.setattr(native, "_lib", None)
            np.testing.assert_array_equal(got, pool(np, x, _n_outputs=1, **attrs)[0])
            assert np.isnan(got).any()
            return
    assert ran and all(ran), "the pool did not run compiled"


def test_empty_operands_take_the_numpy_path(pool_split: None) -> None:
    """An empty GEMM or conv is numpy's to answer (BLAS refuses a zero leading
    dimension): the same zeros and shapes as onnxruntime, no error."""
    from engine.kernels import kernel_for
    mm = kernel_for("MatMul", "", {"": 17})
    got = mm(np, np.zeros((5, 0), np.float32), np.zeros((0, 7), np.float32))[0]
    assert got.shape == (5, 7) and not got.any()
    assert native.gemm(np, np.zeros((5, 0), np.float32), np.zeros((0, 7), np.float32), 2) is None
    conv = kernel_for("Conv", "", {"": 17})
    y = conv(np, np.zeros((0, 3, 9, 9), np.float32), np.ones((4, 3, 3, 3), np.float32))[0]
    assert y.shape == (0, 4, 7, 7)


@pytest.mark.parametrize("x_shape,w_shape", [((0, 3, 9, 9), (4, 3, 3, 3)),
                                             ((2, 0, 9, 9), (4, 0, 3, 3)),
                                             ((1, 2, 9), (0, 2, 3))])
def test_empty_convs_match_onnxruntime(x_shape: tuple, w_shape: tuple,
                                       rng: np.random.Generator) -> None:
    """An empty batch, zero input channels (the output is the bias) or zero filters."""
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    check("Conv", {"x": x, "w": w, "b": rng.standard_normal(w_shape[0]).astype(np.float32)},
          oracle="onnxruntime")


def test_compiled_gemm_reads_views_in_place_or_refuses_them(rng: np.random.Generator) -> None:
    """Transposed and sliced views are read in place with their leading dimension
    (checked against numpy); a view with no unit stride is refused, never misread."""
    if not native.available() or not native._pool_ready():
        pytest.skip("extension or BLAS not found")
    big = rng.standard_normal((40, 30)).astype(np.float32)
    for a, b in ((big[:7, :5], big[10:15, 3:12]), (big[:5, :7].T, big[:9, 20:25].T),
                 (big[:, 4:5], big[6:7, :])):
        out = np.empty((a.shape[0], b.shape[1]), np.float32)
        native._lib.gemm_f32(a, b, out, 2)
        np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
    odd = big[:, ::2][:, 2:3]  # (40, 1): neither stride is one element
    assert odd.strides == (120, 8)
    with pytest.raises(ValueError, match="unit stride"):
        native._lib.gemm_f32(odd, np.ones((1, 1), np.float32), np.empty((40, 1), np.float32), 1)
    assert native.gemm(np, odd, np.ones((1, 1), np.float32), 2) is None  # numpy's path then


@pytest.mark.parametrize("hs", [1, 7, 64])
def test_compiled_streaming_step_equals_numpy_and_onnxruntime(hs: int, rng: np.random.Generator,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """One time step with its state given (a VAD's call): compiled, numpy, onnxruntime."""
    if not native.available():
        pytest.skip("extension not built")
    batch, din = int(rng.integers(1, 4)), int(rng.integers(2, 20))
    model, feeds = _lstm_model(rng, 1, batch, din, hs, "forward", True, False)
    calls: list[int] = []
    real = native._lib.lstm_step_f32
    monkeypatch.setattr(native._lib, "lstm_step_f32", lambda *a: (calls.append(1), real(*a))[1])
    fast = _run(model, feeds)
    assert calls, "the streaming step did not run compiled"
    _check_against_numpy_and_onnxruntime(model, feeds, fast, monkeypatch, 1e-6)


def test_compiled_streaming_step_refuses_mismatched_arrays() -> None:
    if not native.available():
        pytest.skip("extension not built")
    z = np.zeros
    with pytest.raises(ValueError, match="shapes do not match"):
        native._lib.lstm_step_f32(z((1, 3), np.float32), z((1, 4), np.float32), z((1, 4), np.float32),
                                  z((6, 16), np.float32), z(16, np.float32), z((1, 4), np.float32))
    with pytest.raises(ValueError, match="C-contiguous"):
        native._lib.lstm_step_f32(z((1, 3), np.float32), z((1, 4), np.float32), z((1, 4), np.float32),
                                  z((16, 7), np.float32).T, z(16, np.float32), z((1, 4), np.float32))


# ------------------------------------ geometry the C side refuses itself --
# Issue 21: the kernels re-check the numbers Python hands them. Called here directly,
# past engine/kernels/geometry.py, with the crafted geometries that made conv_columns
# write before its buffer (SIGSEGV) and MaxPool read past its row (heap bytes out).
_BIG = 2**63 - 9


@pytest.mark.parametrize("geometry", [
    (1, 1, 1, 2**53, 1, 1, 0, _BIG, 2, 1024),       # the conv: lo overflowed
    (1, 1, 1, 1, 1, 1, 0, 2**62, 2, 8),              # a pad past any index
    (1, 1, 1, 1, 1, 2**40, 0, 0, 2, 8),              # a dilation past NATIVE_MAX_EXTENT
    (1, 1, 0, 1, 1, 1, 0, 0, 2, 8),                  # a zero stride
    (1, 1, 1, 1, 1, 1, -1, 0, 2, 8),                 # a negative pad
    (2**31, 2**31, 1, 1, 1, 1, 0, 0, 1, 1),          # a kernel past NATIVE_MAX_EXTENT
])
def test_compiled_conv_refuses_geometry_it_cannot_index(geometry: tuple) -> None:
    if not native.available() or not native._pool_ready():
        pytest.skip("extension or BLAS not found")
    oh, ow = geometry[8], geometry[9]
    x = np.ones((1, 1, 2, 8), np.float32)
    w = np.ones((1, max(1, min(geometry[0] * geometry[1], 4))), np.float32)
    out = np.zeros((1, 1, oh * ow), np.float32)
    with pytest.raises(ValueError, match="do not agree"):
        native._lib.conv2d_f32(x, w, out, None, None, False, geometry, 1)
    assert not out.any()  # nothing written


@pytest.mark.parametrize("geometry", [
    (1, 3, 1, 2**62 + 9, 1, 1, 0, 2**63 - 10),       # the MaxPool: x_lo overflowed
    (1, 3, 1, 1, 1, 1, 0, 2**40),
    (1, 3, 1, 1, 1, 0, 0, 0),
    (1, 3, 1, 1, 1, 1, 0, -1),
])
def test_compiled_max_pool_refuses_geometry_it_cannot_index(geometry: tuple) -> None:
    if not native.available():
        pytest.skip("extension not built")
    x = np.arange(1, 9, dtype=np.float32).reshape(1, 1, 8)
    out = np.full((1, 1, 2), 7.0, np.float32)
    with pytest.raises(ValueError, match="do not agree"):
        native._lib.maxpool2d_f32(x, out, geometry, 1)
    assert (out == 7.0).all()


def test_compiled_max_pool_interior_path_only_where_its_taps_fit() -> None:
    """Large (in range) strides and pads: every column is an edge column; the answer
    is numpy's (the first window covers 1..3 of the row, the second none of it)."""
    if not native.available():
        pytest.skip("extension not built")
    x = np.arange(1, 9, dtype=np.float32).reshape(1, 1, 8)
    out = np.empty((1, 1, 2), np.float32)
    native._lib.maxpool2d_f32(x, out, (1, 3, 1, 2**30, 1, 1, 0, 0), 1)
    assert out.tolist() == [[[3.0, -np.inf]]]


def test_compiled_pool_clamps_the_threads_a_call_asks_for(pool_split: None) -> None:
    """A ``ways`` of 2^31 - 1 must not start two billion threads (at most one per slice)."""
    x = np.arange(64, dtype=np.float32).reshape(4, 4, 4)
    out = np.empty((4, 2, 2), np.float32)
    native._lib.maxpool2d_f32(x, out, (2, 2, 2, 2, 1, 1, 0, 0), 2**31 - 1)
    np.testing.assert_array_equal(out, x.reshape(4, 2, 2, 2, 2).max(axis=(2, 4)))


def test_the_sanitized_build_is_the_one_under_test() -> None:
    """``make test-sanitize`` runs this file on the -fsanitize=address,undefined build:
    make sure that build (not the installed one) is loaded, with ASan in the process."""
    import os
    from pathlib import Path
    if not os.environ.get("SGLENS_EXPECT_SANITIZED"):
        pytest.skip("not the sanitizer run (make test-sanitize)")
    assert Path(native._lib.__file__) == Path(os.environ[native.LIBRARY_ENV])
    maps = Path("/proc/self/maps").read_text()
    assert "libasan" in maps and "libubsan" in maps


def test_compiled_lstm_leaves_the_models_weights_alone_at_input_size_1(
        rng: np.random.Generator) -> None:
    """Input size 1: the stacked input weight was a view of W and its halving wrote into
    the model's W (a second run, the numpy path or onnxruntime then saw other weights;
    found by tests/test_geometry_fuzz.py)."""
    from engine.kernels import rnn
    if not native.available():
        pytest.skip("extension not built")
    hs = 3
    x = rng.standard_normal((4, 2, 1)).astype(np.float32)
    w, r = (rng.standard_normal((1, 4 * hs, k)).astype(np.float32) for k in (1, hs))
    w_before = w.copy()
    first = rnn.lstm(np, x, w, r, hidden_size=hs)
    np.testing.assert_array_equal(w, w_before)
    again = rnn.lstm(np, x, w, r, hidden_size=hs)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
