"""A fuzz of the windowed kernels' geometry (issue 21): random valid AND invalid Conv and
MaxPool attributes (huge, negative, zero, overflowing int64 sums) through the compiled
path, the numpy path and onnxruntime. The three give the same answer, or ours refuse
with a ``GeometryError`` where onnxruntime refuses too -- or where a value lies beyond
``geometry.MAX_EXTENT`` (our documented bound, which onnxruntime does not have).

``make test`` runs this file a second time against the extension built with
``-fsanitize=address,undefined`` (``make test-sanitize``), which turns a read or write
outside a buffer, or a signed overflow, in the C kernels into a failure. The last test
hands raw random geometry straight to the C entry points, past the Python validator,
for that build to check.
"""

from __future__ import annotations

import contextlib
import os

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from engine.kernels import geometry, native, nn, rnn
from engine.kernels.geometry import GeometryError

pytestmark = pytest.mark.cpu_only("the compiled kernels are the numpy path's")

INT64_MIN, INT64_MAX = -2**63, 2**63 - 1
#: Values an attacker picks: zero, negative, at and past our bound, near int64's ends.
HOSTILE = [0, -1, -7, INT64_MIN, geometry.MAX_EXTENT, geometry.MAX_EXTENT + 1, 2**53,
           2**62 + 9, INT64_MAX - 9, INT64_MAX]
#: Examples per test: a fixed, derandomized set in CI (seconds); SGLENS_FUZZ_EXAMPLES=5000
#: runs a longer, random search by hand.
_EXAMPLES = int(os.environ.get("SGLENS_FUZZ_EXAMPLES", "0"))
FUZZ = settings(max_examples=_EXAMPLES or 120, deadline=None, derandomize=not _EXAMPLES,
                database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _value(small: st.SearchStrategy) -> st.SearchStrategy:
    """Mostly ``small``, one time in five a hostile value."""
    return st.one_of(small, small, small, small, st.sampled_from(HOSTILE))


@st.composite
def window_case(draw, op: str) -> dict:
    """One node: half the cases plain (small values, mostly valid), half hostile (any
    value may be one of HOSTILE, channels and kernel_shape may contradict W)."""
    hostile = draw(st.booleans())
    value = _value if hostile else (lambda small: small)
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    h, w = draw(st.integers(1, 9)), draw(st.integers(1, 12))
    kernel = [draw(st.integers(1, 4)), draw(st.integers(1, 4))]
    attrs: dict = {"strides": [draw(value(st.integers(1, 4))) for _ in range(2)],
                   "dilations": [draw(value(st.integers(1, 2))) for _ in range(2)],
                   "pads": [draw(value(st.integers(0, 3))) for _ in range(4)]}
    auto_pad = draw(st.sampled_from(["NOTSET"] * 6 + ["SAME_UPPER", "SAME_LOWER", "VALID"]))
    if auto_pad != "NOTSET":
        attrs["auto_pad"] = auto_pad
        del attrs["pads"]
    case = {"op": op, "x": (n, c, h, w), "attrs": attrs, "seed": draw(st.integers(0, 2**31))}
    if op == "MaxPool":
        attrs["kernel_shape"] = kernel
        attrs["ceil_mode"] = draw(st.integers(0, 1))
        return case
    group = draw(st.sampled_from([1, 1, 1, 2, "depthwise", "wide", "wide", "wide"]))
    if group == "wide":  # 16 channels a group, 3x3, mostly stride and dilation 1: Winograd's form
        group, kernel = draw(st.integers(1, 2)), [3, 3]
        c = 16 * group
        case["x"], case["wide"] = (n, c, h, w), True
        for key in ("strides", "dilations"):
            attrs[key] = [draw(value(st.sampled_from([1, 1, 1, 2]))) for _ in range(2)]
    elif group == "depthwise":  # one input channel a group (the compiled depthwise kernel)
        group = c = draw(st.integers(2, 3))
        case["x"] = (n, c, h, w)
    elif group == 2 and not hostile:
        c = 2 * draw(st.integers(1, 2))
        case["x"] = (n, c, h, w)
    m = (16 if case.get("wide") else draw(st.integers(1, 3))) * group
    wc = c // group
    if hostile:  # channels that may not divide into the groups or match W
        wc = draw(st.sampled_from([wc, wc, c, c + 1]))
    case["w"] = (m, wc, *kernel)
    if group != 1:
        attrs["group"] = group
    if draw(st.booleans()):  # kernel_shape given: W's own, or (hostile) one that contradicts it
        wrong = [kernel[0], kernel[1] + 1]
        attrs["kernel_shape"] = draw(st.sampled_from([kernel, wrong])) if hostile else kernel
    case["bias"] = draw(st.booleans())
    return case


def _model(case: dict, arrays: dict) -> bytes:
    inits = [numpy_helper.from_array(arrays[k], k) for k in ("w", "b") if k in arrays]
    node = helper.make_node(case["op"], ["x", *[i.name for i in inits]], ["y"], name="fuzzed",
                            **case["attrs"])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(case["x"]))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([node], "g", [x], [y], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=8).SerializeToString()


def _arrays(case: dict) -> dict:
    rng = np.random.default_rng(case["seed"])
    out = {"x": rng.standard_normal(case["x"]).astype(np.float32)}
    if "w" in case:
        out["w"] = rng.standard_normal(case["w"]).astype(np.float32)
        if case["bias"]:
            out["b"] = rng.standard_normal(case["w"][0]).astype(np.float32)
    return out


def _ours(case: dict, arrays: dict, compiled: bool):
    """Our kernel's answer (an array) or its refusal (the GeometryError); any other
    exception fails the test."""
    attrs = dict(case["attrs"])
    with pytest.MonkeyPatch.context() as mp:
        if not compiled:  # (compiled: every 1-D and 2-D float32 conv and MaxPool is)
            mp.setattr(native, "_lib", None)
        try:
            if case["op"] == "MaxPool":
                return nn.max_pool(np, arrays["x"], _n_outputs=1, **attrs)[0]
            return nn.conv(np, arrays["x"], arrays["w"], arrays.get("b"), **attrs)
        except GeometryError as exc:
            return exc


#: Under ``make test-sanitize`` (libasan preloaded) onnxruntime aborts the process when a
#: session refuses a model (its C++ exception path and ASan's interceptors do not mix), so
#: that run compares the compiled and numpy paths only; the normal run compares the same
#: (derandomized) examples with onnxruntime too.
SANITIZED = bool(os.environ.get("SGLENS_EXPECT_SANITIZED"))


def _onnxruntime(case: dict, arrays: dict):
    if SANITIZED:
        return None
    try:
        sess = ort.InferenceSession(_model(case, arrays), providers=["CPUExecutionProvider"])
        return sess.run(None, {"x": arrays["x"]})[0]
    except Exception as exc:  # noqa: BLE001 - a refusal, whichever stage
        return exc


def _beyond_our_bound(case: dict) -> bool:
    """Whether the case holds a value our validator bounds and onnxruntime does not:
    an attribute or a padded extent beyond MAX_EXTENT."""
    a = case["attrs"]
    values = [*a.get("strides", []), *a.get("dilations", []), *a.get("pads", [])]
    pads = a.get("pads", [0] * 4)
    padded = [case["x"][2 + i] + pads[i] + pads[i + 2] for i in range(2)]
    return any(v > geometry.MAX_EXTENT for v in values + padded)


def _legacy_same(case: dict) -> bool:
    """auto_pad SAME_* where onnxruntime departs from the ONNX spec (which we follow): a
    Conv with dilations is refused ("Dilation not supported for AutoPadType::SAME_*"); a
    pool is padded for the undilated kernel, and refused where that padding comes out
    negative (a stride longer than kernel + the input's rest)."""
    a = case["attrs"]
    if not a.get("auto_pad", "").startswith("SAME"):
        return False
    if any(d != 1 for d in a["dilations"]):
        return True
    if case["op"] != "MaxPool":
        return False
    return any((-(-n // s) - 1) * s + k - n < 0
               for n, s, k in zip(case["x"][2:], a["strides"], a["kernel_shape"]) if s > 0)


def _agree(case: dict) -> None:
    arrays = _arrays(case)
    compiled, plain = _ours(case, arrays, True), _ours(case, arrays, False)
    reference = _onnxruntime(case, arrays)
    if reference is None or _legacy_same(case):  # compiled vs numpy only (see SANITIZED)
        event("onnxruntime not compared")
        reference = plain
    elif case["op"] == "MaxPool" and isinstance(reference, np.ndarray):
        # a window that covers no input element (dilated taps all in the padding): the spec
        # leaves it open; onnxruntime answers the lowest float, we -inf
        reference = np.where(reference == np.finfo(np.float32).min, -np.inf, reference)
    # the compiled and numpy paths: one validator, so the same verdict and the same numbers
    event("we refused" if isinstance(plain, GeometryError) else "we answered")
    event("onnxruntime refused" if isinstance(reference, Exception) else "onnxruntime answered")
    assert type(compiled) is type(plain), (compiled, plain)
    if isinstance(plain, GeometryError):
        assert str(compiled) == str(plain)
        assert isinstance(reference, Exception) or _beyond_our_bound(case), \
            f"we refused ({plain}) but onnxruntime answered {getattr(reference, 'shape', '')}"
        return
    a = case["attrs"]
    winograd = case.get("wide") and a.get("strides") == [1, 1] and a.get("dilations") == [1, 1]
    event("Winograd's form" if winograd else "columns or windows")
    # Winograd's sums round apart from the columns' (16-32 channels of unscaled normals)
    tolerance = 1e-4 if winograd else 1e-5
    np.testing.assert_allclose(compiled, plain, rtol=tolerance, atol=tolerance)
    assert not isinstance(reference, Exception), f"onnxruntime refused ({reference}), we answered"
    assert plain.shape == reference.shape
    np.testing.assert_allclose(plain, reference, rtol=1e-4, atol=1e-4)


@pytest.fixture(autouse=True)
def _compiled_or_skip() -> None:
    if not native.available():
        pytest.skip("extension not built: there is no compiled path to compare")


@FUZZ
@given(window_case("Conv"))
def test_conv_geometry_compiled_numpy_and_onnxruntime_agree(case: dict) -> None:
    _agree(case)


@FUZZ
@given(window_case("MaxPool"))
def test_max_pool_geometry_compiled_numpy_and_onnxruntime_agree(case: dict) -> None:
    _agree(case)


_C_VALUE = st.one_of(st.integers(-3, 12), st.sampled_from(HOSTILE))


@settings(max_examples=(_EXAMPLES or 100) * 3, deadline=None, derandomize=not _EXAMPLES, database=None)
@given(st.lists(_C_VALUE, min_size=10, max_size=10), st.integers(1, 3), st.integers(1, 9),
       st.integers(1, 12), st.integers(0, 9), st.integers(0, 12))
def test_the_c_entry_points_refuse_or_stay_inside_their_buffers(geometry_: list, c: int, h: int,
                                                                 w: int, oh: int, ow: int) -> None:
    """Raw geometry straight into im2col_f32, depthwise_conv2d_f32, maxpool2d_f32 and the
    Winograd transforms,
    past geometry.py: each call raises ValueError or runs; under the sanitizer build
    any access outside the buffers (or a signed overflow) aborts the run instead."""
    x = np.ones((1, c, h, w), np.float32)
    kh, kw = (min(max(v, 1), 7) for v in geometry_[:2])  # the weight must exist to be read
    conv = tuple([kh, kw, *geometry_[2:8], oh, ow])
    cols = np.zeros((1, c * kh * kw, oh * ow), np.float32)
    with contextlib.suppress(ValueError):
        native._lib.im2col_f32(x, cols, conv)
        assert np.isin(cols, [0.0, 1.0]).all()  # every value an input's (1) or padding (0)
    r0, r1 = geometry_[8], geometry_[9]  # a band of rows, hostile too (the banded conv's entry)
    band = max(0, min(r1 - r0, 64)) * ow if all(abs(v) < 2**40 for v in (r0, r1)) else 0
    rows = np.zeros((c * kh * kw, band), np.float32)
    with contextlib.suppress(ValueError):
        native._lib.im2col_rows_f32(x, rows, conv, 0, r0, r1)
        assert np.isin(rows, [0.0, 1.0]).all()
    out = np.zeros((1, 2 * c, oh * ow), np.float32)
    with contextlib.suppress(ValueError):
        native._lib.depthwise_conv2d_f32(x, np.ones((2 * c, kh * kw), np.float32), out,
                                         np.zeros(2 * c, np.float32), conv)
        assert np.isfinite(out).all() and (out >= 0).all() and (out <= kh * kw).all()
    pooled = np.zeros((c, oh, ow), np.float32)
    with contextlib.suppress(ValueError):
        native._lib.maxpool2d_f32(x.reshape(c, h, w), pooled, tuple(geometry_[:8]))
        # every value is an input's (1), or -inf for a window wholly outside the input
        assert np.isin(pooled, [1.0, -np.inf]).all()
    # Winograd's tiles: (pad_top, pad_left, th, tw) hostile, v sized for a tile grid of oh x ow
    tiles = np.zeros((16, c, max(oh, 1) * max(ow, 1)), np.float32)
    with contextlib.suppress(ValueError):
        native._lib.winograd_input_f32(x, tiles, tuple(geometry_[2:6]))
        assert (np.abs(tiles) <= 4).all()   # sums and differences of four ones and zeros, twice
    products = np.ones((16, 2 * c, max(r0 % 64, 0) + 1), np.float32)
    y = np.zeros((1, 2 * c, oh, ow), np.float32)
    with contextlib.suppress(ValueError):
        native._lib.winograd_output_f32(products, y)
        assert np.isin(y, [9.0, -3.0, 1.0]).all()   # A^T 1 A, tile by tile


# ------------------------------------------------------------------- LSTM --
@st.composite
def lstm_case(draw) -> dict:
    """An LSTM whose W, R, B and hidden_size agree (plain) or may not (hostile)."""
    hostile = draw(st.booleans())
    seq, batch, inp, hs = (draw(st.integers(1, 4)), draw(st.integers(1, 3)),
                           draw(st.integers(1, 5)), draw(st.integers(1, 6)))
    direction = draw(st.sampled_from(["forward", "reverse", "bidirectional"]))
    nd = 2 if direction == "bidirectional" else 1
    shapes = {"w": [nd, 4 * hs, inp], "r": [nd, 4 * hs, hs], "b": [nd, 8 * hs]}
    hidden = hs
    if hostile:
        hidden = draw(st.sampled_from([hs, hs + 1, 0, -1, geometry.MAX_EXTENT + 1]))
        name, axis = draw(st.sampled_from(["w", "r", "b"])), draw(st.integers(0, 2))
        if axis < len(shapes[name]):  # one dimension off by one (or left alone)
            shapes[name][axis] = max(1, shapes[name][axis] + draw(st.sampled_from([-1, 0, 1])))
    return {"x": (seq, batch, inp), "shapes": shapes, "hidden": hidden, "direction": direction,
            "bias": draw(st.booleans()), "seed": draw(st.integers(0, 2**31))}


def _lstm_arrays(case: dict) -> dict:
    rng = np.random.default_rng(case["seed"])
    names = ["w", "r", "b"] if case["bias"] else ["w", "r"]
    out = {k: (rng.standard_normal(case["shapes"][k]) * 0.5).astype(np.float32) for k in names}
    out["x"] = rng.standard_normal(case["x"]).astype(np.float32)
    return out


def _lstm_ours(case: dict, arrays: dict, compiled: bool):
    with pytest.MonkeyPatch.context() as mp:
        if not compiled:
            mp.setattr(native, "_lib", None)
        try:
            return rnn.lstm(np, arrays["x"], arrays["w"], arrays["r"], arrays.get("b"),
                            hidden_size=case["hidden"], direction=case["direction"])
        except GeometryError as exc:
            return exc


def _lstm_onnxruntime(case: dict, arrays: dict):
    if SANITIZED:
        return None
    inits = [numpy_helper.from_array(arrays[k], k) for k in ("w", "r", "b") if k in arrays]
    node = helper.make_node("LSTM", ["x", *[i.name for i in inits]], ["y", "y_h", "y_c"],
                            hidden_size=case["hidden"], direction=case["direction"])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      list(case["x"]))],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
                           for n in ("y", "y_h", "y_c")], inits)
    data = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=8).SerializeToString()
    try:
        sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
        return sess.run(None, {"x": arrays["x"]})
    except Exception as exc:  # noqa: BLE001 - a refusal, whichever stage
        return exc


@FUZZ
@given(lstm_case())
def test_lstm_sizes_compiled_numpy_and_onnxruntime_agree(case: dict) -> None:
    arrays = _lstm_arrays(case)
    compiled, plain = _lstm_ours(case, arrays, True), _lstm_ours(case, arrays, False)
    reference = _lstm_onnxruntime(case, arrays)
    event("we refused" if isinstance(plain, GeometryError) else "we answered")
    assert type(compiled) is type(plain), (compiled, plain)
    if isinstance(plain, GeometryError):
        assert str(compiled) == str(plain)
        assert reference is None or isinstance(reference, Exception) \
            or case["hidden"] > geometry.MAX_EXTENT, f"we refused ({plain}), onnxruntime answered"
        return
    for got, want in zip(compiled, plain):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    if reference is None:
        return
    assert not isinstance(reference, Exception), f"onnxruntime refused ({reference}), we answered"
    for got, want in zip(plain, reference):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@FUZZ
@given(st.integers(0, 3), st.integers(0, 5), st.integers(0, 9), st.integers(0, 6), st.integers(0, 6),
       st.integers(0, 6), st.sampled_from([-np.inf, -1.0, 0.0, 0.5, 6.0, np.nan]),
       st.sampled_from([np.inf, -1.0, 0.0, 6.0, np.nan]), st.booleans(), st.booleans(), st.booleans(),
       st.integers(0, 2**31 - 1))
def test_the_conv_epilogue_pass_equals_numpys_passes_or_refuses(n: int, m: int, p: int, sm: int, tm: int,
                                                                 rm: int, lo: float, hi: float,
                                                                 use_s: bool, use_t: bool, use_r: bool,
                                                                 seed: int) -> None:
    """``channel_epilogue_f32`` (one C pass: per-channel scale and shift, residual, clamp)
    on random shapes, mismatched scale / shift / residual sizes, NaN and infinite bounds
    and data: it equals the numpy passes it replaces, or raises ValueError (a size that
    does not agree, a NaN bound) and writes nothing."""
    rng = np.random.default_rng(seed)
    y = rng.standard_normal((n, m, p)).astype(np.float32)
    if y.size:
        y.reshape(-1)[rng.integers(0, y.size)] = rng.choice([np.nan, np.inf, -np.inf])
    s = rng.uniform(0.5, 2, sm).astype(np.float32) if use_s else None
    t = rng.standard_normal(tm).astype(np.float32) if use_t else None
    r = rng.standard_normal((n, m if rm else m + 1, p)).astype(np.float32) if use_r else None
    fits = (s is None or sm == m) and (t is None or tm == m) and (r is None or rm) and \
        not (np.isnan(lo) or np.isnan(hi))
    want = y.copy()
    with np.errstate(invalid="ignore"):
        if fits:
            if s is not None:
                want *= s.reshape(1, -1, 1)
            if t is not None:
                want += t.reshape(1, -1, 1)
            if r is not None:
                want += r
            want = np.minimum(np.maximum(want, np.float32(lo)), np.float32(hi))
    before = y.copy()
    if not fits:
        with pytest.raises(ValueError, match="channel_epilogue_f32"):
            native._lib.channel_epilogue_f32(y, s, t, r, lo, hi)
        np.testing.assert_array_equal(y, before)
        return
    native._lib.channel_epilogue_f32(y, s, t, r, lo, hi)
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)
