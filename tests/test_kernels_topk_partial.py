"""TopK of a few among many (``kernels.indexing._smallest_k``): a partition, then a stable
sort of the chosen only. Against onnxruntime on fresh random inputs -- distinct values, ties
inside the k and across the k-th (where the partial form hands over to the full sort), NaN,
unsigned and signed integers, every axis, largest and smallest."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from engine.kernels import indexing


def _ort_topk(x: np.ndarray, k: int, axis: int, largest: int) -> list[np.ndarray]:
    tt = helper.np_dtype_to_tensor_dtype(x.dtype)
    graph = helper.make_graph(
        [helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=axis, largest=largest, sorted=1)], "g",
        [helper.make_tensor_value_info("x", tt, list(x.shape)), helper.make_tensor_value_info("k", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("v", tt, None), helper.make_tensor_value_info("i", TensorProto.INT64, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x, "k": np.array([k], np.int64)})


def _inputs(kind: str, axis: int, rng: np.random.Generator) -> np.ndarray:
    shape = [int(rng.integers(1, 5)), int(rng.integers(1, 4))]
    shape.insert(axis % 3, int(rng.integers(64, 300)))   # the long axis, where TopK looks
    if kind == "distinct":
        return rng.standard_normal(shape).astype(np.float32)
    if kind == "ties":   # few values: ties inside the k and across the k-th
        return rng.integers(0, 40, shape).astype(np.float32)
    if kind == "nan":
        x = rng.standard_normal(shape).astype(np.float32)
        x[rng.random(shape) < 0.3] = np.nan
        return x
    if kind == "uint8":
        return rng.integers(0, 256, shape).astype(np.uint8)
    return rng.integers(-10**6, 10**6, shape).astype(np.int64)


@pytest.mark.parametrize("kind", ["distinct", "ties", "nan", "uint8", "int64"])
@pytest.mark.parametrize("largest", [1, 0])
def test_a_few_of_many_match_onnxruntime(kind, largest, rng):
    axis = int(rng.integers(-3, 3))
    x = _inputs(kind, axis, rng)
    n = x.shape[axis]
    for k in (1, int(rng.integers(2, n // 8 + 1))):
        values, idx = indexing._topk(np, x, k, axis, largest)
        if kind == "nan" and largest:
            # onnxruntime takes NaN as the largest, in no stable order (positions 4 before 0);
            # ours as the sort puts it, last: the partial form must agree with that sort
            keys = np.moveaxis(-x, axis, -1)
            want_i = np.moveaxis(np.argsort(keys, axis=-1, kind="stable")[..., :k], -1, axis)
            want_v = np.take_along_axis(x, want_i, axis=axis)
        else:
            want_v, want_i = _ort_topk(x, k, axis, largest)
        np.testing.assert_array_equal(idx, want_i, err_msg=f"{kind} k={k} axis={axis}")
        np.testing.assert_array_equal(values, want_v)


def test_distinct_values_take_the_partial_form_and_a_tie_across_the_kth_does_not(rng):
    x = rng.standard_normal((3, 200)).astype(np.float32)
    picked = indexing._smallest_k(x, 4, 1)
    assert picked is not None
    np.testing.assert_array_equal(picked, np.argsort(x, axis=1, kind="stable")[:, :4])
    x[:, :3] = -100.0    # the three smallest, then a tie at the fourth
    x[:, 10] = x[:, 11] = -50.0
    assert indexing._smallest_k(x, 4, 1) is None
    assert indexing._smallest_k(x, 5, 1) is not None   # the tie inside the five


@pytest.mark.parametrize("largest", [1, 0])
def test_many_ties_inside_the_k_keep_position_order(largest, rng):
    """The k chosen hold only a few values (ties everywhere inside, none across the k-th): the
    chosen are sorted stably, lower position first, as onnxruntime orders them."""
    n, k = 800, 100
    x = (rng.permutation(n) + 10).astype(np.float32)          # distinct, all above the chosen
    inside = rng.permutation(n)[:k]
    x[inside] = rng.integers(0, 4, k)                          # the k smallest: four values
    if largest:
        x = -x
    x = x.reshape(1, n)
    assert indexing._smallest_k(-x if largest else x, k, 1) is not None
    values, idx = indexing._topk(np, x, k, 1, largest)
    want_v, want_i = _ort_topk(x, k, 1, largest)
    np.testing.assert_array_equal(idx, want_i)
    np.testing.assert_array_equal(values, want_v)
