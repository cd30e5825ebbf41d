"""Each rule family of the TensorRT tables on one-node models: accepted or refused, with the reason and source."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from partition import Graph, Node, load_model
from partition.errors import LensError
from partition.tensorrt.rules import TRTRules, local_functions_of

F, D, U8, I8, I32, I64, B = (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.UINT8, TensorProto.INT8,
                            TensorProto.INT32, TensorProto.INT64, TensorProto.BOOL)


def proto(nodes, inputs, outputs, inits=(), opset=17, extra_opsets=(), functions=()):
    graph = helper.make_graph(nodes, "t", inputs, outputs, list(inits))
    imports = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    m = helper.make_model(graph, opset_imports=imports, functions=list(functions))
    m.ir_version = 8
    return m


def model(*args, **kwargs) -> Graph:
    return load_model(proto(*args, **kwargs).SerializeToString())


def vi(name, shape, t=F):
    return helper.make_tensor_value_info(name, t, shape)


def init(name, values, dtype=np.int64):
    return numpy_helper.from_array(np.asarray(values, dtype=dtype), name)


def verdict(graph: Graph, name: str, **options) -> tuple[str | None, str | None]:
    rules = TRTRules(**options)
    why = rules.compat(graph).get(name)
    return why, rules.cite(name)


def reason(graph: Graph, name: str, **options) -> str | None:
    return verdict(graph, name, **options)[0]


def one(op, inputs, outputs, ins, outs, inits=(), opset=17, **attrs) -> Graph:
    return model([helper.make_node(op, inputs, outputs, name="n", **attrs)], ins, outs, inits, opset=opset)


def ir_one(op, n_in=1, dtype="FLOAT", shape=(2, 3), opset=17, domain="", **attrs) -> Graph:
    from partition import TensorInfo
    ins = [f"x{i}" for i in range(n_in)]
    tensors = {t: TensorInfo(t, dtype, shape) for t in ins}
    return Graph("g", [Node("n", op, tuple(ins), ("y",), domain, attrs)], ins, ["y"], tensors, opset={"": opset})


# ------------------------------------------------------------------ dispatch --
def test_builtin_name_in_another_domain_is_imported_as_the_builtin():
    g = model([helper.make_node("Gelu", ["x"], ["y"], name="n", domain="com.microsoft")], [vi("x", [2])],
              [vi("y", [2])], extra_opsets=[("com.microsoft", 1)])
    assert reason(g, "n") is None


def test_unknown_op_is_a_plugin_lookup_refused_unless_declared():
    g = model([helper.make_node("FusedThing", ["x"], ["y"], name="n", domain="com.example")], [vi("x", [2])],
              [vi("y", [2])], extra_opsets=[("com.example", 1)])
    why, cite = verdict(g, "n")
    assert why == ("com.example.FusedThing: no importer for 'FusedThing' in TensorRT 10.1's ONNX parser and no "
                   "known plugin of that name (declare one with --trt-plugin FusedThing if you have it)")
    assert cite.startswith("10.1:onnxOpImporters.cpp:")
    rules = TRTRules(plugins=["FusedThing"])
    assert rules.compat(g) == {}
    assert "user's TensorRT plugin FusedThing" in rules.notes["n"]


def test_bundled_plugin_is_accepted_with_a_note_and_a_warning():
    g = model([helper.make_node("EfficientNMS_TRT", ["b", "s"], ["y"], name="n", domain="trt.plugins")],
              [vi("b", [1, 10, 4]), vi("s", [1, 10, 2])], [vi("y", None)], extra_opsets=[("trt.plugins", 1)])
    rules = TRTRules()
    assert rules.compat(g) == {}
    assert "libnvinfer_plugin must be loaded" in rules.notes["n"]
    assert "plugin/README.md:" in rules.notes["n"]
    assert any("EfficientNMS_TRT" in w for w in rules.warnings)


def test_onnx_ml_ops_go_to_the_plugin_lookup_like_any_custom_op():
    # 10.1 ModelImporter.cpp parseNode dispatches on node.op_type() alone: no domain check, so an
    # ai.onnx.ml node without an importer of its name is a plugin lookup (a user plugin takes it)
    g = model([helper.make_node("Normalizer", ["x"], ["y"], name="n", domain="ai.onnx.ml")], [vi("x", [2, 3])],
              [vi("y", [2, 3])], extra_opsets=[("ai.onnx.ml", 3)])
    why, cite = verdict(g, "n")
    assert why.startswith("ai.onnx.ml.Normalizer: no importer for 'Normalizer'") and "--trt-plugin Normalizer" in why
    assert cite.startswith("10.1:onnxOpImporters.cpp:")
    assert reason(g, "n", plugins=["Normalizer"]) is None


def _function_model(inner_op: str) -> onnx.ModelProto:
    fn = helper.make_function("local", "MyAct", ["a"], ["b"], [helper.make_node(inner_op, ["a"], ["b"], name="in")],
                              [helper.make_opsetid("", 17)])
    return proto([helper.make_node("MyAct", ["x"], ["y"], name="n", domain="local")], [vi("x", [4, 4])],
                 [vi("y", [4, 4])], extra_opsets=[("local", 1)], functions=[fn])


def test_local_function_body_decides():
    good, bad = _function_model("Relu"), _function_model("Det")
    g = load_model(good.SerializeToString())
    assert TRTRules(local_functions=local_functions_of(good)).compat(g) == {}
    g = load_model(bad.SerializeToString())
    why = TRTRules(local_functions=local_functions_of(bad)).compat(g)["n"]
    assert why == ("MyAct: node 'in' (Det) in its function body is not compatible: "
                   "Det: not supported by TensorRT 10.1's ONNX parser")


def test_earlier_pass_subgraph_node_is_not_an_onnx_op():
    inner = Graph("b", [Node("r", "Relu", ("x",), ("y",))], ["x"], ["y"], is_body=True)
    g = Graph("g", [Node("sg", "Subgraph", ("x",), ("y",), "sglens", {}, {"body": inner})], ["x"], ["y"])
    assert "earlier pass's subgraph node" in reason(g, "sg")


# --------------------------------------------------------------------- opset --
@pytest.mark.parametrize("opset,expect", [(13, None), (8, "outside the range TensorRT 10.1 documents (9-20)"),
                                          (21, "outside the range"), (5, "below opset 7")])
def test_opset_is_a_warning_never_a_refusal(opset, expect):
    g = ir_one("Relu", opset=opset)
    rules = TRTRules()
    assert rules.compat(g) == {}
    if expect is None:
        assert rules.warnings == []
    else:
        assert len(rules.warnings) == 1 and expect in rules.warnings[0]


# ------------------------------------------------------------- row verdicts --
@pytest.mark.parametrize("op", ["Det", "HannWindow", "BlackmanWindow", "HammingWindow", "Unique", "MatMulInteger"])
def test_unsupported_rows(op):
    why, cite = verdict(ir_one(op), "n")
    assert why == f"{op}: not supported by TensorRT 10.1's ONNX parser"
    assert cite.startswith("10.1:onnxOpCheckers.cpp:")


@pytest.mark.parametrize("op,n_in", [("ImageScaler", 1), ("ParametricSoftplus", 1), ("ScaledTanh", 1),
                                     ("CastLike", 2)])
def test_added_rows_are_supported(op, n_in):
    assert reason(ir_one(op, n_in), "n") is None


def test_deform_conv_restrictions_and_release_difference():
    def deform(shape=(1, 2, 5, 5), pads=(1, 1, 1, 1)):
        from partition import TensorInfo
        ins = ["x", "w", "off"]
        tensors = {"x": TensorInfo("x", "FLOAT", shape), "w": TensorInfo("w", "FLOAT", (2, 2, 3, 3)),
                   "off": TensorInfo("off", "FLOAT", (1, 18, 5, 5))}
        return Graph("g", [Node("n", "DeformConv", tuple(ins), ("y",), "", {"pads": list(pads)})], ins, ["y"],
                     tensors, opset={"": 19})
    assert reason(deform(), "n") is None
    assert reason(deform(pads=(1, 1, 0, 0)), "n").startswith("DeformConv: pads [1, 1, 0, 0] must add the same")
    assert reason(deform(shape=(1, 2, 5, 5, 5)), "n") == \
        "DeformConv: input 0 has rank 5; TensorRT takes rank 3 or 4 here"
    why, cite = verdict(deform(), "n", version="10.0")
    assert why == "DeformConv: not supported by TensorRT 10.0's ONNX parser"
    assert cite == "10.0:onnxOpCheckers.cpp:909"  # release/10.0-GA: DEFINE_OP_CHECKER(DeformConv) refuses


def test_unknown_trt_version_is_a_clear_error():
    with pytest.raises(LensError, match=r"no TensorRT rule table for --trt-version '9.9'; tables: 8.5, 8.6, 10.0, 10.1"):
        TRTRules(version="9.9")


# -------------------------------------------------- data-dependent / fallback --
def test_data_dependent_ops_flagged_and_allowed_by_option():
    g = one("NonZero", ["x"], ["y"], [vi("x", [4])], [vi("y", None, I64)])
    assert reason(g, "n") == "NonZero: output shape depends on input values"
    assert reason(g, "n", exclude_data_dependent=False) is None
    roi = one("RoiAlign", ["x", "rois", "idx"], ["y"], [vi("x", [1, 2, 8, 8]), vi("rois", [3, 4]),
                                                       vi("idx", [3], I64)], [vi("y", None)])
    assert reason(roi, "n") == "RoiAlign: output shape depends on input values"
    rules = TRTRules(exclude_data_dependent=False)
    assert rules.compat(roi) == {} and "ROIAlign_TRT" in rules.notes["n"]


def test_fallback_ops_force_an_op_out():
    g = ir_one("Sin")
    assert reason(g, "n") is None
    assert reason(g, "n", fallback_ops=["Sin"]) == "Sin: forced to fall back (fallback_ops)"


# ---------------------------------------------------------------- attributes --
def _resize(opset=17, **attrs):
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    return model([helper.make_node("Resize", ["x", "", "scales"], ["y"], name="n", **attrs)],
                 [vi("x", [1, 1, 4, 4])], [vi("y", [1, 1, 8, 8])], [scales], opset=opset)


def test_resize_cubic_accepted_and_checker_attributes_refused():
    assert reason(_resize(mode="cubic"), "n") is None   # the checker accepts cubic (the old table refused it)
    assert reason(_resize(mode="linear"), "n") is None
    why, cite = verdict(_resize(antialias=1, opset=18), "n")
    assert why == "Resize antialias=1: antialiasing is not supported" and cite.startswith("10.1:onnxOpCheckers.cpp:")
    assert reason(_resize(keep_aspect_ratio_policy="not_larger", opset=18), "n") == \
        "Resize keep_aspect_ratio_policy=not_larger: only stretch"
    assert reason(_resize(coordinate_transformation_mode="tf_half_pixel_for_nn", nearest_mode="floor"), "n") == \
        "Resize: tf_half_pixel_for_nn takes only nearest_mode=round_prefer_floor, not floor"
    assert reason(_resize(coordinate_transformation_mode="tf_crop_and_resize"), "n") == \
        "Resize coordinate_transformation_mode=tf_crop_and_resize not supported"


def test_pooling_and_rnn_and_scatter_attribute_checks():
    x = [vi("x", [1, 1, 6, 6])]
    assert reason(one("MaxPool", ["x"], ["y"], x, [vi("y", None)], kernel_shape=[2, 2]), "n") is None
    assert reason(one("MaxPool", ["x"], ["y"], x, [vi("y", None)], kernel_shape=[2, 2], dilations=[2, 2]), "n") == \
        "MaxPool dilations=[2, 2]: only 1"
    assert reason(one("MaxPool", ["x"], ["y", "i"], x, [vi("y", None), vi("i", None, I64)], kernel_shape=[2, 2]),
                  "n") == "MaxPool: the Indices output is not supported"
    lstm = [vi("x", [2, 1, 3]), vi("w", [1, 8, 3]), vi("r", [1, 8, 2])]
    assert reason(one("LSTM", ["x", "w", "r"], ["y"], lstm, [vi("y", None)], hidden_size=2), "n") is None
    assert reason(one("LSTM", ["x", "w", "r"], ["y"], lstm, [vi("y", None)], hidden_size=2, input_forget=1), "n") == \
        "LSTM input_forget=1: coupled input/forget gates are not supported"
    sc = [vi("d", [4]), vi("i", [2, 1], I64), vi("u", [2])]
    assert reason(one("ScatterND", ["d", "i", "u"], ["y"], sc, [vi("y", [4])], opset=16), "n") is None
    assert reason(one("ScatterND", ["d", "i", "u"], ["y"], sc, [vi("y", [4])], opset=16, reduction="add"), "n") == \
        "ScatterND reduction=add: not supported"
    gs = [vi("x", [1, 1, 4, 4]), vi("g", [1, 4, 4, 2])]
    assert reason(one("GridSample", ["x", "g"], ["y"], gs, [vi("y", None)], opset=16, mode="bicubic"), "n") is None
    assert reason(one("GridSample", ["x", "g"], ["y"], [vi("x", [1, 4, 4]), vi("g", [1, 4, 2])], [vi("y", None)],
                      opset=16), "n") == "GridSample: input 0 has rank 3; TensorRT takes rank 4 here"


# --------------------------------------------------------------------- types --
def test_double_is_cast_down_so_cast_and_add_on_double_pass():
    cast = one("Cast", ["x"], ["y"], [vi("x", [2])], [vi("y", [2], D)], to=D)
    assert reason(cast, "n") is None                       # the old table refused Cast to DOUBLE
    add = one("Add", ["a", "b"], ["y"], [vi("a", [2], D), vi("b", [2], D)], [vi("y", [2], D)])
    assert reason(add, "n") is None                        # ... and Add on DOUBLE


def test_int8_only_through_qdq():
    why, cite = verdict(one("Cast", ["x"], ["y"], [vi("x", [2])], [vi("y", [2], I8)], to=I8), "n")
    assert why.startswith("Cast to INT8: INT8 is a quantized type in TensorRT") and cite.startswith("10.1:onnxOpImporters")
    why, cite = verdict(one("Add", ["a", "b"], ["y"], [vi("a", [2], I8), vi("b", [2], I8)], [vi("y", [2], I8)]), "n")
    assert why.startswith("Add on INT8: INT8 is a quantized type in TensorRT, taken only through Quantize")
    assert cite.startswith("10.1:docs/operators.md:")


def test_uint8_refused_by_the_importers_that_refuse_it_and_as_intermediate():
    concat = one("Concat", ["a", "b"], ["y"], [vi("a", [2], U8), vi("b", [2], U8)], [vi("y", [4], U8)], axis=0)
    why, cite = verdict(concat, "n")
    assert why == "Concat on UINT8: the parser refuses UINT8 for input 0 'a'"
    assert cite.startswith("10.1:onnxOpImporters.cpp:")
    to_u8 = model([helper.make_node("Cast", ["x"], ["c"], name="n", to=U8),
                   helper.make_node("Cast", ["c"], ["y"], name="back", to=F)], [vi("x", [2])], [vi("y", [2])])
    assert reason(to_u8, "n") == ("Cast producing UINT8 for 'c': TensorRT allows UINT8 only as a network input or "
                                  "output, not for intermediate tensors")
    at_end = one("Cast", ["x"], ["y"], [vi("x", [2])], [vi("y", [2], U8)], to=U8)
    assert reason(at_end, "n") is None
    from_input = one("Cast", ["x"], ["y"], [vi("x", [2], U8)], [vi("y", [2])], to=F)
    assert reason(from_input, "n") is None


def test_each_op_has_its_own_type_list():
    assert reason(one("Relu", ["x"], ["y"], [vi("x", [2], I64)], [vi("y", [2], I64)]), "n") is None
    why, cite = verdict(one("Relu", ["x"], ["y"], [vi("x", [2], I32)], [vi("y", [2], I32)]), "n")
    assert why == "Relu on INT32: the parser refuses INT32 for input 0 'x'" and cite.startswith("10.1:importerUtils.cpp:")
    assert reason(one("Sin", ["x"], ["y"], [vi("x", [2], I64)], [vi("y", [2], I64)]), "n").startswith(
        "Sin on INT64: the parser refuses INT64")
    assert reason(one("Equal", ["a", "b"], ["y"], [vi("a", [2], B), vi("b", [2], B)], [vi("y", [2], B)]), "n") is None
    # IsNaN on INT32: refused by 10.1's unary ISNAN layer, accepted by 10.0's Equal-based importer
    isnan = one("IsNaN", ["x"], ["y"], [vi("x", [2], I32)], [vi("y", [2], B)])
    assert reason(isnan, "n").startswith("IsNaN on INT32")
    assert reason(isnan, "n", version="10.0") is None


def test_output_dtype_checked():
    from partition import TensorInfo
    g = Graph("g", [Node("am", "ArgMax", ("x",), ("y",))], ["x"], ["y"],
              {"x": TensorInfo("x", "FLOAT", (2,)), "y": TensorInfo("y", "FLOAT", (1,))}, opset={"": 17})
    assert reason(g, "am") == "ArgMax producing FLOAT: type not supported (output 0 'y'; ArgMax gives INT32, INT64)"


def test_unknown_dtypes_are_not_held_against_a_node():
    g = Graph("g", [Node("a", "Add", ("x", "x"), ("y",))], ["x"], ["y"], opset={"": 17})
    assert reason(g, "a") is None


# ----------------------------------------------------------------- constants --
def test_weights_inputs_must_be_initializers_or_constants():
    const = helper.make_node("Constant", [], ["axes"], name="c", value=numpy_helper.from_array(np.array([0], np.int64)))
    g = model([const, helper.make_node("Squeeze", ["x", "axes"], ["y"], name="n")], [vi("x", [1, 3])], [vi("y", [3])])
    assert reason(g, "n") is None
    folded = model([helper.make_node("Add", ["a0", "a1"], ["axes"], name="fold"),
                    helper.make_node("ReduceSum", ["x", "axes"], ["y"], name="n")],
                   [vi("x", [2, 3])], [vi("y", None)], [init("a0", [0]), init("a1", [1])])
    why, cite = verdict(folded, "n")
    assert why == ("ReduceSum: input 1 'axes' (axes) must be an initializer or a Constant node's output, but it "
                   "comes from node 'fold' (Add)")   # the parser folds nothing (the old table accepted this)
    assert cite.startswith("10.1:importerUtils.cpp:")
    cumsum = one("CumSum", ["x", "ax"], ["y"], [vi("x", [3]), vi("ax", [], I64)], [vi("y", [3])])
    assert reason(cumsum, "n").startswith("CumSum: input 1 'ax' (axis) must be an initializer")


def test_any_tensor_inputs_pass_from_graph_inputs():
    clip = one("Clip", ["x", "lo", "hi"], ["y"], [vi("x", [3]), vi("lo", []), vi("hi", [])], [vi("y", [3])])
    assert reason(clip, "n") is None
    topk = one("TopK", ["x", "k"], ["v", "i"], [vi("x", [5]), vi("k", [1], I64)], [vi("v", None), vi("i", None, I64)])
    assert reason(topk, "n") is None   # K may be any tensor (the old table demanded a constant)


def test_value_checks_topk_dropout():
    def topk(k):
        return one("TopK", ["x", "k"], ["v", "i"], [vi("x", [5000])], [vi("v", None), vi("i", None, I64)],
                   [init("k", [k])])
    assert reason(topk(3839), "n") is None
    why, cite = verdict(topk(3840), "n")
    assert why == "TopK: input 1 'k' (K) is 3840; TensorRT takes less than 3840" and cite.startswith("10.1:docs/")

    def dropout(mode=None, as_input=False):
        inputs = [vi("x", [3]), vi("r", [])] + ([vi("t", [], B)] if as_input else [])
        inits = [] if as_input else [numpy_helper.from_array(np.array(mode), "t")]
        return one("Dropout", ["x", "r", "t"], ["y"], inputs, [vi("y", [3])], inits)
    assert reason(dropout(False), "n") is None
    assert reason(dropout(True), "n") == \
        "Dropout: input 2 't' (training_mode) is True; TensorRT takes only 0 (inference)"
    assert reason(dropout(as_input=True), "n").startswith("Dropout: input 2 't' (training_mode) must be an initializer")


def test_shape_operands_take_any_tensor_graph_inputs_too():
    # 10.1 Reshape/Expand/Tile/...: the parser wraps any tensor in a shape tensor (no build-time check)
    via_shape = model([helper.make_node("Shape", ["z"], ["s"], name="shape_of"),
                       helper.make_node("Reshape", ["x", "s"], ["y"], name="n")],
                      [vi("x", [2, 3]), vi("z", ["n", 2])], [vi("y", None)])
    assert reason(via_shape, "n") is None
    from_input = one("Reshape", ["x", "shape"], ["y"], [vi("x", [2, 3]), vi("shape", [2], I64)], [vi("y", None)])
    assert reason(from_input, "n") is None


def test_random_like_input_must_not_be_an_initializer():
    g = one("RandomUniformLike", ["x"], ["y"], [], [vi("y", [2])], [init("x", [1.0, 2.0], np.float32)])
    assert reason(g, "n") == "RandomUniformLike: input 0 'x' must be a computed tensor, not an initializer"


def _q(zero, zero_type=np.int8, dq=False, x_type=F):
    op = "DequantizeLinear" if dq else "QuantizeLinear"
    inits = [init("s", 0.5, np.float32), init("z", zero, zero_type)]
    out_t = F if dq else (U8 if zero_type == np.uint8 else I8)
    return one(op, ["x", "s", "z"], ["y"], [vi("x", [4], x_type)], [vi("y", [4], out_t)], inits)


def test_qdq_zero_points_and_uint8():
    assert reason(_q(0), "n") is None
    why, cite = verdict(_q(3), "n")
    assert why.startswith("QuantizeLinear: input 2 'z' (zero point) is not all zeros; TensorRT supports only "
                          "symmetric quantization (zero point 0): quantize symmetrically") \
        and cite.startswith("10.1:onnxOpImporters.cpp:")
    # a UINT8 zero point initializer is imported as INT32 (WeightsContext.cpp), so the UINT8 check never
    # sees it: TensorRT quantizes to INT8 with a warning, and the UINT8 output becomes INT8
    assert reason(_q(0, np.uint8), "n") is None
    as_input = one("QuantizeLinear", ["x", "s", "z"], ["y"], [vi("x", [4]), vi("z", [], U8)], [vi("y", [4], U8)],
                   [init("s", 0.5, np.float32)])
    assert reason(as_input, "n") == "QuantizeLinear on UINT8: the parser refuses UINT8 for input 2 'z'"
    assert reason(_q(0, dq=True, x_type=I8), "n") is None
    assert reason(_q(0, np.uint8, dq=True, x_type=U8), "n") == \
        "DequantizeLinear on UINT8: the parser refuses UINT8 for input 0 'x'"


# ---------------------------------------------------------------- control flow --
def _if_model(then_op: str) -> Graph:
    def branch(name, op):
        return helper.make_graph([helper.make_node(op, ["x"], [f"{name}_out"], name=f"{name}_node")], name, [],
                                 [vi(f"{name}_out", None)])
    node = helper.make_node("If", ["cond"], ["y"], name="if", then_branch=branch("then", then_op),
                            else_branch=branch("else", "Relu"))
    return model([node], [vi("cond", [], B), vi("x", [4, 4])], [vi("y", None)])


def test_if_bodies_decide():
    assert reason(_if_model("Relu"), "if") is None
    assert reason(_if_model("Det"), "if") == ("If: node 'then_node' (Det) in its then_branch is not compatible: "
                                              "Det: not supported by TensorRT 10.1's ONNX parser")


def test_loop_body_checked_too():
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep"),
         helper.make_node("NonZero", ["v_in"], ["nz"], name="body_nz"),
         helper.make_node("Identity", ["v_in"], ["v_out"], name="pass")],
        "body", [vi("i", [], I64), vi("cond_in", [], B), vi("v_in", [3])],
        [vi("cond_out", [], B), vi("v_out", [3])])
    g = model([helper.make_node("Loop", ["M", "", "v0"], ["v_final"], name="loop", body=body)],
              [vi("M", [], I64), vi("v0", [3])], [vi("v_final", [3])])
    assert "body_nz" in reason(g, "loop") and "output shape depends on input values" in reason(g, "loop")
    assert reason(g, "loop", exclude_data_dependent=False) is None


def test_onnx_checker_accepts_the_rule_models():
    onnx.checker.check_model(_function_model("Relu"))
    onnx.checker.check_model(proto([helper.make_node("Relu", ["x"], ["y"], name="relu")], [vi("x", [2])],
                                   [vi("y", [2])]))


# ------------------------------------------------- the release in every result --
def _saved(tmp_path, m: onnx.ModelProto) -> str:
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    return str(path)


def _sglens(*args: str):
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-m", "sglens", *args], capture_output=True, text=True, timeout=120)


def _two_relus(op2: str = "Relu", domain: str = "") -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r1"), helper.make_node("Relu", ["a"], ["b"], name="r2"),
             helper.make_node(op2, ["b"], ["y"], name="n", domain=domain)]
    extra = [(domain, 1)] if domain else []
    return proto(nodes, [vi("x", [2])], [vi("y", [2])], extra_opsets=extra)


def test_partition_result_names_the_rule_table(tmp_path):
    from partition import partition
    g = load_model(_two_relus().SerializeToString())
    assert partition(g, "tensorrt").summary["tensorrt_rules"] == "10.1"
    assert partition(g, "tensorrt", trt_version="10.0").summary["tensorrt_rules"] == "10.0"
    result = partition(load_model(_two_relus("MyOp", "custom").SerializeToString()), "tensorrt", trt_plugins=["MyOp"])
    assert result.excluded == {} and "MyOp" in result.summary["tensorrt_notes"]["n"]


def test_cli_json_carries_tensorrt_rules_and_takes_version_and_plugins(tmp_path):
    import json
    path = _saved(tmp_path, _two_relus("MyOp", "custom"))
    out = _sglens("partition", path, "--backend", "tensorrt", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["summary"]["tensorrt_rules"] == "10.1"
    assert [e["node"] for e in data["excluded"]] == ["n"]
    out = _sglens("partition", path, "--backend", "tensorrt", "--json", "--trt-version", "10.0",
                  "--trt-plugin", "MyOp", "--trt-plugin", "Other")
    data = json.loads(out.stdout)
    assert data["summary"]["tensorrt_rules"] == "10.0" and data["excluded"] == []
    assert data["tensorrt_rules"] == "10.0"
    bad = _sglens("partition", path, "--backend", "tensorrt", "--trt-version", "7.2")
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip().splitlines()[-1].endswith("trt_version must be one of 8.5, 8.6, 10.0, 10.1, got '7.2'")
    assert len(bad.stderr.strip().splitlines()) == 1


def test_web_api_partition_carries_tensorrt_rules_and_takes_version_and_plugins(tmp_path):
    from app import create_app
    app = create_app({"SGLENS_SAMPLES": True, "SGLENS_INSTANCE": str(tmp_path / "instance"), "TESTING": True})
    client = app.test_client()
    got = client.post("/api/models/sample-mlp/partition", json={"backend": "tensorrt"})
    assert got.status_code == 200, got.get_json()
    assert got.get_json()["summary"]["tensorrt_rules"] == "10.1"
    got = client.post("/api/models/sample-mlp/partition",
                      json={"backend": "tensorrt", "trt_version": "10.0", "trt_plugins": "MyOp,Other"})
    assert got.status_code == 200 and got.get_json()["summary"]["tensorrt_rules"] == "10.0"
    bad = client.post("/api/models/sample-mlp/partition", json={"backend": "tensorrt", "trt_version": "7"})
    assert bad.status_code == 400 and "trt_version must be one of 8.5, 8.6, 10.0, 10.1, got '7'" in json_text(bad)
    bad = client.post("/api/models/sample-mlp/partition", json={"backend": "tensorrt", "trt_plugins": [1]})
    assert bad.status_code == 400 and "trt_plugins must be a list of strings" in json_text(bad)


def json_text(response) -> str:
    import json
    return json.dumps(response.get_json())


def test_groups_report_names_the_table_and_the_source_line():
    from partition.tensorrt.node_report import groups_report
    g = model([helper.make_node("Relu", ["x"], ["a"], name="r"), helper.make_node("Det", ["a"], ["y"], name="n")],
              [vi("x", [3, 3])], [vi("y", [])])
    rep = groups_report(g, "n")
    assert rep["tensorrt_rules"] == "10.1" and rep["reason_source"].startswith("10.1:onnxOpCheckers.cpp:")
    assert groups_report(g, "n", trt_version="10.0")["tensorrt_rules"] == "10.0"


def test_per_opset_attribute_checks():
    # Dropout's is_test exists up to opset 6, and the checker refuses training mode there only.
    old = ir_one("Dropout", opset=6, is_test=0)
    assert reason(old, "n") == "Dropout is_test=0: training mode is not supported"
    assert reason(ir_one("Dropout", opset=6, is_test=1), "n") is None
    # Resize's coordinate_transformation_mode is checked from opset 11 (Resize-10 has no such attribute).
    assert reason(ir_one("Resize", opset=10, coordinate_transformation_mode="tf_crop_and_resize"), "n") is None
    assert reason(ir_one("Resize", opset=11, coordinate_transformation_mode="tf_crop_and_resize"), "n") is not None


def test_fp8_and_int4_as_the_parser_says():
    from partition import TensorInfo

    def dq(dtype):
        t = {"x": TensorInfo("x", dtype, (4,)), "s": TensorInfo("s", "FLOAT", ()), "y": TensorInfo("y", "FLOAT", (4,))}
        return Graph("g", [Node("n", "DequantizeLinear", ("x", "s"), ("y",))], ["x", "s"], ["y"], t, opset={"": 21})
    assert reason(dq("FLOAT8E4M3FN"), "n") is None
    assert reason(dq("INT4"), "n") is None
    assert reason(dq("FLOAT8E5M2"), "n") == \
        "DequantizeLinear on FLOAT8E5M2: TensorRT has no FLOAT8E5M2 type (input 0 'x')"
    g = ir_one("Relu", dtype="FLOAT8E4M3FN")
    assert reason(g, "n").startswith("Relu on FLOAT8E4M3FN: FLOAT8E4M3FN is a quantized type in TensorRT")


def test_symmetric_int8_qdq_chain_is_one_tensorrt_subgraph():
    from partition import partition
    w = numpy_helper.from_array(np.ones((2, 2, 1, 1), np.int8), "w")
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="q"),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"], name="dq"),
             helper.make_node("DequantizeLinear", ["w", "s", "z"], ["wd"], name="dqw"),
             helper.make_node("Conv", ["xd", "wd"], ["y"], name="conv")]
    g = model(nodes, [vi("x", [1, 2, 3, 3])], [vi("y", [1, 2, 3, 3])],
              [w, init("s", 0.1, np.float32), init("z", 0, np.int8)], opset=13)
    result = partition(g, "tensorrt")
    assert result.excluded == {} and len(result.subgraphs) == 1


def test_compat_remembers_a_passing_signature_only_for_what_types_decide():
    """``compat`` skips the full check for a node whose op row checks only types and whose
    (op, input types, output types) passed before. Same op and input types but a UINT8
    intermediate output, another input type, a graph output, a row with attribute checks:
    each node's verdict equals its own check."""
    from partition.ir import TensorInfo
    info = {t: TensorInfo(t, d, (2,)) for t, d in [("xf", "FLOAT"), ("xi", "INT8"), ("a", "FLOAT"), ("b", "UINT8"),
                                                   ("c", "FLOAT"), ("d", "INT8"), ("e", "FLOAT"), ("o", "UINT8"),
                                                   ("p", "FLOAT"), ("q", "FLOAT")]}
    nodes = [Node("r0", "Relu", ("xf",), ("a",)), Node("r1", "Relu", ("xf",), ("b",)),
             Node("r2", "Relu", ("xf",), ("c",)), Node("r3", "Relu", ("xi",), ("d",)),
             Node("r4", "Relu", ("a",), ("e",)), Node("r5", "Relu", ("c",), ("o",)),
             Node("s0", "Softmax", ("e",), ("p",), attrs={"axis": -1}),
             Node("s1", "Softmax", ("a",), ("q",), attrs={"axis": 0})]
    graph = Graph("g", nodes, ["xf", "xi"], ["d", "o", "p", "q"], info, opset={"": 17})
    rules = TRTRules()
    alone = {n.name: v for n in nodes if (v := TRTRules().check(graph, n))}
    assert rules.compat(graph) == alone
    assert {"r1", "r3"} <= set(alone) and "r0" not in alone and "r5" not in alone  # the cases are there
