"""Small models for the run-state, time-limit and Dask security tests."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

#: trips of the endless Loop: at a billion trips a second still 146 years
ENDLESS_TRIPS = 2 ** 62


def endless_loop_model() -> bytes:
    """y = Loop(M=2^62, cond=true, v=x) with body v -> v + 0: a few hundred bytes that run for ever
    (in onnxruntime's C++ and in our engine alike)."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep_going"),
         helper.make_node("Add", ["v_in", "zero"], ["v_out"], name="step")],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [1])],
        [helper.make_tensor("zero", TensorProto.FLOAT, [1], [0.0])])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trips", "cond", "x"], ["y"], name="endless", body=body)],
        "endless_loop",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        [helper.make_tensor("trips", TensorProto.INT64, [], [ENDLESS_TRIPS]),
         helper.make_tensor("cond", TensorProto.BOOL, [], [True])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model, full_check=True)
    return model.SerializeToString()
