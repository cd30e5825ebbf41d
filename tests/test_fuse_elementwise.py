"""Elementwise chains on a device as one generated kernel (engine/fuse_elementwise.py).

Run on the strict fake cupy with ``ElementwiseKernel`` compiled as C on the host
(tests/host_cuda.py): the generated source computes the numbers, checked against
onnxruntime on fresh random inputs; the launch table says what ran."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from fake_cupy import install
from host_cuda import install_kernels, refusing_kernel
from onnx import TensorProto, helper, numpy_helper

from engine.executor import Executor
from engine.fuse_elementwise import chain_source
from partition import load_model
from partition.ir import Node

pytestmark = pytest.mark.cpu_only(reason="installs its own fake cupy with host-compiled kernels")

F, D, I32 = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT32
_NP = {F: np.float32, D: np.float64, I32: np.int32}


def _model(nodes, inputs, outputs, inits=(), dtype=F):
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info(n, dtype, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, dtype, None) for n in outputs],
                          [numpy_helper.from_array(v, n) for n, v in inits])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _reference(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def _run(monkeypatch, model, feeds, **opts):
    """(outputs, the warm run's launch table, the executor's step op types) on the fake GPU."""
    fake = install(monkeypatch)
    install_kernels(monkeypatch, fake)
    with Executor(load_model(model.SerializeToString()), device="gpu", **opts) as ex:
        ex.run(feeds)
        with fake.counting() as counts:
            res = ex.run(feeds)
        steps = [s.node.op_type for s in ex._steps]
        outs = {k: v.get() for k, v in res.outputs.items()}
        kept = {k: v.get() for k, v in (res.values or {}).items()
                if hasattr(v, "get")} if opts.get("keep_intermediates") else {}
    return outs, counts.launch_calls, steps, kept


def _generated(launches):
    return sum(n for k, n in launches.items() if k.startswith("ElementwiseKernel:sglens_ew_"))


# (ops, the chain's other inputs: (name, shape) or a constant array)
CHAINS = {
    "bias_residual": ([("Add", "b"), ("Add", "r")], {"b": (5,), "r": (2, 3, 5)}),
    "affine_sigmoid": ([("Mul", "s"), ("Add", "b"), ("Sigmoid", None)], {"s": (1,), "b": (3, 1)}),
    "unary_tail": ([("Neg", None), ("Relu", None), ("Exp", None), ("Log", None), ("Sqrt", None),
                    ("Tanh", None), ("Erf", None), ("Abs", None)], {}),
    # the reciprocal before the subtraction: 1/(a - b) would amplify a cancellation's rounding
    "pow_div": ([("Pow", "p"), ("Div", "q"), ("Reciprocal", None), ("Sub", "b")],
                {"p": (1,), "q": (2, 1, 5), "b": (5,)}),
    "trig_round": ([("Sin", None), ("Mul", "s"), ("Cos", None), ("Floor", None), ("Add", "b"), ("Ceil", None)],
                   {"s": (1,), "b": (1, 3, 1)}),
    "leaky": ([("Mul", "s"), ("LeakyRelu", None)], {"s": (5,)}),
}


def _chain_model(ops, others, dtype=F, rng=None, shape=(2, 3, 5)):
    nodes, prev = [], "x"
    for k, (op, other) in enumerate(ops):
        out = f"t{k}" if k + 1 < len(ops) else "y"
        attrs = {"alpha": 0.2} if op == "LeakyRelu" else {}
        nodes.append(helper.make_node(op, [prev, other] if other else [prev], [out], name=f"n{k}", **attrs))
        prev = out
    # Constants for the operands of Pow/Div that must keep the domain real and finite.
    inits = [(n, (np.abs(rng.standard_normal(s)) + 0.5).astype(_NP[dtype])) for n, s in others.items()
             if n in ("p", "q", "s")]
    inputs = [("x", list(shape))] + [(n, list(s)) for n, s in others.items() if n not in ("p", "q", "s")]
    feeds = {n: (rng.standard_normal(s) + (2 if n == "x" else 0)).astype(_NP[dtype])
             for n, s in [("x", shape)] + [(n, s) for n, s in others.items() if n not in ("p", "q", "s")]}
    if dtype == I32:
        feeds = {n: rng.integers(1, 5, v.shape).astype(np.int32) for n, v in feeds.items()}
        inits = [(n, rng.integers(1, 3, v.shape).astype(np.int32)) for n, v in inits]
    return _model(nodes, inputs, ["y"], inits, dtype), feeds


@pytest.mark.parametrize("name", list(CHAINS))
@pytest.mark.parametrize("dtype", [F, D])
def test_a_chain_is_one_generated_launch_and_matches_onnxruntime(monkeypatch, rng, name, dtype):
    ops, others = CHAINS[name]
    if dtype == D:   # onnxruntime has no float64 Erf
        ops = [op for op in ops if op[0] != "Erf"]
    model, feeds = _chain_model(ops, others, dtype, rng)
    got, launches, steps, _ = _run(monkeypatch, model, feeds)
    want = _reference(model, feeds)
    np.testing.assert_allclose(got["y"], want["y"], rtol=2e-5 if dtype == F else 1e-12, atol=1e-6)
    assert got["y"].dtype == want["y"].dtype and got["y"].shape == want["y"].shape
    assert _generated(launches) == 1 and len(steps) == 1, (launches, steps)


def test_integer_chains_run_as_written(monkeypatch, rng):
    """An int32 Add/Mul/Sub chain: no float kernel; the xp kernels, same answer."""
    model, feeds = _chain_model([("Add", "b"), ("Mul", "s"), ("Sub", "b")], {"b": (5,), "s": (1,)}, I32, rng)
    got, launches, _, _ = _run(monkeypatch, model, feeds)
    np.testing.assert_array_equal(got["y"], _reference(model, feeds)["y"])
    assert _generated(launches) == 0


def test_a_tensor_read_twice_or_handed_out_ends_a_chain(monkeypatch, rng):
    """``t0`` is read by two nodes and ``t2`` is a graph output: neither is fused away."""
    nodes = [helper.make_node("Mul", ["x", "x"], ["t0"], name="sq"),
             helper.make_node("Sigmoid", ["t0"], ["t1"], name="a"),
             helper.make_node("Tanh", ["t0"], ["t2"], name="b"),
             helper.make_node("Add", ["t1", "t2"], ["t3"], name="c"),
             helper.make_node("Neg", ["t3"], ["y"], name="d"),
             helper.make_node("Exp", ["t2"], ["z"], name="e")]
    model = _model(nodes, [("x", [4, 6])], ["y", "z", "t2"])
    feeds = {"x": rng.standard_normal((4, 6)).astype(np.float32)}
    got, launches, steps, _ = _run(monkeypatch, model, feeds)
    want = _reference(model, feeds)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=2e-5, atol=1e-6)
    # Sigmoid -> Add -> Neg is one chain (Add's other input is an outer tensor); sq, b, e stay.
    assert sorted(steps) == sorted(["Mul", "Tanh", "Sigmoid+Add+Neg", "Exp"]), steps


def test_the_debugger_sees_every_tensor_of_a_fused_chain(monkeypatch, rng):
    ops, others = CHAINS["affine_sigmoid"]
    model, feeds = _chain_model(ops, others, F, rng)
    got, _, _, kept = _run(monkeypatch, model, feeds, keep_intermediates=True)
    inner = helper.make_model(model.graph, opset_imports=model.opset_import, ir_version=8)
    inner.graph.output.extend([helper.make_tensor_value_info(t, F, None) for t in ("t0", "t1")])
    want = _reference(inner, feeds)
    for t in ("t0", "t1", "y"):
        np.testing.assert_allclose(kept[t] if t != "y" else got[t], want[t], rtol=2e-5, atol=1e-6)


def test_a_chain_whose_source_does_not_compile_runs_as_written(monkeypatch, rng):
    fake = install(monkeypatch)
    install_kernels(monkeypatch, fake)
    monkeypatch.setattr(fake, "ElementwiseKernel", refusing_kernel)
    model, feeds = _chain_model(*CHAINS["bias_residual"], F, rng)
    with Executor(load_model(model.SerializeToString()), device="gpu") as ex:
        with pytest.warns(RuntimeWarning, match="sglens_ew_.*did not compile"):
            first = ex.run(feeds).outputs["y"].get()
        second = ex.run(feeds).outputs["y"].get()   # no second try
    want = _reference(model, feeds)["y"]
    np.testing.assert_allclose(first, want, rtol=1e-6)
    np.testing.assert_allclose(second, want, rtol=1e-6)


def test_the_source_holds_no_model_strings_and_is_shared_by_equal_chains():
    a = (Node("n0", "Mul", ("x<script>", "w"), ("m",)), Node("n1", "Add", ("m", "x<script>"), ("y",)))
    b = (Node("k0", "Mul", ("u", "v"), ("p",)), Node("k1", "Add", ("p", "u"), ("q",)))
    ins_a, src_a = chain_source(a)
    ins_b, src_b = chain_source(b)
    assert ins_a == ("x<script>", "w") and ins_b == ("u", "v")
    assert src_a == src_b == "const T t0 = (a0 * a1);\nconst T t1 = (t0 + a0);\ny = t1;"


def test_the_cpu_path_is_unchanged(rng):
    """On numpy no chain is fused (the CPU has its own fusions and in-place forms)."""
    model, feeds = _chain_model(*CHAINS["affine_sigmoid"], F, rng)
    with Executor(load_model(model.SerializeToString())) as ex:
        assert [s.node.op_type for s in ex._steps] == ["Mul", "Add", "Sigmoid"]
        np.testing.assert_allclose(ex.run(feeds).outputs["y"], _reference(model, feeds)["y"], rtol=2e-6)
