"""Ops whose output count only the node knows (Split before opset 18) run right on the executor."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from engine.executor import Executor
from partition.onnx_io import from_model_proto
from tests.conftest import make_model


def test_split_without_sizes_matches_onnxruntime(rng) -> None:
    outs = [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, None) for i in range(3)]
    model = make_model([helper.make_node("Split", ["x"], ["y0", "y1", "y2"], axis=0, name="split")],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 4])], outs)
    feeds = {"x": rng.standard_normal((6, 4)).astype(np.float32)}
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    with Executor(from_model_proto(model)) as ex:
        got = ex.run(feeds).outputs
    for i, w in enumerate(want):
        np.testing.assert_array_equal(got[f"y{i}"], w)
