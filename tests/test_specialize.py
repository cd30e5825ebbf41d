"""Nodes specialised on their constant inputs (engine/specialize.py) against onnxruntime.

Each case is a one-node model whose axes / shape / pads / indices are initializers
(or Constant nodes), run on fresh random inputs of several shapes by our executor
(on the host and on the strict cupy stand-in) and by onnxruntime. The specialised
call must actually be bound, a replaced weight must be honoured, and shapes a plan
rejects must still fail with the registry kernel's named error.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.executor import Executor
from engine.run_errors import KernelFailure
from fake_cupy import install
from partition import load_model


def _model(op: str, x_shape: tuple, consts: list[np.ndarray | None], as_nodes: bool,
           x_dtype: Any = np.float32, **attrs: Any) -> onnx.ModelProto:
    names, inits, nodes = ["x"], [], []
    for i, c in enumerate(consts):
        if c is None:
            names.append("")
            continue
        n = f"c{i}"
        names.append(n)
        t = numpy_helper.from_array(c, n)
        if as_nodes:
            nodes.append(helper.make_node("Constant", [], [n], value=t))
        else:
            inits.append(t)
    while names and names[-1] == "":
        names.pop()
    nodes.append(helper.make_node(op, names, ["y"], name="n", **attrs))
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(x_dtype))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", elem, None)],
                          [helper.make_tensor_value_info("y", elem, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _i(*v: int) -> np.ndarray:
    return np.array(v, np.int64)


def _w(*shape: int) -> np.ndarray:
    return np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)


# (op, consts, attrs, input shapes: several, so plans per shape are exercised)
CASES: list[tuple[str, list, dict, list[tuple]]] = [
    ("Unsqueeze", [_i(0, -1)], {}, [(3, 4), (2,), (1, 5, 2)]),
    ("Squeeze", [_i(1, -1)], {}, [(3, 1, 1), (2, 1, 4, 1)]),
    ("Squeeze", [], {}, [(1, 3, 1), (2, 4)]),
    ("Reshape", [_i(0, -1)], {}, [(3, 4, 2), (5, 1)]),
    ("Reshape", [_i(-1, 4)], {}, [(2, 8), (4, 3, 4)]),
    ("Slice", [_i(1, -4), _i(100, -1), _i(0, -1), _i(1, 2)], {}, [(3, 9), (5, 2, 7)]),
    ("Slice", [_i(-1), _i(-100), _i(1), _i(-2)], {}, [(2, 7, 3), (4, 6)]),
    ("Slice", [_i(0, 1), _i(2, 3)], {}, [(4, 5), (3, 3, 3)]),
    ("Gather", [np.array(1, np.int64)], {"axis": 0}, [(3, 4), (2, 2, 2)]),
    ("Gather", [np.array(-1, np.int64)], {"axis": 1}, [(3, 4), (2, 5, 2)]),
    ("Gather", [_i(0, -1, 2, 0)], {"axis": -1}, [(3, 4), (2, 5, 3)]),
    ("Pad", [_i(0, 2, 1, 3)], {"mode": "reflect"}, [(4, 6), (5, 4)]),
    ("Pad", [_i(1, 0, 0, 3)], {"mode": "edge"}, [(3, 5), (2, 2)]),
    ("Pad", [_i(0, 2, 0, 1)], {"mode": "wrap"}, [(3, 5), (2, 4)]),
    ("Pad", [_i(1, -1, 2, 2), np.array(1.5, np.float32)], {"mode": "constant"}, [(3, 5), (4, 3)]),
    ("Pad", [_i(0, 1, 3, 0, 2, 3)], {"mode": "reflect"}, [(2, 5, 4), (3, 4, 6)]),
    ("ReduceMean", [_i(-1)], {"keepdims": 0}, [(3, 5), (2, 3, 4)]),
    ("ReduceMean", [_i(0, 2)], {}, [(3, 5, 2), (2, 3, 4, 2)]),
    ("ReduceSum", [_i(1)], {"keepdims": 1}, [(3, 5), (2, 3, 4)]),
    ("ReduceMean", [], {"keepdims": 0}, [(3, 5)]),
    ("ReduceMax", [_i(-1, 0)], {"keepdims": 0}, [(3, 5), (2, 3, 4)]),
    ("ReduceMin", [_i(1)], {}, [(3, 5), (2, 3, 4)]),
    # Over axes of length 1 only: a reshape (the second shape reduces for real).
    ("ReduceMean", [_i(-1)], {"keepdims": 0}, [(2, 3, 1), (2, 3, 4)]),
    ("ReduceMean", [_i(0, 2)], {}, [(1, 4, 1), (2, 4, 3)]),
    ("ReduceSum", [_i(1)], {"keepdims": 0}, [(3, 1), (3, 2)]),
    ("ReduceMax", [_i(0, 1)], {"keepdims": 0}, [(1, 1), (2, 3)]),
    # The other reductions by their registry function on planned axes (skl2onnx's kNN Scan body
    # runs a ReduceSumSquare per training row); over length-1 axes they still square, root or log.
    ("ReduceSumSquare", [_i(-1)], {"keepdims": 0}, [(3, 5), (2, 3, 1)]),
    ("ReduceSumSquare", [], {}, [(3, 5), (1, 1)]),
    # over the last axis: a dot of each row with itself (the third shape's row too long for it)
    ("ReduceSumSquare", [_i(-1)], {"keepdims": 1}, [(16, 30), (2, 3, 7), (2, 1500)]),
    ("ReduceL2", [_i(2)], {"keepdims": 0}, [(2, 3, 5), (4, 1, 9)]),
    ("ReduceL2", [_i(0, 2)], {}, [(3, 5, 2), (1, 4, 1)]),
    ("ReduceL1", [_i(1)], {"keepdims": 0}, [(3, 5), (2, 1, 4)]),
    ("ReduceLogSumExp", [_i(-1)], {}, [(3, 5), (2, 3, 1)]),
    ("ReduceProd", [_i(0)], {"keepdims": 0}, [(3, 5), (1, 4)]),
    ("Conv", [_w(6, 4, 3), _w(6)], {"pads": [1, 1], "strides": [2]}, [(1, 4, 9), (2, 4, 5)]),
    ("Conv", [_w(5, 3, 3, 2)], {"pads": [1, 0, 2, 1], "dilations": [2, 1]}, [(1, 3, 6, 5)]),
    ("Conv", [_w(4, 2, 3, 3), _w(4)], {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
     [(1, 2, 5, 7), (2, 2, 4, 4)]),
    ("Conv", [_w(10, 1, 16)], {"kernel_shape": [16], "strides": [8]}, [(1, 1, 64)]),
    ("Conv", [_w(3, 8, 1), _w(3)], {}, [(1, 8, 1), (1, 8, 300)]),   # the second: too big, generic
    # Taps in the padding (one flat take with a trailing zero): wide pads, dilation, N=2, 3-D.
    ("Conv", [_w(4, 3, 3), _w(4)], {"pads": [4, 3], "dilations": [2], "strides": [3]},
     [(2, 3, 7), (1, 3, 2)]),
    ("Conv", [_w(2, 2, 2, 3, 2)], {"pads": [1, 0, 1, 1, 2, 0], "strides": [1, 2, 1]},
     [(1, 2, 3, 4, 3), (2, 2, 2, 3, 2)]),
    ("Conv", [_w(5, 4, 2, 2), _w(5)], {"strides": [1, 2]}, [(2, 4, 3, 6)]),
]
#: Convs past the small-conv plan: on the host their compiled kernel is decided once per shape
#: (``nn.conv_fused_plan``); a device runs the registry kernel.
COMPILED_CASES: list[tuple[str, list, dict, list[tuple]]] = [
    ("Conv", [_w(8, 4, 3, 3), _w(8)], {"pads": [1, 1, 1, 1]}, [(1, 4, 20, 20), (2, 4, 9, 13)]),
    ("Conv", [_w(6, 1, 3, 3)], {"group": 6, "strides": [2, 2], "pads": [1, 0, 1, 1]}, [(1, 6, 20, 17)]),
    ("Conv", [_w(16, 8, 1, 1), _w(16)], {}, [(1, 8, 30, 30)]),
]
REDUCE_ATTR_OPSET = {op: 18 for op in ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceSumSquare", "ReduceL2",
                                        "ReduceL1", "ReduceLogSumExp", "ReduceProd")}  # attributes at 17


def _build(op: str, consts: list, attrs: dict, shape: tuple, as_nodes: bool) -> onnx.ModelProto:
    if op in REDUCE_ATTR_OPSET and consts:  # the attribute form of opset 17
        return _model(op, shape, [], as_nodes, axes=[int(a) for a in consts[0]], **attrs)
    return _model(op, shape, consts, as_nodes, **attrs)


def _cell(fn: Any, name: str) -> Any:
    """A variable a closure captured (the specialised call's body, the body's plans)."""
    return dict(zip(fn.__code__.co_freevars, (c.cell_contents for c in fn.__closure__)))[name]


def _ort(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("as_nodes", [False, True])
def test_specialised_nodes_match_onnxruntime(case: int, as_nodes: bool,
                                             rng: np.random.Generator) -> None:
    _check_planned(*CASES[case], as_nodes, rng)


@pytest.mark.cpu_only("the host's compiled conv plans: a device runs the registry kernel")
@pytest.mark.parametrize("case", range(len(COMPILED_CASES)))
def test_convs_past_the_small_plan_are_planned_on_the_host(case: int, rng: np.random.Generator) -> None:
    _check_planned(*COMPILED_CASES[case], False, rng)


def _check_planned(op: str, consts: list, attrs: dict, shapes: list, as_nodes: bool,
                   rng: np.random.Generator) -> None:
    model = _build(op, consts, attrs, shapes[0], as_nodes)
    with Executor(load_model(model.SerializeToString())) as ex:
        step = ex._steps[-1]
        assert step.call.__qualname__.split(".")[0] in ("specialized_call", "_flat_call"), \
            "the specialised call was not bound"
        for shape in shapes * 2:  # each shape twice: planned, then from the plan
            x = rng.standard_normal(shape).astype(np.float32)
            got = ex.run({"x": x}).numpy_outputs()["y"]
            want = _ort(model, x)
            assert got.shape == want.shape and got.dtype == want.dtype
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        plans = _cell(step.call, "plans") if "plans" in step.call.__code__.co_freevars \
            else _cell(_cell(step.call, "body"), "plans")
        assert plans.get(shapes[0]) is not None, "the first shape was not planned: generic kernel ran"


@pytest.mark.parametrize("case", range(len(CASES) + len(COMPILED_CASES)))
def test_specialised_nodes_on_the_fake_device(case: int, monkeypatch: pytest.MonkeyPatch,
                                              rng: np.random.Generator) -> None:
    install(monkeypatch)
    op, consts, attrs, shapes = (CASES + COMPILED_CASES)[case]
    model = _build(op, consts, attrs, shapes[0], False)
    with Executor(load_model(model.SerializeToString()), device="gpu") as ex:
        for shape in shapes:
            x = rng.standard_normal(shape).astype(np.float32)
            got = ex.run({"x": x}).numpy_outputs()["y"]
            np.testing.assert_allclose(got, _ort(model, x), rtol=1e-5, atol=1e-5)


def test_a_replaced_weight_is_honoured(rng: np.random.Generator) -> None:
    model = _model("Slice", (4, 6), [_i(0), _i(2), _i(1)], False)
    with Executor(load_model(model.SerializeToString())) as ex:
        x = rng.standard_normal((4, 6)).astype(np.float32)
        np.testing.assert_array_equal(ex({"x": x})["y"], x[:, 0:2])
        ex.set_weight("c1", _i(5))
        np.testing.assert_array_equal(ex({"x": x})["y"], x[:, 0:5])


def test_a_shape_the_plan_rejects_fails_with_the_kernel_error(rng: np.random.Generator) -> None:
    model = _model("Squeeze", (3, 1), [_i(1)], False)
    with Executor(load_model(model.SerializeToString())) as ex:
        ex({"x": rng.standard_normal((3, 1)).astype(np.float32)})
        with pytest.raises(KernelFailure, match="'n' \\(Squeeze\\)"):
            ex({"x": rng.standard_normal((3, 2)).astype(np.float32)})


def test_integer_reductions_and_float16_use_the_registry_kernel(rng: np.random.Generator) -> None:
    for dtype in (np.int32, np.float16):
        model = _model("ReduceSum", (3, 4), [_i(1)], False, x_dtype=dtype)
        x = (rng.standard_normal((3, 4)) * 10).astype(dtype)
        with Executor(load_model(model.SerializeToString())) as ex:
            got = ex({"x": x})["y"]
        want = _ort(model, x)
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-3)


@pytest.mark.cpu_only("the host's compiled conv plans: a device runs the registry kernel")
def test_a_conv_outside_a_chain_runs_its_compiled_plan_and_honours_a_new_weight(rng) -> None:
    """A conv no chain takes (EfficientNet's and YOLO's, each before a SiLU) is planned once per
    shape on its compiled kernel; a weight ``set_weight`` replaces is the one the next run uses."""
    from engine import specialize
    from engine.kernels import native
    if not native.available():
        pytest.skip("extension not built")
    model = _model("Conv", (1, 4, 20, 20), [_w(8, 4, 3, 3), _w(8)], False, pads=[1, 1, 1, 1])
    x = rng.standard_normal((1, 4, 20, 20)).astype(np.float32)
    with Executor(load_model(model.SerializeToString())) as ex:
        np.testing.assert_allclose(ex({"x": x})["y"], _ort(model, x), rtol=1e-5, atol=1e-5)
        step = ex._steps[-1]
        plans = _cell(step.call, "plans") if "plans" in step.call.__code__.co_freevars \
            else _cell(_cell(step.call, "body"), "plans")
        assert plans[x.shape][0] is specialize._run_compiled
        w = rng.standard_normal((8, 4, 3, 3)).astype(np.float32)
        ex.set_weight("c0", w)
        got = ex({"x": x})["y"]
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(w, "c0"))
    np.testing.assert_allclose(got, _ort(model, x), rtol=1e-5, atol=1e-5)


@pytest.mark.cpu_only("numpy's vecdot: a device runs the reduction as planned for it")
@pytest.mark.parametrize("op,keepdims", [("ReduceSumSquare", 0), ("ReduceSumSquare", 1), ("ReduceL2", 1)])
def test_a_short_last_axis_sum_of_squares_is_one_dot_a_row(op: str, keepdims: int,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            rng: np.random.Generator) -> None:
    # skl2onnx's kNN Scan step ends in a ReduceSumSquare over 30 features: each row's dot with
    # itself (no squared copy, no reduction set up); a long row keeps the pairwise sum.
    if not hasattr(np, "vecdot"):
        pytest.skip("numpy < 2 has no vecdot")
    dots: list[tuple] = []
    real = np.vecdot
    monkeypatch.setattr(np, "vecdot", lambda a, b: dots.append(a.shape) or real(a, b))
    model = _build(op, [_i(-1)], {"keepdims": keepdims}, (16, 30), False)
    with Executor(load_model(model.SerializeToString())) as ex:
        for shape in ((16, 30), (16, 30), (3, 2000)):
            x = rng.standard_normal(shape).astype(np.float32)
            got = ex.run({"x": x}).numpy_outputs()["y"]
            want = _ort(model, x)
            assert got.shape == want.shape and got.dtype == want.dtype
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert dots == [(16, 30), (16, 30)]
