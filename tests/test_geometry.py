"""The geometry validator (engine/kernels/geometry.py, issue 21): each malformed node
onnxruntime refuses is refused by our executor and our interpreter too, naming the
node and the value at fault; values past our bound are refused before any kernel
allocates; valid geometry of every windowed op still matches onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.executor import Executor
from engine.interpreter import run_graph
from engine.kernels import geometry
from engine.kernels.geometry import GeometryError
from partition import load_model
from partition.errors import LensError

F = TensorProto.FLOAT


def _model(op: str, x_shape: list, inits: dict, n_out: int = 1, **attrs) -> bytes:
    tensors = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()]
    node = helper.make_node(op, ["x", *inits], [f"y{i}" for i in range(n_out)], name="bad_node",
                            **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", F, x_shape)],
                          [helper.make_tensor_value_info(f"y{i}", F, None) for i in range(n_out)],
                          tensors)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=8).SerializeToString()


def _ones(*shape: int) -> np.ndarray:
    return np.ones(shape, np.float32)


#: (model, what our message says, onnxruntime refuses it too)
MALFORMED = {
    "conv kernel_shape vs W": (_model("Conv", [1, 2, 6, 6], {"w": _ones(3, 2, 3, 3)},
                                      kernel_shape=[3, 2]), "disagrees with the weight", True),
    "conv channels vs group": (_model("Conv", [1, 4, 6, 6], {"w": _ones(2, 3, 3, 3)}, group=2),
                               "channels", True),
    "conv output channels vs group": (_model("Conv", [1, 4, 6, 6], {"w": _ones(3, 2, 3, 3)},
                                             group=2), "not a multiple of group", True),
    "conv negative pad": (_model("Conv", [1, 1, 6, 6], {"w": _ones(1, 1, 3, 3)},
                                 pads=[0, -1, 0, 0]), "pads[1] = -1", True),
    "conv zero stride": (_model("Conv", [1, 1, 6, 6], {"w": _ones(1, 1, 3, 3)}, strides=[1, 0]),
                         "strides[1] = 0", True),
    "conv kernel past the input": (_model("Conv", [1, 1, 6, 6], {"w": _ones(1, 1, 3, 3)},
                                          dilations=[1, 4]), "no output position", True),
    "conv bias length": (_model("Conv", [1, 1, 6, 6], {"w": _ones(2, 1, 3, 3), "b": _ones(3)}),
                         "bias B", True),
    "average pool pad >= kernel": (_model("AveragePool", [1, 1, 6, 6], {}, kernel_shape=[2, 2],
                                          pads=[2, 0, 0, 0]), "smaller than the kernel", True),
    "lp pool pad >= kernel": (_model("LpPool", [1, 1, 6, 6], {}, kernel_shape=[2, 2],
                                     pads=[0, 0, 0, 3]), "smaller than the kernel", True),
    "max pool pad >= kernel": (_model("MaxPool", [1, 1, 6, 6], {}, kernel_shape=[2, 2],
                                      pads=[0, 0, 2, 0]), "smaller than the kernel", True),
    "conv transpose kernel_shape vs W": (_model("ConvTranspose", [1, 2, 4, 4],
                                                {"w": _ones(2, 3, 3, 3)}, kernel_shape=[2, 3]),
                                         "disagrees with the weight", True),
    "conv transpose channels": (_model("ConvTranspose", [1, 3, 4, 4], {"w": _ones(2, 3, 3, 3)}),
                                "channels", True),
    "lstm hidden_size vs R": (_model("LSTM", [2, 1, 3], {"w": _ones(1, 16, 3), "r": _ones(1, 16, 4)},
                                     hidden_size=5), "hidden_size 5 contradicts R", True),
    "gru W vs input size": (_model("GRU", [2, 1, 3], {"w": _ones(1, 12, 5), "r": _ones(1, 12, 4)},
                                   hidden_size=4), "W has shape", True),
    "rnn direction": (_model("RNN", [2, 1, 3], {"w": _ones(1, 4, 3), "r": _ones(1, 4, 4)},
                             hidden_size=4, direction="sideways"), "direction 'sideways'", True),
}


def _onnxruntime_refuses(data: bytes, x: np.ndarray) -> bool:
    try:
        ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    except Exception:  # noqa: BLE001 - a refusal at load or at run
        return True
    return False


def _x(data: bytes) -> np.ndarray:
    dims = onnx.load_from_string(data).graph.input[0].type.tensor_type.shape.dim
    return np.random.default_rng(0).standard_normal([d.dim_value for d in dims]).astype(np.float32)


@pytest.mark.parametrize("name", list(MALFORMED))
def test_malformed_geometry_is_refused_naming_the_node(name: str) -> None:
    data, words, ort_refuses = MALFORMED[name]
    x = _x(data)
    assert _onnxruntime_refuses(data, x) is ort_refuses
    graph = load_model(data)
    with Executor(graph) as ex, pytest.raises(LensError) as caught:
        ex.run({"x": x})
    message = str(caught.value)
    assert "'bad_node'" in message and words in message, message
    with pytest.raises(GeometryError) as caught:   # the reference interpreter names it too
        run_graph(graph, {"x": x})
    assert "'bad_node'" in str(caught.value) and words in str(caught.value)


@pytest.mark.parametrize("attrs", [
    dict(strides=[1, 2**53], pads=[0, 2**63 - 9, 0, 0]),
    dict(pads=[0, 2**40, 0, 0]),
    dict(dilations=[1, 2**40]),
])
def test_values_past_the_bound_are_refused_before_anything_is_allocated(attrs: dict) -> None:
    with pytest.raises(GeometryError, match=str(geometry.MAX_EXTENT)):
        geometry.conv((1, 1, 2, 8), (1, 1, 1, 3), kernel_shape=[1, 3], **attrs)


def test_a_check_runs_once_per_input_signature() -> None:
    geometry._conv.cache_clear()
    for _ in range(5):
        geometry.conv([1, 3, 8, 8], [4, 3, 3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    info = geometry._conv.cache_info()
    assert (info.misses, info.hits) == (1, 4)


@pytest.mark.parametrize("op,attrs,inits", [
    ("ConvTranspose", dict(strides=[2, 3], pads=[1, 0, 0, 2], output_padding=[1, 0]),
     {"w": (2, 3, 3, 2), "b": (3,)}),
    ("ConvTranspose", dict(strides=[2, 2], output_shape=[9, 8]), {"w": (2, 1, 3, 3)}),
    ("AveragePool", dict(kernel_shape=[3, 2], strides=[2, 1], pads=[1, 1, 2, 0], ceil_mode=1), {}),
    ("AveragePool", dict(kernel_shape=[2, 3], pads=[1, 1, 1, 1], count_include_pad=1), {}),
    ("LpPool", dict(kernel_shape=[2, 2], strides=[2, 2], pads=[1, 0, 0, 1]), {}),
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[3, 1], dilations=[1, 2], ceil_mode=1), {}),
])
def test_valid_geometry_still_matches_onnxruntime(op: str, attrs: dict, inits: dict) -> None:
    rng = np.random.default_rng(7)
    arrays = {k: rng.standard_normal(s).astype(np.float32) for k, s in inits.items()}
    data = _model(op, [1, 2, 5, 7], arrays, **attrs)
    x = rng.standard_normal((1, 2, 5, 7)).astype(np.float32)
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    with Executor(load_model(data)) as ex:
        got = np.asarray(ex.run({"x": x}).outputs["y0"])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kw,words", [
    (dict(scales=[1.0, 1.0, 2.0, float("inf")], sizes=None, axes=[0, 1, 2, 3]), "finite"),
    (dict(scales=[1.0, 1.0, 2.0, -2.0], sizes=None, axes=[0, 1, 2, 3]), "above 0"),
    (dict(scales=None, sizes=[1, 1, 2**40, 4], axes=[0, 1, 2, 3]), "outside"),
    (dict(scales=[1.0, 1.0, 1e12, 1e12], sizes=None, axes=[0, 1, 2, 3]), "outside"),
    (dict(scales=None, sizes=[4, 4], axes=[2, 3, 1]), "for 3 resized axes"),
])
def test_resize_output_is_validated(kw: dict, words: str) -> None:
    with pytest.raises(GeometryError, match=words):
        geometry.resize_output((1, 1, 4, 4), policy="stretch", **kw)


def test_resize_axes_are_validated() -> None:
    assert geometry.resize_axes(4, [-1, 1]) == [3, 1]
    assert geometry.resize_axes(3, None) == [0, 1, 2]
    with pytest.raises(GeometryError, match="axes\\[1\\] = 4 is out of range"):
        geometry.resize_axes(4, [2, 4])
    with pytest.raises(GeometryError, match="twice"):
        geometry.resize_axes(4, [2, -2])


def test_max_unpool_shape_is_validated_before_it_allocates() -> None:
    assert geometry.max_unpool((1, 2, 2, 2), kernel_shape=[2, 2], strides=[2, 2]) == (1, 2, 4, 4)
    with pytest.raises(GeometryError, match="strides\\[0\\]"):   # 2^62 x 2: an exabyte of zeros
        geometry.max_unpool((1, 1, 3, 3), kernel_shape=[2, 2], strides=[2**62, 2])
    with pytest.raises(GeometryError, match="unpooled size"):
        geometry.max_unpool((1, 1, 1, 1), kernel_shape=[1, 1], pads=[1, 0, 1, 0])
    with pytest.raises(GeometryError, match="smaller than the unpooled"):
        geometry.max_unpool((1, 1, 2, 2), kernel_shape=[2, 2], strides=[2, 2],
                            output_shape=[1, 1, 3, 4])


# ------------------------------------------------------- axes out of range --
def _axis_model(op: str, axis: int) -> onnx.ModelProto:
    """One node over a (2, 3) float input whose axis (attribute or input) is ``axis``."""
    inputs, inits, attrs = ["x"], [], {}
    if op in ("ReduceSum", "Unsqueeze", "CumSum"):
        inputs.append("a")
        inits.append(helper.make_tensor("a", TensorProto.INT64, [] if op == "CumSum" else [1], [axis]))
    else:
        attrs["axis"] = axis
    if op == "LayerNormalization":
        inputs.append("s")
        inits.append(helper.make_tensor("s", TensorProto.FLOAT, [3], [1.0, 1.0, 1.0]))
    graph = helper.make_graph([helper.make_node(op, inputs, ["y"], name="n0", **attrs)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("op,bad,good", [("Flatten", 3, -2), ("Flatten", -3, 2), ("ReduceSum", 2, -2),
                                         ("ReduceSum", -3, 1), ("LayerNormalization", 2, -1),
                                         ("CumSum", 2, -1), ("Unsqueeze", 3, -3)])
def test_an_axis_out_of_range_is_refused_as_onnxruntime_refuses_it(op: str, bad: int, good: int,
                                                                    rng: np.random.Generator) -> None:
    """Each of these wrapped an out-of-range axis with ``%`` (or read past the shape) and
    computed on another axis; onnxruntime refuses the node, and now so do we, naming
    it. An in-range negative axis still gives onnxruntime's answer."""
    x = rng.standard_normal((2, 3)).astype(np.float32)
    model = _axis_model(op, bad)
    with pytest.raises(Exception):
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
            None, {"x": x})
    with Executor(load_model(model.SerializeToString())) as ex, \
            pytest.raises(LensError, match=rf"node 'n0' \({op}\).*out of range"):
        ex.run({"x": x})
    model = _axis_model(op, good)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    with Executor(load_model(model.SerializeToString())) as ex:
        got = ex.run({"x": x}).outputs["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
