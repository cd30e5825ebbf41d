"""A per-channel affine after a conv chain's activation joins the chain (``engine/fuse.py``
``_affine_after``): Mul / Add nodes by constants of the conv's channels or single values (PP-OCRv4's
learnable scale and shift after each hard swish), or an inference BatchNormalization (Keras' Conv
-> Relu -> BatchNormalization), run in the conv's epilogue pass (``AffineAfter``; the compiled
``channel_epilogue_f32``'s post scale and shift). Against onnxruntime on fresh random inputs, with
the compiled kernels and on the numpy path, on the strict cupy stand-in too; ``set_weight`` reaches
the affine's constants; what is not per-channel stays a node of its own."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.executor import Executor
from engine.fuse import FUSED_DOMAIN
from fake_cupy import install
from partition.onnx_io import from_model_proto
from test_fuse_conv import compiled  # noqa: F401 - the fixture: numpy path, then compiled kernels

F = TensorProto.FLOAT
C = 6


def _model(rng: np.random.Generator, activation: str, after: str, after_shape: tuple = ()) -> onnx.ModelProto:
    """x -> Conv -> activation ("relu", "relu6", "hard_swish": Paddle's Add-Clip-Mul-Div) -> after
    ("scalars": Mul(w, y) + b of ``after_shape``, "batchnorm")."""
    f32 = lambda name, a: numpy_helper.from_array(np.asarray(a, dtype=np.float32), name)  # noqa: E731
    inits = [f32("w", rng.standard_normal((C, 3, 3, 3)) * 0.4), f32("b", rng.standard_normal(C) * 0.1),
             f32("zero", 0.0), f32("three", 3.0), f32("six", 6.0)]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1])]
    if activation == "relu":
        nodes.append(helper.make_node("Relu", ["c"], ["act"], name="act"))
    elif activation == "relu6":
        nodes.append(helper.make_node("Clip", ["c", "zero", "six"], ["act"], name="act"))
    else:
        nodes += [helper.make_node("Add", ["c", "three"], ["h1"], name="hs_add"),
                  helper.make_node("Clip", ["h1", "zero", "six"], ["h2"], name="hs_clip"),
                  helper.make_node("Mul", ["c", "h2"], ["h3"], name="hs_mul"),
                  helper.make_node("Div", ["h3", "six"], ["act"], name="hs_div")]
    if after == "batchnorm":
        inits += [f32("gamma", rng.random(C) + 0.5), f32("beta", rng.standard_normal(C)),
                  f32("mean", rng.standard_normal(C) * 0.1), f32("var", rng.random(C) + 0.5)]
        nodes.append(helper.make_node("BatchNormalization", ["act", "gamma", "beta", "mean", "var"], ["y"],
                                      name="bn_after", epsilon=1e-3))
    else:
        inits += [f32("scale", rng.random(after_shape) + 0.5), f32("shift", rng.standard_normal(after_shape))]
        nodes += [helper.make_node("Mul", ["scale", "act"], ["m"], name="lab_scale"),   # the constant first
                  helper.make_node("Add", ["m", "shift"], ["y"], name="lab_shift")]
    graph = helper.make_graph(nodes, "affine_after", [helper.make_tensor_value_info("x", F, [1, 3, 9, 11])],
                              [helper.make_tensor_value_info("y", F, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _reference(model: onnx.ModelProto, feeds: dict) -> np.ndarray:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


CASES = [("hard_swish", "scalars", (1,)), ("relu", "batchnorm", ()), ("relu6", "scalars", (1, C, 1, 1)),
         ("relu", "scalars", ())]


@pytest.mark.parametrize("activation,after,shape", CASES)
def test_an_affine_after_the_activation_runs_in_the_convs_pass(activation, after, shape, compiled, rng):
    model = _model(rng, activation, after, shape)
    feeds = {"x": rng.standard_normal((1, 3, 9, 11)).astype(np.float32)}
    with Executor(from_model_proto(model)) as ex:
        (step,) = ex._steps                                  # one step: conv, activation and affine
        for _ in range(2):                                   # a second run: nothing held or freed twice
            got = ex.run(feeds).numpy_outputs()["y"]
        kept = ex.run(feeds, keep_intermediates=True).values   # the debugger: every tensor, as written
    assert step.node.domain == FUSED_DOMAIN
    assert step.node.op_type.endswith("+BatchNormalization" if after == "batchnorm" else "+Mul+Add"), step.node
    np.testing.assert_allclose(got, _reference(model, feeds), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(kept["y"], got, rtol=1e-5, atol=1e-5)
    assert "act" in kept


def test_a_new_shift_after_the_activation_is_read(compiled, rng):
    model = _model(rng, "hard_swish", "scalars", (1,))
    feeds = {"x": rng.standard_normal((1, 3, 9, 11)).astype(np.float32)}
    new_shift = np.array([-1.75], np.float32)
    with Executor(from_model_proto(model)) as ex:
        ex.run(feeds)
        ex.set_weight("shift", new_shift)
        got = ex.run(feeds).numpy_outputs()["y"]
    changed = model.__deepcopy__()
    next(i for i in changed.graph.initializer if i.name == "shift").CopyFrom(numpy_helper.from_array(new_shift, "shift"))
    np.testing.assert_allclose(got, _reference(changed, feeds), rtol=1e-4, atol=1e-4)


def test_a_map_after_the_activation_is_not_per_channel_and_stays_a_node(rng):
    model = _model(rng, "relu", "scalars", (1, 1, 9, 11))   # varies along the spatial axes
    feeds = {"x": rng.standard_normal((1, 3, 9, 11)).astype(np.float32)}
    with Executor(from_model_proto(model)) as ex:
        kinds = [s.node.op_type for s in ex._steps]
        got = ex.run(feeds).numpy_outputs()["y"]
    assert kinds[0] == "Conv+Relu" and "Mul" in kinds, kinds
    np.testing.assert_allclose(got, _reference(model, feeds), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("activation,after,shape", [("relu", "batchnorm", ()), ("relu6", "scalars", (1, C, 1, 1))])
def test_on_the_fake_device(activation, after, shape, monkeypatch, rng):
    """The device path's epilogue (``xp``'s passes; the generated device epilogue does not take an
    affine after the activation) on the strict cupy stand-in: no implicit conversion."""
    install(monkeypatch)
    model = _model(rng, activation, after, shape)
    feeds = {"x": rng.standard_normal((1, 3, 9, 11)).astype(np.float32)}
    with Executor(from_model_proto(model), device="gpu") as ex:
        assert any(s.node.op_type.startswith("Conv+") and s.node.domain == FUSED_DOMAIN for s in ex._steps)
        got = ex.run(feeds).outputs["y"].get()
    np.testing.assert_allclose(got, _reference(model, feeds), rtol=1e-4, atol=1e-4)
