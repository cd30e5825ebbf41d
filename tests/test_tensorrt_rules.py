"""Each rule of the TensorRT table, with a positive and a negative case."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from partition import Graph, Node, load_model
from partition.tensorrt.rules import TABLE_PATH, TRTRules, load_table

F = TensorProto.FLOAT


def model(nodes, inputs, outputs, inits=(), opset=17, extra_opsets=()) -> Graph:
    graph = helper.make_graph(nodes, "t", inputs, outputs, list(inits))
    imports = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    m = helper.make_model(graph, opset_imports=imports)
    m.ir_version = 8
    return load_model(m.SerializeToString())


def vi(name, shape, t=F):
    return helper.make_tensor_value_info(name, t, shape)


def reason(graph: Graph, name: str, **options) -> str | None:
    return TRTRules(**options).compat(graph).get(name)


def init(name, values, dtype=np.int64):
    return numpy_helper.from_array(np.asarray(values, dtype=dtype), name)


# ------------------------------------------------------------------ table --
def test_table_names_its_source_and_version_and_is_well_formed():
    table = json.loads(TABLE_PATH.read_text())
    assert table["tensorrt_version"].startswith("10")
    assert "operators.md" in table["comment"] and "TensorRT 10" in table["comment"]
    assert "not fetched" in table["comment"].lower() or "NOT fetched" in table["comment"]
    known = set(table["type_sets"])
    allowed_keys = {"types", "supported", "note", "input_types", "output_types", "index_inputs", "index_outputs",
                    "constant_inputs", "attrs", "data_dependent_shape", "control_flow", "max_outputs",
                    "max_outputs_message"}
    for op, row in table["ops"].items():
        assert set(row) <= allowed_keys, op
        if row.get("supported", True):
            assert row["types"] in known or isinstance(row["types"], list), op
        for spec in row.get("attrs", ()):
            assert "{value}" in spec["message"], op
    for op in ("Conv", "Reshape", "Resize", "NonZero", "Det", "Cast", "If", "Loop", "Scan"):
        assert op in table["ops"]
    assert load_table() is load_table()


# -------------------------------------------------------------- the rules --
def test_default_domain_op_passes_and_custom_domain_fails():
    g = model([helper.make_node("Relu", ["x"], ["r"], name="relu"),
               helper.make_node("FusedThing", ["r"], ["y"], name="custom", domain="com.example")],
              [vi("x", [2, 3])], [vi("y", [2, 3])], extra_opsets=[("com.example", 1)])
    assert reason(g, "relu") is None
    why = reason(g, "custom")
    assert why is not None and "custom domain 'com.example'" in why and "plugin" in why


def test_opset_in_range_passes_and_out_of_range_fails():
    inside = model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [vi("x", [2])], [vi("y", [2])], opset=13)
    assert reason(inside, "relu") is None
    outside = model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [vi("x", [2])], [vi("y", [2])], opset=7)
    why = reason(outside, "relu")
    assert why is not None and "opset 7" in why and "9-22" in why


def test_supported_op_passes_and_unsupported_op_fails():
    g = model([helper.make_node("Relu", ["x"], ["r"], name="relu"),
               helper.make_node("Det", ["r"], ["y"], name="det")], [vi("x", [4, 4])], [vi("y", [])])
    assert reason(g, "relu") is None
    assert reason(g, "det") == "Det: not supported by TensorRT 10.x's ONNX parser"


def test_op_missing_from_the_table_fails_with_its_name():
    g = Graph("g", [Node("weird", "NotAnOnnxOp", ("x",), ("y",))], ["x"], ["y"], opset={"": 17})
    assert "NotAnOnnxOp: not in TensorRT" in reason(g, "weird")


def test_data_dependent_shape_flagged_and_allowed_by_option():
    g = model([helper.make_node("NonZero", ["x"], ["y"], name="nz")], [vi("x", [4])], [vi("y", None, TensorProto.INT64)])
    assert reason(g, "nz") == "NonZero: output shape depends on input values"
    assert reason(g, "nz", exclude_data_dependent=False) is None


def test_resize_mode_restriction():
    def resize(mode):
        scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
        return model([helper.make_node("Resize", ["x", "", "scales"], ["y"], name="rs", mode=mode)],
                     [vi("x", [1, 1, 4, 4])], [vi("y", [1, 1, 8, 8])], [scales])
    assert reason(resize("linear"), "rs") is None
    assert reason(resize("nearest"), "rs") is None
    assert reason(resize("cubic"), "rs") == "Resize mode=cubic not supported"


def test_cast_target_type_restriction():
    def cast(to):
        return model([helper.make_node("Cast", ["x"], ["y"], name="cast", to=to)], [vi("x", [2])], [vi("y", [2], to)])
    assert reason(cast(TensorProto.FLOAT16), "cast") is None
    assert reason(cast(TensorProto.DOUBLE), "cast") == "Cast to DOUBLE: type not supported"


def test_input_dtype_checked():
    def add(t):
        return model([helper.make_node("Add", ["a", "b"], ["y"], name="add")], [vi("a", [2], t), vi("b", [2], t)],
                     [vi("y", [2], t)])
    assert reason(add(F), "add") is None
    why = reason(add(TensorProto.DOUBLE), "add")
    assert why is not None and why.startswith("Add on DOUBLE: type not supported")


def test_output_dtype_checked():
    def argmax(t):
        return model([helper.make_node("ArgMax", ["x"], ["y"], name="am")], [vi("x", [2, 3])], [vi("y", [1, 3], t)])
    assert reason(argmax(TensorProto.INT64), "am") is None
    # ONNX shape inference would make the output INT64 anyway: an IR-level graph can say UINT8.
    from partition import TensorInfo
    g = Graph("g", [Node("am", "ArgMax", ("x",), ("y",))], ["x"], ["y"],
              {"x": TensorInfo("x", "FLOAT", (2,)), "y": TensorInfo("y", "UINT8", (1,))}, opset={"": 17})
    assert "ArgMax producing UINT8: type not supported" in reason(g, "am")


def test_reshape_shape_from_initializer_or_shape_tensor_passes_but_graph_input_fails():
    ok = model([helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")], [vi("x", [2, 3])],
               [vi("y", [3, 2])], [init("shape", [3, 2])])
    assert reason(ok, "reshape") is None
    via_shape = model([helper.make_node("Shape", ["z"], ["s"], name="shape_of"),
                       helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape")],
                      [vi("x", [2, 3]), vi("z", ["n", 2])], [vi("y", None)])
    assert reason(via_shape, "reshape") is None
    bad = model([helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")],
                [vi("x", [2, 3]), vi("shape", [2], TensorProto.INT64)], [vi("y", None)])
    why = reason(bad, "reshape")
    assert why == ("Reshape: input 1 'shape' must be a build-time constant or shape tensor, "
                   "but it comes from graph input 'shape'")


def test_squeeze_axes_from_constant_node_or_folded_constants_pass():
    const = helper.make_node("Constant", [], ["axes"], name="c",
                             value=numpy_helper.from_array(np.array([0], np.int64)))
    g = model([const, helper.make_node("Squeeze", ["x", "axes"], ["y"], name="sq")], [vi("x", [1, 3])],
              [vi("y", [3])])
    assert reason(g, "sq") is None
    folded = model([helper.make_node("Add", ["a0", "a1"], ["axes"], name="fold"),
                    helper.make_node("Unsqueeze", ["x", "axes"], ["y"], name="unsq")],
                   [vi("x", [3])], [vi("y", [1, 3])], [init("a0", [0]), init("a1", [0])])
    assert reason(folded, "unsq") is None


def test_squeeze_axes_computed_from_data_fails():
    g = model([helper.make_node("Cast", ["x"], ["xi"], name="cast", to=TensorProto.INT64),
               helper.make_node("Squeeze", ["z", "xi"], ["y"], name="sq")],
              [vi("x", [1]), vi("z", [1, 3])], [vi("y", None)])
    why = reason(g, "sq")
    assert why is not None and why.startswith("Squeeze: input 1 'xi' must be a build-time constant, but it comes "
                                              "from node 'cast' (Cast)")


def test_topk_k_and_reduction_axes_must_be_constant():
    def topk(k_is_input):
        inputs = [vi("x", [5])] + ([vi("k", [1], TensorProto.INT64)] if k_is_input else [])
        inits = [] if k_is_input else [init("k", [2])]
        return model([helper.make_node("TopK", ["x", "k"], ["v", "i"], name="topk")], inputs,
                     [vi("v", [2]), vi("i", [2], TensorProto.INT64)], inits)
    assert reason(topk(False), "topk") is None
    assert "TopK: input 1 'k' must be a build-time constant" in reason(topk(True), "topk")

    def rsum(axes_is_input):
        inputs = [vi("x", [2, 3])] + ([vi("axes", [1], TensorProto.INT64)] if axes_is_input else [])
        inits = [] if axes_is_input else [init("axes", [1])]
        return model([helper.make_node("ReduceSum", ["x", "axes"], ["y"], name="rs")], inputs, [vi("y", None)], inits)
    assert reason(rsum(False), "rs") is None
    assert "ReduceSum: input 1 'axes' must be a build-time constant" in reason(rsum(True), "rs")


def _if_model(then_op: str, else_op: str = "Relu") -> Graph:
    def branch(name):
        op = then_op if name == "then" else else_op
        nodes = [helper.make_node(op, ["x"], [f"{name}_out"], name=f"{name}_node")]
        return helper.make_graph(nodes, name, [], [vi(f"{name}_out", None)])
    node = helper.make_node("If", ["cond"], ["y"], name="if", then_branch=branch("then"), else_branch=branch("else"))
    return model([node], [vi("cond", [], TensorProto.BOOL), vi("x", [4, 4])], [vi("y", None)])


def test_if_passes_when_every_body_node_passes():
    assert reason(_if_model("Relu"), "if") is None


def test_if_fails_when_a_body_node_fails_and_names_it():
    why = reason(_if_model("Det"), "if")
    assert why == ("If: node 'then_node' (Det) in its then_branch is not compatible: "
                   "Det: not supported by TensorRT 10.x's ONNX parser")


def test_loop_body_checked_too():
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep"),
         helper.make_node("NonZero", ["v_in"], ["nz"], name="body_nz"),
         helper.make_node("Identity", ["v_in"], ["v_out"], name="pass")],
        "body", [vi("i", [], TensorProto.INT64), vi("cond_in", [], TensorProto.BOOL), vi("v_in", [3])],
        [vi("cond_out", [], TensorProto.BOOL), vi("v_out", [3])])
    g = model([helper.make_node("Loop", ["M", "", "v0"], ["v_final"], name="loop", body=body)],
              [vi("M", [], TensorProto.INT64), vi("v0", [3])], [vi("v_final", [3])])
    assert "body_nz" in reason(g, "loop") and "output shape depends on input values" in reason(g, "loop")
    assert reason(g, "loop", exclude_data_dependent=False) is None


def test_maxpool_indices_output_not_supported():
    one = model([helper.make_node("MaxPool", ["x"], ["y"], name="mp", kernel_shape=[2, 2])],
                [vi("x", [1, 1, 4, 4])], [vi("y", None)])
    assert reason(one, "mp") is None
    two = model([helper.make_node("MaxPool", ["x"], ["y", "idx"], name="mp", kernel_shape=[2, 2])],
                [vi("x", [1, 1, 4, 4])], [vi("y", None), vi("idx", None, TensorProto.INT64)])
    assert reason(two, "mp") == "MaxPool: the Indices output is not supported"


def test_fallback_ops_force_an_op_out():
    g = model([helper.make_node("Sin", ["x"], ["y"], name="sin")], [vi("x", [2])], [vi("y", [2])])
    assert reason(g, "sin") is None
    assert reason(g, "sin", fallback_ops=["Sin"]) == "Sin: forced to fall back (fallback_ops)"


def test_unknown_dtypes_are_not_held_against_a_node():
    g = Graph("g", [Node("a", "Add", ("x", "x"), ("y",))], ["x"], ["y"], opset={"": 17})
    assert reason(g, "a") is None


@pytest.mark.parametrize("op", ["Det", "Unique", "Compress", "StringNormalizer", "MatMulInteger"])
def test_known_unsupported_ops(op):
    g = Graph("g", [Node("n", op, ("x",), ("y",))], ["x"], ["y"], opset={"": 17})
    assert reason(g, "n") is not None


def test_earlier_pass_subgraph_node_is_not_an_onnx_op():
    inner = Graph("b", [Node("r", "Relu", ("x",), ("y",))], ["x"], ["y"], is_body=True)
    g = Graph("g", [Node("sg", "Subgraph", ("x",), ("y",), "sglens", {}, {"body": inner})], ["x"], ["y"])
    assert "earlier pass's subgraph node" in reason(g, "sg")


def test_onnx_checker_accepts_the_rule_models():
    # The models above are real ONNX: keep one honest with the checker.
    g = model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [vi("x", [2])], [vi("y", [2])])
    from partition import to_model_proto
    onnx.checker.check_model(to_model_proto(g))
