"""Fused Conv chains (engine/fuse.py ``_fuse_conv_chains``): Conv -> Relu, Conv -> Add ->
Relu (a ResNet's residual) and Conv -> Add run as one step, their epilogue in place on
the conv's output. Checked against onnxruntime on fresh random inputs, with the
compiled conv kernels and on the numpy path, over odd geometries (depthwise too);
groups, broadcasting residuals, intermediates read elsewhere or kept, ``plan="nodes"``
and failures keep the graph's own semantics."""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.kernels import native
from engine.executor import Executor
from engine.fuse import FUSED_DOMAIN
from engine.run_errors import KernelFailure
from fake_cupy import install
from partition.onnx_io import from_model_proto

F = TensorProto.FLOAT


@pytest.fixture(params=[False, True], ids=["numpy", "compiled"])
def compiled(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[bool]:
    """The compiled conv kernels (``native.py``), or the numpy path with them switched off."""
    on = bool(request.param)
    if on and not native.available():
        pytest.skip("extension not built")
    if not on:
        monkeypatch.setattr(native, "_lib", None)
    yield on


def _model(x_shape: tuple, w_shape: tuple, chain: str, *, bias: bool = True,
           res_shape: tuple | None = None, extra_outputs: tuple[str, ...] = (),
           rng: np.random.Generator, **attrs: Any) -> tuple[onnx.ModelProto, dict]:
    """x -> Conv(w, b) -> chain ("relu", "add", "add_relu", "radd_relu": residual first)."""
    w = rng.standard_normal(w_shape).astype(np.float32) * 0.3
    inits = [numpy_helper.from_array(w, "w")]
    conv_in = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(w_shape[0]).astype(np.float32), "b"))
        conv_in.append("b")
    nodes = [helper.make_node("Conv", conv_in, ["c"], name="conv", **attrs)]
    inputs = [helper.make_tensor_value_info("x", F, list(x_shape))]
    feeds = {"x": rng.standard_normal(x_shape).astype(np.float32)}
    last = "c"
    if "add" in chain:
        pair = ["r", "c"] if chain.startswith("r") else ["c", "r"]
        nodes.append(helper.make_node("Add", pair, ["a"], name="add"))
        inputs.append(helper.make_tensor_value_info("r", F, list(res_shape)))
        feeds["r"] = rng.standard_normal(res_shape).astype(np.float32)
        last = "a"
    if chain.endswith("relu"):
        nodes.append(helper.make_node("Relu", [last], ["y"], name="relu"))
        last = "y"
    outs = [helper.make_tensor_value_info(t, F, None) for t in (last, *extra_outputs)]
    graph = helper.make_graph(nodes, "fused_conv", inputs, outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model, feeds


def _check(model: onnx.ModelProto, feeds: dict, fused: bool, **opts: Any) -> Executor:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in model.graph.output]
    expected = dict(zip(names, sess.run(None, feeds)))
    with Executor(from_model_proto(model), **opts) as ex:
        ex.run(feeds)
        got = ex.run(feeds).outputs  # a second run: nothing of the first was held or freed twice
        steps = [s.node for s in ex._steps]
    for name in names:
        np.testing.assert_allclose(np.asarray(got[name]), expected[name], rtol=1e-4, atol=1e-4)
    assert any(n.domain == FUSED_DOMAIN for n in steps) == fused, [n.name for n in steps]
    return ex


def _out_shape(x_shape: tuple, w_shape: tuple, strides: list, pads: list, dil: list) -> tuple:
    sp = [(x_shape[2 + i] + pads[i] + pads[i + 2] - (w_shape[2 + i] - 1) * dil[i] - 1) // strides[i] + 1
          for i in range(2)]
    return (x_shape[0], w_shape[0], *sp)


@pytest.mark.parametrize("chain", ["relu", "add_relu", "radd_relu", "add"])
@pytest.mark.parametrize("geom", [
    # (x shape, w shape, strides, pads, dilations, group)
    ((1, 8, 30, 30), (16, 8, 3, 3), [1, 1], [1, 1, 1, 1], [1, 1], 1),      # row bands
    ((2, 6, 33, 31), (16, 6, 3, 3), [2, 2], [1, 0, 2, 1], [1, 1], 1),      # stride 2, odd pads, N=2
    ((1, 3, 40, 40), (16, 3, 7, 7), [2, 2], [3, 3, 3, 3], [1, 1], 1),      # the 7x7 stem
    ((1, 16, 24, 24), (32, 16, 1, 1), [1, 1], [0, 0, 0, 0], [1, 1], 1),    # 1x1
    ((1, 32, 7, 7), (64, 32, 3, 3), [1, 1], [1, 1, 1, 1], [1, 1], 1),      # small map: channel slices
    ((1, 4, 21, 19), (8, 4, 3, 3), [1, 1], [2, 2, 2, 2], [2, 2], 1),       # dilated
    ((1, 8, 20, 20), (8, 4, 3, 3), [1, 1], [1, 1, 1, 1], [1, 1], 2),       # groups
    ((1, 8, 20, 20), (8, 1, 3, 3), [2, 2], [1, 1, 1, 1], [1, 1], 8),       # depthwise
])
def test_fused_chain_matches_onnxruntime(chain: str, geom: tuple, compiled: bool,
                                         rng: np.random.Generator) -> None:
    xs, ws, strides, pads, dil, group = geom
    res = _out_shape(xs, ws, strides, pads, dil)
    for bias in (True, False):
        model, feeds = _model(xs, ws, chain, bias=bias, res_shape=res, rng=rng, strides=strides,
                              pads=pads, dilations=dil, group=group)
        _check(model, feeds, fused=True)


def test_a_broadcasting_residual_runs_as_written(compiled: bool, rng: np.random.Generator) -> None:
    """Add(conv, r) with r of shape (1, M, 1, 1): not the conv's shape, so the step
    runs the nodes as written (numpy broadcasting), the result is the graph's."""
    model, feeds = _model((1, 4, 12, 12), (8, 4, 3, 3), "add_relu", res_shape=(1, 8, 1, 1),
                          rng=rng, pads=[1, 1, 1, 1])
    _check(model, feeds, fused=True)


def test_an_intermediate_read_elsewhere_is_not_fused(rng: np.random.Generator) -> None:
    """The conv's output is also a graph output: the chain stays as written."""
    model, feeds = _model((1, 4, 12, 12), (8, 4, 3, 3), "relu", extra_outputs=("c",), rng=rng,
                          pads=[1, 1, 1, 1])
    _check(model, feeds, fused=False)


def test_plan_nodes_and_kept_intermediates_see_every_node(rng: np.random.Generator) -> None:
    model, feeds = _model((1, 4, 12, 12), (8, 4, 3, 3), "add_relu", res_shape=(1, 8, 12, 12),
                          rng=rng, pads=[1, 1, 1, 1])
    _check(model, feeds, fused=False, plan="nodes")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with Executor(from_model_proto(model)) as ex:
        res = ex.run(feeds, keep_intermediates=True)
    assert {"c", "a", "y"} <= set(res.values)
    np.testing.assert_allclose(res.values["y"], sess.run(None, feeds)[0], rtol=1e-4, atol=1e-4)
    # the Add's own output, before Relu (it has negative values): the nodes ran as written
    np.testing.assert_allclose(res.values["a"], res.values["c"] + feeds["r"], rtol=1e-6)
    assert (res.values["a"] < 0).any()


def test_the_residual_input_is_not_written(compiled: bool, rng: np.random.Generator) -> None:
    model, feeds = _model((1, 4, 16, 16), (8, 4, 3, 3), "add_relu", res_shape=(1, 8, 16, 16),
                          rng=rng, pads=[1, 1, 1, 1])
    before = feeds["r"].copy()
    _check(model, feeds, fused=True)
    np.testing.assert_array_equal(feeds["r"], before)


def test_a_failure_names_the_node_that_failed(rng: np.random.Generator) -> None:
    """A residual the Add cannot broadcast: the error names 'add', not the fused step."""
    model, feeds = _model((1, 4, 12, 12), (8, 4, 3, 3), "add_relu", res_shape=(1, 8, 5, 5),
                          rng=rng, pads=[1, 1, 1, 1])
    with Executor(from_model_proto(model)) as ex:
        assert any(s.node.domain == FUSED_DOMAIN for s in ex._steps)
        with pytest.raises(KernelFailure) as info:
            ex.run(feeds)
    assert info.value.node == "add" and info.value.op_type == "Add"
    assert "'add' (Add)" in str(info.value)


def test_per_node_times_give_the_chain_to_its_conv(rng: np.random.Generator) -> None:
    """Per-node times (the app's time colouring) name the graph's own nodes, every one of
    them: the fused step's time is the conv's (the add and the relu ride in its pass: 0);
    a chain named after none of its nodes (a hard swish) shares its time equally."""
    model, feeds = _model((1, 4, 12, 12), (8, 4, 3, 3), "add_relu", res_shape=(1, 8, 12, 12),
                          rng=rng, pads=[1, 1, 1, 1])
    with Executor(from_model_proto(model)) as ex:
        run = ex.run(feeds)
        (step,) = ex._steps
    seconds = run.node_seconds
    assert set(seconds) == {"conv", "add", "relu"}
    assert seconds["conv"] > 0 and seconds["add"] == seconds["relu"] == 0.0
    assert step.node.name == "conv" and seconds["conv"] == pytest.approx(sum(seconds.values()))
    from engine.executor import _share_fused_times
    from engine.fuse import Fused
    from partition.ir import Node
    parts = (Node("a", "Add", ("x", "k"), ("s",)), Node("c", "Clip", ("s",), ("y",)))
    times = {"a+swish": 0.5}
    _share_fused_times(times, {"a+swish": Fused(Node("a+swish", "HardSwish", ("x",), ("y",)), parts, None)})
    assert times == {"a": 0.25, "c": 0.25}


def test_fused_chain_on_the_fake_device(monkeypatch: pytest.MonkeyPatch,
                                        rng: np.random.Generator) -> None:
    """The generic (xp) epilogue on the strict cupy stand-in: no implicit conversion."""
    install(monkeypatch)
    model, feeds = _model((1, 4, 14, 14), (8, 4, 3, 3), "add_relu", res_shape=(1, 8, 7, 7),
                          rng=rng, pads=[1, 1, 1, 1], strides=[2, 2])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with Executor(from_model_proto(model), device="gpu") as ex:
        assert any(s.node.domain == FUSED_DOMAIN for s in ex._steps)
        got = ex.run(feeds).outputs["y"]
    np.testing.assert_allclose(got.get(), sess.run(None, feeds)[0], rtol=1e-4, atol=1e-4)


def test_the_conv_input_as_its_own_residual(compiled: bool, rng: np.random.Generator) -> None:
    """Relu(Conv(x) + x), a residual block without a projection: x is read twice by the
    fused step; its value is right and x is released once (a second run works too)."""
    w = numpy_helper.from_array((rng.standard_normal((6, 6, 3, 3)) * 0.3).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c", "x"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "self_residual", [helper.make_tensor_value_info("x", F, [1, 6, 20, 20])],
                              [helper.make_tensor_value_info("y", F, None)], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    feeds = {"x": rng.standard_normal((1, 6, 20, 20)).astype(np.float32)}
    _check(model, feeds, fused=True)


def _clip_model(bounds: tuple, *, opset: int = 17, bound_as: str = "initializer",
                rng: np.random.Generator) -> tuple[onnx.ModelProto, dict]:
    """x -> Conv -> Clip(lo, hi) (Relu6 when (0, 6)); a bound of None is left out. Under
    opset 6 the bounds are attributes; ``bound_as="input"`` makes them graph inputs."""
    model, feeds = _model((1, 4, 9, 9), (6, 4, 3, 3), "", rng=rng, pads=[1, 1, 1, 1])
    g = model.graph
    lo, hi = bounds
    if opset < 11:
        attrs = {k: v for k, v in (("min", lo), ("max", hi)) if v is not None}
        g.node.append(helper.make_node("Clip", ["c"], ["y"], name="clip", **attrs))
    else:
        names = []
        for name, v in (("lo", lo), ("hi", hi)):
            if v is None:
                names.append("")
                continue
            names.append(name)
            value = np.array(v, dtype=np.float32)
            if bound_as == "input":
                g.input.append(helper.make_tensor_value_info(name, F, []))
                feeds[name] = value
            else:
                g.initializer.append(numpy_helper.from_array(value, name))
        while names and not names[-1]:
            names.pop()
        g.node.append(helper.make_node("Clip", ["c", *names], ["y"], name="clip"))
    del g.output[:]
    g.output.append(helper.make_tensor_value_info("y", F, None))
    del model.opset_import[:]
    model.opset_import.append(helper.make_opsetid("", opset))
    return model, feeds


@pytest.mark.parametrize("bounds", [(0.0, 6.0), (-0.5, None), (None, 0.25), (1.0, -1.0)],
                         ids=["relu6", "min-only", "max-only", "min-over-max"])
def test_conv_then_clip_is_one_step_matching_onnxruntime(bounds, compiled, rng):
    """Relu6 (MobileNet's, PP-OCR's) and other constant-bound Clips after a Conv run as the
    conv's in-place epilogue, as ONNX computes Clip (min over max gives max)."""
    model, feeds = _clip_model(bounds, rng=rng)
    _check(model, feeds, fused=True)


def test_an_opset_6_clip_with_attribute_bounds_fuses_too(rng):
    model, feeds = _clip_model((0.0, 6.0), opset=6, rng=rng)
    del model.graph.node[0].attribute[:]   # Conv-1 has the same attributes; pads as default 0
    _check(model, feeds, fused=True)


def test_a_clip_whose_bounds_are_run_inputs_stays_as_written(rng):
    model, feeds = _clip_model((0.0, 6.0), bound_as="input", rng=rng)
    _check(model, feeds, fused=False)


def test_a_new_clip_bound_reaches_the_fused_step(rng):
    """The bounds stay the fused step's inputs: ``set_weight`` on one takes effect."""
    model, feeds = _clip_model((0.0, 6.0), rng=rng)
    with Executor(from_model_proto(model)) as ex:
        assert any(s.node.op_type == "Conv+Clip" for s in ex._steps)
        ex.set_weight("hi", np.array(0.1, dtype=np.float32))
        got = ex.run(feeds).outputs["y"]
    assert float(np.max(got)) <= 0.1 + 1e-7 and float(np.max(got)) > 0.0


def _bn_model(after: str, rng: np.random.Generator) -> tuple[onnx.ModelProto, dict]:
    """x -> Conv -> BatchNormalization -> ``after`` ("" | "relu" | "add_relu" | "clip")."""
    model, feeds = _model((2, 4, 7, 7), (6, 4, 3, 3), "", rng=rng, pads=[1, 1, 1, 1])
    g = model.graph
    params = {"scale": rng.uniform(0.5, 2.0, 6), "bias": rng.standard_normal(6),
              "mean": rng.standard_normal(6), "var": rng.uniform(0.1, 3.0, 6)}
    g.initializer.extend(numpy_helper.from_array(v.astype(np.float32), k) for k, v in params.items())
    g.node.append(helper.make_node("BatchNormalization", ["c", *params], ["n"], name="bn", epsilon=1e-3))
    last = "n"
    if after.startswith(("add", "sum")):   # a two-input Sum: Caffe2's residual
        g.node.append(helper.make_node("Sum" if after.startswith("sum") else "Add", ["n", "r"], ["a"], name="add"))
        g.input.append(helper.make_tensor_value_info("r", F, [2, 6, 7, 7]))
        feeds["r"] = rng.standard_normal((2, 6, 7, 7)).astype(np.float32)
        last = "a"
    if after.endswith("relu"):
        g.node.append(helper.make_node("Relu", [last], ["y"], name="relu"))
        last = "y"
    elif after == "clip":
        g.initializer.extend([numpy_helper.from_array(np.array(0, np.float32), "lo"),
                              numpy_helper.from_array(np.array(6, np.float32), "hi")])
        g.node.append(helper.make_node("Clip", [last, "lo", "hi"], ["y"], name="clip"))
        last = "y"
    del g.output[:]
    g.output.append(helper.make_tensor_value_info(last, F, None))
    return model, feeds


@pytest.mark.parametrize("after", ["", "relu", "add_relu", "sum_relu", "clip"])
def test_a_batch_normalization_after_a_conv_folds_into_its_epilogue(after, compiled, rng):
    """Conv -> BatchNormalization (PP-OCR's 35 in its classifier) runs as one step, the
    normalisation as ``* s + t`` per channel on the conv's output, then Add (or a two-input
    Sum, as Caffe2 wrote residuals) / Relu / Clip."""
    model, feeds = _bn_model(after, rng)
    ex = _check(model, feeds, fused=True)
    (op,) = [s.node.op_type for s in ex._steps if s.node.domain == FUSED_DOMAIN]
    assert op == {"": "Conv+BatchNormalization", "relu": "Conv+BatchNormalization+Relu",
                  "add_relu": "Conv+BatchNormalization+Add+Relu", "sum_relu": "Conv+BatchNormalization+Sum+Relu",
                  "clip": "Conv+BatchNormalization+Clip"}[after]


def test_new_normalisation_statistics_reach_the_fused_step(rng):
    """The BatchNormalization's parameters stay the step's inputs: ``set_weight`` on the
    running mean changes the result as onnxruntime computes it with the new mean."""
    model, feeds = _bn_model("", rng)
    mean = rng.standard_normal(6).astype(np.float32)
    with Executor(from_model_proto(model)) as ex:
        ex.set_weight("mean", mean)
        got = ex.run(feeds).outputs["n"]
    for init in model.graph.initializer:
        if init.name == "mean":
            init.CopyFrom(numpy_helper.from_array(mean, "mean"))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(got, sess.run(None, feeds)[0], rtol=1e-4, atol=1e-4)


def _pad_model(amounts: list[int], *, fill: float = 0.0, mode: str = "constant", group: int = 1,
               conv_pads: tuple | str = (0, 1, 1, 0), strides: tuple = (2, 2), pads_as: str = "initializer",
               opset: int = 17, then_clip: bool = True,
               rng: np.random.Generator) -> tuple[onnx.ModelProto, dict]:
    """x -> Pad(amounts, fill) -> Conv(pads=conv_pads) [-> Clip(0, 6)]: MobileNetV2's strided
    (depthwise) convs as transformers exports them."""
    c_in = 8
    w = (rng.standard_normal((8, c_in // group, 3, 3)) * 0.3).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w")]
    inputs = [helper.make_tensor_value_info("x", F, [1, c_in, 13, 12])]
    feeds = {"x": rng.standard_normal((1, c_in, 13, 12)).astype(np.float32)}
    if opset < 11:
        pad = helper.make_node("Pad", ["x"], ["p"], name="pad", pads=amounts, mode=mode, value=fill)
    else:
        value = np.array(amounts, np.int64)
        if pads_as == "input":
            inputs.append(helper.make_tensor_value_info("amounts", TensorProto.INT64, [8]))
            feeds["amounts"] = value
        else:
            inits.append(numpy_helper.from_array(value, "amounts"))
        inits.append(numpy_helper.from_array(np.array(fill, np.float32), "fill"))
        pad = helper.make_node("Pad", ["x", "amounts", "fill"], ["p"], name="pad", mode=mode)
    padding = {"auto_pad": conv_pads} if isinstance(conv_pads, str) else {"pads": list(conv_pads)}
    nodes = [pad, helper.make_node("Conv", ["p", "w"], ["c"], name="conv", group=group,
                                   strides=list(strides), **padding)]
    last = "c"
    if then_clip:
        inits += [numpy_helper.from_array(np.array(0, np.float32), "lo"),
                  numpy_helper.from_array(np.array(6, np.float32), "hi")]
        nodes.append(helper.make_node("Clip", ["c", "lo", "hi"], ["y"], name="clip"))
        last = "y"
    graph = helper.make_graph(nodes, "pad_conv", inputs, [helper.make_tensor_value_info(last, F, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model, feeds


@pytest.mark.parametrize("amounts", [[0, 0, 0, 0, 0, 0, 1, 1], [0, 0, 1, 2, 0, 0, 0, 1], [0, 0, 3, 0, 0, 0, 0, 2]])
@pytest.mark.parametrize("group", [1, 8])
@pytest.mark.parametrize("then_clip", [True, False])
def test_a_zero_pad_before_a_conv_folds_into_its_pads(amounts, group, then_clip, compiled, rng, monkeypatch):
    """An explicit zero Pad on the spatial axes (MobileNetV2's 52) becomes the conv's own
    padding: one step, no padded copy, the result onnxruntime gives."""
    import engine.fuse as fuse_module

    def never(*_args, **_kw):
        raise AssertionError("the fused step fell back to the nodes as written")
    monkeypatch.setattr(fuse_module, "as_written", never)
    model, feeds = _pad_model(amounts, group=group, then_clip=then_clip, rng=rng)
    ex = _check(model, feeds, fused=True)
    kinds = [s.node.op_type for s in ex._steps]
    assert kinds == ["Pad+Conv+Clip" if then_clip else "Pad+Conv"]


@pytest.mark.parametrize("group", [1, 8])
def test_a_zero_pad_before_a_valid_conv_folds_too(group, compiled, rng, monkeypatch):
    """transformers' EfficientNet pads each strided depthwise conv explicitly, then convolves
    with ``auto_pad=VALID`` (no padding of its own): the Pad folds in as the conv's pads."""
    import engine.fuse as fuse_module

    def never(*_args, **_kw):
        raise AssertionError("the fused step fell back to the nodes as written")
    monkeypatch.setattr(fuse_module, "as_written", never)
    model, feeds = _pad_model([0, 0, 0, 0, 0, 0, 1, 1], group=group, conv_pads="VALID", then_clip=False, rng=rng)
    ex = _check(model, feeds, fused=True)
    assert [s.node.op_type for s in ex._steps] == ["Pad+Conv"]


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
def test_a_zero_pad_before_a_same_conv_stays_as_written(auto_pad, rng):
    model, feeds = _pad_model([0, 0, 0, 0, 0, 0, 1, 1], conv_pads=auto_pad, then_clip=False, rng=rng)
    _check(model, feeds, fused=False)


def test_an_opset_2_pad_with_attribute_amounts_folds_too(rng):
    model, feeds = _pad_model([0, 0, 1, 1, 0, 0, 1, 1], opset=10, then_clip=False, rng=rng)
    _check(model, feeds, fused=True)


@pytest.mark.parametrize("case", ["fill", "reflect", "batch axis", "negative", "run input"])
def test_a_pad_that_is_not_zeros_on_the_spatial_axes_stays_as_written(case, rng):
    kw: dict[str, Any] = {"then_clip": False}
    amounts = [0, 0, 1, 1, 0, 0, 1, 1]
    if case == "fill":
        kw["fill"] = 1.5
    elif case == "reflect":
        kw["mode"] = "reflect"
    elif case == "batch axis":
        amounts = [1, 0, 1, 1, 0, 0, 1, 1]
    elif case == "negative":
        amounts = [0, 0, -1, 1, 0, 0, 1, 1]
    else:
        kw["pads_as"] = "input"
    model, feeds = _pad_model(amounts, rng=rng, **kw)
    _check(model, feeds, fused=False)


def test_new_pad_amounts_reach_the_fused_step(rng):
    """The Pad's amounts stay the step's inputs: after ``set_weight`` the nodes run as
    written, with the new amounts, as onnxruntime computes them."""
    model, feeds = _pad_model([0, 0, 1, 1, 0, 0, 1, 1], then_clip=False, rng=rng)
    new = np.array([0, 0, 2, 0, 0, 0, 0, 3], np.int64)
    model2, _ = _pad_model([0, 0, 1, 1, 0, 0, 1, 1], then_clip=False, rng=rng)
    model2.graph.initializer[0].CopyFrom(model.graph.initializer[0])
    model2.graph.initializer[1].CopyFrom(numpy_helper.from_array(new, "amounts"))
    want = ort.InferenceSession(model2.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    with Executor(from_model_proto(model)) as ex:
        assert [s.node.op_type for s in ex._steps] == ["Pad+Conv"]
        ex.run(feeds)
        ex.set_weight("amounts", new)
        got = ex.run(feeds).outputs["c"]
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)


def test_on_a_device_an_asymmetric_folded_pad_keeps_cudnns_symmetric_pads(rng, monkeypatch):
    """cuDNN takes symmetric pads only: on a (fake) GPU, a Pad whose sum with the conv's
    pads is lopsided is padded first and the conv keeps its own pads, so the library
    path still takes it; the result is onnxruntime's."""
    from engine.kernels import device
    install(monkeypatch)
    asked: list[list[int]] = []
    real = device.conv_library

    def spy(xp, x, w, b, pads, *rest):
        asked.append(list(pads))
        return real(xp, x, w, b, pads, *rest)
    monkeypatch.setattr(device, "conv_library", spy)
    import engine.fuse as fuse_module

    def never(*_args, **_kw):
        raise AssertionError("the fused step fell back to the nodes as written")
    monkeypatch.setattr(fuse_module, "as_written", never)
    model, feeds = _pad_model([0, 0, 0, 0, 0, 0, 1, 1], conv_pads=(0, 0, 0, 0), then_clip=True, rng=rng)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    with Executor(from_model_proto(model), device="gpu") as ex:
        assert [s.node.op_type for s in ex._steps] == ["Pad+Conv+Clip"]
        got = ex.run(feeds).numpy_outputs()["y"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert asked and all(p[:2] == p[2:] for p in asked), asked


def test_the_normalisation_is_prepared_once_per_parameter_version(rng, monkeypatch):
    """The folded BatchNormalization's (s, t) is weight preparation: computed once, and
    again only after set_weight replaces a parameter (on a device: five launches a conv)."""
    import engine.fuse as fuse_module
    calls = []
    real = fuse_module._bn_affine
    monkeypatch.setattr(fuse_module, "_bn_affine", lambda *a: calls.append(1) or real(*a))
    model, feeds = _bn_model("relu", rng)
    with Executor(from_model_proto(model)) as ex:
        for _ in range(3):
            ex.run(feeds)
        assert len(calls) == 1
        ex.set_weight("mean", np.zeros(6, np.float32))
        ex.run(feeds)
        ex.run(feeds)
    assert len(calls) == 2


@pytest.mark.parametrize("geom", [
    # (x shape, w shape, strides, pads, dilations, group)
    ((1, 8, 40, 1), (6, 8, 5, 1), [1, 1], [0, 0, 0, 0], [1, 1], 1),     # Magika's 5x1 column conv
    ((2, 4, 33, 1), (6, 2, 3, 1), [2, 1], [1, 0, 2, 0], [2, 1], 2),     # stride, pads, dilation, groups
    ((1, 4, 17, 1), (4, 1, 3, 1), [1, 1], [1, 0, 1, 0], [1, 1], 4),     # depthwise
])
def test_a_column_conv_runs_as_a_row_conv_matching_onnxruntime(geom, compiled, rng):
    """A conv over a one-wide map with a one-wide kernel is the same conv along a row
    (H and W swapped by reshapes): the compiled columns walk rows fast."""
    x_shape, w_shape, strides, pads, dil, group = geom
    model, feeds = _model(x_shape, w_shape, "relu", rng=rng, strides=strides, pads=pads, dilations=dil,
                          group=group)
    _check(model, feeds, fused=True)


@pytest.mark.cpu_only(reason="the banded columns are the compiled numpy path's")
@pytest.mark.parametrize("geom", [
    # (x shape, w shape, strides, pads, dilations, group)
    ((1, 8, 30, 30), (16, 8, 3, 3), [1, 1], [1, 1, 1, 1], [1, 1], 1),
    ((2, 6, 33, 31), (16, 6, 3, 3), [2, 2], [1, 0, 2, 1], [1, 1], 1),      # stride 2, odd pads, N=2
    ((1, 4, 21, 19), (8, 4, 3, 3), [1, 1], [2, 2, 2, 2], [2, 2], 1),       # dilated
    ((1, 8, 20, 20), (8, 4, 3, 3), [1, 1], [1, 1, 1, 1], [1, 1], 2),       # groups
])
def test_large_columns_are_made_a_band_of_rows_at_a_time(geom, rng, monkeypatch):
    """Columns over the band size (PP-OCR det's 66 MB) are made and multiplied a band of
    output rows at a time; forced here with a tiny band, the result is onnxruntime's."""
    from engine.kernels import nn as nn_kernels
    if not native.available():
        pytest.skip("extension not built")
    monkeypatch.setattr(nn_kernels, "_BAND_BYTES", 2048)
    bands = []
    real = nn_kernels._conv_banded
    monkeypatch.setattr(nn_kernels, "_conv_banded", lambda *a: bands.append(1) or real(*a))
    x_shape, w_shape, strides, pads, dil, group = geom
    model, feeds = _model(x_shape, w_shape, "add_relu", rng=rng, strides=strides, pads=pads, dilations=dil,
                          group=group, res_shape=_out_shape(x_shape, w_shape, strides, pads, dil))
    _check(model, feeds, fused=True)
    assert bands, "the banded path did not run"


@pytest.mark.cpu_only(reason="the banded columns are the compiled numpy path's")
def test_columns_over_the_whole_columns_cap_are_still_banded(rng, monkeypatch):
    """The cap on whole im2col columns is not the banded path's (a band is all it holds): a conv
    whose columns would pass it (IS-Net's 1.2 GB, forced here with a tiny cap) is banded, not
    sent to one numpy matmul per kernel position."""
    from engine.kernels import nn as nn_kernels
    if not native.available():
        pytest.skip("extension not built")
    monkeypatch.setattr(nn_kernels, "_BAND_BYTES", 2048)
    monkeypatch.setattr(nn_kernels, "_IM2COL_BYTES", 4096)
    bands = []
    real = nn_kernels._conv_banded
    monkeypatch.setattr(nn_kernels, "_conv_banded", lambda *a: bands.append(1) or real(*a))
    model, feeds = _model((1, 8, 20, 20), (6, 8, 3, 3), "relu", rng=rng, pads=[1, 1, 1, 1])
    _check(model, feeds, fused=True)
    assert bands, "the banded path did not run"


def test_the_row_columns_entry_refuses_what_does_not_agree():
    if not native.available():
        pytest.skip("extension not built")
    x = np.zeros((1, 2, 5, 5), np.float32)
    geometry = (3, 3, 1, 1, 1, 1, 1, 1, 5, 5)
    for cols, img, r0, r1 in [(np.zeros((18, 10), np.float32), 1, 0, 2),    # no image 1
                              (np.zeros((18, 10), np.float32), 0, 3, 2),    # r0 past r1
                              (np.zeros((18, 10), np.float32), 0, 4, 6),    # past the last row
                              (np.zeros((18, 15), np.float32), 0, 0, 2),    # cols of 3 rows for 2
                              (np.zeros((17, 10), np.float32), 0, 0, 2)]:   # a K that is not C kh kw
        with pytest.raises(ValueError, match="do not agree"):
            native._lib.im2col_rows_f32(x, cols, geometry, img, r0, r1)


@pytest.mark.cpu_only("the host plan: a device runs conv_fused's device path")
def test_a_chain_is_planned_once_per_input_shape_and_weight_version(rng, monkeypatch):
    """On the host a fused chain's call is decided once (``nn.conv_fused_plan``) and then
    runs as planned: a new input shape or a weight ``set_weight`` replaced plans again, and
    every result matches onnxruntime with the weights of its time."""
    import engine.fuse as fuse
    if not native.available():
        pytest.skip("extension not built")
    made: list[tuple] = []
    real = fuse.conv_fused_plan

    def counted(x_shape, *args, **kwargs):
        made.append(x_shape)
        return real(x_shape, *args, **kwargs)
    monkeypatch.setattr(fuse, "conv_fused_plan", counted)
    model, _ = _model((1, 4, 9, 9), (6, 4, 3, 3), "add_relu", res_shape=(1, 6, 9, 9), rng=rng, pads=[1, 1, 1, 1])
    model.graph.input[0].type.tensor_type.shape.dim[2].dim_param = "h"   # a dynamic height
    model.graph.input[1].type.tensor_type.shape.dim[2].dim_param = "h"

    def oracle(feeds, w=None):
        if w is not None:
            for init in model.graph.initializer:
                if init.name == "w":
                    init.CopyFrom(numpy_helper.from_array(w, "w"))
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return sess.run(None, feeds)[0]

    def feeds(h):
        return {"x": rng.standard_normal((1, 4, h, 9)).astype(np.float32),
                "r": rng.standard_normal((1, 6, h, 9)).astype(np.float32)}
    with Executor(from_model_proto(model)) as ex:
        assert any(s.node.domain == FUSED_DOMAIN for s in ex._steps)
        for h in (9, 9, 9):
            f = feeds(h)
            np.testing.assert_allclose(ex.run(f).outputs["y"], oracle(f), rtol=1e-4, atol=1e-4)
        assert made == [(1, 4, 9, 9)]
        f = feeds(5)
        np.testing.assert_allclose(ex.run(f).outputs["y"], oracle(f), rtol=1e-4, atol=1e-4)
        assert made == [(1, 4, 9, 9), (1, 4, 5, 9)]
        w = rng.standard_normal((6, 4, 3, 3)).astype(np.float32)
        ex.set_weight("w", w)
        f = feeds(5)
        np.testing.assert_allclose(ex.run(f).outputs["y"], oracle(f, w), rtol=1e-4, atol=1e-4)
        assert made == [(1, 4, 9, 9), (1, 4, 5, 9), (1, 4, 5, 9)]


def test_a_conv_without_bias_then_add_takes_the_compiled_epilogue(rng, monkeypatch):
    """A conv without a bias, then Add, has nothing per channel to apply: its epilogue is the
    residual alone, in the compiled pass -- not a failure that sends the chain back to the nodes
    as written (a misspelt call did that once, silently: the results were still right)."""
    import engine.fuse as fuse
    if not native.available():
        pytest.skip("extension not built")
    written: list[str] = []
    real = fuse.as_written

    def counted(xp, parts, *args):
        written.append(parts[0].name)
        return real(xp, parts, *args)
    monkeypatch.setattr(fuse, "as_written", counted)
    model, feeds = _model((1, 6, 12, 12), (6, 6, 3, 3), "add", bias=False, res_shape=(1, 6, 12, 12),
                          rng=rng, pads=[1, 1, 1, 1])
    _check(model, feeds, fused=True)
    assert written == []
