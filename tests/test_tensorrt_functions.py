"""Model-local functions (``ModelProto.functions``): the IR carries each call's body, the
TensorRT rules decide by it everywhere (no ``local_functions=`` needed), and the model
still runs in our engine and in onnxruntime, before and after export."""

from __future__ import annotations

import io
import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from app import create_app
from engine.executor import Executor
from engine.interpreter import run_graph
from partition import load_model
from partition.errors import ModelError
from partition.local_functions import FUNCTION_KEY, expanded_size
from partition.onnx_io import to_model_proto
from partition.tensorrt.node_report import groups_report
from partition.runner import partition
from partition.tensorrt.rules import TRTRules
from sglens.cli import main as cli_main

F = TensorProto.FLOAT
OPSET = [helper.make_opsetid("", 17)]


def ref(name: str, ref_name: str, kind: int = onnx.AttributeProto.FLOAT) -> onnx.AttributeProto:
    a = onnx.AttributeProto(name=name, ref_attr_name=ref_name, type=kind)
    return a


def fn(name: str, inputs, outputs, nodes, attributes=(), defaults=()) -> onnx.FunctionProto:
    f = helper.make_function("local", name, list(inputs), list(outputs), nodes,
                             OPSET + [helper.make_opsetid("local", 1)], list(attributes))
    f.attribute_proto.extend(defaults)
    return f


def leaky(alpha_ref: str = "alpha") -> onnx.NodeProto:
    node = helper.make_node("LeakyRelu", ["m"], ["b"], name="leaky")
    node.attribute.append(ref("alpha", alpha_ref))
    return node


#: Act(a) = LeakyRelu(a * 2, alpha) -- all supported, alpha bound from the call (default 0.1)
ACT = fn("Act", ["a"], ["b"], [helper.make_node("Constant", [], ["two"], name="two",
                                                value=helper.make_tensor("v", F, [], [2.0])),
                               helper.make_node("Mul", ["a", "two"], ["m"], name="mul"), leaky()],
         defaults=[helper.make_attribute("alpha", 0.1)])
#: Det inside: TensorRT has no importer for it
BAD = fn("Bad", ["a"], ["b"], [helper.make_node("Det", ["a"], ["d"], name="det"),
                               helper.make_node("Neg", ["d"], ["b"], name="neg")])


def outer_calling(inner: str, domain: str = "local") -> onnx.FunctionProto:
    """Outer(a) = Tanh(inner(a)), passing its own attribute alpha on to inner."""
    call = helper.make_node(inner, ["a"], ["c"], name="call_inner", domain=domain)
    call.attribute.append(ref("alpha", "alpha"))
    return fn("Outer", ["a"], ["b"], [call, helper.make_node("Tanh", ["c"], ["b"], name="tanh")],
              attributes=["alpha"])


def model(nodes, functions, x_shape, y_shape, check: bool = True) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, x_shape)],
                              [helper.make_tensor_value_info("y", F, y_shape)])
    m = helper.make_model(graph, opset_imports=OPSET + [helper.make_opsetid("local", 1)],
                          functions=list(functions))
    m.ir_version = 8
    if check:
        onnx.checker.check_model(m)
    return m


def act_model() -> onnx.ModelProto:
    """x -> Relu -> Act(alpha=0.3) -> Act() -> Sigmoid -> y: two calls, two instances."""
    c1 = helper.make_node("Act", ["r"], ["a1"], name="act1", domain="local", alpha=0.3)
    c2 = helper.make_node("Act", ["a1"], ["a2"], name="act2", domain="local")
    nodes = [helper.make_node("Sin", ["x"], ["r"], name="sin"), c1, c2,
             helper.make_node("Sigmoid", ["a2"], ["y"], name="sig")]
    return model(nodes, [ACT], [3, 4], [3, 4])


def nested_model(inner: onnx.FunctionProto) -> onnx.ModelProto:
    call = helper.make_node("Outer", ["x"], ["o"], name="outer", domain="local", alpha=0.2)
    return model([call, helper.make_node("Abs", ["o"], ["y"], name="abs")], [inner, outer_calling(inner.name)],
                 [2, 3, 3] if inner.name == "Bad" else [3, 4], [2] if inner.name == "Bad" else [3, 4])


def bad_model() -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Bad", ["r"], ["y"], name="bad_call", domain="local")]
    return model(nodes, [BAD], [2, 3, 3], [2])


def load(m: onnx.ModelProto):
    return load_model(m.SerializeToString())


def ort_run(m: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def feed(shape, seed) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ------------------------------------------------------------------- IR --
def test_calls_carry_their_instantiated_bodies():
    g = load(act_model())
    a1, a2 = g.node_by_name["act1"], g.node_by_name["act2"]
    b1, b2 = a1.subgraphs[FUNCTION_KEY], a2.subgraphs[FUNCTION_KEY]
    assert [n.op_type for n in b1.nodes] == ["Constant", "Mul", "LeakyRelu"]
    assert b1.inputs == ("a",) and b1.outputs == ("b",)
    # the reference is bound: the call's value, else the function's default
    assert b1.node_by_name["leaky"].attrs["alpha"] == pytest.approx(0.3)
    assert b2.node_by_name["leaky"].attrs["alpha"] == pytest.approx(0.1)
    assert a1.attrs["alpha"] == pytest.approx(0.3)  # the call keeps its own attributes
    # the partitioner sees one node per call: its reads are its inputs only
    assert g.reads(a2) == ("a1",) and [n.name for n in g.input_nodes(a2)] == ["act1"]


def test_calls_with_the_same_attributes_share_one_body():
    c1 = helper.make_node("Act", ["x"], ["a1"], name="c1", domain="local", alpha=0.3)
    c2 = helper.make_node("Act", ["a1"], ["y"], name="c2", domain="local", alpha=0.3)
    m = model([c1, c2], [ACT], [3], [3])
    g = load(m)
    assert g.node_by_name["c1"].subgraphs[FUNCTION_KEY] is g.node_by_name["c2"].subgraphs[FUNCTION_KEY]
    x = feed([3], 5)
    with Executor(g) as ex:
        np.testing.assert_allclose(ex({"x": x})["y"], ort_run(m, x), rtol=1e-5, atol=1e-6)
    assert [f.name for f in to_model_proto(g).functions] == ["Act"]


def test_recursion_through_other_attribute_values_is_refused_too():
    """F(alpha) calling F(alpha=2.0): a different instance, the same function -- still recursion."""
    call = helper.make_node("F", ["a"], ["b"], domain="local", alpha=2.0)
    f = fn("F", ["a"], ["b"], [call], attributes=["alpha"])
    with pytest.raises(ModelError, match=r"'F' calls itself \(local.F -> local.F\)"):
        load(model([helper.make_node("F", ["x"], ["y"], name="n", domain="local", alpha=1.0)], [f], [2], [2],
                   check=False))


def test_a_recursive_function_is_refused_with_the_cycle_named():
    loop_a = fn("A", ["a"], ["b"], [helper.make_node("B", ["a"], ["b"], domain="local")])
    loop_b = fn("B", ["a"], ["b"], [helper.make_node("A", ["a"], ["b"], domain="local")])
    graph = helper.make_graph([helper.make_node("A", ["x"], ["y"], name="n", domain="local")], "g",
                              [helper.make_tensor_value_info("x", F, [2])],
                              [helper.make_tensor_value_info("y", F, [2])])
    m = helper.make_model(graph, opset_imports=OPSET + [helper.make_opsetid("local", 1)],
                          functions=[loop_a, loop_b])
    m.ir_version = 8
    with pytest.raises(ModelError, match=r"'A' calls itself \(local.A -> local.B -> local.A\)"):
        load(m)


def test_deep_function_chains_import_without_recursion():
    depth = 1500  # past Python's recursion limit if instantiation recursed per level
    functions = [fn(f"F{i}", ["a"], ["b"], [helper.make_node(f"F{i + 1}", ["a"], ["b"], domain="local")])
                 for i in range(depth)] + [fn(f"F{depth}", ["a"], ["b"], [helper.make_node("Relu", ["a"], ["b"])])]
    graph = helper.make_graph([helper.make_node("F0", ["x"], ["y"], name="n", domain="local")], "g",
                              [helper.make_tensor_value_info("x", F, [2])],
                              [helper.make_tensor_value_info("y", F, [2])])
    m = helper.make_model(graph, opset_imports=OPSET + [helper.make_opsetid("local", 1)], functions=functions)
    m.ir_version = 8
    g = load_model(m.SerializeToString(), infer_shapes=False)
    why = TRTRules().compat(g)["n"]  # the rules walk it iteratively too, and stop where the parser does
    assert "nested 25 bodies deep; TensorRT's parser stops at 24" in why
    assert why.startswith("F0: node 'F25_0' (F25) in its function body (via function body 'F1_0' (F1) > "
                          "function body 'F2_0' (F2) > ... > function body 'F25_0' (F25)) is not compatible")


def wide_chain(depth: int, calls: int, leaf_op: str) -> onnx.ModelProto:
    """F0 calls F1 ``calls`` times in a row, F1 calls F2 so, ...: ``calls ** depth`` paths."""
    def body(i: int) -> list[onnx.NodeProto]:
        names = ["a"] + [f"t{k}" for k in range(1, calls)] + ["b"]
        return [helper.make_node(f"F{i + 1}", [names[k]], [names[k + 1]], name=f"c{k}", domain="local")
                for k in range(calls)]
    functions = [fn(f"F{i}", ["a"], ["b"], body(i)) for i in range(depth)]
    functions.append(fn(f"F{depth}", ["a"], ["b"], [helper.make_node(leaf_op, ["a"], ["b"], name="leaf")]))
    # (onnx's own checker and inference expand every path: not run on these)
    return model([helper.make_node("F0", ["x"], ["y"], name="n", domain="local")], functions, [3, 3], [3, 3],
                 check=False)


def test_expanded_size_counts_paths_and_stops_at_the_limit():
    assert expanded_size(act_model()) == 4 + 2 * 3  # the calls count, and each call's body
    assert expanded_size(nested_model(ACT)) == 2 + 2 + 3
    assert expanded_size(wide_chain(3, 4, "Relu")) == 1 + 4 + 4 * (4 + 4 * (4 + 4 * 1))
    assert expanded_size(wide_chain(20, 4, "Relu")) is None  # over the limit: inference is skipped


def test_shared_bodies_are_imported_and_checked_once_per_typing():
    """4 ** 20 paths through the call tree: imported and checked once per function, not per path
    (onnx's shape inference would walk every path: the importer skips it here)."""
    g = load(wide_chain(20, 4, "Relu"))
    assert TRTRules().compat(g) == {}
    why = TRTRules().compat(load(wide_chain(20, 4, "Det")))["n"]
    assert why.startswith("F0: node 'leaf' (Det) in its function body (via function body 'c0' (F1) > ")
    exported = to_model_proto(g)
    assert len(exported.functions) == 21


def test_too_many_function_instances_are_refused(monkeypatch):
    import partition.local_functions as lf
    monkeypatch.setattr(lf, "MAX_INSTANCES", 5)
    with pytest.raises(ModelError, match="more than 5 distinct instances"):
        load(wide_chain(8, 1, "Relu"))


# ---------------------------------------------------------------- rules --
def test_supported_body_is_accepted_without_extra_arguments():
    g = load(act_model())
    assert TRTRules().compat(g) == {}


def test_unsupported_inner_op_is_refused_naming_the_inner_node():
    g = load(bad_model())
    rules = TRTRules()
    assert rules.compat(g) == {"bad_call": "Bad: node 'det' (Det) in its function body is not compatible: "
                                           "Det: not supported by TensorRT 10.1's ONNX parser"}
    assert rules.cite("bad_call").startswith("10.1:onnxOpCheckers.cpp")


def test_nested_functions_decide_by_the_innermost_body():
    assert TRTRules().compat(load(nested_model(ACT))) == {}
    why = TRTRules().compat(load(nested_model(BAD)))
    assert why == {"outer": "Outer: node 'det' (Det) in its function body (via function body 'call_inner' (Bad) "
                            "> function body 'det' (Det)) is not compatible: Det: not supported by TensorRT "
                            "10.1's ONNX parser"}


def test_body_types_come_from_the_call():
    """Relu refuses INT32 in the parser: the body's input is typed from the caller's tensor."""
    body = fn("R", ["a"], ["b"], [helper.make_node("Relu", ["a"], ["b"], name="relu")])
    graph = helper.make_graph([helper.make_node("R", ["x"], ["y"], name="call", domain="local")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.INT32, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [4])])
    m = helper.make_model(graph, opset_imports=OPSET + [helper.make_opsetid("local", 1)], functions=[body])
    m.ir_version = 8
    why = TRTRules().compat(load(m))["call"]
    assert why.startswith("R: node 'relu' (Relu) in its function body is not compatible: Relu on INT32")


def _reduce_model(axes_from: str) -> onnx.ModelProto:
    """RSum(a, axes) = ReduceSum(a, axes): the parser needs axes as weights, through the call too."""
    sum_fn = fn("RSum", ["a", "ax"], ["b"], [helper.make_node("ReduceSum", ["a", "ax"], ["b"], name="rs")])
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [1])
    nodes = [helper.make_node("RSum", ["x", "axes" if axes_from == "initializer" else "axes2"], ["y"],
                              name="call", domain="local")]
    if axes_from == "constant":
        nodes.insert(0, helper.make_node("Constant", [], ["axes2"], name="k", value=axes))
    elif axes_from == "computed":
        nodes.insert(0, helper.make_node("Abs", ["axes"], ["axes2"], name="abs"))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [3, 4])],
                              [helper.make_tensor_value_info("y", F, [3, 1])],
                              [axes] if axes_from != "constant" else [])
    m = helper.make_model(graph, opset_imports=OPSET + [helper.make_opsetid("local", 1)], functions=[sum_fn])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("axes_from", ["initializer", "constant"])
def test_weights_passed_into_a_function_are_weights_inside(axes_from):
    m = _reduce_model(axes_from)
    assert TRTRules().compat(load(m)) == {}
    x = feed([3, 4], 11)
    with Executor(load(m)) as ex:
        np.testing.assert_allclose(ex({"x": x})["y"], ort_run(m, x), rtol=1e-5, atol=1e-6)


def test_a_computed_tensor_passed_as_weights_is_refused_inside():
    why = TRTRules().compat(load(_reduce_model("computed")))["call"]
    assert why.startswith("RSum: node 'rs' (ReduceSum) in its function body is not compatible: ReduceSum: input 1 "
                          "'ax' (axes) must be an initializer or a Constant node's output")


def test_a_call_with_fewer_inputs_than_the_function_is_refused():
    two = fn("Two", ["a", "c"], ["b"], [helper.make_node("Add", ["a", "c"], ["b"], name="add")])
    g = load(model([helper.make_node("Two", ["x"], ["y"], name="call", domain="local")], [two], [3], [3]))
    assert TRTRules().compat(g) == {"call": "Two: the call passes 1 inputs but the function declares 2; "
                                            "TensorRT's parser needs exactly as many"}


def test_a_builtin_name_wins_over_a_local_function_of_that_name():
    """The parser looks up its importers first, by op type alone: a local 'Relu' is imported as Relu."""
    relu = helper.make_function("local", "Relu", ["a"], ["b"], [helper.make_node("Det", ["a"], ["b"])], OPSET)
    g = load(model([helper.make_node("Relu", ["x"], ["y"], name="n", domain="local")], [relu], [3, 3], [3, 3]))
    assert TRTRules().compat(g) == {}


def test_partition_cli_and_groups_report_use_the_body(tmp_path, capsys):
    path = tmp_path / "bad.onnx"
    onnx.save_model(bad_model(), str(path))
    assert cli_main(["partition", str(path), "--backend", "tensorrt", "--min-size", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    reasons = {e["node"]: e["reason"] for e in out["excluded"]}
    assert reasons["bad_call"].startswith("Bad: node 'det' (Det) in its function body is not compatible")
    assert [s["nodes"] for s in out["subgraphs"]] == [["relu"]]
    report = groups_report(load(bad_model()), "bad_call")
    assert report["compatible"] is False and report["reason"] == reasons["bad_call"]
    assert report["reason_source"].startswith("10.1:onnxOpCheckers.cpp")
    assert groups_report(load(bad_model()), "relu")["incompatible_descendants"] == ["bad_call"]
    path = tmp_path / "good.onnx"
    onnx.save_model(act_model(), str(path))
    assert cli_main(["partition", str(path), "--backend", "tensorrt", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["excluded"] == [] and [s["nodes"] for s in out["subgraphs"]] == [["sin", "act1", "act2", "sig"]]


# ------------------------------------------------------- run and export --
@pytest.mark.parametrize("build", [act_model, lambda: nested_model(ACT), bad_model, lambda: nested_model(BAD)],
                         ids=["act", "nested", "bad", "nested-bad"])
def test_runs_in_our_engine_and_onnxruntime_alike_before_and_after_export(build):
    m = build()
    g = load(m)
    shape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
    for seed in (1, 2):
        x = feed(shape, seed)
        want = ort_run(m, x)
        np.testing.assert_allclose(run_graph(g, {"x": x})["y"], want, rtol=1e-5, atol=1e-6)
        with Executor(g) as ex:
            np.testing.assert_allclose(ex({"x": x})["y"], want, rtol=1e-5, atol=1e-6)
        exported = to_model_proto(g)
        onnx.checker.check_model(exported)
        np.testing.assert_allclose(ort_run(exported, x), want, rtol=1e-5, atol=1e-6)


def test_export_writes_one_function_per_instance():
    exported = to_model_proto(load(act_model()))
    assert sorted(f.name for f in exported.functions) == ["Act", "Act_2"]
    assert [n.op_type for n in exported.graph.node] == ["Sin", "Act", "Act_2", "Sigmoid"]
    again = load(exported)  # and it imports again, with the same bound values
    assert again.node_by_name["act2"].subgraphs[FUNCTION_KEY].node_by_name["leaky"].attrs["alpha"] == \
        pytest.approx(0.1)


def test_partitioned_graph_with_a_call_inside_a_subgraph_exports_and_runs():
    m = act_model()
    result = partition(load(m), "tensorrt")
    assert [s.nodes for s in result.subgraphs] == [["sin", "act1", "act2", "sig"]]
    exported = to_model_proto(result.graph)
    onnx.checker.check_model(exported)
    x = feed([3, 4], 7)
    np.testing.assert_allclose(ort_run(exported, x), ort_run(m, x), rtol=1e-5, atol=1e-6)
    with Executor(result.graph) as ex:
        np.testing.assert_allclose(ex({"x": x})["y"], ort_run(m, x), rtol=1e-5, atol=1e-6)


def test_web_partition_decides_by_the_body(tmp_path):
    app = create_app({"SGLENS_SAMPLES": False, "SGLENS_INSTANCE": str(tmp_path / "instance"), "TESTING": True})
    client = app.test_client()
    up = client.post("/api/models", data={"file": (io.BytesIO(bad_model().SerializeToString()), "bad.onnx")},
                     content_type="multipart/form-data")
    assert up.status_code in (200, 201), up.get_data(as_text=True)
    got = client.post(f"/api/models/{up.get_json()['id']}/partition", json={"backend": "tensorrt", "min_size": 1})
    assert got.status_code == 200, got.get_data(as_text=True)
    reasons = {e["node"]: e["reason"] for e in got.get_json()["excluded"]}
    assert reasons == {"bad_call": "Bad: node 'det' (Det) in its function body is not compatible: "
                                   "Det: not supported by TensorRT 10.1's ONNX parser"}


@pytest.mark.timeout(30)
def test_an_upload_whose_calls_explode_imports_and_partitions_at_once(tmp_path):
    """4 ** 20 call paths: onnx's inference would walk each (hours); the server answers at once."""
    app = create_app({"SGLENS_SAMPLES": False, "SGLENS_INSTANCE": str(tmp_path / "instance"), "TESTING": True})
    client = app.test_client()
    data = wide_chain(20, 4, "Relu").SerializeToString()
    up = client.post("/api/models", data={"file": (io.BytesIO(data), "wide.onnx")}, content_type="multipart/form-data")
    assert up.status_code in (200, 201), up.get_data(as_text=True)
    got = client.post(f"/api/models/{up.get_json()['id']}/partition", json={"backend": "tensorrt", "min_size": 1})
    assert got.status_code == 200 and got.get_json()["excluded"] == []
    assert len(to_model_proto(load_model(data)).functions) == 21
