"""A hard swish after a Conv joins its fused chain (engine/fuse.py ``_fuse_conv_chains``):
ONNX's HardSwish op (torch's MobileNetV3 exports, PP-LCNet's) and Paddle's
``x * clip(x + 3, 0, 6) / 6`` (PP-OCR's, layout models') run as the conv's in-place
epilogue, compiled (``native.channel_epilogue``, tested in test_native.py) or on numpy's passes. Checked against
onnxruntime on fresh random inputs; the graph's semantics where the chain cannot run
fused (a broadcasting residual, kept intermediates, per-node times, a new constant)."""

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
from test_fuse_conv import _check, compiled  # noqa: F401 -- the fixture, for these tests too

F = TensorProto.FLOAT
SWISHES = ["onnx", "paddle_div", "paddle_mul", "paddle_none"]


def _swish_model(swish: str, rng: np.random.Generator, *, residual: tuple | None = None,
                 bn: bool = True) -> tuple[onnx.ModelProto, dict]:
    """x -> Conv -> [BatchNormalization] -> [Add r] -> a hard swish written as ``swish``."""
    m, c = 6, 4
    inits = [numpy_helper.from_array((rng.standard_normal((m, c, 3, 3)) * 0.6).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(m).astype(np.float32), "b")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1])]
    inputs = [helper.make_tensor_value_info("x", F, [2, c, 9, 8])]
    feeds = {"x": (rng.standard_normal((2, c, 9, 8)) * 3).astype(np.float32)}
    last = "c"
    if bn:
        params = {"scale": rng.uniform(0.5, 2.0, m), "bias": rng.standard_normal(m),
                  "mean": rng.standard_normal(m), "var": rng.uniform(0.1, 3.0, m)}
        inits += [numpy_helper.from_array(v.astype(np.float32), k) for k, v in params.items()]
        nodes.append(helper.make_node("BatchNormalization", ["c", *params], ["n"], name="bn"))
        last = "n"
    if residual is not None:
        nodes.append(helper.make_node("Add", [last, "r"], ["a"], name="add"))
        inputs.append(helper.make_tensor_value_info("r", F, list(residual)))
        feeds["r"] = rng.standard_normal(residual).astype(np.float32)
        last = "a"
    if swish == "onnx":
        nodes.append(helper.make_node("HardSwish", [last], ["y"], name="hswish"))
    else:
        consts = {"three": 3.0, "zero": 0.0, "six": 6.0, "sixth": 1 / 6}
        inits += [numpy_helper.from_array(np.array(v, np.float32), k) for k, v in consts.items()]
        tail = swish.split("_")[1]
        nodes += [helper.make_node("Add", [last, "three"], ["s"], name="shift"),
                  helper.make_node("Clip", ["s", "zero", "six"], ["cl"], name="clip"),
                  helper.make_node("Mul", [last, "cl"], ["y" if tail == "none" else "p"], name="mul")]
        if tail != "none":
            nodes.append(helper.make_node("Div" if tail == "div" else "Mul",
                                          ["p", "six" if tail == "div" else "sixth"], ["y"], name="scale"))
    graph = helper.make_graph(nodes, "conv_swish", inputs, [helper.make_tensor_value_info("y", F, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), feeds


@pytest.fixture()
def never_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fused step must run fused: falling back to the nodes as written fails the test."""
    import engine.fuse as fuse_module

    def never(*_args, **_kw):
        raise AssertionError("the fused step fell back to the nodes as written")
    monkeypatch.setattr(fuse_module, "as_written", never)


def _fused_kinds(model: onnx.ModelProto, **opts) -> list[str]:
    with Executor(from_model_proto(model), **opts) as ex:
        return [s.node.op_type for s in ex._steps if s.node.domain == FUSED_DOMAIN]


@pytest.mark.parametrize("swish", SWISHES)
@pytest.mark.parametrize("residual", [False, True])
def test_a_hard_swish_after_a_conv_is_its_epilogue(swish, residual, compiled, rng, never_as_written):
    model, feeds = _swish_model(swish, rng, residual=(2, 6, 9, 8) if residual else None)
    _check(model, feeds, fused=True)
    kinds = _fused_kinds(model)
    assert len(kinds) == 1 and kinds[0].startswith("Conv+BatchNormalization")
    assert ("HardSwish" in kinds[0]) == (swish == "onnx") and ("Clip" in kinds[0]) == (swish != "onnx")


def test_without_a_normalisation_too(compiled, rng, never_as_written):
    model, feeds = _swish_model("paddle_div", rng, bn=False)
    _check(model, feeds, fused=True)
    assert _fused_kinds(model) == ["Conv+Add+Clip+Mul+Div"]


def test_a_broadcasting_residual_runs_the_nodes_as_written(compiled, rng):
    model, feeds = _swish_model("paddle_div", rng, residual=(1, 6, 1, 1))
    _check(model, feeds, fused=True)


def test_kept_intermediates_and_per_node_times_name_the_graphs_nodes(rng):
    model, feeds = _swish_model("paddle_div", rng)
    with Executor(from_model_proto(model)) as ex:
        seconds = ex.run(feeds).node_seconds
        kept = ex.run(feeds, keep_intermediates=True).values
    assert set(seconds) == {"conv", "bn", "shift", "clip", "mul", "scale"}
    assert {"c", "n", "s", "cl", "p", "y"} <= set(kept)
    np.testing.assert_allclose(kept["cl"], np.clip(kept["n"] + 3, 0, 6), rtol=1e-6)


def test_a_new_shift_reaches_the_fused_step(rng, never_as_written):
    """The hard swish's constants stay the step's inputs: ``set_weight`` takes effect."""
    model, feeds = _swish_model("paddle_div", rng)
    with Executor(from_model_proto(model)) as ex:
        ex.set_weight("three", np.array(100.0, np.float32))   # mostly clip(n + 100, 0, 6) = 6: y = n
        got = ex.run(feeds, keep_intermediates=False).outputs["y"]
        n = ex.run(feeds, keep_intermediates=True).values["n"]
    # n comes from the run that keeps intermediates: the conv alone, its sums in another order
    # than the fused step's (float32 rounding, 1e-6 relative seen: 3 in 40 fresh seeds)
    np.testing.assert_allclose(got, n * np.clip(n + np.float32(100), 0, 6) / np.float32(6), rtol=2e-5, atol=1e-5)


def test_on_a_device_the_swish_stays_out_of_the_chain(monkeypatch, rng):
    """Fused on the host only (a device makes the elementwise tail one kernel of its own)."""
    install(monkeypatch)
    model, feeds = _swish_model("onnx", rng)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    with Executor(from_model_proto(model), device="gpu") as ex:
        kinds = [s.node.op_type for s in ex._steps if s.node.domain == FUSED_DOMAIN]
        got = ex.run(feeds).outputs["y"].get()
    assert kinds and not any("HardSwish" in k for k in kinds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_subgraph_on_our_engine_fuses_as_the_whole_graph_does(rng, never_as_written):
    """A subgraph body's weights are its inputs, fed from the enclosing graph's weights: its
    chains fuse on them all the same (a partitioned PP-LCNet fused 5 steps of 32), and a
    weight replaced on the enclosing executor reaches the fused step inside."""
    from partition import partition
    model, feeds = _swish_model("paddle_div", rng, residual=(2, 6, 9, 8))
    g = from_model_proto(model)
    part = partition(g, "default", ops=["Conv", "BatchNormalization", "Add", "Clip", "Mul", "Div"])
    assert [n.is_subgraph for n in part.graph.nodes] == [True]
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with Executor(part.graph, subgraph_runtime="engine") as ex:
        got = ex.run(feeds).outputs["y"]
        (child,) = ex._descendants()
        kinds = [s.node.op_type for s in child._steps if s.node.domain == FUSED_DOMAIN]
        assert kinds == ["Conv+BatchNormalization+Add+Add+Clip+Mul+Div"]
        _close_to_rounding(got, sess.run(None, feeds)[0])
        ex.set_weight("three", np.array(100.0, np.float32))   # clip(a + 100, 0, 6) = 6: y = a
        again = ex.run(feeds).outputs["y"]
    model.graph.initializer[[i.name for i in model.graph.initializer].index("three")].CopyFrom(
        numpy_helper.from_array(np.array(100.0, np.float32), "three"))
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    _close_to_rounding(again, want)


def _close_to_rounding(got: np.ndarray, want: np.ndarray) -> None:
    """rtol 1e-4, and an atol of float32 rounding of the largest value (engine.tolerance's
    ROUNDING_SCALE) beside 1e-4: a BatchNormalization folded into the conv's weights scales its
    terms up to 6x, and where they cancel near zero among outputs of 90 one element was 3.8e-4
    off onnxruntime (4e-6 of the largest; a CI seed found it)."""
    from engine.tolerance import ROUNDING_SCALE
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 + ROUNDING_SCALE * float(np.abs(want).max()))


def test_a_hard_swish_with_a_nan_bound_takes_numpys_passes(compiled, rng):
    """The compiled epilogue refuses NaN bounds: such a swish runs as numpy's passes, with
    numpy's NaN (never a clamp-free pass that skips the swish)."""
    from engine.kernels.nn import HardSwishAct, conv_fused
    x = rng.standard_normal((1, 3, 6, 5)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    plain = conv_fused(np, x, w, None, None, False, pads=[1, 1, 1, 1])
    act = HardSwishAct(1.0, 3.0, float("nan"), 6.0, "Div", 6.0)
    got = conv_fused(np, x, w, None, None, act, pads=[1, 1, 1, 1])
    with np.errstate(invalid="ignore"):
        want = act.apply(np, plain.copy())
    np.testing.assert_array_equal(got, want)
    assert np.isnan(got).all()
