"""Float16 models on the host: computed in float32, rounded where the model rounds
(engine/float16.py). Oracles: onnxruntime (whose CPU provider also computes such models in
float32 between the model's casts) and ONNX's reference evaluator, on fresh random inputs."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from engine.executor import Executor, find_kernel
from engine.float16 import float16_tensors, narrowed, widen, widened
from engine.kernels.registry import lookup
from engine.tolerance import Tolerance, compare_arrays
from partition.ir import TensorInfo
from partition.onnx_io import load_model
from partition.runner import partition

F16 = TensorProto.FLOAT16
#: float16 keeps 11 significant bits: the two sides round at different places
F16_TOL = Tolerance(atol=1e-3, rtol=1e-2)


def _fp16_block(seed: int = 0) -> onnx.ModelProto:
    """x(2x16, fp16) -> MatMul W -> Add b -> Relu -> Mul by a Constant -> Softmax -> y (fp16),
    plus a branch through ConstantOfShape and a Cast of an int64 shape to float16: every kind
    of float16 source, as a float16 export writes them (opset 17, IR 8)."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array((rng.standard_normal((16, 8)) * 0.5).astype(np.float16), "W")
    b = numpy_helper.from_array(rng.standard_normal(8).astype(np.float16), "b")
    half = helper.make_tensor("half", F16, [], [0.5])
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["xw"], name="matmul"),
        helper.make_node("Add", ["xw", "b"], ["xwb"], name="add"),
        helper.make_node("Relu", ["xwb"], ["r"], name="relu"),
        helper.make_node("Constant", [], ["c"], name="const", value=half),
        helper.make_node("Mul", ["r", "c"], ["rc"], name="scale"),
        helper.make_node("Shape", ["rc"], ["shape"], name="shape"),
        helper.make_node("ConstantOfShape", ["shape"], ["ones"], name="ones",
                         value=helper.make_tensor("one", F16, [1], [1.0])),
        helper.make_node("Cast", ["shape"], ["shape16"], name="cast_shape", to=F16),
        helper.make_node("ReduceSum", ["shape16"], ["n"], name="n", keepdims=0),
        helper.make_node("Div", ["ones", "n"], ["eps"], name="eps"),
        helper.make_node("Add", ["rc", "eps"], ["z"], name="bias_eps"),
        helper.make_node("Softmax", ["z"], ["y"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(nodes, "fp16_block", [helper.make_tensor_value_info("x", F16, [2, 16])],
                              [helper.make_tensor_value_info("y", F16, [2, 8])], initializer=[w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def _ort(model: onnx.ModelProto, feeds: dict) -> list:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def test_widened_makes_every_float16_source_float32_and_nothing_else():
    graph = load_model(_fp16_block().SerializeToString())
    wide = widened(graph)
    nodes = {n.name: n for n in wide.nodes}
    assert wide.initializers["W"].dtype == "FLOAT" and wide.initializers["W"].value.dtype == np.float32
    np.testing.assert_array_equal(wide.initializers["W"].value,
                                  graph.initializers["W"].value.astype(np.float32))  # exact
    assert nodes["const"].attrs["value"].dtype == np.float32
    assert nodes["ones"].attrs["value"].dtype == np.float32
    assert (nodes["cast_shape"].op_type, nodes["cast_shape"].domain) == ("RoundToFloat16", "sglens.host")
    assert [n.name for n in wide.nodes] == [n.name for n in graph.nodes]   # names are identity
    assert wide.tensors == graph.tensors   # the declared types stay the model's
    assert widened(wide) is wide   # nothing left to widen: the same graph back


def test_a_float32_graph_is_returned_unchanged():
    graph = load_model("sample_models/trt_cycle.onnx")
    assert widened(graph) is graph


@pytest.mark.parametrize("values", [
    np.array([1.0, 1.0 + 2 ** -11, 65504.0, 65520.0, 1e-8, -3.14159265], np.float32),  # rounding, inf, flush
    np.array([2049, 4097, -70000, 0], np.int64),                                         # ints round too
])
def test_round_to_float16_gives_the_value_of_onnx_cast_stored_as_float32(values):
    node = helper.make_node("Cast", ["x"], ["y"], to=F16)
    dtype = helper.np_dtype_to_tensor_dtype(values.dtype)
    model = helper.make_model(helper.make_graph(
        [node], "cast", [helper.make_tensor_value_info("x", dtype, [values.size])],
        [helper.make_tensor_value_info("y", F16, [values.size])]),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    expected = ReferenceEvaluator(model).run(None, {"x": values})[0]
    got = lookup("RoundToFloat16", "sglens.host")(np, values)[0]
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, expected.astype(np.float32))


def _dtype_spy() -> tuple:
    """A kernel finder (ours) that records the dtype of every float array a kernel is given."""
    seen: dict[str, set] = {}

    def finder(node, opset):
        kernel = find_kernel(node, opset)
        if kernel is None:
            return None

        def spied(xp, *args, **attrs):
            seen.setdefault(node.op_type, set()).update(
                a.dtype for a in args if getattr(a, "dtype", np.dtype(int)).kind == "f")
            return kernel(xp, *args, **attrs)
        return spied
    return finder, seen


def test_a_float16_model_runs_in_float32_and_hands_back_float16(rng):
    model = _fp16_block()
    feeds = {"x": rng.standard_normal((2, 16)).astype(np.float16)}
    spying, seen = _dtype_spy()
    with Executor(load_model(model.SerializeToString()), kernels=spying, keep_intermediates=True) as ex:
        result = ex.run(feeds)
    y = result.numpy_outputs()["y"]
    assert {"MatMul", "Softmax", "Div"} <= set(seen)
    assert set().union(*seen.values()) == {np.dtype(np.float32)}   # no float16 arithmetic
    assert y.dtype == np.float16   # what the model declares
    assert result.values["xw"].dtype == np.float16   # kept values too, for the debugger
    assert compare_arrays(y, _ort(model, feeds)[0], F16_TOL)["match"]
    reference = ReferenceEvaluator(model).run(None, feeds)[0]
    assert compare_arrays(y, reference, F16_TOL)["match"]


def test_a_float16_weight_set_at_run_time_is_widened_like_the_bound_ones(rng):
    model = _fp16_block()
    feeds = {"x": rng.standard_normal((2, 16)).astype(np.float16)}
    new_w = (rng.standard_normal((16, 8)) * 0.5).astype(np.float16)
    with Executor(load_model(model.SerializeToString())) as ex:
        ex.set_weight("W", new_w)
        assert ex._weights["W"].dtype == np.float32
        y = ex.run(feeds).numpy_outputs()["y"]
    changed = onnx.ModelProto()
    changed.CopyFrom(model)
    changed.graph.initializer[0].CopyFrom(numpy_helper.from_array(new_w, "W"))
    assert compare_arrays(y, _ort(changed, feeds)[0], F16_TOL)["match"]


@pytest.mark.parametrize("runtime", ["onnxruntime", "engine"])
def test_a_subgraph_on_another_runtime_gets_its_declared_float16_inputs(rng, runtime):
    """The host computes in float32; a subgraph that onnxruntime runs was cut from the float16
    model and declares float16 inputs and weights: it gets them, and hands back float32."""
    model = _fp16_block()
    feeds = {"x": rng.standard_normal((2, 16)).astype(np.float16)}
    parted = partition(load_model(model.SerializeToString()), "default", ops=["MatMul", "Add", "Relu"]).graph
    assert any(n.is_subgraph for n in parted.nodes)
    spying, seen = _dtype_spy()
    with Executor(parted, subgraph_runtime=runtime, kernels=spying) as ex:
        result = ex.run(feeds)
    assert {r.executor for r in result.subgraphs} == {runtime}
    assert "Softmax" in seen and set().union(*seen.values()) == {np.dtype(np.float32)}  # the host's
    y = result.numpy_outputs()["y"]
    assert y.dtype == np.float16
    assert compare_arrays(y, _ort(model, feeds)[0], F16_TOL)["match"]


def test_narrowed_rounds_only_what_the_model_declares_float16():
    declared = {"a": TensorInfo("a", "FLOAT16"), "b": TensorInfo("b", "FLOAT")}
    values = {"a": np.ones(2, np.float32), "b": np.ones(2, np.float32), "c": np.ones(2, np.float32)}
    out = narrowed(values, float16_tensors(declared))
    assert [out[k].dtype for k in "abc"] == [np.float16, np.float32, np.float32]
    assert widen(np.ones(2, np.float16)).dtype == np.float32 and widen(3) == 3


# --- the match rule of a float16 model --------------------------------------------------------

def _f32_with_a_float16_cast_in_a_body() -> onnx.ModelProto:
    """A float32 model whose only float16 is a Cast inside an If branch (bodies count too)."""
    then = helper.make_graph([helper.make_node("Cast", ["x"], ["t16"], to=F16),
                              helper.make_node("Cast", ["t16"], ["t"], to=TensorProto.FLOAT)], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, [3])])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, [3])])
    g = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)], "g",
                          [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                           helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_which_graphs_compute_in_float16():
    from engine.float16 import computes_in_float16
    assert computes_in_float16(load_model(_fp16_block().SerializeToString()))
    assert computes_in_float16(load_model(_f32_with_a_float16_cast_in_a_body().SerializeToString()))
    assert not computes_in_float16(load_model("sample_models/trt_cycle.onnx"))


def test_compare_judges_a_float16_model_by_float16_precision_unless_told_otherwise(rng):
    from engine.compare import compare
    from engine.tolerance import FLOAT16_ATOL, FLOAT16_RTOL
    model = _fp16_block()
    graph = load_model(model.SerializeToString())
    feeds = {"x": rng.standard_normal((2, 16)).astype(np.float16)}
    default = compare(graph, model, feeds, repeat=1, warmup=0)
    assert (default.tolerance.atol, default.tolerance.rtol) == (FLOAT16_ATOL, FLOAT16_RTOL)
    assert any("computes in float16" in n and "float16's" in n for n in default.notes)
    mine = compare(graph, model, feeds, repeat=1, warmup=0, tolerance=Tolerance(1e-6, 1e-6))
    assert (mine.tolerance.atol, mine.tolerance.rtol) == (1e-6, 1e-6)
    assert not any("float16's" in n for n in mine.notes)
    plain = load_model("sample_models/trt_cycle.onnx")
    from partition.onnx_io import to_model_proto
    x = {"input": rng.standard_normal((4, 4)).astype(np.float32)}
    f32 = compare(plain, to_model_proto(plain), x, repeat=1, warmup=0)
    assert f32.tolerance == Tolerance() and not any("float16" in n for n in f32.notes)


def test_the_cli_compares_a_float16_file_by_its_precision(tmp_path):
    import subprocess
    import sys
    path = tmp_path / "half.onnx"
    onnx.save(_fp16_block(), str(path))

    def cli(*extra):
        return subprocess.run([sys.executable, "-m", "sglens", "compare", str(path), "--repeat", "1",
                               *extra], capture_output=True, text=True, timeout=300)
    default, told = cli(), cli("--atol", "0.0002")
    assert default.returncode == 0, default.stderr
    assert "match rule: |ours - ref| <= 0.001 + 0.01 * |ref|" in default.stdout
    assert "the model computes in float16" in default.stdout
    assert told.returncode in (0, 1), told.stderr
    assert "match rule: |ours - ref| <= 0.0002 + 0.01 * |ref|" in told.stdout   # rtol: the model's


def test_the_web_form_prefills_float16_precision_for_a_float16_model():
    from app.run_inputs import defaults_json, parse_tolerance
    from engine.tolerance import FLOAT16_ATOL, FLOAT16_RTOL
    half = defaults_json(load_model(_fp16_block().SerializeToString()), None)
    assert half["tolerance"] == {"atol": FLOAT16_ATOL, "rtol": FLOAT16_RTOL} and half["float16"]
    plain = defaults_json(load_model("sample_models/trt_cycle.onnx"), None)
    assert plain["tolerance"] == Tolerance().to_json() and not plain["float16"]
    assert parse_tolerance(None) is None   # none sent: the model's own default, decided by compare


def test_the_memory_budget_counts_float16_as_the_float32_the_host_holds():
    from engine.budget import estimate_memory
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", F16, [1000])],
                          [helper.make_tensor_value_info("y", F16, [1000])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    estimate = estimate_memory(load_model(model.SerializeToString()), {"x": (1000,)})
    assert estimate.peak_bytes == 2 * 1000 * 4   # x and y live together, 4 bytes an element


def test_round_to_float16_is_numpys_conversion_on_every_float16_value_and_every_tie():
    """The kernel's integer-bit rounding against numpy's own float32 -> float16 -> float32."""
    every = np.arange(2 ** 16, dtype=np.uint16).view(np.float16).astype(np.float32)
    finite = np.sort(every[np.isfinite(every)]).astype(np.float64)
    ties = ((finite[:-1] + finite[1:]) / 2).astype(np.float32)   # exact in float32
    cases = np.concatenate([every, ties, np.nextafter(ties, np.float32(-np.inf)),
                            np.nextafter(ties, np.float32(np.inf)), [65519.0, 65520.0, 1e30, -1e30]])
    cases = cases.astype(np.float32)
    with np.errstate(over="ignore"):
        expected = cases.astype(np.float16).astype(np.float32)
    got = lookup("RoundToFloat16", "sglens.host")(np, cases)[0]
    np.testing.assert_array_equal(got, expected)   # NaN in the same places, every other bit equal
    assert np.array_equal(got.view(np.uint32)[~np.isnan(got)], expected.view(np.uint32)[~np.isnan(expected)])
