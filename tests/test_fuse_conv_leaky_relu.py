"""Conv -> [BatchNormalization] -> LeakyRelu [-> Max / Min against a scalar constant, or a
Clip] as one fused step (engine/fuse.py), the LeakyRelu and its bound in the conv's
epilogue: tf2onnx writes Keras' ``maximum(leaky_relu(conv), c)`` so (openWakeWord's
embedding model, 19 times). Checked against onnxruntime on fresh random inputs, with the
compiled epilogue and numpy's passes, and bit for bit against the same graph run node by
node; and the LeakyRelu kernel's max / min forms against ONNX's reference evaluator."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from engine.executor import Executor
from engine.fuse import FUSED_DOMAIN
from engine.kernels.activations import leaky_relu
from fake_cupy import install
from partition.onnx_io import from_model_proto

from test_fuse_conv import _check, _model, compiled  # noqa: F401 - the fixture

F = TensorProto.FLOAT


def _leaky_model(alpha: float, bound: str, rng: np.random.Generator, *, bn: bool = False,
                 bound_shape: tuple = ()) -> tuple[onnx.ModelProto, dict]:
    """x -> Conv -> [BatchNormalization] -> LeakyRelu(alpha) -> ``bound``: "" | "max" |
    "max_first" (the constant as Max's first input) | "min" | "clip"."""
    model, feeds = _model((2, 4, 9, 7), (6, 4, 3, 3), "", rng=rng, pads=[1, 1, 1, 1])
    g = model.graph
    last = "c"
    if bn:
        params = {"scale": rng.uniform(0.5, 2.0, 6), "bias": rng.standard_normal(6),
                  "mean": rng.standard_normal(6), "var": rng.uniform(0.1, 3.0, 6)}
        g.initializer.extend(numpy_helper.from_array(v.astype(np.float32), k) for k, v in params.items())
        g.node.append(helper.make_node("BatchNormalization", ["c", *params], ["n"], name="bn"))
        last = "n"
    g.node.append(helper.make_node("LeakyRelu", [last], ["l"], name="leaky", alpha=alpha))
    last = "l"
    if bound:
        value = np.full(bound_shape, -0.4 if bound.startswith("max") else 0.7, np.float32)
        if bound == "clip":
            g.initializer.extend([numpy_helper.from_array(np.array(-0.3, np.float32), "lo"),
                                  numpy_helper.from_array(np.array(0.9, np.float32), "hi")])
            g.node.append(helper.make_node("Clip", ["l", "lo", "hi"], ["y"], name="clip"))
        else:
            g.initializer.append(numpy_helper.from_array(value, "k"))
            pair = ["k", "l"] if bound == "max_first" else ["l", "k"]
            g.node.append(helper.make_node(bound[:3].capitalize(), pair, ["y"], name="bound"))
        last = "y"
    del g.output[:]
    g.output.append(helper.make_tensor_value_info(last, F, None))
    return model, feeds


def _fused_ops(ex: Executor) -> list[str]:
    return [s.node.op_type for s in ex._steps if s.node.domain == FUSED_DOMAIN]


def _node_by_node(model: onnx.ModelProto, feeds: dict) -> np.ndarray:
    with Executor(from_model_proto(model), plan="nodes") as ex:
        assert not _fused_ops(ex)
        return np.asarray(ex.run(feeds).outputs[model.graph.output[0].name])


@pytest.mark.parametrize("alpha", [0.2, 1.0, 1.7, -0.5], ids=["slope<1", "slope1", "slope>1", "negative"])
@pytest.mark.parametrize("bound", ["", "max", "max_first", "min", "clip"])
def test_conv_leaky_relu_and_its_bound_are_one_step(alpha, bound, compiled, rng):
    model, feeds = _leaky_model(alpha, bound, rng)
    ex = _check(model, feeds, fused=True)
    want = {"": "Conv+LeakyRelu", "clip": "Conv+LeakyRelu+Clip", "min": "Conv+LeakyRelu+Min"}.get(
        bound, "Conv+LeakyRelu+Max")
    assert _fused_ops(ex) == [want]
    with Executor(from_model_proto(model)) as fused:
        got = np.asarray(fused.run(feeds).outputs[model.graph.output[0].name])
    np.testing.assert_array_equal(got, _node_by_node(model, feeds))   # the same numbers, not just close


def test_with_a_batch_normalization_before_it(compiled, rng):
    model, feeds = _leaky_model(0.2, "max", rng, bn=True)
    ex = _check(model, feeds, fused=True)
    assert _fused_ops(ex) == ["Conv+BatchNormalization+LeakyRelu+Max"]


def test_nan_and_infinities_come_out_as_the_nodes_give_them(compiled, rng):
    """A NaN or infinite input reaches the conv's sums; the epilogue keeps them as the nodes do."""
    model, feeds = _leaky_model(0.2, "max", rng)
    feeds["x"][0, 0, 2, 3] = np.nan
    feeds["x"][1, 2, 4, 4] = np.inf
    feeds["x"][1, 3, 0, 0] = -np.inf
    with Executor(from_model_proto(model)) as ex:
        got = np.asarray(ex.run(feeds).outputs["y"])
    want = _node_by_node(model, feeds)
    assert np.isnan(want).any()
    np.testing.assert_array_equal(got, want)


def test_a_bound_that_is_not_a_scalar_stays_as_written(rng):
    """A per-channel Max would broadcast: the conv and LeakyRelu fuse, the Max runs after."""
    model, feeds = _leaky_model(0.2, "max", rng, bound_shape=(1, 6, 1, 1))
    ex = _check(model, feeds, fused=True)
    assert _fused_ops(ex) == ["Conv+LeakyRelu"]
    assert "bound" in [s.node.name for s in ex._steps]


def test_a_new_bound_reaches_the_fused_step(rng):
    """The Max's constant stays the step's input: ``set_weight`` on it takes effect."""
    model, feeds = _leaky_model(0.2, "max", rng)
    with Executor(from_model_proto(model)) as ex:
        ex.set_weight("k", np.array(0.5, np.float32))
        got = np.asarray(ex.run(feeds).outputs["y"])
    assert got.min() == np.float32(0.5)


def test_on_the_fake_device(monkeypatch, rng):
    """The numpy-pass epilogue written against ``xp`` on the strict cupy stand-in."""
    install(monkeypatch)
    model, feeds = _leaky_model(0.2, "max", rng)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    with Executor(from_model_proto(model), device="gpu") as ex:
        assert _fused_ops(ex) == ["Conv+LeakyRelu+Max"]
        got = ex.run(feeds).outputs["y"].get()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("alpha", [0.01, 0.5, 1.0, 3.0, 0.0, -2.0])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_the_leaky_relu_kernel_matches_the_reference_evaluator(alpha, dtype, rng):
    """Its max / min forms (and ``where`` past them) against ONNX's reference, with zeros of both
    signs, infinities and a NaN among the inputs. (The reference multiplies by a sign vector, so
    it gives -0.0 * alpha for -0.0 where ONNX's definition, ``x`` for ``x >= 0``, gives -0.0: the
    signs of zeros are compared for ``alpha >= 0`` only; an infinite alpha makes its sign NaN.)"""
    alpha = float(np.float32(alpha))   # as the attribute holds it
    x = (rng.standard_normal(64) * 10).astype(dtype)
    x[:6] = [0.0, -0.0, np.inf, -np.inf, np.nan, -1e-30]
    node = helper.make_node("LeakyRelu", ["x"], ["y"], alpha=alpha)
    tt = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", tt, [64])],
                              [helper.make_tensor_value_info("y", tt, [64])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    got = leaky_relu(np, x, alpha=alpha)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    if alpha >= 0:
        np.testing.assert_array_equal(np.signbit(got[:2]), np.signbit(want[:2]))


def test_an_infinite_or_negative_slope_follows_the_definition():
    """``x`` for ``x >= 0`` (zeros of both signs kept), ``alpha * x`` below: the ``where`` form."""
    x = np.array([0.0, -0.0, 2.0, -3.0, np.inf, -np.inf, np.nan], np.float32)
    for alpha in (float("inf"), -2.0, 0.0):
        with np.errstate(invalid="ignore"):
            want = np.array([v if v >= 0 or np.isnan(v) else np.float32(alpha) * v for v in x], np.float32)
            got = leaky_relu(np, x, alpha=alpha)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got[:2]), [False, True])
