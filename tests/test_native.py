"""The compiled kernels (engine/kernels/_native.c, engine/kernels/native.py): built
wherever a C compiler is; the LSTM recurrence (the whole family: test_rnn_fuzz.py) equal
to the numpy loop it replaces
and to onnxruntime on fresh random inputs (odd hidden sizes exercise the loops'
remainders); erf and GELU against an exact erf, special values included, on both
paths; arrays of the wrong type or layout refused with an error instead of read
past."""

from __future__ import annotations

import contextlib
import math
import shutil
import sysconfig
from typing import Iterator

import numpy as np
import onnxruntime as ort
import pytest

from engine.kernels import blas
from engine.executor import Executor
from engine.fuse import _silu, gelu_kernel
from engine.kernels import native
from engine.kernels.nn import HardSwishAct, LeakyReluAct
from engine.kernels.elementwise import erf, sigmoid
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


@pytest.mark.parametrize("compiled", [True, False])
def test_sigmoid_and_silu_on_both_paths(compiled: bool, rng: np.random.Generator,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Against float64 maths; special values as the unfused nodes give them (x = -inf:
    sigmoid 0, SiLU -inf * 0 = NaN, as Mul(x, Sigmoid(x)) in onnxruntime)."""
    if compiled and not native.available():
        pytest.skip("extension not built")
    if not compiled:
        monkeypatch.setattr(native, "_lib", None)
    x = np.concatenate([rng.standard_normal(5000) * 4, rng.uniform(-120, 120, 300),
                        [0.0, -0.0, 1e-40, 88.0, -88.0, 104.0, -104.0, 17.0]]).astype(np.float32)
    x = x.reshape(2, -1)[:, ::3]   # a strided view: the compiled path copies it first
    with np.errstate(over="ignore"):
        sig = 1.0 / (1.0 + np.exp(-x.astype(np.float64)))
    got = sigmoid(np, x)
    assert got.dtype == np.float32 and got.shape == x.shape
    np.testing.assert_allclose(got, sig, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(_silu(np, x)[0], x * sig, rtol=1e-6, atol=1e-7)
    special = np.array([np.inf, -np.inf, np.nan], np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        want = special * (1 / (1 + np.exp(-special)))
    np.testing.assert_array_equal(sigmoid(np, special), [1.0, 0.0, np.nan])
    np.testing.assert_array_equal(_silu(np, special)[0], want)   # inf, NaN, NaN


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
    with pytest.raises(ValueError, match="float32 arrays of one size"):
        native._lib.sigmoid_f32(np.zeros(4, np.float32), np.zeros(3, np.float32), True)


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


def _compiled_only() -> None:
    if not native.available():
        pytest.skip("extension not built")


#: Kinds of conv: one group, several groups (the compiled im2col, one batched matmul),
#: depthwise (group == C) with and without a channel multiplier, 1-D (numpy's path),
#: 1-D depthwise (the compiled depthwise kernel at height 1).
CONV_KINDS = ["plain", "grouped", "depthwise", "multiplier", "1d", "1d-depthwise"]


def _conv_case(seed: int, kind: str) -> tuple[dict, dict, str]:
    rng = np.random.default_rng(seed)
    nsp = 1 if kind.startswith("1d") else 2
    k = tuple(int(v) for v in rng.integers(1, 5 if kind in ("plain", "grouped") else 8, nsp)) \
        if seed % 4 else (1,) * nsp
    if kind == "depthwise" and seed % 4 == 1:  # the square kernels of dw_window
        k = (int(rng.choice([3, 5, 7])),) * 2
    sp = tuple(max(int(v), 2 * kk - 1) for v, kk in zip(rng.integers(3, 40, nsp), k))  # a window fits
    attrs: dict = {"kernel_shape": list(k), "strides": [int(v) for v in rng.integers(1, 4, nsp)]}
    if rng.random() < 0.7:
        attrs["dilations"] = [int(v) for v in rng.integers(1, 3, nsp)]
        attrs["pads"] = [int(rng.integers(0, 2 * kk + 1)) for kk in k * 2]
    else:
        attrs["auto_pad"] = str(rng.choice(["SAME_UPPER", "SAME_LOWER", "VALID"]))
    group, c = 1, int(rng.integers(1, 20))
    m = int(rng.integers(1, 40))
    if kind == "grouped":
        group = int(rng.integers(2, 5))
        c, m = c * group, group * int(rng.integers(1, 6))
    elif kind in ("depthwise", "multiplier", "1d-depthwise"):
        group, c = c, c
        m = c * (int(rng.integers(2, 4)) if kind == "multiplier" else 1)
    if group > 1:
        attrs["group"] = group
    x = rng.standard_normal((int(rng.integers(1, 4)), c) + sp).astype(np.float32)
    w = rng.standard_normal((m, c // group) + k).astype(np.float32)
    arrays = {"x": x, "w": w, "b": rng.standard_normal(m).astype(np.float32)}
    pointwise = all(v == 1 for v in k) and all(s == 1 for s in attrs["strides"]) \
        and not any(attrs.get("pads", [0]))  # (a 1x1 kernel at stride 1 pads nothing)
    path = "depthwise_plan" if kind in ("depthwise", "multiplier", "1d-depthwise") and c > 1 else \
        None if pointwise or nsp == 1 else "im2col_plan"
    return arrays, attrs, path


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("kind", CONV_KINDS)
def test_compiled_conv_random_geometry(seed: int, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """1-D and 2-D convs of every group kind on the compiled kernels against onnxruntime:
    random kernels, strides, dilations, pads up to twice the kernel (whole windows in
    the padding), auto_pad, batches; the compiled kernel must be the one that ran."""
    _compiled_only()
    arrays, attrs, path = _conv_case(seed, kind)
    ran: list[bool] = []
    if path is not None:
        real = getattr(native, path)

        def spy(*args, **kwargs):   # the plan is made, and what it made runs
            plan = real(*args, **kwargs)
            ran.append(plan is not None)

            def planned(x):
                ran.append(True)
                return plan(x)
            return None if plan is None else planned
        monkeypatch.setattr(native, path, spy)
    check("Conv", arrays, rtol=1e-4, atol=1e-4, oracle="onnxruntime", **attrs)
    if path is not None:
        assert len(ran) >= 2 and all(ran), f"the conv did not run {path}"


@pytest.mark.parametrize("k", [3, 5, 7])
@pytest.mark.parametrize("width", [3, 7, 14, 64, 65])
def test_depthwise_narrow_planes_at_stride_one_match_onnxruntime(k: int, width: int, rng) -> None:
    """Stride-1 square kernels on planes up to 64 wide take the flat form (the whole padded
    plane as one row, the wrapped columns dropped), wider ones the row form: both against
    onnxruntime, with dilations, uneven pads, a channel multiplier and a batch -- the flat
    form's last window reads the padded plane's last float (the sanitizer build runs this)."""
    _compiled_only()
    dil = int(rng.integers(1, 3))
    c, mult = int(rng.integers(1, 9)), int(rng.integers(1, 3))
    height = int(rng.integers(max(1, (k - 1) * dil - 3), 12))
    pads = [int(v) for v in rng.integers(0, k, 4)]
    if height + pads[0] + pads[2] < (k - 1) * dil + 1:   # at least one output row
        pads[2] += (k - 1) * dil + 1 - (height + pads[0] + pads[2])
    if width + pads[1] + pads[3] < (k - 1) * dil + 1:
        pads[3] += (k - 1) * dil + 1 - (width + pads[1] + pads[3])
    arrays = {"x": rng.standard_normal((2, c, height, width)).astype(np.float32),
              "w": rng.standard_normal((c * mult, 1, k, k)).astype(np.float32),
              "b": rng.standard_normal(c * mult).astype(np.float32)}
    with _answers_of("depthwise_plan") as ran:
        check("Conv", arrays, rtol=1e-4, atol=1e-4, oracle="onnxruntime", kernel_shape=[k, k],
              strides=[1, 1], dilations=[dil, dil], pads=pads, group=c)
    assert (ran and all(ran)) or c == 1, "the compiled depthwise kernel did not run"


@contextlib.contextmanager
def _answers_of(name: str) -> Iterator[list[bool]]:
    """Within: ``native.<name>`` records, per call, whether it answered (not None)."""
    answered: list[bool] = []
    real = getattr(native, name)

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        answered.append(out is not None)
        return out
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(native, name, spy)
        yield answered


@pytest.mark.parametrize("seed", range(16))
def test_compiled_average_pool_random_geometry(seed: int) -> None:
    """AveragePool by the depthwise window sums and per-axis counts (``native.average_pool2d``)
    against onnxruntime: random kernels, strides, pads up to the kernel, ceil mode, counting
    the pads or not, batches, channels; and against our own numpy path."""
    _compiled_only()
    rng = np.random.default_rng(1000 + seed)
    k = [int(v) for v in rng.integers(1, 6, 2)]
    attrs: dict = {"kernel_shape": k, "strides": [int(v) for v in rng.integers(1, 4, 2)],
                   "pads": [int(rng.integers(0, kk)) for kk in k * 2],
                   "ceil_mode": int(rng.integers(0, 2)), "count_include_pad": int(rng.integers(0, 2))}
    sp = [int(rng.integers(kk, kk + 30)) for kk in k]
    x = rng.standard_normal((int(rng.integers(1, 3)), int(rng.integers(1, 40)), *sp)).astype(np.float32)
    with _answers_of("average_pool2d") as calls:
        check("AveragePool", {"x": x}, rtol=1e-5, atol=1e-5, oracle="onnxruntime", **attrs)
    assert calls and all(calls), "the compiled average pool did not run"
    with pytest.MonkeyPatch.context() as mp:   # the numpy path agrees
        mp.setattr(native, "_lib", None)
        check("AveragePool", {"x": x}, rtol=1e-5, atol=1e-5, oracle="onnxruntime", **attrs)


def test_compiled_conv_epilogue_matches_onnxruntime(rng: np.random.Generator) -> None:
    """Conv + Add + Relu (a ResNet block's tail), fused: bias, residual and Relu on the
    compiled conv's output, for one group and depthwise."""
    _compiled_only()
    from engine.kernels.nn import conv_fused
    from onnx import TensorProto, helper
    f = TensorProto.FLOAT
    for group, w_shape in ((1, (12, 8, 3, 3)), (8, (8, 1, 3, 3))):
        x = rng.standard_normal((2, 8, 21, 19)).astype(np.float32)
        w = rng.standard_normal(w_shape).astype(np.float32)
        m = w_shape[0]
        b = rng.standard_normal(m).astype(np.float32)
        res = rng.standard_normal((2, m, 21, 19)).astype(np.float32)
        kept = res.copy()
        got = conv_fused(np, x, w, b, res, True, pads=[1, 1, 1, 1], group=group)
        g = helper.make_graph([helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1],
                                                group=group),
                               helper.make_node("Add", ["c", "r"], ["s"]),
                               helper.make_node("Relu", ["s"], ["y"])], "g",
                              [helper.make_tensor_value_info(n, f, None) for n in ("x", "w", "b", "r")],
                              [helper.make_tensor_value_info("y", f, None)])
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
        want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
            None, {"x": x, "w": w, "b": b, "r": res})[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(res, kept)  # the residual was read, never written


@pytest.mark.parametrize("case", ["affine", "shift", "residual", "relu", "clip", "lo over hi", "nothing"])
def test_compiled_channel_epilogue_equals_numpys_passes(case: str, rng: np.random.Generator) -> None:
    """One C pass (``channel_epilogue_f32``) against the numpy passes it replaces, NaN and
    infinities in the data included: ``min(max(y, lo), hi)`` as ONNX's Clip."""
    _compiled_only()
    y = rng.standard_normal((2, 5, 7, 3)).astype(np.float32)
    y[0, 1, 2, :] = [np.nan, np.inf, -np.inf]
    scale = rng.uniform(0.5, 2, 5).astype(np.float32) if case == "affine" else None
    shift = rng.standard_normal(5).astype(np.float32) if case in ("affine", "shift") else None
    res = rng.standard_normal(y.shape).astype(np.float32) if case == "residual" else None
    lo, hi = {"relu": (0.0, math.inf), "clip": (0.0, 6.0), "lo over hi": (2.0, 1.0)}.get(
        case, (-math.inf, math.inf))
    want = y.copy()
    if scale is not None:
        want *= scale.reshape(1, -1, 1, 1)
    if shift is not None:
        want += shift.reshape(1, -1, 1, 1)
    if res is not None:
        want += res
    want = np.minimum(np.maximum(want, np.float32(lo)), np.float32(hi))
    assert native.channel_epilogue(y, scale, shift, res, lo, hi)
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)


def test_compiled_channel_epilogue_refuses_what_does_not_agree() -> None:
    _compiled_only()
    y = np.zeros((2, 3, 4), np.float32)
    bad = [(np.zeros(4, np.float32), None, None, 0.0, 1.0),            # scale of 4 for 3 channels
           (None, np.zeros(2, np.float32), None, 0.0, 1.0),            # shift of 2
           (None, None, np.zeros((2, 3, 5), np.float32), 0.0, 1.0),    # residual of another shape
           (None, None, None, math.nan, 1.0)]                          # a NaN bound
    for scale, shift, res, lo, hi in bad:
        with pytest.raises(ValueError, match="channel_epilogue_f32"):
            native._lib.channel_epilogue_f32(y, scale, shift, res, lo, hi)
    with pytest.raises(ValueError, match="float32"):
        native._lib.channel_epilogue_f32(np.zeros((2, 3, 4)), None, None, None, 0.0, 1.0)
    with pytest.raises(ValueError, match="3-D"):
        native._lib.channel_epilogue_f32(np.zeros((2, 3), np.float32), None, None, None, 0.0, 1.0)


@pytest.mark.parametrize("act", [HardSwishAct(1 / 6, 0.5, 0.0, 1.0),
                                 HardSwishAct(1.0, 3.0, 0.0, 6.0, "Div", 6.0),
                                 HardSwishAct(1.0, 3.0, 0.0, 6.0, "Mul", 1 / 6)],
                         ids=["onnx", "div", "mul"])
def test_the_compiled_epilogue_hard_swish_is_numpys_with_nan_and_infinities(act, rng):
    """A hard swish in the clamp's place (``nn.HardSwishAct``, engine/fuse.py's conv chains):
    the one C pass against ``HardSwishAct.apply``'s numpy passes."""
    _compiled_only()
    y = (rng.standard_normal((2, 5, 33)) * 5).astype(np.float32)
    y[0, 0, :4] = [np.nan, np.inf, -np.inf, -3.0]
    scale, shift = rng.uniform(0.5, 2, 5).astype(np.float32), rng.standard_normal(5).astype(np.float32)
    ours = y.copy()
    assert native.channel_epilogue(ours, scale, shift, None, -np.inf, np.inf, act.compiled())
    ref = y * scale[None, :, None] + shift[None, :, None]
    ref = act.apply(np, ref)
    np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=1e-5)   # NaN where numpy has NaN
    assert np.isnan(ours[0, 0, 0]) and np.isnan(ours[0, 0, 2]) and ours[0, 0, 1] == np.inf


def test_the_compiled_epilogue_refuses_bad_hard_swish_parameters():
    _compiled_only()
    y = np.ones((1, 2, 3), np.float32)
    with pytest.raises(ValueError, match="hard swish"):
        native._lib.channel_epilogue_f32(y, None, None, None, -np.inf, np.inf, (1.0, 3.0, np.nan, 6.0, 1, 6.0))
    with pytest.raises(ValueError, match="hard swish"):
        native._lib.channel_epilogue_f32(y, None, None, None, -np.inf, np.inf, (1.0, 3.0, 0.0, 6.0, 7, 6.0))
    with pytest.raises(TypeError):
        native._lib.channel_epilogue_f32(y, None, None, None, -np.inf, np.inf, (1.0, 3.0))


@pytest.mark.parametrize("alpha", [0.2, 1.7, -0.5, float("nan")], ids=["below1", "above1", "negative", "nan"])
def test_the_compiled_epilogue_leaky_relu_is_numpys_with_nan_and_infinities(alpha, rng):
    """A LeakyRelu before the clamp (``LeakyReluAct``, tf2onnx's Conv -> LeakyRelu -> Max): the
    one C pass bit for bit against ``LeakyReluAct.apply``'s numpy passes, a residual included."""
    _compiled_only()
    y = (rng.standard_normal((2, 5, 33)) * 5).astype(np.float32)
    y[0, 0, :5] = [np.nan, np.inf, -np.inf, -3.0, -0.0]
    res = rng.standard_normal((2, 5, 33)).astype(np.float32)
    scale, shift = rng.uniform(0.5, 2, 5).astype(np.float32), rng.standard_normal(5).astype(np.float32)
    act = LeakyReluAct(alpha, np.float32(-0.4), None)
    ours, plain = y.copy(), y.copy()
    assert native.channel_epilogue(ours, scale, shift, res, -0.4, np.inf, None, alpha)
    assert native.channel_epilogue(plain, None, None, res, -0.4, np.inf, None, alpha)
    with np.errstate(invalid="ignore"):
        ref = act.apply(np, y * scale[None, :, None] + shift[None, :, None] + res)
        ref_plain = act.apply(np, y + res)
    np.testing.assert_array_equal(plain, ref_plain)   # the LeakyRelu and clamp: the same numbers
    # (* s + t may be one fused multiply-add in C: within rounding, as the hard swish's)
    np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=1e-5)
    assert np.isnan(ours[0, 0, 0]) and ours[0, 0, 1] == np.inf


def test_the_compiled_epilogue_refuses_a_leaky_relu_with_a_hard_swish_or_not_a_number():
    _compiled_only()
    y = np.ones((1, 2, 3), np.float32)
    with pytest.raises(ValueError, match="LeakyRelu and a hard swish"):
        native._lib.channel_epilogue_f32(y, None, None, None, -np.inf, np.inf, (1.0, 3.0, 0.0, 6.0, 1, 6.0), 0.2)
    with pytest.raises(TypeError):
        native._lib.channel_epilogue_f32(y, None, None, None, -np.inf, np.inf, None, "0.2")


def _threads() -> int:
    """The threads of this process now (Linux: one entry per thread)."""
    import os
    return len(os.listdir("/proc/self/task"))


def test_no_compiled_kernel_leaves_a_thread_behind(rng: np.random.Generator) -> None:
    """One owner of the cores (engine/kernels/blas.py): the compiled kernels start no
    thread that outlives their call -- a
    depthwise and a grouped conv, a MaxPool -- where the old pools left workers
    spinning beside BLAS's."""
    _compiled_only()
    from engine.kernels.nn import conv, max_pool
    x = rng.standard_normal((1, 16, 40, 40)).astype(np.float32)
    conv(np, x, rng.standard_normal((16, 1, 3, 3)).astype(np.float32), pads=[1] * 4, group=16)
    before = _threads()
    for _ in range(3):
        conv(np, x, rng.standard_normal((16, 1, 5, 5)).astype(np.float32), pads=[2] * 4, group=16)
        conv(np, x, rng.standard_normal((32, 4, 3, 3)).astype(np.float32), pads=[1] * 4, group=4)
        max_pool(np, x, kernel_shape=[3, 3], strides=[2, 2], _n_outputs=1)
    assert _threads() == before


@pytest.mark.parametrize("load,expect", [(0.0, "share"), (50.0, 1)])
def test_the_engine_gives_blas_the_free_cores(load: float, expect, monkeypatch: pytest.MonkeyPatch) -> None:
    """No clamp to one thread: an Executor built with the default options gives BLAS the
    cores nobody else uses -- every core of an idle machine (BLAS's own default), one
    on a machine loaded far past its cores; a user's OPENBLAS_NUM_THREADS is kept, and
    a number asked for is set."""
    from threadpoolctl import threadpool_info, threadpool_limits
    from sample_models.generate import build_all

    def blas_threads() -> set[int]:
        return {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}
    graph = load_model(build_all()["trt_cycle.onnx"].SerializeToString())
    _machine_load(monkeypatch, load)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", blas.SHARE_VAR):
        monkeypatch.delenv(var, raising=False)
    with threadpool_limits(3, user_api="blas"):
        blas._applied = None
        with Executor(graph):
            assert blas_threads() == {blas.cpu_share() if expect == "share" else expect}
        monkeypatch.setenv("OPENBLAS_NUM_THREADS", "3")
        assert blas.apply(None) is None  # the user's setting
        assert blas.apply(2) == 2 and blas_threads() == {2}
    blas._applied = None


def _machine_load(monkeypatch: pytest.MonkeyPatch, load: float) -> None:
    """The machine as its load average says (no /proc/stat window: ``blas._rates``'s
    fallback), whatever else runs beside the test."""
    import time
    monkeypatch.setattr(blas.os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(blas, "machine_busy_seconds", lambda: None)
    monkeypatch.setattr(blas, "_sample", [time.monotonic() - 1.0, time.process_time(), None, 1.0, None])


def _two_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(blas.os, "sched_getaffinity", lambda _pid: {0, 1})
    monkeypatch.setattr(blas.os, "cpu_count", lambda: 2)
    monkeypatch.delenv(blas.SHARE_VAR, raising=False)


def _window(monkeypatch: pytest.MonkeyPatch, own: float, others: float, load: float) -> None:
    """A one-second window in which this process used ``own`` cores and the machine's
    other processes ``others`` (its busy time: both), the load average reading ``load``."""
    import time
    busy0 = 1000.0
    monkeypatch.setattr(blas.os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(blas, "machine_busy_seconds", lambda: busy0 + own + others)
    monkeypatch.setattr(blas, "_sample", [time.monotonic() - 1.0, time.process_time() - own, busy0,
                                          1.0, None])


@pytest.mark.parametrize("measured", [False, True])
@pytest.mark.parametrize("own,others,expect", [(1.9, 0.0, 2), (1.0, 0.0, 2), (1.0, 1.0, 1), (0.2, 0.4, 2)])
def test_free_cores_do_not_count_this_processs_own_load(own: float, others: float, expect: int,
                                                        measured: bool,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """This process's own threads (BLAS's, an onnxruntime pool beside it) are given back, so
    a busy benchmark or server keeps its cores; the threads of other processes are not --
    measured over one window (the machine's busy time less this process's), or, without
    /proc/stat, the load average less this process's rate."""
    import time
    _two_cores(monkeypatch)
    load = max(own, 1.0) + others
    if measured:
        _window(monkeypatch, own, others, load)
    else:
        _machine_load(monkeypatch, load)
        monkeypatch.setattr(blas, "_sample", [time.monotonic() - 1.0, time.process_time() - own,
                                              None, 1.0, None])
    assert blas.free_cores() == expect


def test_a_lagging_load_average_does_not_take_a_core_from_blas(monkeypatch: pytest.MonkeyPatch) -> None:
    # Right after this process kept both cores busy, the one-minute load average still
    # reads 1.6 while the last window saw it use one core and nobody else anything: that
    # is an idle machine (the load average less the rate had said 0.6 of a core was others'
    # and given BLAS one thread: a whole benchmark's ResNet-18 on one core).
    _two_cores(monkeypatch)
    _window(monkeypatch, own=1.0, others=0.0, load=1.6)
    assert blas.free_cores() == 2
    _window(monkeypatch, own=1.0, others=1.6, load=1.6)  # others really busy: one core left
    assert blas.free_cores() == 1


def test_the_machines_busy_time_reads_from_proc_stat() -> None:
    busy = blas.machine_busy_seconds()
    if busy is None:
        pytest.skip("no /proc/stat here")
    assert busy > 0 and blas.machine_busy_seconds() >= busy


def test_compiled_conv_kernels_refuse_bad_arrays() -> None:
    _compiled_only()
    z = np.zeros
    geometry = (3, 3, 1, 1, 1, 1, 0, 0, 3, 3)
    with pytest.raises(ValueError, match="do not agree"):
        native._lib.im2col_f32(z((1, 2, 5, 5), np.float32), z((1, 17, 9), np.float32), geometry)
    with pytest.raises(ValueError, match="float32"):
        native._lib.im2col_f32(z((1, 2, 5, 5)), z((1, 18, 9)), geometry)
    with pytest.raises(ValueError, match="do not agree"):  # 3 output channels over 2 inputs
        native._lib.depthwise_conv2d_f32(z((1, 2, 5, 5), np.float32), z((3, 9), np.float32),
                                         z((1, 3, 9), np.float32), None, geometry)
    with pytest.raises(ValueError, match="do not agree"):  # a weight row that is not kh * kw
        native._lib.depthwise_conv2d_f32(z((1, 2, 5, 5), np.float32), z((2, 8), np.float32),
                                         z((1, 2, 9), np.float32), None, geometry)
    with pytest.raises(ValueError, match="do not agree"):  # a bias of the wrong size
        native._lib.depthwise_conv2d_f32(z((1, 2, 5, 5), np.float32), z((2, 9), np.float32),
                                         z((1, 2, 9), np.float32), z(3, np.float32), geometry)


@pytest.mark.parametrize("seed", range(24))
def test_compiled_max_pool_random_geometry(seed: int) -> None:
    """2-D MaxPool compiled against onnxruntime: kernels, strides,
    dilations, pads and ceil mode at random; with a NaN in the input against the
    numpy path: a window holding a NaN is NaN, as numpy's maximum (onnxruntime and
    ONNX's reference evaluator let a NaN through in some windows and not in others,
    by the order they compare in: NaN in MaxPool is left open by the standard)."""
    _compiled_only()
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


def test_empty_operands_take_the_numpy_path() -> None:
    """An empty GEMM or conv is numpy's to answer: the same zeros and shapes as
    onnxruntime, no error."""
    from engine.kernels import kernel_for
    mm = kernel_for("MatMul", "", {"": 17})
    got = mm(np, np.zeros((5, 0), np.float32), np.zeros((0, 7), np.float32))[0]
    assert got.shape == (5, 7) and not got.any()
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
    _compiled_only()
    oh, ow = geometry[8], geometry[9]
    x = np.ones((1, 1, 2, 8), np.float32)
    taps = max(1, min(geometry[0] * geometry[1], 4))
    cols = np.zeros((1, taps, oh * ow), np.float32)
    with pytest.raises(ValueError, match="do not agree"):
        native._lib.im2col_f32(x, cols, geometry)
    out = np.zeros((1, 1, oh * ow), np.float32)
    with pytest.raises(ValueError, match="do not agree"):
        native._lib.depthwise_conv2d_f32(x, np.ones((1, taps), np.float32), out, None, geometry)
    assert not cols.any() and not out.any()  # nothing written


@pytest.mark.parametrize("kernel", [(1, 1), (3, 3), (5, 5), (2, 4), (4, 1)])
@pytest.mark.parametrize("width", [1, 3, 20])
def test_compiled_max_pool_of_stride_one_and_the_inputs_width(kernel: tuple, width: int) -> None:
    """The whole-plane passes (stride 1, output as wide as the input: YOLO's SPPF, Inception's
    pool branches): every left pad from 0 to kw - 1, top and bottom pads of any size below the
    window, planes narrower than the window; -0.0 and 0.0 in the input, against onnxruntime,
    and with a NaN against the numpy path (a window holding it is NaN)."""
    _compiled_only()
    from engine.kernels import kernel_for
    pool = kernel_for("MaxPool", "", {"": 17})
    rng = np.random.default_rng(width * 100 + kernel[0] * 10 + kernel[1])
    kh, kw = kernel
    for left in range(kw):
        pads = [int(rng.integers(0, kh)), left, int(rng.integers(0, kh)), kw - 1 - left]
        x = rng.standard_normal((2, 3, int(rng.integers(kh, kh + 9)), width)).astype(np.float32)
        x[0, 0, 0, :] = -0.0
        x[1, 2, -1, :] = 0.0
        check("MaxPool", {"x": x}, rtol=0, atol=0, oracle="onnxruntime", kernel_shape=list(kernel),
              pads=pads)
        x[1, 1, int(rng.integers(0, x.shape[2])), int(rng.integers(0, width))] = np.nan
        got = pool(np, x, _n_outputs=1, kernel_shape=list(kernel), pads=pads)[0]
        assert got.shape[3] == width and np.isnan(got).any()
        with pytest.MonkeyPatch.context() as m:
            m.setattr(native, "_lib", None)
            np.testing.assert_array_equal(got, pool(np, x, _n_outputs=1, kernel_shape=list(kernel), pads=pads)[0])


@pytest.mark.parametrize("geometry", [
    (3, 3, 1, 1, 1, 1, 2**40, 2),        # stride 1 and the input's width: a top pad no row reaches
    (3, 3, 1, 1, 1, 1, 0, 3),            # a left pad past the window: not the whole-plane path
    (3, 3, 1, 1, 1, 1, 2**62, 0),
])
def test_compiled_max_pool_of_stride_one_stays_in_its_buffers(geometry: tuple) -> None:
    """Raw geometry that takes (or just misses) the whole-plane path, with more output rows than
    input rows: each window holds an input value (1) or none (-inf), or the call refuses."""
    if not native.available():
        pytest.skip("extension not built")
    x = np.ones((2, 4, 5), np.float32)
    out = np.full((2, 9, 5), 7.0, np.float32)
    with contextlib.suppress(ValueError):
        native._lib.maxpool2d_f32(x, out, geometry)
        assert np.isin(out, [1.0, -np.inf]).all()


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
        native._lib.maxpool2d_f32(x, out, geometry)
    assert (out == 7.0).all()


def test_compiled_max_pool_interior_path_only_where_its_taps_fit() -> None:
    """Large (in range) strides and pads: every column is an edge column; the answer
    is numpy's (the first window covers 1..3 of the row, the second none of it)."""
    if not native.available():
        pytest.skip("extension not built")
    x = np.arange(1, 9, dtype=np.float32).reshape(1, 1, 8)
    out = np.empty((1, 1, 2), np.float32)
    native._lib.maxpool2d_f32(x, out, (1, 3, 1, 2**30, 1, 1, 0, 0))
    assert out.tolist() == [[[3.0, -np.inf]]]


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


def test_depthwise_refuses_a_padded_plane_far_larger_than_its_planes() -> None:
    """The depthwise kernel pads one plane into a scratch of the rows and columns its
    windows read; pads and strides of a million around a 3x3 input would make that
    4e12 floats: native.py declines (numpy's path decides) and the C entry point,
    called directly, refuses instead of allocating."""
    _compiled_only()
    x = np.ones((1, 2, 3, 3), np.float32)
    w = np.ones((2, 1, 3, 3), np.float32)
    big = 10**6
    geometry = ((3, 3), (big, big), (1, 1), (big, big, big, big), (3, 3))
    assert native.depthwise_conv2d(np, x, w, None, *geometry) is None
    with pytest.raises(ValueError, match="do not agree"):
        native._lib.depthwise_conv2d_f32(x, w.reshape(2, 9), np.zeros((1, 2, 9), np.float32), None,
                                         (3, 3, big, big, 1, 1, big, big, 3, 3))


def test_compiled_fake_quantize_is_the_numpy_path_bit_for_bit(rng, monkeypatch):
    """One pass for a per-tensor Q -> DQ pair (PP-OCRv4 rec in QDQ has 610 a run): the same
    float32 division, round-half-even, clip and product as numpy's path, ties, NaN, infinities
    and values past the integer range included; onnxruntime within one quantization step."""
    if not native.available():
        pytest.skip("extension not built")
    from engine.kernels import quant
    x = (rng.standard_normal((3, 5, 7, 11)) * 20).astype(np.float32)
    s = np.array(rng.uniform(0.01, 0.5), np.float32)
    x.flat[:6] = [np.nan, np.inf, -np.inf, 0.5 * s, 1.5 * s, -2.5 * s]   # ties round to even
    for zp in (np.array(0, np.int8), np.array(-7, np.int8), np.array(128, np.uint8)):
        info = np.iinfo(zp.dtype)
        got = quant.fake_quantize(np, x, s, zp, axis=1, low=info.min, high=info.max)
        with monkeypatch.context() as m:
            m.setattr(native, "fake_quantize", lambda *a, **k: None)     # numpy's path
            want = quant.fake_quantize(np, x, s, zp, axis=1, low=info.min, high=info.max)
        assert got.dtype == want.dtype == np.float32 and got.shape == x.shape
        np.testing.assert_array_equal(got, want)    # NaN where NaN, bit for bit elsewhere
    with pytest.raises(ValueError, match="float32 arrays of one size"):
        native._lib.quantize_f32(np.zeros(4, np.float32), np.zeros(5, np.float32), 0.1, 0.0, -128.0, 127.0, True)
    per_channel = np.full(5, 0.1, np.float32)
    assert native.fake_quantize(np, x, per_channel, np.zeros(5, np.int8), -128, 127) is None   # numpy's path


def test_the_epilogue_applies_an_affine_after_the_activation_and_refuses_what_does_not_agree(rng):
    """``channel_epilogue_f32``'s post scale and shift (``conv_epilogue.AffineAfter``): after the
    activation, per channel; lengths that disagree with the channels, or one of the two alone, refused."""
    if not native.available():
        pytest.skip("extension not built")
    y = rng.standard_normal((2, 4, 15)).astype(np.float32)
    scale, shift = (rng.random(4) + 0.5).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    ps, pt = (rng.random(4) + 0.5).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    want = np.maximum(y * scale[:, None] + shift[:, None], 0) * ps[:, None] + pt[:, None]
    ours = y.copy()
    assert native.channel_epilogue(ours, scale, shift, None, 0.0, np.inf, post=(ps, pt))
    np.testing.assert_allclose(ours, want, rtol=1e-6, atol=1e-6)
    lib = native._lib
    for bad in [(ps[:3], pt), (ps, pt[:3]), (ps, None), (None, pt)]:   # a length that disagrees; one side only
        with pytest.raises(ValueError):
            lib.channel_epilogue_f32(y.copy(), scale, shift, None, 0.0, np.inf, None, None, *bad)
