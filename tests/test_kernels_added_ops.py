"""Kernels added for conformance, on fresh random inputs against onnx's ReferenceEvaluator,
on numpy and on the strict cupy stand-in (and real cupy where a GPU is present)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from test_kernels_harness import check, xp_param


@xp_param
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_grid_sample_2d(xp: Any, mode: str, padding_mode: str, align_corners: int,
                        rng: np.random.Generator) -> None:
    x = rng.standard_normal((2, 3, 5, 6)).astype(np.float32)
    grid = rng.uniform(-1.3, 1.3, size=(2, 4, 7, 2)).astype(np.float32)  # some points outside
    check("GridSample", {"x": x, "grid": grid}, xp=xp, mode=mode, padding_mode=padding_mode,
          align_corners=align_corners, rtol=1e-4, atol=1e-5)


@xp_param
def test_grid_sample_3d_linear(xp: Any, rng: np.random.Generator) -> None:
    x = rng.standard_normal((1, 2, 3, 4, 5)).astype(np.float32)
    grid = rng.uniform(-1.1, 1.1, size=(1, 2, 3, 4, 3)).astype(np.float32)
    check("GridSample", {"x": x, "grid": grid}, xp=xp, opset=20, rtol=1e-4, atol=1e-5)


@xp_param
@pytest.mark.parametrize("inverse,onesided", [(0, 0), (0, 1), (1, 0)])
def test_dft(xp: Any, inverse: int, onesided: int, rng: np.random.Generator) -> None:
    x = rng.standard_normal((2, 8, 2 if inverse else 1)).astype(np.float32)
    check("DFT", {"x": x}, xp=xp, axis=1, inverse=inverse, onesided=onesided, rtol=1e-4, atol=1e-4)


@xp_param
def test_col2im(xp: Any, rng: np.random.Generator) -> None:
    image, block = np.array([5, 6], np.int64), np.array([2, 3], np.int64)
    counts = [(5 + 1 + 0 - 2 * (2 - 1) - 1) // 1 + 1, (6 + 0 + 1 - 1 * (3 - 1) - 1) // 2 + 1]
    x = rng.standard_normal((2, 3 * 6, counts[0] * counts[1])).astype(np.float32)
    check("Col2Im", {"x": x, "image": image, "block": block}, xp=xp, opset=18, dilations=[2, 1],
          pads=[1, 0, 0, 1], strides=[1, 2], rtol=1e-5, atol=1e-5)


@xp_param
def test_deform_conv_with_mask_and_groups(xp: Any, rng: np.random.Generator) -> None:
    x = rng.standard_normal((2, 4, 6, 7)).astype(np.float32)
    w = rng.standard_normal((6, 2, 3, 2)).astype(np.float32)
    oh, ow = (6 + 2 - 3) // 1 + 1, (7 + 0 - 2) // 2 + 1
    offset = rng.uniform(-1.5, 1.5, size=(2, 2 * 3 * 2 * 2, oh, ow)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    mask = rng.uniform(0, 1, size=(2, 2 * 3 * 2, oh, ow)).astype(np.float32)
    check("DeformConv", {"x": x, "w": w, "offset": offset, "b": b, "mask": mask}, xp=xp, opset=19,
          group=2, offset_group=2, pads=[1, 0, 1, 0], strides=[1, 2], rtol=1e-4, atol=1e-4)


@xp_param
@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_tensor_scatter(xp: Any, mode: str, rng: np.random.Generator) -> None:
    past = rng.standard_normal((3, 2, 6, 4)).astype(np.float32)
    update = rng.standard_normal((3, 2, 2, 4)).astype(np.float32)
    where = rng.integers(0, 5 if mode == "circular" else 4, size=3).astype(np.int64)
    check("TensorScatter", {"past": past, "update": update, "where": where}, xp=xp, opset=24, mode=mode)


@xp_param
@pytest.mark.parametrize("is_causal", [0, 1])
def test_attention_runs_as_its_onnx_function(xp: Any, is_causal: int, rng: np.random.Generator) -> None:
    # No hand-written kernel: the op runs as the body onnx gives for these inputs' types.
    q = rng.standard_normal((2, 3, 4, 8)).astype(np.float32)
    k = rng.standard_normal((2, 3, 5, 8)).astype(np.float32)
    v = rng.standard_normal((2, 3, 5, 6)).astype(np.float32)
    check("Attention", {"q": q, "k": k, "v": v}, xp=xp, opset=23, is_causal=is_causal, rtol=1e-4, atol=1e-5)


@xp_param
def test_string_ops(xp: Any) -> None:
    words = np.array(["Monday", "tuesday", "a b  c", ""], dtype=object)
    check("StringConcat", {"a": words, "b": np.array(["!"], dtype=object)}, xp=xp, opset=20)
    check("StringSplit", {"x": words}, xp=xp, opset=20, n_outputs=2)
    check("RegexFullMatch", {"x": words}, xp=xp, opset=20, pattern="[a-z]+day")


@pytest.mark.parametrize("device", ["cpu", "fake-gpu"])
def test_function_defined_op_through_the_executor_matches_onnxruntime(device: str, rng: np.random.Generator,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # The executor resolves kernels with the same kernel_for, so it runs function bodies too.
    import onnxruntime as ort  # noqa: PLC0415
    from onnx import TensorProto, helper  # noqa: PLC0415

    from engine.executor import Executor  # noqa: PLC0415
    from fake_cupy import install  # noqa: PLC0415
    from partition import load_model  # noqa: PLC0415

    scores = rng.standard_normal((4, 5, 3)).astype(np.float32)
    labels = rng.integers(0, 5, size=(4, 3)).astype(np.int64)
    node = helper.make_node("SoftmaxCrossEntropyLoss", ["s", "l"], ["loss", "logp"], reduction="mean",
                            ignore_index=2)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("s", TensorProto.FLOAT, [4, 5, 3]),
                                            helper.make_tensor_value_info("l", TensorProto.INT64, [4, 3])],
                              [helper.make_tensor_value_info("loss", TensorProto.FLOAT, []),
                               helper.make_tensor_value_info("logp", TensorProto.FLOAT, [4, 5, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    feeds = {"s": scores, "l": labels}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    if device == "fake-gpu":
        install(monkeypatch)
    with Executor(load_model(model.SerializeToString()), device="gpu" if device == "fake-gpu" else "cpu") as ex:
        got = ex.run(feeds).numpy_outputs()
    np.testing.assert_allclose(got["loss"], want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["logp"], want[1], rtol=1e-5, atol=1e-6)


@xp_param
@pytest.mark.parametrize("mode", ["avg", "max"])
def test_roi_align_modes(xp: Any, mode: str, rng: np.random.Generator) -> None:
    # max mode is ONNX's: the largest weighted corner term per sample, then the max over samples.
    x = rng.standard_normal((2, 3, 8, 9)).astype(np.float32)
    corners = np.sort(rng.uniform(0, 7, size=(4, 2, 2)), axis=1)  # [roi, (lo, hi), (y, x)]
    rois = np.stack([corners[:, 0, 1], corners[:, 0, 0], corners[:, 1, 1], corners[:, 1, 0]], axis=1)
    check("RoiAlign", {"x": x, "rois": rois.astype(np.float32),
                       "batch": rng.integers(0, 2, size=4).astype(np.int64)}, xp=xp, opset=16, mode=mode,
          output_height=3, output_width=2, sampling_ratio=2, rtol=1e-4, atol=1e-5)


@xp_param
@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
def test_tree_ensemble_random_rows(xp: Any, aggregate: int, rng: np.random.Generator) -> None:
    from onnx import TensorProto, helper  # noqa: PLC0415
    from onnx.reference import ReferenceEvaluator  # noqa: PLC0415

    from test_kernels_harness import assert_same, run_ours  # noqa: PLC0415

    # Two trees over 3 features: a LEQ/GT/MEMBER mix, NaN inputs following nodes_missing_value_tracks_true.
    node = helper.make_node(
        "TreeEnsemble", ["x"], ["y"], domain="ai.onnx.ml", tree_roots=[0, 3], n_targets=2,
        aggregate_function=aggregate, nodes_featureids=[0, 1, 2, 2, 1],
        nodes_modes=helper.make_tensor("m", TensorProto.UINT8, [5], [0, 3, 6, 1, 4]),
        nodes_splits=helper.make_tensor("s", TensorProto.FLOAT, [5], [0.1, -0.3, 0.0, 0.4, 0.0]),
        membership_values=helper.make_tensor("mv", TensorProto.FLOAT, [3], [1.0, 2.0, float("nan")]),
        nodes_truenodeids=[1, 0, 2, 4, 3], nodes_trueleafs=[0, 1, 1, 0, 1],
        nodes_falsenodeids=[2, 1, 3, 5, 4], nodes_falseleafs=[0, 1, 1, 1, 1],
        nodes_missing_value_tracks_true=[1, 0, 0, 1, 0],
        leaf_targetids=[0, 1, 0, 1, 0, 1], leaf_weights=helper.make_tensor("w", TensorProto.FLOAT, [6],
                                                                          [1.5, -2.0, 3.0, 0.5, 7.0, -1.0]))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("ai.onnx.ml", 5)])
    model.ir_version = 8
    x = rng.standard_normal((8, 3)).astype(np.float32)
    x[:, 2] = rng.integers(0, 3, size=8)  # hits and misses of the membership set
    x[rng.integers(0, 8), rng.integers(0, 3)] = np.nan
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    got = run_ours(model, {"x": x}, xp)[0]
    assert_same(got, np.asarray(want), 1e-6, 1e-6, "TreeEnsemble")
