"""A frozen batch norm as torch exports it -- Conv -> Mul(scale) -> Add(shift) [-> Add(residual)]
-> Relu, the scale and shift constant per-channel vectors read through an Identity of a shared
weight (transformers' DETR backbone, torchvision's FrozenBatchNorm2d) -- becomes the conv's
epilogue: the Identity a derived weight at bind time (``Executor._weights_of_weights``), the Mul
and Add a per-channel affine chain (``engine/fuse_channel.py``) the conv chain takes
(``engine/fuse.py``). Against onnxruntime on fresh random inputs; ``set_weight`` of a shared
weight reaches every reader; vectors that are not per-channel leave the nodes as written."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.executor import Executor
from engine.fuse import FUSED_DOMAIN
from partition.onnx_io import from_model_proto
from test_fuse_conv import compiled  # noqa: F401 - the fixture: numpy path, then compiled kernels

F = TensorProto.FLOAT


def _model(rng: np.random.Generator, *, residual: bool = False, vector_shape: tuple = (1, 8, 1, 1),
           through_identity: bool = True, constant_first: bool = False):
    """x -> Conv -> Mul(scale) -> Add(shift) [-> Add(x)] -> Relu, twice, the two convs' scales
    and shifts the same weights (torch's exporter shares them through Identity nodes)."""
    inits = [numpy_helper.from_array((rng.standard_normal((8, 8, 3, 3)) * 0.3).astype(np.float32), "w1"),
             numpy_helper.from_array((rng.standard_normal((8, 8, 3, 3)) * 0.3).astype(np.float32), "w2"),
             numpy_helper.from_array((rng.random(vector_shape) + 0.5).astype(np.float32), "scale"),
             numpy_helper.from_array(rng.standard_normal(vector_shape).astype(np.float32), "shift")]
    nodes, x = [], "x"
    for k in (1, 2):
        scale, shift = "scale", "shift"
        if through_identity:
            nodes += [helper.make_node("Identity", ["scale"], [f"scale{k}"], name=f"share scale {k}"),
                      helper.make_node("Identity", ["shift"], [f"shift{k}"], name=f"share shift {k}")]
            scale, shift = f"scale{k}", f"shift{k}"
        nodes += [helper.make_node("Conv", [x, f"w{k}"], [f"c{k}"], name=f"conv{k}", pads=[1, 1, 1, 1]),
                  helper.make_node("Mul", [scale, f"c{k}"] if constant_first else [f"c{k}", scale], [f"m{k}"],
                                   name=f"scale{k}"),
                  helper.make_node("Add", [shift, f"m{k}"] if constant_first else [f"m{k}", shift], [f"a{k}"],
                                   name=f"shift{k}")]
        last = f"a{k}"
        if residual:
            nodes.append(helper.make_node("Add", [last, x], [f"r{k}"], name=f"residual{k}"))
            last = f"r{k}"
        nodes.append(helper.make_node("Relu", [last], [f"y{k}"], name=f"relu{k}"))
        x = f"y{k}"
    graph = helper.make_graph(nodes, "frozen_bn", [helper.make_tensor_value_info("x", F, [1, 8, 10, 9])],
                              [helper.make_tensor_value_info(x, F, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, x


def _reference(model, feeds: dict) -> np.ndarray:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


@pytest.mark.parametrize("residual", [False, True])
def test_a_frozen_batch_norm_becomes_the_convs_epilogue(residual, compiled, rng):
    model, out = _model(rng, residual=residual)
    feeds = {"x": rng.standard_normal((1, 8, 10, 9)).astype(np.float32)}
    with Executor(from_model_proto(model)) as ex:
        kinds = [s.node.op_type for s in ex._steps]
        for _ in range(2):
            got = ex.run(feeds).numpy_outputs()[out]
            np.testing.assert_allclose(got, _reference(model, feeds), rtol=1e-4, atol=1e-4)
    want = "Conv+Mul+Add+Add+Relu" if residual else "Conv+Mul+Add+Relu"
    assert kinds == [want, want], kinds   # no Identity runs, no Mul or Add alone
    assert all(s.node.domain == FUSED_DOMAIN for s in ex._steps)


def test_a_shared_weight_replaced_reaches_both_convs(rng):
    model, out = _model(rng)
    feeds = {"x": rng.standard_normal((1, 8, 10, 9)).astype(np.float32)}
    new_scale = (rng.random((1, 8, 1, 1)) + 0.5).astype(np.float32)
    changed = model.__deepcopy__()
    changed.graph.initializer[2].CopyFrom(numpy_helper.from_array(new_scale, "scale"))
    with Executor(from_model_proto(model)) as ex:
        ex.run(feeds)
        ex.set_weight("scale", new_scale)
        got = ex.run(feeds).numpy_outputs()[out]
        values = ex.run(feeds, keep_intermediates=True).values
    np.testing.assert_allclose(got, _reference(changed, feeds), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(values["scale1"], new_scale)   # the debugger sees the alias too


@pytest.mark.parametrize("shape", [(1,), (1, 1, 1, 1), ()])
def test_a_scalar_scale_and_shift_become_the_convs_epilogue_too(shape, compiled, rng):
    """PP-OCRv4's learnable affine after each conv, ``Mul(w, conv) + b`` with ``w`` and ``b`` of
    one value (the constant first): the same scale and shift on every channel, so the conv's
    epilogue as a per-channel one is (the PP-OCRv4 detector: 244 -> 164 steps, 101 -> 80 ms)."""
    model, out = _model(rng, vector_shape=shape, through_identity=False, constant_first=True)
    feeds = {"x": rng.standard_normal((1, 8, 10, 9)).astype(np.float32)}
    with Executor(from_model_proto(model)) as ex:
        kinds = [s.node.op_type for s in ex._steps]
        np.testing.assert_allclose(ex.run(feeds).numpy_outputs()[out], _reference(model, feeds),
                                   rtol=1e-4, atol=1e-4)
        new_shift = np.full(shape, 2.5, np.float32)      # the weights stay inputs: a new shift is read
        ex.set_weight("shift", new_shift)
        got = ex.run(feeds).numpy_outputs()[out]
    assert kinds == ["Conv+Mul+Add+Relu"] * 2, kinds
    changed = model.__deepcopy__()
    changed.graph.initializer[3].CopyFrom(numpy_helper.from_array(new_shift, "shift"))
    np.testing.assert_allclose(got, _reference(changed, feeds), rtol=1e-4, atol=1e-4)


def test_vectors_that_are_not_per_channel_stay_as_written(rng):
    model, out = _model(rng, vector_shape=(1, 1, 10, 9), through_identity=False)   # a spatial map
    feeds = {"x": rng.standard_normal((1, 8, 10, 9)).astype(np.float32)}
    with Executor(from_model_proto(model)) as ex:
        kinds = [s.node.op_type for s in ex._steps]
        got = ex.run(feeds).numpy_outputs()[out]
    np.testing.assert_allclose(got, _reference(model, feeds), rtol=1e-4, atol=1e-4)
    assert "Mul" in kinds and not any(k.startswith("Conv+Mul") for k in kinds), kinds
