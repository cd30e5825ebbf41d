"""3x3 convs of stride 1 as Winograd's F(2x2, 3x3) (``engine/kernels/_native_winograd.c``,
``native.winograd_plan``): against onnxruntime on fresh random geometry, through the executor's
fused chains, and the C entry points on hostile geometry (run on the sanitizer build too)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.executor import Executor
from engine.kernels import native, nn
from partition import load_model
from test_kernels_harness import check

from conftest import make_model


def _compiled_only() -> None:
    if not native.available():
        pytest.skip("extension not built")


@pytest.fixture
def winograd_calls(monkeypatch) -> list:
    """Each Winograd plan made (the conv took it) -- so a test cannot pass on the columns."""
    made: list = []
    real = native.winograd_plan

    def spy(*args, **kwargs):
        plan = real(*args, **kwargs)
        made.append(plan is not None)
        return plan
    monkeypatch.setattr(native, "winograd_plan", spy)
    return made


@pytest.mark.parametrize("seed", range(16))
def test_winograd_conv_matches_onnxruntime(seed: int, winograd_calls: list) -> None:
    """Odd and even maps down to 1x1 outputs, every pad from 0 to 2 on each side (asymmetric),
    a batch of 1 to 3, a bias or none, one group or two or three (16 channels or more each)."""
    _compiled_only()
    rng = np.random.default_rng(seed)
    group = (1, 1, 2, 3)[seed % 4]
    n, cg, mg = int(rng.integers(1, 4)), int(rng.integers(16, 41)), int(rng.integers(16, 41))
    c, m = cg * group, mg * group
    h, w = (int(v) for v in rng.integers(1, 15, 2))
    pads = [int(v) for v in rng.integers(0, 3, 4)]
    if h + pads[0] + pads[2] < 3 or w + pads[1] + pads[3] < 3:
        pads = [2, 2, 2, 2]
    inputs = {"x": rng.standard_normal((n, c, h, w)).astype(np.float32),
              "w": (rng.standard_normal((m, cg, 3, 3)) / np.sqrt(9 * cg)).astype(np.float32),
              "b": rng.standard_normal(m).astype(np.float32) if seed % 2 else None}
    check("Conv", inputs, rtol=1e-4, atol=1e-5, oracle="onnxruntime", pads=pads, group=group)
    assert winograd_calls == [True]


def test_fewer_channels_or_a_stride_keep_the_columns(winograd_calls: list) -> None:
    _compiled_only()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 8, 9, 9)).astype(np.float32)
    check("Conv", {"x": x, "w": rng.standard_normal((32, 8, 3, 3)).astype(np.float32)}, rtol=1e-4, atol=1e-4,
          oracle="onnxruntime", pads=[1] * 4)   # a stem's few input channels
    x = rng.standard_normal((1, 32, 9, 9)).astype(np.float32)
    check("Conv", {"x": x, "w": rng.standard_normal((32, 32, 3, 3)).astype(np.float32)}, rtol=1e-4, atol=1e-4,
          oracle="onnxruntime", pads=[1] * 4, strides=[2, 2])
    check("Conv", {"x": x, "w": rng.standard_normal((32, 8, 3, 3)).astype(np.float32)}, rtol=1e-4, atol=1e-4,
          oracle="onnxruntime", pads=[1] * 4, group=4)   # 8 channels a group
    assert winograd_calls == []


def test_a_fused_chain_runs_winograd_once_planned(rng, winograd_calls: list) -> None:
    """Conv -> BatchNormalization -> Relu bound by the executor: the chain's plan takes the
    Winograd form once, and three runs on fresh inputs match onnxruntime."""
    _compiled_only()
    c = 24
    f = TensorProto.FLOAT
    inits = [numpy_helper.from_array((rng.standard_normal((c, c, 3, 3)) / 9).astype(np.float32), "w"),
             numpy_helper.from_array(rng.uniform(0.5, 1.5, c).astype(np.float32), "s"),
             numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "t"),
             numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "mu"),
             numpy_helper.from_array(rng.uniform(0.5, 1.5, c).astype(np.float32), "var")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["y", "s", "t", "mu", "var"], ["z"], name="bn"),
             helper.make_node("Relu", ["z"], ["out"], name="relu")]
    model = make_model(nodes, [helper.make_tensor_value_info("x", f, [1, c, 11, 12])],
                       [helper.make_tensor_value_info("out", f, None)], initializers=inits)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with Executor(load_model(model.SerializeToString())) as ex:
        for _ in range(3):
            x = rng.standard_normal((1, c, 11, 12)).astype(np.float32)
            np.testing.assert_allclose(ex.run({"x": x}).numpy_outputs()["out"], session.run(None, {"x": x})[0],
                                       rtol=1e-4, atol=1e-5)
    assert winograd_calls == [True]


@pytest.mark.parametrize("geometry", [
    (0, 0, 0, 3),              # no tile rows
    (-1, 0, 3, 3),             # a negative pad
    (4, 0, 3, 3),              # the input does not fit its padded plane (4 + 5 > 2 * 3 + 2)
    (0, 0, 2**62, 2**62),      # tiles past any buffer
    (0, 0, 3, 4),              # v has room for 9 tiles, not 12
])
def test_winograd_input_refuses_geometry_it_cannot_index(geometry: tuple) -> None:
    _compiled_only()
    x = np.ones((1, 2, 5, 5), np.float32)
    v = np.full((16, 2, 9), 7.0, np.float32)
    with pytest.raises(ValueError, match="do not agree"):
        native._lib.winograd_input_f32(x, v, geometry)
    assert (v == 7.0).all()


@pytest.mark.parametrize("shapes", [((16, 2, 9), (1, 2, 7, 6)), ((15, 2, 9), (1, 2, 6, 6)),
                                    ((16, 3, 9), (1, 2, 6, 6)), ((16, 2, 9), (1, 2, 0, 6))])
def test_winograd_output_refuses_shapes_that_disagree(shapes: tuple) -> None:
    _compiled_only()
    m = np.ones(shapes[0], np.float32)
    y = np.full(shapes[1], 7.0, np.float32)
    with pytest.raises(ValueError, match="do not agree"):
        native._lib.winograd_output_f32(m, y)
    assert (y == 7.0).all()


def test_winograd_transforms_are_lavin_and_grays(rng) -> None:
    """The C transforms against the matrices themselves on one tile: B^T d B, then A^T m A
    (an odd output keeps its first row and column only)."""
    _compiled_only()
    bt = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float32)
    at = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float32)
    d = rng.standard_normal((1, 1, 4, 4)).astype(np.float32)
    v = np.empty((16, 1, 1), np.float32)
    native._lib.winograd_input_f32(d, v, (0, 0, 1, 1))
    np.testing.assert_allclose(v.reshape(4, 4), bt @ d[0, 0] @ bt.T, rtol=1e-6, atol=1e-6)
    m = rng.standard_normal((16, 1, 1)).astype(np.float32)
    y = np.empty((1, 1, 1, 1), np.float32)
    native._lib.winograd_output_f32(m, y)
    np.testing.assert_allclose(y[0, 0], (at @ m.reshape(4, 4) @ at.T)[:1, :1], rtol=1e-5, atol=1e-6)
    assert nn._WINOGRAD_MIN_CHANNELS >= 2


def test_outputs_never_alias_the_threads_scratch(rng) -> None:
    """Winograd's tiles and im2col's columns are this thread's reused scratch; what a conv
    returns is its own: a Winograd conv's output survives a larger im2col conv (which grows the
    scratch) and a second Winograd conv, and matches onnxruntime."""
    _compiled_only()
    x = rng.standard_normal((1, 32, 10, 10)).astype(np.float32)
    w = (rng.standard_normal((32, 32, 3, 3)) / 17).astype(np.float32)
    first = nn.conv(np, x, w, pads=[1, 1, 1, 1])
    kept = first.copy()
    big = rng.standard_normal((1, 8, 40, 40)).astype(np.float32)
    stem = nn.conv(np, big, rng.standard_normal((16, 8, 5, 5)).astype(np.float32), strides=[2, 2])
    again = nn.conv(np, rng.standard_normal((1, 32, 10, 10)).astype(np.float32), w, pads=[1, 1, 1, 1])
    np.testing.assert_array_equal(first, kept)
    assert not np.shares_memory(first, again) and not np.shares_memory(first, stem)
    session = ort.InferenceSession(
        make_model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 10, 10])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                   initializers=[numpy_helper.from_array(w, "w")]).SerializeToString(),
        providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(first, session.run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)
