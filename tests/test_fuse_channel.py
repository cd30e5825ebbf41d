"""Per-channel affine chains (engine/fuse_channel.py): BatchNormalization, then Mul / Add by
per-channel vectors (Caffe2's scale layer, read through Unsqueeze), then Relu, as one step.
Checked against onnxruntime on fresh random inputs: the compiled pass and numpy's, vectors that
broadcast otherwise, ``set_weight``, a caller's own kernel, the fake device, and the ONNX model
zoo's DenseNet-121 as the onnx wheel ships it (its weights drawn as the benchmark draws them)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.executor import Executor
from engine.fuse import FUSED_DOMAIN
from engine.kernels import kernel_for, native
from fake_cupy import install
from partition.onnx_io import from_model_proto

F = TensorProto.FLOAT
C = 6


def _model(rng: np.random.Generator, *, mul_shape=(C, 1, 1), add_shape=(1, C, 1, 1), relu=True,
           opset: int = 9, extra_outputs: tuple[str, ...] = ()) -> tuple[onnx.ModelProto, dict]:
    """x -> BatchNormalization -> Mul(Unsqueeze(m)) -> Add(a) -> Relu -> y."""
    p = {"s": rng.uniform(0.5, 1.5, C), "b": rng.normal(0, 0.3, C), "mean": rng.normal(0, 0.3, C),
         "var": rng.uniform(0.5, 1.5, C), "m": rng.uniform(0.5, 1.5, mul_shape),
         "a": rng.normal(0, 0.3, add_shape)}
    inits = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in p.items()]
    unsq = ([helper.make_node("Unsqueeze", ["m"], ["mu"], name="unsq", axes=[0])] if opset < 13 else
            [helper.make_node("Unsqueeze", ["m", "ax"], ["mu"], name="unsq")])
    if opset >= 13:
        inits.append(numpy_helper.from_array(np.array([0], np.int64), "ax"))
    nodes = unsq + [helper.make_node("BatchNormalization", ["x", "s", "b", "mean", "var"], ["n"], name="bn",
                                     epsilon=1e-3),
                    helper.make_node("Mul", ["n", "mu"], ["k"], name="mul"),
                    helper.make_node("Add", ["a", "k"], ["z" if relu else "y"], name="add")]
    if relu:
        nodes.append(helper.make_node("Relu", ["z"], ["y"], name="relu"))
    graph = helper.make_graph(nodes, "affine", [helper.make_tensor_value_info("x", F, [2, C, 9, 7])],
                              [helper.make_tensor_value_info(t, F, None) for t in ("y", *extra_outputs)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    return model, {"x": rng.standard_normal((2, C, 9, 7)).astype(np.float32)}


def _expected(model: onnx.ModelProto, feeds: dict) -> dict:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in model.graph.output], sess.run(None, feeds)))


def _fused(ex: Executor) -> list[str]:
    return [s.node.op_type for s in ex._steps if s.node.domain == FUSED_DOMAIN]


@pytest.fixture
def as_written(monkeypatch) -> list:
    """Calls of the fused step's fallback (the nodes run as written), counted."""
    import engine.fuse_channel as fc
    calls: list = []
    real = fc.as_written

    def spy(*args: Any) -> tuple:
        calls.append(args[1])
        return real(*args)
    monkeypatch.setattr(fc, "as_written", spy)
    return calls


@pytest.mark.parametrize("path", ["compiled", "numpy"])
@pytest.mark.parametrize("relu", [True, False])
@pytest.mark.parametrize("opset", [9, 17])
def test_the_chain_is_one_step_matching_onnxruntime(path, relu, opset, rng, monkeypatch, as_written):
    if path == "numpy":
        monkeypatch.setattr(native, "_lib", None)
    elif not native.available():
        pytest.skip("extension not built")
    model, feeds = _model(rng, relu=relu, opset=opset)
    want = _expected(model, feeds)
    with Executor(from_model_proto(model)) as ex:
        assert _fused(ex) == ["BatchNormalization+Mul+Add" + ("+Relu" if relu else "")]
        for _ in range(2):   # the fold is kept: a second run gives the same
            got = ex.run(feeds).outputs
            np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5, atol=1e-5)
        assert feeds["x"] is not got["y"]
    assert not as_written, "the fused step fell back to the nodes as written"


def test_a_vector_that_is_not_per_channel_runs_the_nodes_as_written(rng, as_written):
    """Add by a (1, 1, 9, 7) map broadcasts over space, not channels. As a weight its shape is
    known when binding: the chain ends before the Add. As a graph input of no declared shape it
    is known only when the step runs: the step runs the nodes as written."""
    model, feeds = _model(rng, add_shape=(1, 1, 9, 7))
    want = _expected(model, feeds)
    with Executor(from_model_proto(model)) as ex:
        assert _fused(ex) == ["BatchNormalization+Mul"]
        np.testing.assert_allclose(ex.run(feeds).outputs["y"], want["y"], rtol=1e-5, atol=1e-5)
    assert not as_written
    a = next(t for t in model.graph.initializer if t.name == "a")
    feeds["a"] = numpy_helper.to_array(a)
    model.graph.initializer.remove(a)
    model.graph.input.append(helper.make_tensor_value_info("a", F, None))
    with Executor(from_model_proto(model)) as ex:
        assert _fused(ex) == ["BatchNormalization+Mul+Add+Relu"]
        np.testing.assert_allclose(ex.run(feeds).outputs["y"], want["y"], rtol=1e-5, atol=1e-5)
    assert len(as_written) == 1


def test_a_replaced_weight_reaches_the_fused_step(rng):
    model, feeds = _model(rng)
    new_var = rng.uniform(2.0, 3.0, C).astype(np.float32)
    with Executor(from_model_proto(model)) as ex:
        ex.run(feeds)
        ex.set_weight("var", new_var)
        got = ex.run(feeds).outputs["y"]
    for t in model.graph.initializer:
        if t.name == "var":
            t.CopyFrom(numpy_helper.from_array(new_var, "var"))
    np.testing.assert_allclose(got, _expected(model, feeds)["y"], rtol=1e-5, atol=1e-5)


def test_an_intermediate_read_elsewhere_or_a_callers_own_kernel_leaves_the_chain(rng):
    model, feeds = _model(rng, extra_outputs=("k",))
    want = _expected(model, feeds)
    with Executor(from_model_proto(model)) as ex:
        assert _fused(ex) == ["BatchNormalization+Mul"]   # the chain stops where k leaves the graph
        got = ex.run(feeds).outputs
    for name in ("y", "k"):
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5)
    model, feeds = _model(rng)

    def mine(node: Any, opsets: Any) -> Any:   # a caller's own Relu: it must run, so no fusion
        if node.op_type == "Relu":
            return lambda xp, a, **_: (xp.maximum(a, 0) + 1.0,)
        return kernel_for(node.op_type, node.domain, opsets)
    with Executor(from_model_proto(model), kernels=mine) as ex:
        assert not _fused(ex)
        np.testing.assert_allclose(ex.run(feeds).outputs["y"], _expected(model, feeds)["y"] + 1.0,
                                   rtol=1e-5, atol=1e-5)


def test_a_conv_keeps_its_batch_normalization_and_relu(rng):
    """Conv -> BatchNormalization -> Relu is the conv chain's (its epilogue), not this fusion's."""
    w = numpy_helper.from_array(rng.standard_normal((C, 3, 3, 3)).astype(np.float32), "w")
    bn = [numpy_helper.from_array(rng.uniform(0.5, 1.5, C).astype(np.float32), k) for k in ("s", "b", "m", "v")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"], name="bn"),
             helper.make_node("Relu", ["n"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "cbr", [helper.make_tensor_value_info("x", F, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", F, None)], [w, *bn])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    feeds = {"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)}
    with Executor(from_model_proto(model)) as ex:
        assert _fused(ex) == ["Conv+BatchNormalization+Relu"]
        np.testing.assert_allclose(ex.run(feeds).outputs["y"], _expected(model, feeds)["y"],
                                   rtol=1e-4, atol=1e-4)


def test_the_chain_on_the_fake_device(monkeypatch, rng):
    """The xp passes on the strict cupy stand-in: no implicit host conversion."""
    install(monkeypatch)
    model, feeds = _model(rng)
    with Executor(from_model_proto(model), device="gpu") as ex:
        assert _fused(ex)
        got = ex.run(feeds).outputs["y"]
    np.testing.assert_allclose(got.get(), _expected(model, feeds)["y"], rtol=1e-5, atol=1e-5)


def test_the_model_zoo_densenet_fuses_its_caffe2_scale_layers(rng, as_written):
    """DenseNet-121 from the installed onnx wheel, its weights drawn as bench/zoo_weights.py draws
    them: every BatchNormalization -> Mul -> Add (-> Relu) is one step, and the output matches
    onnxruntime on a fresh random image."""
    light = Path(onnx.__file__).parent / "backend/test/data/light/light_densenet121.onnx"
    if not light.is_file():
        pytest.skip(f"this onnx wheel ships no {light.name}")
    sys.path.append(str(Path(__file__).resolve().parents[1] / "bench"))
    import zoo_weights  # noqa: PLC0415 - bench/ is not a package
    image = rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
    data = zoo_weights.calibrated(zoo_weights.materialize(light.read_bytes()), image)
    model = onnx.load_from_string(data)
    feeds = {"data_0": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}
    want = _expected(model, feeds)
    with Executor(from_model_proto(model)) as ex:
        fused = _fused(ex)
        got = ex.run(feeds).outputs
    assert sum("BatchNormalization+Mul+Add" in op for op in fused) >= 100, fused   # alone or a conv's epilogue
    assert not as_written
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-3, atol=1e-4)


def _conv_model(rng: np.random.Generator, add_shape=(1, C, 1, 1)) -> tuple[onnx.ModelProto, dict]:
    """x -> Conv -> BatchNormalization -> Mul(Unsqueeze(m)) -> Add(a) -> Relu: BN-Inception's block."""
    model, _ = _model(rng, add_shape=add_shape)
    g = model.graph
    g.initializer.append(numpy_helper.from_array(rng.standard_normal((C, 3, 3, 3)).astype(np.float32) * 0.3, "w"))
    g.node.insert(0, helper.make_node("Conv", ["img", "w"], ["x"], name="conv", pads=[1, 1, 1, 1]))
    del g.input[:]
    g.input.append(helper.make_tensor_value_info("img", F, [2, 3, 9, 7]))
    return model, {"img": rng.standard_normal((2, 3, 9, 7)).astype(np.float32)}


@pytest.mark.parametrize("path", ["compiled", "numpy"])
def test_after_a_conv_the_chain_is_the_convs_epilogue(path, rng, monkeypatch, as_written):
    if path == "numpy":
        monkeypatch.setattr(native, "_lib", None)
    elif not native.available():
        pytest.skip("extension not built")
    model, feeds = _conv_model(rng)
    with Executor(from_model_proto(model)) as ex:
        assert _fused(ex) == ["Conv+BatchNormalization+Mul+Add+Relu"]
        ex.run(feeds)
        got = ex.run(feeds).outputs["y"]
        ex.set_weight("m", rng.uniform(2.0, 3.0, (C, 1, 1)).astype(np.float32))  # read through the Unsqueeze
        new = ex.run(feeds).outputs["y"]
        m = ex._weights["m"]
    np.testing.assert_allclose(got, _expected(model, feeds)["y"], rtol=1e-4, atol=1e-4)
    for t in model.graph.initializer:
        if t.name == "m":
            t.CopyFrom(numpy_helper.from_array(np.asarray(m), "m"))
    np.testing.assert_allclose(new, _expected(model, feeds)["y"], rtol=1e-4, atol=1e-4)
    assert not as_written


def test_a_conv_chain_whose_vector_is_not_per_channel_runs_as_written(rng):
    """The Add's vector arrives as a graph input of no declared shape: known only at run time,
    where a (1, 1, 9, 7) map is not per-channel -- the conv chain runs its nodes as written."""
    model, feeds = _conv_model(rng, add_shape=(1, 1, 9, 7))
    a = next(t for t in model.graph.initializer if t.name == "a")
    feeds["a"] = numpy_helper.to_array(a)
    model.graph.initializer.remove(a)
    model.graph.input.append(helper.make_tensor_value_info("a", F, None))
    import engine.fuse as fuse_module
    calls: list = []
    real = fuse_module.as_written
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fuse_module, "as_written", lambda *a: calls.append(1) or real(*a))
        with Executor(from_model_proto(model)) as ex:
            assert _fused(ex) == ["Conv+BatchNormalization+Mul+Add+Relu"]
            got = ex.run(feeds).outputs["y"]
    np.testing.assert_allclose(got, _expected(model, feeds)["y"], rtol=1e-4, atol=1e-4)
    assert calls
