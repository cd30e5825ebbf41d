"""Weight preparation (nodes of weights only) runs once per weight version (engine/memo.py)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine import memo
from engine.executor import Executor, find_kernel
from partition import load_model

from conftest import make_model

F = TensorProto.FLOAT


def vi(name: str, shape: list | None):
    return helper.make_tensor_value_info(name, F, shape)


def _counting(counts: dict[str, int]):
    """A kernel finder that counts the calls of each node's kernel."""
    def find(node, opset):
        kernel = find_kernel(node, opset)
        if kernel is None:
            return None

        def counted(xp, *args, **attrs):
            counts[node.name] = counts.get(node.name, 0) + 1
            return kernel(xp, *args, **attrs)
        return counted
    return find


def _ort(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def _reference(model, feeds):
    """ONNX's reference evaluator, at opset 19 (it has no DequantizeLinear-13 but 19's, which
    reads int8 the same way); the model itself stays at opset 17."""
    from onnx import ModelProto
    from onnx.reference import ReferenceEvaluator
    at19 = ModelProto()
    at19.CopyFrom(model)
    at19.opset_import[0].version = 19
    return ReferenceEvaluator(at19).run(None, feeds)[0]


def _prepared_weight_model(w: np.ndarray):
    """y = x @ Transpose(Slice(w)) -- the weight preparation exporters write."""
    nodes = [helper.make_node("Slice", ["w", "starts", "ends"], ["ws"], name="slice w"),
             helper.make_node("Transpose", ["ws"], ["wt"], name="transpose w", perm=[1, 0]),
             helper.make_node("MatMul", ["x", "wt"], ["y"], name="matmul")]
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array([0], np.int64), "starts"),
             numpy_helper.from_array(np.array([6], np.int64), "ends")]
    return make_model(nodes, [vi("x", [2, 4])], [vi("y", None)], initializers=inits)


@pytest.mark.parametrize("plan", ["segments", "nodes"])
def test_weight_preparation_runs_once_and_again_after_set_weight(rng, plan):
    w = rng.standard_normal((8, 4)).astype(np.float32)
    model = _prepared_weight_model(w)
    counts: dict[str, int] = {}
    with Executor(load_model(model.SerializeToString()), kernels=_counting(counts), plan=plan) as ex:
        for _ in range(3):
            x = rng.standard_normal((2, 4)).astype(np.float32)
            np.testing.assert_allclose(ex.run({"x": x}).numpy_outputs()["y"], _ort(model, {"x": x}),
                                       rtol=1e-5, atol=1e-6)
        assert counts == {"slice w": 1, "transpose w": 1, "matmul": 3}
        w2 = rng.standard_normal((8, 4)).astype(np.float32)
        ex.set_weight("w", w2)
        x = rng.standard_normal((2, 4)).astype(np.float32)
        got = ex.run({"x": x}).numpy_outputs()["y"]
        np.testing.assert_allclose(got, _ort(_prepared_weight_model(w2), {"x": x}), rtol=1e-5, atol=1e-6)
        assert counts == {"slice w": 2, "transpose w": 2, "matmul": 4}


def _then_branch_model(then_nodes: list, x_shape: list, w: np.ndarray, extra_inits: list):
    """An If whose condition always holds (sum(x) > -1e9) and whose then branch reads the
    graph's weight ``w`` (silero-VAD's shape); ``w`` is the first initializer."""
    then = helper.make_graph(then_nodes, "then", [], [vi("t_out", None)])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["e_out"], name="else id")],
                              "else", [], [vi("e_out", None)])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
             helper.make_node("Greater", ["s", "limit"], ["c"], name="cond"),
             helper.make_node("If", ["c"], ["y"], name="if", then_branch=then, else_branch=other)]
    inits = [numpy_helper.from_array(w, "w"), *extra_inits,
             numpy_helper.from_array(np.array(-1e9, np.float32), "limit")]
    return make_model(nodes, [vi("x", x_shape)], [vi("y", None)], initializers=inits)


def _sliced_weight_body(w: np.ndarray):
    return _then_branch_model(
        [helper.make_node("Slice", ["w", "starts", "ends"], ["ws"], name="slice w"),
         helper.make_node("Transpose", ["ws"], ["wt"], name="transpose w", perm=[1, 0]),
         helper.make_node("MatMul", ["x", "wt"], ["t_out"], name="then matmul")],
        [2, 4], w, [numpy_helper.from_array(np.array([0], np.int64), "starts"),
                    numpy_helper.from_array(np.array([6], np.int64), "ends")])


def _conv_body(w: np.ndarray):
    return _then_branch_model([helper.make_node("Conv", ["x", "w"], ["t_out"], name="body conv", pads=[1, 1])],
                              [1, 3, 8], w, [])


def test_a_body_prepares_an_outer_weight_once_per_version(rng):
    """silero-VAD's shape: an If body slices the graph's weight; the body runs every
    call, its weight preparation once."""
    w = rng.standard_normal((8, 4)).astype(np.float32)
    model = _sliced_weight_body(w)
    counts: dict[str, int] = {}
    with Executor(load_model(model.SerializeToString()), kernels=_counting(counts)) as ex:
        for _ in range(3):
            x = rng.standard_normal((2, 4)).astype(np.float32)
            np.testing.assert_allclose(ex.run({"x": x}).numpy_outputs()["y"], _ort(model, {"x": x}),
                                       rtol=1e-5, atol=1e-6)
        assert counts["slice w"] == counts["transpose w"] == 1 and counts["then matmul"] == 3
        w2 = rng.standard_normal((8, 4)).astype(np.float32)
        ex.set_weight("w", w2)
        x = rng.standard_normal((2, 4)).astype(np.float32)
        np.testing.assert_allclose(ex.run({"x": x}).numpy_outputs()["y"], _ort(_sliced_weight_body(w2), {"x": x}),
                                   rtol=1e-5, atol=1e-6)
        assert counts["slice w"] == 2


def test_nothing_writes_into_a_memoized_result(rng):
    """MatMul of two weights, then Add of the input: the Add's in-place form would
    write into the product, which the memo hands out again on the next run."""
    a = rng.standard_normal((4, 4)).astype(np.float32)
    b = rng.standard_normal((4, 4)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["a", "b"], ["ab"], name="ab"),
             helper.make_node("Add", ["ab", "x"], ["s"], name="add"),
             helper.make_node("Relu", ["s"], ["y"], name="relu")]
    model = make_model(nodes, [vi("x", [4, 4])], [vi("y", None)],
                       initializers=[numpy_helper.from_array(a, "a"), numpy_helper.from_array(b, "b")])
    with Executor(load_model(model.SerializeToString())) as ex:
        for _ in range(3):
            x = rng.standard_normal((4, 4)).astype(np.float32)
            np.testing.assert_allclose(ex.run({"x": x}).numpy_outputs()["y"], _ort(model, {"x": x}),
                                       rtol=1e-5, atol=1e-5)


def test_a_body_node_plans_on_an_enclosing_graphs_weight_and_sees_it_replaced(rng):
    """silero-VAD's opset-18 export: the convs sit in an If branch and read the graph's
    weights. They are planned on them like the top level's (engine/specialize.py), and
    a replaced weight still reaches them (each call checks it is the same object)."""
    w = (rng.standard_normal((4, 3, 3)) * 0.5).astype(np.float32)
    model = _conv_body(w)
    with Executor(load_model(model.SerializeToString())) as ex:
        x = rng.standard_normal((1, 3, 8)).astype(np.float32)
        np.testing.assert_allclose(ex.run({"x": x}).numpy_outputs()["y"], _ort(model, {"x": x}),
                                   rtol=1e-5, atol=1e-6)
        body = next(c for c in ex._children.values() if c.graph.name == "then")
        call = body._steps[0].call.__qualname__
        assert "_kernel_call" not in call, call   # planned, not the registry call as written
        w2 = rng.standard_normal((4, 3, 3)).astype(np.float32)
        ex.set_weight("w", w2)
        np.testing.assert_allclose(ex.run({"x": x}).numpy_outputs()["y"], _ort(_conv_body(w2), {"x": x}),
                                   rtol=1e-5, atol=1e-6)


def test_an_output_of_the_graph_is_never_memoized(rng):
    """A caller may write into what a run returns: a weight-only output is computed anew
    each run, so the next run's value is the graph's, not the caller's edit."""
    w = rng.standard_normal((3, 2)).astype(np.float32)
    nodes = [helper.make_node("Neg", ["w"], ["wn"], name="negate w"),
             helper.make_node("Relu", ["x"], ["y"], name="relu")]
    model = make_model(nodes, [vi("x", [2])], [vi("wn", None), vi("y", None)],
                       initializers=[numpy_helper.from_array(w, "w")])
    with Executor(load_model(model.SerializeToString())) as ex:
        first = ex.run({"x": np.ones(2, np.float32)}).numpy_outputs()["wn"]
        first[...] = 0.0
        again = ex.run({"x": np.ones(2, np.float32)}).numpy_outputs()["wn"]
    np.testing.assert_array_equal(again, -w)


def _qdq_weight_model(wq: np.ndarray, scale: np.ndarray, tile: bool):
    """y = x @ DequantizeLinear(wq, scale) (per column), as a QDQ-quantized model writes every
    weight; with ``tile``, the product also reads Tile(w) -- a result larger than its weight."""
    nodes = [helper.make_node("DequantizeLinear", ["wq", "scale"], ["w"], name="dequantize w", axis=1),
             helper.make_node("MatMul", ["x", "w"], ["y0"], name="matmul")]
    inits = [numpy_helper.from_array(wq, "wq"), numpy_helper.from_array(scale, "scale")]
    if tile:
        nodes += [helper.make_node("Tile", ["w", "reps"], ["wt"], name="tile w"),
                  helper.make_node("ReduceSum", ["wt"], ["s"], name="sum", keepdims=0),
                  helper.make_node("Add", ["y0", "s"], ["y"], name="add")]
        inits.append(numpy_helper.from_array(np.array([2, 2], np.int64), "reps"))
    else:
        nodes[-1] = helper.make_node("MatMul", ["x", "w"], ["y"], name="matmul")
    return make_model(nodes, [vi("x", [2, wq.shape[0]])], [vi("y", None)], initializers=inits)


@pytest.mark.parametrize("budget", [None, 1 << 20])
def test_a_dequantized_weight_is_kept_though_larger_than_the_int8_weight(rng, monkeypatch, budget):
    """int8 -> float32 is 4x the bytes and past the 1 MiB floor: kept all the same (memo.WIDENING).
    A Tile of the same weight, larger than its argument for no such reason, is kept while the
    executor's MemoBudget allows (1 GiB), and recomputed each run past it (here 1 MiB)."""
    if budget is not None:
        monkeypatch.setattr(memo, "MEMO_EXTRA_BYTES", budget)
    wq = rng.integers(-128, 128, (512, 1024), dtype=np.int8)   # 512 KiB; 2 MiB dequantized
    scale = (rng.random(1024) * 0.01 + 0.001).astype(np.float32)
    model = _qdq_weight_model(wq, scale, tile=True)
    counts: dict[str, int] = {}
    with Executor(load_model(model.SerializeToString()), kernels=_counting(counts)) as ex:
        for _ in range(3):
            x = rng.standard_normal((2, 512)).astype(np.float32)
            np.testing.assert_allclose(ex.run({"x": x}).numpy_outputs()["y"], _ort(model, {"x": x}),
                                       rtol=1e-4, atol=1e-2)
        taken = memo.MEMO_EXTRA_BYTES - ex._memo_budget.left
    assert counts["dequantize w"] == 1 and counts["matmul"] == 3
    tile_bytes = 4 * wq.size * 4
    assert (counts["tile w"], taken) == ((1, tile_bytes) if budget is None else (3, 0))


def _filled_weight_model(shape: tuple[int, ...]):
    """A Conv whose weight is ConstantOfShape(its shape) of 0.02 plus a learned offset, as the onnx
    wheel's model-zoo graphs carry every weight (bench/zoo_weights.py)."""
    fill = numpy_helper.from_array(np.array([0.02], np.float32))
    nodes = [helper.make_node("ConstantOfShape", ["w_shape"], ["w_fill"], name="fill", value=fill),
             helper.make_node("Add", ["w_fill", "offset"], ["w"], name="offset w"),
             helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])]
    offset = np.linspace(-0.05, 0.05, int(np.prod(shape)), dtype=np.float32).reshape(shape)
    inits = [numpy_helper.from_array(np.array(shape, np.int64), "w_shape"),
             numpy_helper.from_array(offset, "offset")]
    return make_model(nodes, [vi("x", [1, shape[1], 6, 6])], [vi("y", None)], initializers=inits)


def test_a_weight_filled_from_its_shape_is_made_once_and_again_after_set_weight(rng):
    """ConstantOfShape makes 4.5 MiB from 32 bytes: past the old rule (no result larger than its
    arguments but 1 MiB), kept under the executor's MemoBudget, given back when a new version of
    the weight replaces it. (The Add of the offset is no larger than its arguments: kept as before.)"""
    shape = (256, 128, 3, 3)
    model = _filled_weight_model(shape)
    counts: dict[str, int] = {}
    with Executor(load_model(model.SerializeToString()), kernels=_counting(counts)) as ex:
        for _ in range(3):
            x = rng.standard_normal((1, 128, 6, 6)).astype(np.float32)
            np.testing.assert_allclose(ex.run({"x": x}).numpy_outputs()["y"], _ort(model, {"x": x}),
                                       rtol=1e-4, atol=1e-4)
        assert counts == {"fill": 1, "offset w": 1, "conv": 3}
        assert memo.MEMO_EXTRA_BYTES - ex._memo_budget.left == 4 * int(np.prod(shape))
        ex.set_weight("w_shape", np.array(shape, np.int64))   # a new version: made again
        x = rng.standard_normal((1, 128, 6, 6)).astype(np.float32)
        np.testing.assert_allclose(ex.run({"x": x}).numpy_outputs()["y"], _ort(model, {"x": x}),
                                   rtol=1e-4, atol=1e-4)
        assert counts["fill"] == 2
        assert memo.MEMO_EXTRA_BYTES - ex._memo_budget.left == 4 * int(np.prod(shape))  # old given back


def test_memo_budget_takes_what_it_has_and_gets_it_back():
    budget = memo.MemoBudget(100)
    assert budget.take(60) and not budget.take(41) and budget.take(40) and budget.left == 0
    budget.give(60)
    assert budget.left == 60 and not budget.take(61)


def test_a_qdq_models_weight_is_dequantized_at_bind_time_and_again_after_set_weight(rng):
    """Executor._dequantize_weights: the float weight is a derived weight, so the product reads a
    constant (planned and fused as in the float model); set_weight of the int8 source remakes it."""
    wq = rng.integers(-128, 128, (16, 8), dtype=np.int8)
    scale = (rng.random(8) * 0.01 + 0.001).astype(np.float32)
    model = _qdq_weight_model(wq, scale, tile=False)
    x = rng.standard_normal((2, 16)).astype(np.float32)
    with Executor(load_model(model.SerializeToString()), keep_intermediates=True) as ex:
        # evaluated, not run -- on the host; a device run (the fake-GPU suite) runs it, memoized
        assert ("dequantize w" in [s.node.name for s in ex._steps]) == (ex.xp is not np)
        result = ex.run({"x": x})
        # ONNX's evaluator: onnxruntime quantizes x on the fly for an int8 weight (1e-3 off)
        np.testing.assert_allclose(result.numpy_outputs()["y"], _reference(model, {"x": x}),
                                   rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(result.values["w"], wq.astype(np.float32) * scale)  # the debugger's
        new = rng.integers(-128, 128, (16, 8), dtype=np.int8)
        ex.set_weight("wq", new)
        changed = _qdq_weight_model(new, scale, tile=False)
        np.testing.assert_allclose(ex.run({"x": x}).numpy_outputs()["y"], _reference(changed, {"x": x}),
                                   rtol=1e-5, atol=1e-5)
    for kept in ({"plan": "nodes"}, {"kernels": _counting({})}):   # every node as written; their kernels
        with Executor(load_model(model.SerializeToString()), **kept) as ex:
            assert "dequantize w" in [s.node.name for s in ex._steps]


def _shape_arithmetic_model():
    """y = Reshape(Relu(x), [shape(x)[0] * shape(x)[1], -1]) and z = the zero state
    ConstantOfShape([1, size(x)]) + 1: a target and a state computed from shapes at run time,
    as exporters write them (Shape with start/end; Size)."""
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Shape", ["r"], ["lead"], name="shape", start=0, end=2),
             helper.make_node("ReduceProd", ["lead"], ["rows"], name="rows", keepdims=1),
             helper.make_node("Concat", ["rows", "minus1"], ["target"], name="target", axis=0),
             helper.make_node("Reshape", ["r", "target"], ["y"], name="reshape"),
             helper.make_node("Size", ["x"], ["n"], name="size"),
             helper.make_node("Unsqueeze", ["n", "axis0"], ["n1"], name="n1"),
             helper.make_node("Concat", ["one", "n1"], ["state_shape"], name="state shape", axis=0),
             helper.make_node("ConstantOfShape", ["state_shape"], ["zeros"], name="zeros"),
             helper.make_node("Add", ["zeros", "bias"], ["z"], name="state")]
    inits = [i64("minus1", [-1]), i64("axis0", [0]), i64("one", [1]),
             numpy_helper.from_array(np.array(1.0, np.float32), "bias")]
    return make_model(nodes, [vi("x", None)], [vi("y", None), vi("z", None)], initializers=inits)


@pytest.mark.parametrize("plan", ["segments", "nodes"])
def test_shape_arithmetic_runs_once_per_input_shape(rng, plan):
    model = _shape_arithmetic_model()
    counts: dict[str, int] = {}
    arithmetic = ("shape", "rows", "target", "size", "n1", "state shape", "zeros")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with Executor(load_model(model.SerializeToString()), kernels=_counting(counts), plan=plan) as ex:
        # A, A, B, B, A: the arithmetic runs for each shape unlike the last run's (one result is
        # kept), so after each run 1, 1, 2, 2, 3 times; the Relu and the Reshape every run.
        for runs, (shape, computed) in enumerate([((2, 3, 4), 1), ((2, 3, 4), 1), ((3, 3, 4), 2),
                                                  ((3, 3, 4), 2), ((2, 3, 4), 3)], start=1):
            x = rng.standard_normal(shape).astype(np.float32)
            got = ex.run({"x": x}).numpy_outputs()
            y, z = sess.run(None, {"x": x})
            np.testing.assert_array_equal(got["y"], y)
            np.testing.assert_array_equal(got["z"], z)
            assert [counts[n] for n in arithmetic] == [computed] * len(arithmetic), counts
            assert counts["relu"] == counts["reshape"] == counts["state"] == runs
        assert all(counts[n] == 3 for n in arithmetic), counts


def test_a_shape_handed_out_of_the_graph_is_computed_anew(rng):
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Relu", ["x"], ["y"], name="relu")]
    model = make_model(nodes, [vi("x", None)],
                       [helper.make_tensor_value_info("s", TensorProto.INT64, None), vi("y", None)])
    with Executor(load_model(model.SerializeToString())) as ex:
        first = ex.run({"x": np.ones((2, 5), np.float32)}).numpy_outputs()["s"]
        first[...] = 0
        again = ex.run({"x": np.ones((2, 5), np.float32)}).numpy_outputs()["s"]
    np.testing.assert_array_equal(again, [2, 5])


def test_a_loop_body_whose_shapes_change_each_iteration(rng):
    """Each iteration doubles the carried tensor: the body's Shape sees a new shape every
    time, and what it feeds (a ConstantOfShape) follows it."""
    body = helper.make_graph(
        [helper.make_node("Shape", ["v"], ["s"], name="body shape"),
         helper.make_node("ConstantOfShape", ["s"], ["ones"], name="body ones",
                          value=numpy_helper.from_array(np.array([1.0], np.float32))),
         helper.make_node("Concat", ["v", "ones"], ["v_next"], name="body concat", axis=0),
         helper.make_node("ReduceSum", ["v_next"], ["total"], name="body sum", keepdims=0),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body cond")],
        "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []), vi("v", None)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), vi("v_next", None),
         vi("total", None)])
    nodes = [helper.make_node("Loop", ["trips", "keep_going", "x"], ["v_last", "totals"], name="loop",
                              body=body)]
    inits = [numpy_helper.from_array(np.array(4, np.int64), "trips"),
             numpy_helper.from_array(np.array(True), "keep_going")]
    model = make_model(nodes, [vi("x", None)], [vi("v_last", None), vi("totals", None)],
                       initializers=inits)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with Executor(load_model(model.SerializeToString())) as ex:
        for n in (3, 3, 2):
            x = rng.standard_normal((n, 2)).astype(np.float32)
            got = ex.run({"x": x}).numpy_outputs()
            for name, want in zip(("v_last", "totals"), sess.run(None, {"x": x})):
                np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-5)
