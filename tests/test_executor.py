"""The executor's mechanics, on small hand-made graphs and a tiny kernel set of our own.

The kernels here are injected (``Executor(kernels=...)``), so these tests check
the executor -- parallel branches, freeing at last use, error naming, nested
bodies with outer-scope reads, the control-flow design's nested wait with one worker --
independently of ``engine/kernels``. Sample models on the real kernels are in
``test_executor_models.py``.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from onnx import TensorProto, helper

from engine import create_engine
from engine.executor import Executor
from engine.run_errors import DeviceError, KernelFailure, MissingKernelError
from partition import load_model

from conftest import make_model

F = TensorProto.FLOAT


# ------------------------------------------------------------ test kernels --
def _sleepy(xp, x, **_):
    time.sleep(0.2)
    return (x + 1,)


def _boom(xp, x, **_):
    raise ValueError("boom on purpose")


def _if(xp, cond, *, subgraphs, run_graph, **_):
    return tuple(run_graph(subgraphs["then_branch" if bool(cond) else "else_branch"], []))


def _loop(xp, trip, cond, *carried, subgraphs, run_graph, **_):
    """ONNX Loop: trip count and condition both optional and dynamic."""
    body = subgraphs["body"]
    n = len(carried)
    i, keep_going, scans = 0, True if cond is None else bool(cond), []
    while keep_going and (trip is None or i < int(trip)):
        # xp-generic, so these kernels also run on a device (the --fake-gpu plugin mode)
        out = run_graph(body, [xp.asarray(np.array(i, np.int64)), xp.asarray(np.array(keep_going)), *carried])
        keep_going, carried = bool(out[0]), tuple(out[1:1 + n])
        scans.append(out[1 + n:])
        i += 1
    k = len(scans[0]) if scans else 0
    return (*carried, *[xp.stack([s[j] for s in scans]) for j in range(k)])


KERNELS = {
    "Add": lambda xp, a, b, **_: (a + b,),
    "Mul": lambda xp, a, b, **_: (a * b,),
    "Relu": lambda xp, x, **_: (xp.maximum(x, 0),),
    "Identity": lambda xp, x, **_: (x,),
    "Less": lambda xp, a, b, **_: (a < b,),
    "ReduceSum": lambda xp, x, axes=None, keepdims=1, **_: (xp.asarray(x.sum(), x.dtype),),
    "Sleepy": _sleepy,
    "Boom": _boom,
    "If": _if,
    "Loop": _loop,
}


def kernels(node, opset):
    return KERNELS.get(node.op_type)


def graph_of(nodes, inputs, outputs, inits=None):
    return load_model(make_model(nodes, inputs, outputs, inits).SerializeToString())


def vi(name, shape, t=F):
    return helper.make_tensor_value_info(name, t, shape)


def one_worker_engine():
    return create_engine("threaded", num_cpu_workers=1)


# ------------------------------------------------------------------ basics --
def test_chain_and_weights(rng):
    w = rng.standard_normal((2, 3)).astype(np.float32)
    g = graph_of([helper.make_node("Add", ["x", "w"], ["a"], name="add"),
                  helper.make_node("Relu", ["a"], ["y"], name="relu")],
                 [vi("x", [2, 3])], [vi("y", [2, 3])],
                 [helper.make_tensor("w", F, [2, 3], w.ravel())])
    x = rng.standard_normal((2, 3)).astype(np.float32)
    with Executor(g, kernels=kernels) as ex:
        res = ex.run({"x": x})
        assert set(res.node_seconds) == {"add", "relu"}
        np.testing.assert_allclose(res.outputs["y"], np.maximum(x + w, 0))
        # a second run reuses the binding
        np.testing.assert_allclose(ex({"x": -x})["y"], np.maximum(-x + w, 0))


def test_independent_branches_run_in_parallel():
    nodes = [helper.make_node("Sleepy", ["x"], [f"b{i}"], name=f"branch{i}", domain="test")
             for i in range(3)]
    nodes += [helper.make_node("Add", ["b0", "b1"], ["s"], name="s"),
              helper.make_node("Add", ["s", "b2"], ["y"], name="y")]
    g = graph_of(nodes, [vi("x", [2])], [vi("y", [2])])
    with Executor(g, kernels=kernels, workers=3) as ex:
        t0 = time.perf_counter()
        y = ex({"x": np.zeros(2, np.float32)})["y"]
        wall = time.perf_counter() - t0
    np.testing.assert_allclose(y, 3.0)
    assert wall < 0.45, f"three 0.2 s branches took {wall:.2f} s: they did not overlap"


def test_memory_freed_at_last_use_unless_kept():
    n, size = 6, 256 * 1024  # floats: 1 MiB per tensor
    nodes, prev = [], "x"
    for i in range(n):
        nodes.append(helper.make_node("Relu", [prev], [f"t{i}"], name=f"r{i}"))
        prev = f"t{i}"
    g = graph_of(nodes, [vi("x", [size])], [vi(prev, [size])])
    x = np.ones(size, np.float32)
    with Executor(g, kernels=kernels) as ex:
        lean = ex.run({"x": x})
        kept = ex.run({"x": x}, keep_intermediates=True)
    mib = 4 * size
    assert lean.peak_bytes <= 2 * mib, "a chain never needs more than two tensors alive"
    assert lean.values == {}
    assert kept.peak_bytes == (n + 1) * mib
    assert set(kept.values) == {"x", *(f"t{i}" for i in range(n))}


def test_graph_output_that_is_an_input_or_weight():
    g = graph_of([helper.make_node("Relu", ["x"], ["y"], name="r")],
                 [vi("x", [2])], [vi("y", [2]), vi("x", [2]), vi("w", [2])],
                 [helper.make_tensor("w", F, [2], [1.0, 2.0])])
    x = np.array([-1, 1], np.float32)
    with Executor(g, kernels=kernels) as ex:
        out = ex({"x": x})
    np.testing.assert_array_equal(out["x"], x)
    np.testing.assert_array_equal(out["w"], [1, 2])


# ------------------------------------------------------------------ errors --
def test_kernel_failure_names_node_op_and_shapes():
    g = graph_of([helper.make_node("Relu", ["x"], ["a"], name="ok"),
                  helper.make_node("Boom", ["a"], ["b"], name="bad_node", domain="test"),
                  helper.make_node("Relu", ["b"], ["y"], name="after")],
                 [vi("x", [2, 5])], [vi("y", [2, 5])])
    engine = create_engine("threaded", num_cpu_workers=2)
    try:
        ex = Executor(g, engine, kernels=kernels)
        with pytest.raises(KernelFailure) as info:
            ex.run({"x": np.zeros((2, 5), np.float32)})
        msg = str(info.value)
        assert "'bad_node'" in msg and "(Boom)" in msg and "[2, 5]" in msg and "boom on purpose" in msg
        assert info.value.input_shapes == [[2, 5]]
        # nothing leaks into the shared engine, and the executor still works
        engine.wait_for_all()
        g2 = graph_of([helper.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", [1])], [vi("y", [1])])
        assert Executor(g2, engine, kernels=kernels)({"x": np.ones(1, np.float32)})["y"][0] == 1
    finally:
        engine.shutdown()


def test_a_node_with_many_inputs_lists_the_first_shapes_and_counts_the_rest():
    """A subgraph node takes every weight it reads (silero-VAD's: 45 inputs): its one-line error
    lists the first SHAPES_SHOWN shapes and counts the others; all are kept, and survive pickling."""
    import pickle
    from engine.run_errors import SHAPES_SHOWN
    n = SHAPES_SHOWN + 7
    xs = [f"x{i}" for i in range(n)]
    g = graph_of([helper.make_node("Boom", xs, ["y"], name="wide", domain="test")],
                 [vi(x, [i + 1]) for i, x in enumerate(xs)], [vi("y", [1])])
    with Executor(g, kernels=kernels) as ex, pytest.raises(KernelFailure) as info:
        ex.run({x: np.zeros(i + 1, np.float32) for i, x in enumerate(xs)})
    msg = str(info.value)
    assert f"[{SHAPES_SHOWN}]" in msg and f"[{SHAPES_SHOWN + 1}]" not in msg and "(+7 more)" in msg, msg
    assert info.value.input_shapes == [[i + 1] for i in range(n)]
    again = pickle.loads(pickle.dumps(info.value))
    assert str(again) == msg and again.input_shapes == info.value.input_shapes


def test_failure_on_a_branch_no_output_needs_is_still_reported():
    g = graph_of([helper.make_node("Relu", ["x"], ["y"], name="main"),
                  helper.make_node("Boom", ["x"], ["dead"], name="dead_end", domain="test")],
                 [vi("x", [3])], [vi("y", [3])])
    with Executor(g, kernels=kernels) as ex, pytest.raises(KernelFailure, match="dead_end"):
        ex.run({"x": np.zeros(3, np.float32)})


def test_missing_kernel_is_named_at_bind_time():
    g = graph_of([helper.make_node("Frobnicate", ["x"], ["y"], name="f", domain="test")],
                 [vi("x", [1])], [vi("y", [1])])
    with pytest.raises(MissingKernelError, match="Frobnicate"):
        Executor(g, kernels=kernels)


@pytest.mark.cpu_only(reason="checks the error given when no GPU is present; the plugin provides one")
def test_gpu_without_gpu_is_a_clear_error():
    from engine import gpu
    if gpu.device_count() > 0:
        pytest.skip("a GPU is present")
    g = graph_of([helper.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", [1])], [vi("y", [1])])
    with pytest.raises(DeviceError, match="--device cpu") as err:
        Executor(g, device="gpu", kernels=kernels)
    # the run page shows this message too: the choice in its words first, the CLI's flag beside them
    assert str(err.value).startswith("device gpu: ") and "choose the device cpu" in str(err.value)


def test_missing_feed_is_an_input_error():
    from engine.run_errors import InputError
    g = graph_of([helper.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", [1])], [vi("y", [1])])
    with Executor(g, kernels=kernels) as ex, pytest.raises(InputError, match="'x'|x"):
        ex.run({})


# ------------------------------------------------------------ control flow --
def _if_graph():
    """y = If(sum(x) < 0) then x * k else Relu(x) + k; both branches read outer x and k."""
    then_g = helper.make_graph([helper.make_node("Mul", ["x", "k"], ["t_out"], name="then_mul")],
                               "then", [], [vi("t_out", [3])])
    else_g = helper.make_graph([helper.make_node("Relu", ["x"], ["e_r"], name="else_relu"),
                                helper.make_node("Add", ["e_r", "k"], ["e_out"], name="else_add")],
                               "else", [], [vi("e_out", [3])])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
             helper.make_node("Less", ["s", "zero"], ["c"], name="less"),
             helper.make_node("Mul", ["x", "two"], ["k"], name="k"),
             helper.make_node("If", ["c"], ["y"], name="if", then_branch=then_g, else_branch=else_g)]
    inits = [helper.make_tensor("zero", F, [], [0.0]), helper.make_tensor("two", F, [], [2.0])]
    return graph_of(nodes, [vi("x", [3])], [vi("y", [3])], inits)


@pytest.mark.parametrize("x", [[1.0, -2.0, 3.0], [-1.0, -2.0, 0.5]])
def test_if_with_outer_scope_reads(x):
    x = np.array(x, np.float32)
    k = 2 * x
    want = x * k if x.sum() < 0 else np.maximum(x, 0) + k
    with Executor(_if_graph(), one_worker_engine(), kernels=kernels) as ex:
        np.testing.assert_allclose(ex({"x": x})["y"], want)


def _loop_graph(inner: bool = False):
    """Loop with a dynamic trip count M and a condition (acc < limit); the body
    reads outer ``step``; with ``inner``, the body holds an If holding a Loop."""
    body_nodes = [helper.make_node("Add", ["acc_in", "step"], ["acc_out"], name="body_add"),
                  helper.make_node("Less", ["acc_out", "limit"], ["cond_out"], name="body_less"),
                  helper.make_node("Identity", ["acc_out"], ["scan_out"], name="body_scan")]
    if inner:
        # acc_out2 = If(cond_out) then Loop(2 iterations: acc += step) else acc_out
        inner_body = helper.make_graph(
            [helper.make_node("Add", ["a_in", "step"], ["a_out"], name="deep_add"),
             helper.make_node("Identity", ["c_in"], ["c_out"], name="deep_cond")],
            "deep", [vi("j", [], TensorProto.INT64), vi("c_in", [], TensorProto.BOOL), vi("a_in", [1])],
            [vi("c_out", [], TensorProto.BOOL), vi("a_out", [1])])
        then_g = helper.make_graph(
            [helper.make_node("Loop", ["two_i", "", "acc_out"], ["deep_out"], name="deep_loop", body=inner_body)],
            "then", [], [vi("deep_out", [1])])
        else_g = helper.make_graph([helper.make_node("Identity", ["acc_out"], ["same"], name="else_id")],
                                   "else", [], [vi("same", [1])])
        body_nodes.append(helper.make_node("If", ["cond_out"], ["acc_final"], name="body_if",
                                           then_branch=then_g, else_branch=else_g))
        out_acc = "acc_final"
    else:
        out_acc = "acc_out"
    body = helper.make_graph(body_nodes, "body",
                             [vi("i", [], TensorProto.INT64), vi("cond_in", [], TensorProto.BOOL),
                              vi("acc_in", [1])],
                             [vi("cond_out", [], TensorProto.BOOL), vi(out_acc, [1]), vi("scan_out", [1])])
    nodes = [helper.make_node("Loop", ["M", "go", "acc0"], ["acc", "trace"], name="loop", body=body)]
    inits = [helper.make_tensor("limit", F, [1], [10.0]), helper.make_tensor("two_i", TensorProto.INT64, [], [2])]
    return graph_of(nodes, [vi("M", [], TensorProto.INT64), vi("go", [], TensorProto.BOOL),
                            vi("acc0", [1]), vi("step", [1])],
                    [vi("acc", [1]), vi("trace", ["n", 1])], inits)


def _loop_reference(M, go, acc, step, inner):
    trace, i = [], 0
    while go and i < M:
        acc = acc + step
        go = bool(acc[0] < 10)
        trace.append(acc.copy())
        if inner and go:
            acc = acc + 2 * step
        i += 1
    return acc, np.stack(trace) if trace else np.zeros((0, 1), np.float32)


@pytest.mark.parametrize("inner", [False, True], ids=["flat", "nested3deep"])
@pytest.mark.parametrize("M,go,step", [(100, True, 1.5), (3, True, 1.0), (1, True, 20.0)],
                         ids=["condition-stops", "trip-count-stops", "one-iteration"])
def test_loop_dynamic_trip_count_and_condition(M, go, step, inner):
    g = _loop_graph(inner)
    feeds = {"M": np.array(M, np.int64), "go": np.array(go), "acc0": np.zeros(1, np.float32),
             "step": np.array([step], np.float32)}
    want_acc, want_trace = _loop_reference(M, go, np.zeros(1, np.float32), np.float32(step), inner)
    with Executor(g, one_worker_engine(), kernels=kernels) as ex:
        out = ex({k: v for k, v in feeds.items()})
    np.testing.assert_allclose(out["acc"], want_acc)
    np.testing.assert_allclose(out["trace"], want_trace)


def test_nested_waits_with_one_worker_do_not_deadlock():
    """The control-flow design's hazard: every If/Loop waits for its body on the only worker."""
    g = _loop_graph(inner=True)
    feeds = {"M": np.array(50, np.int64), "go": np.array(True), "acc0": np.zeros(1, np.float32),
             "step": np.array([0.25], np.float32)}
    done = threading.Event()
    result = {}

    def go():
        with Executor(g, one_worker_engine(), kernels=kernels) as ex:
            result["out"] = ex(feeds)
        done.set()
    t = threading.Thread(target=go, daemon=True)
    t.start()
    assert done.wait(60), "nested body runs deadlocked on a one-worker engine"
    want, _ = _loop_reference(50, True, np.zeros(1, np.float32), np.float32(0.25), True)
    np.testing.assert_allclose(result["out"]["acc"], want, rtol=1e-5)


def test_failure_inside_a_body_names_the_path():
    body = helper.make_graph([helper.make_node("Boom", ["x"], ["b"], name="deep_boom", domain="test")],
                             "then", [], [vi("b", [2])])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["o"], name="id")], "else", [], [vi("o", [2])])
    g = graph_of([helper.make_node("If", ["c"], ["y"], name="the_if", then_branch=body, else_branch=other)],
                 [vi("c", [], TensorProto.BOOL), vi("x", [2])], [vi("y", [2])])
    with Executor(g, kernels=kernels) as ex, pytest.raises(KernelFailure) as info:
        ex({"c": np.array(True), "x": np.zeros(2, np.float32)})
    assert info.value.node == "deep_boom"
    assert "'the_if' (If) > 'deep_boom' (Boom)" in str(info.value)
