"""Shape, indexing and reduction kernels against ReferenceEvaluator on fresh random inputs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import numpy_helper

from test_kernels_harness import check, rand_shape, xp_param

i64 = np.int64


def _x(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


@xp_param
def test_reshape_transpose_flatten(xp: Any, rng: np.random.Generator) -> None:
    shape = rand_shape(rng, 4)
    x = _x(rng, shape)
    target = np.array([shape[0], 0, -1], dtype=i64)
    check("Reshape", {"x": x, "s": target}, xp=xp)
    check("Transpose", {"x": x}, xp=xp, perm=[int(p) for p in rng.permutation(4)])
    check("Flatten", {"x": x}, xp=xp, axis=int(rng.integers(-4, 5)))
    check("Shape", {"x": x}, xp=xp, start=int(rng.integers(-4, 2)))
    check("Size", {"x": x}, xp=xp)


@xp_param
def test_squeeze_unsqueeze_expand_tile(xp: Any, rng: np.random.Generator) -> None:
    x = _x(rng, (rand_shape(rng, 1)[0], 1, rand_shape(rng, 1)[0], 1))
    check("Squeeze", {"x": x, "axes": np.array([1, -1], dtype=i64)}, xp=xp)
    check("Squeeze", {"x": x}, xp=xp)
    check("Unsqueeze", {"x": x, "axes": np.array([0, -1], dtype=i64)}, xp=xp)
    check("Expand", {"x": x, "s": np.array([x.shape[0], 2, x.shape[2], 3], dtype=i64)}, xp=xp)
    check("Tile", {"x": x, "r": rng.integers(1, 3, 4).astype(i64)}, xp=xp)


@xp_param
def test_concat_split(xp: Any, rng: np.random.Generator) -> None:
    shape = rand_shape(rng, 3, 2, 6)
    axis = int(rng.integers(-3, 3))
    parts = {f"x{i}": _x(rng, shape) for i in range(int(rng.integers(1, 4)))}
    check("Concat", parts, xp=xp, axis=axis)
    x = _x(rng, (6, 7, 5))
    check("Split", {"x": x, "s": np.array([2, 4], dtype=i64)}, xp=xp, n_outputs=2, axis=0)
    check("Split", {"x": x}, xp=xp, n_outputs=3, axis=1, opset=18, num_outputs=3)
    check("Split", {"x": x}, xp=xp, n_outputs=3, axis=0)


@xp_param
def test_slice(xp: Any, rng: np.random.Generator) -> None:
    x = _x(rng, rand_shape(rng, 3, 3, 8))
    for _ in range(5):
        axes = rng.permutation(3)[: int(rng.integers(1, 4))]
        starts = [int(rng.integers(-x.shape[a] - 2, x.shape[a] + 2)) for a in axes]
        ends = [int(rng.integers(-x.shape[a] - 2, x.shape[a] + 2)) for a in axes]
        steps = [int(rng.choice([-3, -2, -1, 1, 2, 3])) for _ in axes]
        check("Slice", {"x": x, "b": np.array(starts, i64), "e": np.array(ends, i64),
                        "a": axes.astype(i64), "s": np.array(steps, i64)}, xp=xp,
              oracle="onnxruntime")  # the reference slices python-style out of range; ORT clamps per spec


@xp_param
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad(mode: str, xp: Any, rng: np.random.Generator) -> None:
    x = _x(rng, rand_shape(rng, 3, 3, 6))
    pads = np.concatenate([rng.integers(0, 3, 3), rng.integers(0, 3, 3)]).astype(i64)
    check("Pad", {"x": x, "p": pads, "v": np.array(1.5, np.float32) if mode == "constant" else None},
          xp=xp, mode=mode)


@xp_param
def test_generators(xp: Any, rng: np.random.Generator) -> None:
    check("Range", {"a": np.array(rng.integers(-5, 5), i64), "b": np.array(rng.integers(5, 20), i64),
                    "d": np.array(rng.integers(1, 4), i64)}, xp=xp)
    check("Range", {"a": np.array(rng.random() * 3, np.float32), "b": np.array(-2.0, np.float32),
                    "d": np.array(-0.3, np.float32)}, xp=xp)
    check("ConstantOfShape", {"s": rng.integers(1, 4, 3).astype(i64)}, xp=xp,
          value=numpy_helper.from_array(np.array([rng.random()], dtype=np.float32)))
    idx = rng.integers(-4, 4, (3, 2)).astype(i64)
    check("OneHot", {"i": idx, "d": np.array(4, i64), "v": np.array([0.0, 2.0], np.float32)}, xp=xp,
          axis=int(rng.integers(-3, 3)))
    check("Trilu", {"x": _x(rng, (2, 4, 5)), "k": np.array(rng.integers(-2, 3), i64)}, xp=xp,
          upper=int(rng.integers(0, 2)))
    check("DepthToSpace", {"x": _x(rng, (1, 8, 2, 3))}, xp=xp, blocksize=2, mode=str(rng.choice(["DCR", "CRD"])))
    check("SpaceToDepth", {"x": _x(rng, (1, 2, 4, 6))}, xp=xp, blocksize=2)


@xp_param
def test_gather_family(xp: Any, rng: np.random.Generator) -> None:
    x = _x(rng, rand_shape(rng, 3, 2, 5))
    axis = int(rng.integers(-3, 3))
    n = x.shape[axis]
    check("Gather", {"x": x, "i": rng.integers(-n, n, (2, 3)).astype(i64)}, xp=xp, axis=axis)
    idx_shape = list(x.shape)
    idx_shape[axis] = int(rng.integers(1, 4))
    # A non-negative axis here: onnx's reference GatherElements mishandles axis=-1 (it slices
    # shape[dim + 1:] = shape[0:]) and fails whenever the index is shorter along that axis.
    check("GatherElements", {"x": x, "i": rng.integers(-n, n, idx_shape).astype(i64)}, xp=xp,
          axis=axis % x.ndim)
    nd = np.stack([rng.integers(0, x.shape[0], 4), rng.integers(0, x.shape[1], 4)], -1).astype(i64)
    check("GatherND", {"x": x, "i": nd}, xp=xp)


@xp_param
@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max"])
def test_scatter_family(reduction: str, xp: Any, rng: np.random.Generator) -> None:
    x = _x(rng, (4, 5))
    # Distinct targets for "none" (order between duplicates is unspecified there).
    cols = np.stack([rng.permutation(5)[:3] for _ in range(4)]).astype(i64)
    upd = _x(rng, (4, 3))
    check("ScatterElements", {"x": x, "i": cols, "u": upd}, xp=xp, axis=1, opset=18, reduction=reduction)
    rows = (rng.permutation(4)[:2] if reduction == "none" else rng.integers(0, 4, 3)).reshape(-1, 1).astype(i64)
    check("ScatterND", {"x": x, "i": rows, "u": _x(rng, (rows.shape[0], 5))}, xp=xp, opset=18,
          reduction=reduction)


@xp_param
def test_topk_nonzero_cumsum_arg(xp: Any, rng: np.random.Generator) -> None:
    x = rng.integers(0, 6, rand_shape(rng, 3, 2, 6)).astype(np.float32)  # ties on purpose
    axis = int(rng.integers(-3, 3))
    k = int(rng.integers(1, x.shape[axis] + 1))
    check("TopK", {"x": x, "k": np.array([k], i64)}, xp=xp, n_outputs=2, axis=axis,
          largest=int(rng.integers(0, 2)))
    check("NonZero", {"x": x}, xp=xp)
    check("CumSum", {"x": x, "a": np.array(axis, i64)}, xp=xp, exclusive=int(rng.integers(0, 2)),
          reverse=int(rng.integers(0, 2)))
    for op in ("ArgMax", "ArgMin"):
        check(op, {"x": x}, xp=xp, axis=axis, keepdims=int(rng.integers(0, 2)),
              select_last_index=int(rng.integers(0, 2)))


REDUCE = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
          "ReduceSumSquare", "ReduceLogSumExp", "ReduceLogSum"]


@xp_param
@pytest.mark.parametrize("op", REDUCE)
@pytest.mark.parametrize("opset", [13, 18])
def test_reduce(op: str, opset: int, xp: Any, rng: np.random.Generator) -> None:
    x = rng.uniform(0.5, 1.5, rand_shape(rng, 3)).astype(np.float32)
    axes = sorted(int(a) for a in rng.permutation(3)[: int(rng.integers(1, 4))])
    keep = int(rng.integers(0, 2))
    if opset >= 18 or op == "ReduceSum":
        check(op, {"x": x, "axes": np.array(axes, i64)}, xp=xp, opset=opset, keepdims=keep, rtol=1e-5)
    else:
        check(op, {"x": x}, xp=xp, opset=opset, keepdims=keep, axes=axes, rtol=1e-5)


@pytest.mark.parametrize("sizes", [[2, 3], [4, 4], [7, -1]])
def test_split_sizes_that_do_not_cover_the_axis_are_refused_as_onnxruntime_does(sizes) -> None:
    """np.split took such sizes as cut points and returned pieces of other lengths; onnxruntime
    refuses the node, and so does our executor, naming it."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from engine.executor import Executor
    from partition import load_model
    from partition.errors import LensError
    node = helper.make_node("Split", ["x", "s"], ["a", "b"], name="bad_split", axis=-1)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 6])],
                          [helper.make_tensor_value_info(t, TensorProto.FLOAT, None) for t in "ab"],
                          [numpy_helper.from_array(np.array(sizes, i64), "s")])
    data = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()
    x = np.ones((3, 6), np.float32)
    with pytest.raises(Exception):
        ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    with Executor(load_model(data)) as ex, pytest.raises(LensError) as caught:
        ex.run({"x": x})
    assert "'bad_split'" in str(caught.value) and "do not add up to the axis length 6" in str(caught.value)
