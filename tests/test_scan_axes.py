"""Scan over inputs scanned along other axes and backwards, outputs stacked along other axes
and backwards, with a carried state, against onnxruntime: each step's slice is a view of its
sequence (engine/kernels/control_flow.py), which must pick the right element."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from conftest import make_model
from engine.executor import Executor
from partition import load_model

F = TensorProto.FLOAT


def _scan_model(steps: int):
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "a_t"], ["acc_out"], name="accumulate"),
         helper.make_node("Mul", ["acc_out", "b_t"], ["y_t"], name="scale"),
         helper.make_node("ReduceSumSquare", ["b_t"], ["z_t"], name="norm", keepdims=0)],
        "body", [helper.make_tensor_value_info("acc_in", F, [3]), helper.make_tensor_value_info("a_t", F, [3]),
                 helper.make_tensor_value_info("b_t", F, [3])],
        [helper.make_tensor_value_info("acc_out", F, [3]), helper.make_tensor_value_info("y_t", F, [3]),
         helper.make_tensor_value_info("z_t", F, [])])
    scan = helper.make_node("Scan", ["acc0", "a", "b"], ["acc", "y", "z"], name="scan", body=body,
                            num_scan_inputs=2, scan_input_axes=[1, 0], scan_input_directions=[1, 0],
                            scan_output_axes=[1, 0], scan_output_directions=[1, 0])
    return make_model([scan], [helper.make_tensor_value_info("acc0", F, [3]),
                               helper.make_tensor_value_info("a", F, [3, steps]),
                               helper.make_tensor_value_info("b", F, [steps, 3])],
                      [helper.make_tensor_value_info(n, F, None) for n in ("acc", "y", "z")])


@pytest.mark.parametrize("plan", ["segments", "nodes"])
def test_scan_axes_and_directions_match_onnxruntime(plan: str, rng: np.random.Generator) -> None:
    steps = int(rng.integers(2, 9))
    model = _scan_model(steps)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with Executor(load_model(model.SerializeToString()), plan=plan) as ex:
        for _ in range(3):
            feeds = {"acc0": rng.standard_normal(3).astype(np.float32),
                     "a": rng.standard_normal((3, steps)).astype(np.float32),
                     "b": rng.standard_normal((steps, 3)).astype(np.float32)}
            got = ex.run(feeds).numpy_outputs()
            for name, want in zip(("acc", "y", "z"), sess.run(None, feeds)):
                assert got[name].shape == want.shape, name
                np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6, err_msg=name)
