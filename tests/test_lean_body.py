"""Bodies of If/Loop compiled into one straight-line function (``engine/body.py``):
results against onnxruntime, failures named after their node, short results, and
tensor names that are not Python identifiers (names are data, never code)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from engine.body import compile_body
from engine.executor import Executor
from engine.run_errors import KernelFailure, RunError
from partition import load_model

from conftest import make_model

F = TensorProto.FLOAT
ODD = ["x; import os", "a b", "t'\"{}", "v0", "K", "ü/名前", "__import__('os')"]


def vi(name: str, shape: list, t: int = F) -> object:
    return helper.make_tensor_value_info(name, t, shape)


def _if_model(names: list[str]):
    """If(c): then = a chain over the outer ``x`` through tensors called ``names``,
    with a weight, returning the chain's end and the weight (a folded Constant, read
    from outside the compiled function); else = Neg(x), Identity(x)."""
    w = helper.make_tensor(names[1] + "_w", F, [3], [0.5, -2.0, 3.0])
    nodes = [helper.make_node("Constant", [], [names[1] + "_w"], value=w)]
    prev = "x"
    for i, n in enumerate(names):
        op = ("Mul", [prev, names[1] + "_w"]) if i == 1 else ("Relu", [prev]) if i % 2 else \
            ("Add", [prev, "x"])
        nodes.append(helper.make_node(op[0], op[1], [n], name=f"node {n}"))
        prev = n
    then_g = helper.make_graph(nodes, "then", [], [vi(prev, [3]), vi(names[1] + "_w", [3])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["neg"], name="neg"),
                                helper.make_node("Identity", ["x"], ["same"], name="same")],
                               "else", [], [vi("neg", [3]), vi("same", [3])])
    return make_model([helper.make_node("If", ["c"], ["y", "z"], name="the_if",
                                        then_branch=then_g, else_branch=else_g)],
                      [vi("c", [], TensorProto.BOOL), vi("x", [3])], [vi("y", [3]), vi("z", [3])])


@pytest.mark.parametrize("cond", [True, False])
def test_a_compiled_body_matches_onnxruntime_with_odd_tensor_names(cond: bool,
                                                                   rng: np.random.Generator) -> None:
    model = _if_model(ODD)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with Executor(load_model(model.SerializeToString())) as ex:
        for _ in range(3):
            feeds = {"c": np.array(cond), "x": rng.standard_normal(3).astype(np.float32)}
            got = ex(feeds)
            for name, want in zip(("y", "z"), sess.run(None, feeds)):
                np.testing.assert_allclose(got[name], want, rtol=1e-6, err_msg=name)
        sources = [c._body_fn.source for c in ex._children.values()]
    assert sources and all("import" not in s and "ü" not in s for s in sources)


def test_a_failure_inside_a_body_names_the_if_and_the_node() -> None:
    def boom(xp, *args, **attrs):
        raise ValueError("kaboom")

    model = _if_model(["p", "q", "r"])

    def kernels(node, opset):
        from engine.executor import find_kernel  # noqa: PLC0415
        return boom if node.name == "node q" else find_kernel(node, opset)
    with Executor(load_model(model.SerializeToString()), kernels=kernels) as ex:
        with pytest.raises(KernelFailure, match=r"'the_if' \(If\) > 'node q' \(Mul\).*kaboom"):
            ex({"c": np.array(True), "x": np.ones(3, np.float32)})
        # the executor is usable afterwards
        assert ex({"c": np.array(False), "x": np.ones(3, np.float32)})["y"].tolist() == [-1] * 3


def test_a_short_result_is_a_named_run_error() -> None:
    model = _if_model(["p", "q", "r"])

    def kernels(node, opset):
        from engine.executor import find_kernel  # noqa: PLC0415
        return (lambda xp, *a, **k: ()) if node.name == "node r" else find_kernel(node, opset)
    with Executor(load_model(model.SerializeToString()), kernels=kernels) as ex:
        with pytest.raises(RunError, match=r"'the_if' \(If\) > 'node r' \(\w+\).*returned 0 output"):
            ex({"c": np.array(True), "x": np.ones(3, np.float32)})
    with Executor(load_model(model.SerializeToString()), kernels=kernels, plan="nodes") as ex:
        with pytest.raises(RunError, match=r"'node r' \(\w+\).*returned 0 output"):   # the step loop's
            ex({"c": np.array(True), "x": np.ones(3, np.float32)})


@pytest.mark.cpu_only(reason="on a device the body's p -> q -> r chain is one generated kernel: nothing between to release")
def test_the_compiled_function_releases_tensors_after_their_last_reader() -> None:
    """The plan's drops become ``del v`` lines; outputs and outside tensors are kept."""
    model = _if_model(["p", "q", "r"])
    with Executor(load_model(model.SerializeToString())) as ex:
        ex({"c": np.array(True), "x": np.ones(3, np.float32)})
        then = next(c for c in ex._children.values() if c.graph.name == "then")
        fn = compile_body(then._steps, then.graph.inputs, then.graph.outputs,
                          {*then._weights, *then.graph.free_tensors}, set(then._weights), True, np,
                          lambda n, a, e: e)
    released = [line.split()[1] for line in fn.source.splitlines() if line.strip().startswith("del ")]
    assert len(released) == 2  # p and q; r is the output, x comes from outside
