"""The steps of Scan and Loop against onnxruntime (engine/kernels/control_flow.py). Scan: inputs
scanned along other axes and backwards, outputs stacked along other axes and backwards, with a
carried state -- each step's slice is a view of its sequence, which must pick the right element.
Loop: a condition the body computes ends it early, and the counter and the condition fed in are
scan outputs -- the condition is one array shared by the steps, the counter a new one each step."""

from __future__ import annotations

import re

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from conftest import make_model
from engine.executor import Executor
from engine.kernels import control_flow
from engine.run_errors import RunError
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


def _loop_model():
    i64, b = TensorProto.INT64, TensorProto.BOOL
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x"], ["s_out"], name="accumulate"),
         helper.make_node("ReduceSum", ["s_out"], ["total"], name="total", keepdims=0),
         helper.make_node("Less", ["total", "limit"], ["cond_out"], name="going on"),
         helper.make_node("Identity", ["i"], ["i_out"], name="counter"),
         helper.make_node("Identity", ["cond_in"], ["cond_seen"], name="condition")],
        "body", [helper.make_tensor_value_info("i", i64, []), helper.make_tensor_value_info("cond_in", b, []),
                 helper.make_tensor_value_info("s_in", F, [3])],
        [helper.make_tensor_value_info("cond_out", b, []), helper.make_tensor_value_info("s_out", F, [3]),
         helper.make_tensor_value_info("i_out", i64, []), helper.make_tensor_value_info("cond_seen", b, [])])
    loop = helper.make_node("Loop", ["trips", "start", "s0"], ["s", "counters", "conditions"], name="loop",
                            body=body)
    return make_model([loop], [helper.make_tensor_value_info("trips", i64, []),
                               helper.make_tensor_value_info("start", b, []),
                               helper.make_tensor_value_info("s0", F, [3]), helper.make_tensor_value_info("x", F, [3]),
                               helper.make_tensor_value_info("limit", F, [])],
                      [helper.make_tensor_value_info("s", F, None), helper.make_tensor_value_info("counters", i64, None),
                       helper.make_tensor_value_info("conditions", b, None)])


@pytest.mark.parametrize("plan", ["segments", "nodes"])
def test_loop_counter_condition_and_an_early_end_match_onnxruntime(plan: str, rng: np.random.Generator) -> None:
    model = _loop_model()
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with Executor(load_model(model.SerializeToString()), plan=plan) as ex:
        for trips, limit in ((6, 1e9), (50, 10.0), (0, 1e9)):
            feeds = {"trips": np.array(trips, np.int64), "start": np.array(True),
                     "s0": np.zeros(3, np.float32), "x": rng.uniform(0.5, 1.0, 3).astype(np.float32),
                     "limit": np.array(limit, np.float32)}
            got = ex.run(feeds).numpy_outputs()
            for name, want in zip(("s", "counters", "conditions"), sess.run(None, feeds)):
                assert got[name].shape == want.shape, (name, trips)
                np.testing.assert_allclose(got[name], want, rtol=1e-6, err_msg=name)
            if trips == 50:   # ended by its condition, well before 50 steps
                assert 0 < len(got["counters"]) < 50 and list(got["counters"]) == list(range(len(got["counters"])))


def _if_model():
    """y = If(sum(x) > 0) then Squeeze(x) * w else If(max(x) > 1) then Neg(x) else x - w,
    reading the outer x and the weight w: branches that change from run to run, one nested."""
    inner = helper.make_node(
        "If", ["big"], ["inner_y"], name="inner if",
        then_branch=helper.make_graph([helper.make_node("Neg", ["x"], ["n"], name="negate")], "inner_then", [],
                                      [helper.make_tensor_value_info("n", F, None)]),
        else_branch=helper.make_graph([helper.make_node("Sub", ["x", "w"], ["d"], name="minus w")], "inner_else", [],
                                      [helper.make_tensor_value_info("d", F, None)]))
    outer_else = helper.make_graph(
        [helper.make_node("ReduceMax", ["x"], ["m"], name="max", keepdims=0),
         helper.make_node("Greater", ["m", "one"], ["big"], name="big"), inner],
        "outer_else", [], [helper.make_tensor_value_info("inner_y", F, None)])
    outer_then = helper.make_graph(
        [helper.make_node("Mul", ["x", "w"], ["p"], name="times w")], "outer_then", [],
        [helper.make_tensor_value_info("p", F, None)])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["c"], name="positive"),
             helper.make_node("If", ["c"], ["y"], name="outer if", then_branch=outer_then, else_branch=outer_else)]
    from onnx import numpy_helper
    inits = [numpy_helper.from_array(np.array([0.5, 2.0, -1.0], np.float32), "w"),
             numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one")]
    return make_model(nodes, [helper.make_tensor_value_info("x", F, [3])], [helper.make_tensor_value_info("y", F, None)],
                      initializers=inits)


@pytest.mark.parametrize("plan", ["segments", "nodes"])
def test_if_branches_taken_in_turn_match_onnxruntime(plan: str) -> None:
    model = _if_model()
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with Executor(load_model(model.SerializeToString()), plan=plan) as ex:
        if plan == "segments":   # bound once as an If, not the generic control-flow call
            assert "_if_call" in next(s.call for s in ex._steps if s.node.name == "outer if").__qualname__
        for x in ([1.0, 2.0, 3.0], [-1.0, -2.0, 1.5], [-3.0, -2.0, 0.5], [4.0, 0.0, 0.0], [-1.0, -1.0, -1.0]):
            feeds = {"x": np.array(x, np.float32)}
            np.testing.assert_allclose(ex.run(feeds).numpy_outputs()["y"], sess.run(None, feeds)[0],
                                       rtol=1e-6, err_msg=str(x))


def _distance_scan_model(body_inputs: int = 2):
    """skl2onnx's kNN form: the queries carried through unchanged (Identity), each training row
    a step, a Sub and a ReduceSumSquare a step, the distances out through an Identity."""
    ins = [helper.make_tensor_value_info("q_in", F, ["N", 4]), helper.make_tensor_value_info("row", F, [4])]
    ins += [helper.make_tensor_value_info(f"extra{k}", F, [4]) for k in range(body_inputs - 2)]
    body = helper.make_graph(
        [helper.make_node("Identity", ["q_in"], ["q_out"], name="carry"),
         helper.make_node("Sub", ["q_in", "row"], ["d"], name="difference"),
         helper.make_node("ReduceSumSquare", ["d"], ["d2"], name="squared", axes=[1], keepdims=0),
         helper.make_node("Identity", ["d2"], ["dist"], name="out")],
        "body", ins, [helper.make_tensor_value_info("q_out", F, ["N", 4]),
                      helper.make_tensor_value_info("dist", F, ["N"])])
    scan = helper.make_node("Scan", ["q", "train"], ["q_last", "dists"], name="distances", body=body,
                            num_scan_inputs=1)
    return make_model([scan], [helper.make_tensor_value_info("q", F, ["N", 4]),
                               helper.make_tensor_value_info("train", F, ["T", 4])],
                      [helper.make_tensor_value_info(n, F, None) for n in ("q_last", "dists")])


def test_a_scan_body_is_one_call_taking_its_inputs_by_position(rng: np.random.Generator) -> None:
    """The body's generated function takes its inputs as parameters (no dict of them a step)
    and assigns its Identities without a call; the distances match onnxruntime."""
    model = _distance_scan_model()
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with Executor(load_model(model.SerializeToString())) as ex:
        for n, t in ((3, 7), (5, 2)):
            feeds = {"q": rng.standard_normal((n, 4)).astype(np.float32),
                     "train": rng.standard_normal((t, 4)).astype(np.float32)}
            got = ex.run(feeds).numpy_outputs()
            for name, want in zip(("q_last", "dists"), sess.run(None, feeds)):
                np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6, err_msg=name)
        (body,) = ex._children.values()
        source = body._body_fn.source
    assert source.startswith("def body(env, w, rctx, i0, i1):"), source
    assert "env[" not in source, source            # nothing read from the outer scope by name
    calls = [line for line in source.splitlines() if "(xp" in line or "rctx)" in line]
    assert len(calls) == 2, source                  # the Sub and the ReduceSumSquare; no Identity call
    assert any(re.fullmatch(r"        v\d+ = i0", line) for line in source.splitlines()), source


@pytest.mark.parametrize("plan", ["segments", "nodes"])
def test_a_scan_whose_body_takes_another_input_count_fails_naming_it(plan: str) -> None:
    model = _distance_scan_model(body_inputs=3)
    feeds = {"q": np.ones((2, 4), np.float32), "train": np.ones((3, 4), np.float32)}
    with Executor(load_model(model.SerializeToString()), plan=plan) as ex:
        with pytest.raises(RunError, match=r"'distances' \(Scan\).*body 'body' takes 3 inputs, got 2"):
            ex.run(feeds)


def test_scan_sequences_of_different_lengths_fail_naming_the_scan() -> None:
    body = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["c"], name="add")], "body",
        [helper.make_tensor_value_info("a", F, [2]), helper.make_tensor_value_info("b", F, [2])],
        [helper.make_tensor_value_info("c", F, [2])])
    model = make_model([helper.make_node("Scan", ["x", "y"], ["z"], name="pairs", body=body, num_scan_inputs=2)],
                       [helper.make_tensor_value_info("x", F, ["T", 2]), helper.make_tensor_value_info("y", F, ["U", 2])],
                       [helper.make_tensor_value_info("z", F, None)])
    with Executor(load_model(model.SerializeToString())) as ex:
        with pytest.raises(RunError, match=r"'pairs' \(Scan\).*differ in length.*\[3, 4\]"):
            ex.run({"x": np.ones((3, 2), np.float32), "y": np.ones((4, 2), np.float32)})


@pytest.mark.parametrize("plan", ["segments", "nodes"])
def test_a_scan_over_a_one_dimensional_sequence_steps_through_0d_tensors(plan: str, rng: np.random.Generator) -> None:
    """Each step's slice of a [T] sequence is a 0-d tensor (an array: the sequence's own iterator
    yields numpy scalars), also where the body hands it straight out, against onnxruntime."""
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "x"], ["s2"], name="accumulate"),
         helper.make_node("Identity", ["x"], ["x_out"], name="pass"),
         helper.make_node("Unsqueeze", ["x", "axis0"], ["u"], name="lift")],
        "body", [helper.make_tensor_value_info("s", F, []), helper.make_tensor_value_info("x", F, [])],
        [helper.make_tensor_value_info("s2", F, []), helper.make_tensor_value_info("x_out", F, []),
         helper.make_tensor_value_info("u", F, [1])],
        [helper.make_tensor("axis0", TensorProto.INT64, [1], [0])])
    model = make_model([helper.make_node("Scan", ["s0", "xs"], ["s", "xs_out", "us"], name="scan", body=body,
                                         num_scan_inputs=1)],
                       [helper.make_tensor_value_info("s0", F, []), helper.make_tensor_value_info("xs", F, ["T"])],
                       [helper.make_tensor_value_info(n, F, None) for n in ("s", "xs_out", "us")])
    feeds = {"s0": np.array(rng.standard_normal(), np.float32),
             "xs": rng.standard_normal(int(rng.integers(1, 9))).astype(np.float32)}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    slices: list[type] = []
    real_run_graph = control_flow.body_step

    def spying(run_graph, graph, n_inputs):
        step = real_run_graph(run_graph, graph, n_inputs)
        return lambda *values: slices.append(type(values[-1])) or step(*values)
    with Executor(load_model(model.SerializeToString()), plan=plan) as ex, \
            pytest.MonkeyPatch.context() as mp:
        mp.setattr(control_flow, "body_step", spying)
        got = ex.run(feeds).numpy_outputs()
    for name, w in zip(("s", "xs_out", "us"), want):
        assert got[name].shape == w.shape, name
        np.testing.assert_allclose(got[name], w, rtol=1e-6, atol=1e-6, err_msg=name)
    assert len(slices) == feeds["xs"].size and not any(issubclass(t, np.generic) for t in slices), slices
