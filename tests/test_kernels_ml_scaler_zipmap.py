"""Scaler and ZipMap (ai.onnx.ml) on our kernels, against onnxruntime and ONNX's reference
evaluator on fresh random inputs: scikit-learn pipelines converted by skl2onnx start with a
Scaler and end every classifier with a ZipMap, and each ran as an onnxruntime session of its own."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from engine.executor import Executor
from engine.run_errors import RunError
from partition import load_model

ML = "ai.onnx.ml"


def _model(node, x_type: int, x_shape: list, out: helper.ValueInfoProto):
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", x_type, x_shape)], [out])
    return helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 17),
                                                                  helper.make_opsetid(ML, 3)])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("per_feature", [True, False])
def test_scaler_matches_onnxruntime_and_the_reference(dtype, per_feature, rng):
    c = int(rng.integers(2, 9))
    n = c if per_feature else 1
    offset = rng.standard_normal(n).astype(np.float32).tolist()
    scale = (rng.random(n) * 3 + 0.1).astype(np.float32).tolist()
    node = helper.make_node("Scaler", ["x"], ["y"], domain=ML, offset=offset, scale=scale)
    tt = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    model = _model(node, tt, ["N", c], helper.make_tensor_value_info("y", TensorProto.FLOAT, None))
    x = (rng.standard_normal((int(rng.integers(1, 6)), c)) * 10).astype(dtype)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    oracle = ReferenceEvaluator(model).run(None, {"x": x})[0]
    with Executor(load_model(model.SerializeToString())) as ex:  # no fallback given: our kernel runs it
        got = ex.run({"x": x}).numpy_outputs()["y"]
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)
    if dtype != np.int64:  # the reference keeps an integer input's type (ONNX says float), truncating
        np.testing.assert_allclose(got, oracle, rtol=1e-6, atol=1e-5)


def test_a_scaler_of_another_width_is_refused_naming_it(rng):
    node = helper.make_node("Scaler", ["x"], ["y"], domain=ML, offset=[0.0, 1.0, 2.0], scale=[1.0], name="scale it")
    model = _model(node, TensorProto.FLOAT, ["N", 4], helper.make_tensor_value_info("y", TensorProto.FLOAT, None))
    with Executor(load_model(model.SerializeToString())) as ex:
        with pytest.raises(RunError, match=r"'scale it' \(Scaler\).*offset has 3 values; the input has 4"):
            ex.run({"x": np.ones((2, 4), np.float32)})


def _zipmap_model(labels: dict, shape: list):
    node = helper.make_node("ZipMap", ["x"], ["m"], domain=ML, name="zip", **labels)
    key = TensorProto.STRING if "classlabels_strings" in labels else TensorProto.INT64
    out = helper.make_value_info("m", helper.make_sequence_type_proto(
        helper.make_map_type_proto(key, helper.make_tensor_type_proto(TensorProto.FLOAT, []))))
    return _model(node, TensorProto.FLOAT, shape, out)


@pytest.mark.parametrize("labels", [{"classlabels_int64s": [3, 0, 7]},
                                    {"classlabels_strings": ["cat", "dog", "<b>bird</b>"]}])
@pytest.mark.parametrize("rows", [0, 1, 4])
def test_zipmap_makes_onnxruntimes_maps(labels, rows, rng):
    shape = [rows, 3] if rows else [3]
    model = _zipmap_model(labels, ["N", 3] if rows else [3])
    x = rng.random(shape).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    with Executor(load_model(model.SerializeToString())) as ex:
        got = ex.run({"x": x}).outputs["m"]
    assert isinstance(got, list) and len(got) == len(want) == max(rows, 1)
    for ours, theirs in zip(got, want):
        assert list(ours) == list(theirs)                       # the labels, in order, typed as theirs
        assert all(type(k) is type(t) for k, t in zip(ours, theirs))
        np.testing.assert_array_equal(np.float32(list(ours.values())), np.float32(list(theirs.values())))


def test_zipmap_of_another_width_is_refused_naming_it():
    model = _zipmap_model({"classlabels_int64s": [0, 1]}, ["N", 3])
    with Executor(load_model(model.SerializeToString())) as ex:
        with pytest.raises(RunError, match=r"'zip' \(ZipMap\).*takes \[N, 2\] or \[2\].*got shape \[4, 3\]"):
            ex.run({"x": np.ones((4, 3), np.float32)})


def test_scaler_attributes_converted_once_never_confused(rng):
    """A node's attribute lists are converted once (kept by identity); fresh lists of other
    values -- whose ids Python may hand out again once the old ones die -- never find a
    stale conversion."""
    from engine.kernels import ml
    x = rng.standard_normal((3, 4)).astype(np.float32)
    for _ in range(200):   # beyond the cache's size: it starts over and ids come back
        offset, scale = rng.standard_normal(4).tolist(), rng.standard_normal(4).tolist()
        np.testing.assert_allclose(ml.scaler(np, x, offset=offset, scale=scale),
                                   (x - np.float32(offset)) * np.float32(scale), rtol=1e-6)
    kept = rng.standard_normal(4).tolist()
    assert ml._float32s(kept, 0.0) is ml._float32s(kept, 0.0)
