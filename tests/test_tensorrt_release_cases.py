"""One-node cases per release, written from that release's parser source (not from our tables).

Sources: ``shared/reference/onnx-tensorrt-<release>-GA`` (beside the checkout) at the tags the reference README names.
``None``: the parser imports the node; otherwise a phrase of the refusal and the file the refusal must
cite (``release:file``). The 10.1 cases are in ``test_tensorrt_source_cases.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from partition import load_model, partition
from partition.tensorrt.rules import TRTRules
from partition.tensorrt.table import release_differences

F, BF16, I32, I64, I8, U8, B = (TensorProto.FLOAT, TensorProto.BFLOAT16, TensorProto.INT32, TensorProto.INT64,
                                TensorProto.INT8, TensorProto.UINT8, TensorProto.BOOL)


def vi(name, shape, t=F):
    return helper.make_tensor_value_info(name, t, shape)


def w(name, values, dtype=np.float32):
    return numpy_helper.from_array(np.asarray(values, dtype=dtype), name)


def one(op, inputs, outputs, ins, outs, inits=(), opset=13, domain="", extra=(), functions=(), **attrs):
    node = helper.make_node(op, inputs, outputs, name="n", domain=domain or None, **attrs)
    graph = helper.make_graph([node], "t", ins, outs, list(inits))
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra]
    m = helper.make_model(graph, opset_imports=opsets, functions=list(functions))
    m.ir_version = 8
    return load_model(m.SerializeToString())


Y = [vi("y", None)]
X = [vi("x", [2, 4])]


def _local_call():
    fn = helper.make_function("me", "MyAct", ["a"], ["b"], [helper.make_node("Relu", ["a"], ["b"])],
                              [helper.make_opsetid("", 13)])
    return one("MyAct", ["x"], ["y"], X, Y, domain="me", extra=[("me", 1)], functions=[fn])


CASES = {
    "8.6": [
        # convertDtype: INT64 -> kINT32 (onnx2trt_utils.cpp:358); activationHelper refuses INT32 (:32)
        ("Relu on INT64 (carried as INT32)", lambda: one("Relu", ["x"], ["y"], [vi("x", [2], I64)], Y),
         ("INT64 carried as INT32 by TensorRT 8.6", "onnx2trt_utils.cpp")),
        # unaryHelper has a kABS case only; Sign falls to the default list (BOOL, INT32, UINT8) (:1773)
        ("Sign on INT32", lambda: one("Sign", ["x"], ["y"], [vi("x", [2], I32)], Y), ("INT32", "onnx2trt_utils.cpp")),
        ("Abs on INT32", lambda: one("Abs", ["x"], ["y"], [vi("x", [2], I32)], Y), None),
        ("Hardmax (operators.md N)", lambda: one("Hardmax", ["x"], ["y"], X, Y), ("not supported", "docs/")),
        ("CastLike: no importer, a plugin lookup",
         lambda: one("CastLike", ["x", "t"], ["y"], [vi("x", [2]), vi("t", [2], I32)], Y, opset=15),
         ("no importer", "builtin_op_importers.cpp")),
        ("com.microsoft Gelu: no importer",
         lambda: one("Gelu", ["x"], ["y"], X, Y, domain="com.microsoft", extra=[("com.microsoft", 1)]),
         ("no importer", "builtin_op_importers.cpp")),
        ("Relu on BF16: no BF16 type (convertDtype)", lambda: one("Relu", ["x"], ["y"], [vi("x", [2], BF16)], Y),
         ("no BFLOAT16 type", "onnx2trt_utils.cpp")),
        ("a model-local function: no local-function importer", _local_call, ("no importer", "builtin_op_importers.cpp")),
        ("InstanceNormalization scale from a graph input (onnx2trt_utils.cpp:1241)",
         lambda: one("InstanceNormalization", ["x", "s", "b"], ["y"], [vi("x", [1, 2, 4, 4]), vi("s", [2])], Y,
                     [w("b", [0, 0])]), ("initializer", "onnx2trt_utils.cpp")),
        ("InstanceNormalization with initializers", lambda: one("InstanceNormalization", ["x", "s", "b"], ["y"],
                                                                [vi("x", [1, 2, 4, 4])], Y,
                                                                [w("s", [1, 1]), w("b", [0, 0])]), None),
        ("QuantizeLinear without a zero point (builtin_op_importers.cpp: 3 inputs for INT8)",
         lambda: one("QuantizeLinear", ["x", "s"], ["y"], [vi("x", [4])], [vi("y", [4], U8)], [w("s", 0.5)]),
         ("zero-point", "builtin_op_importers.cpp")),
        # QuantDequantLinearHelper (builtin_op_importers.cpp:1157-1297 in 8.6-GA): a constant scale must have
        # coefficients, all positive (:1194, :1197); a constant zero point all zeros (:1220); DQ refuses
        # UINT8 data (:1160); Q a UINT8 zero point (:1165), but UINT8 weights arrive as INT32 (:670)
        ("QuantizeLinear, negative scale", lambda: one("QuantizeLinear", ["x", "s", "z"], ["y"], [vi("x", [4])],
                                                       [vi("y", [4], I8)], [w("s", -0.5), w("z", 0, np.int8)]),
         ("positive", "builtin_op_importers.cpp")),
        ("QuantizeLinear, zero point 3", lambda: one("QuantizeLinear", ["x", "s", "z"], ["y"], [vi("x", [4])],
                                                     [vi("y", [4], I8)], [w("s", 0.5), w("z", 3, np.int8)]),
         ("zero", "builtin_op_importers.cpp")),
        ("QuantizeLinear, INT8 zero point 0", lambda: one("QuantizeLinear", ["x", "s", "z"], ["y"], [vi("x", [4])],
                                                          [vi("y", [4], I8)], [w("s", 0.5), w("z", 0, np.int8)]),
         None),
        ("DequantizeLinear, UINT8 data from the network input",
         lambda: one("DequantizeLinear", ["x", "s", "z"], ["y"], [vi("x", [4], U8)], Y,
                     [w("s", 0.5), w("z", 0, np.uint8)]), ("UINT8", "builtin_op_importers.cpp")),
        ("DequantizeLinear, zero point -1", lambda: one("DequantizeLinear", ["x", "s", "z"], ["y"], [vi("x", [4], I8)],
                                                        Y, [w("s", 0.5), w("z", -1, np.int8)]),
         ("zero", "builtin_op_importers.cpp")),
        ("DequantizeLinear without a zero point", lambda: one("DequantizeLinear", ["x", "s"], ["y"], [vi("x", [4], I8)],
                                                              Y, [w("s", 0.5)]), ("zero-point", "builtin_op_importers.cpp")),
        ("ScatterND reduction=add: the attribute is never read (accepted)",
         lambda: one("ScatterND", ["d", "i", "u"], ["y"], [vi("d", [4]), vi("i", [1, 1], I64), vi("u", [1])], Y,
                     opset=16, reduction="add"), None),
        ("Shape start=1: ignored (accepted)", lambda: one("Shape", ["x"], ["y"], X, [vi("y", None, I64)], opset=15,
                                                          start=1), None),
        ("LayerNormalization", lambda: one("LayerNormalization", ["x", "s"], ["y"], X, Y, [w("s", np.ones(4))],
                                           opset=17), None),
    ],
    "8.5": [
        ("LayerNormalization (operators.md N)", lambda: one("LayerNormalization", ["x", "s"], ["y"], X, Y,
                                                            [w("s", np.ones(4))], opset=17),
         ("not supported", "docs/")),
        ("IsInf (operators.md N)", lambda: one("IsInf", ["x"], ["y"], X, [vi("y", None, B)]), ("not supported", "docs/")),
        ("GroupNormalization: no row, a plugin lookup",
         lambda: one("GroupNormalization", ["x", "s", "b"], ["y"], [vi("x", [1, 4, 2, 2])], Y,
                     [w("s", np.ones(2)), w("b", np.zeros(2))], opset=18, num_groups=2),
         ("no importer", "builtin_op_importers.cpp")),
        # QuantDequantLinearHelper (builtin_op_importers.cpp:1177-1297 in 8.5-GA): 3 inputs (:1193), scale
        # positive (:1209), zero point all zeros (:1227), UINT8 data refused (:1180)
        ("QuantizeLinear without a zero point", lambda: one("QuantizeLinear", ["x", "s"], ["y"], [vi("x", [4])],
                                                            [vi("y", [4], U8)], [w("s", 0.5)]),
         ("zero-point", "builtin_op_importers.cpp")),
        ("DequantizeLinear, zero scale", lambda: one("DequantizeLinear", ["x", "s", "z"], ["y"], [vi("x", [4], I8)],
                                                     Y, [w("s", 0.0), w("z", 0, np.int8)]),
         ("positive", "builtin_op_importers.cpp")),
        ("QuantizeLinear, zero point 1", lambda: one("QuantizeLinear", ["x", "s", "z"], ["y"], [vi("x", [4])],
                                                     [vi("y", [4], I8)], [w("s", 0.5), w("z", 1, np.int8)]),
         ("zero", "builtin_op_importers.cpp")),
        ("DequantizeLinear, INT8, zero point 0", lambda: one("DequantizeLinear", ["x", "s", "z"], ["y"],
                                                             [vi("x", [4], I8)], Y, [w("s", 0.5), w("z", 0, np.int8)]),
         None),
        ("Conv", lambda: one("Conv", ["x", "k"], ["y"], [vi("x", [1, 1, 4, 4])], Y, [w("k", np.ones((1, 1, 3, 3)))]),
         None),
    ],
    "10.0": [
        ("DeformConv: 10.0's checker refuses (onnxOpCheckers.cpp:909)",
         lambda: one("DeformConv", ["x", "k", "o"], ["y"], [vi("x", [1, 2, 5, 5]), vi("o", [1, 18, 3, 3])], Y,
                     [w("k", np.ones((2, 2, 3, 3)))], opset=19), ("not supported", "onnxOpCheckers.cpp")),
        # IsNaN = NOT(Equal(x, x)): the NOT sees BOOL, Equal takes every type (onnxOpImporters.cpp:2716)
        ("IsNaN on INT32", lambda: one("IsNaN", ["x"], ["y"], [vi("x", [2], I32)], [vi("y", None, B)]), None),
        ("Sign on INT32: no SIGN case before 10.1 (importerUtils.cpp:1596)",
         lambda: one("Sign", ["x"], ["y"], [vi("x", [2], I32)], Y), ("INT32", "importerUtils.cpp")),
        ("CastLike", lambda: one("CastLike", ["x", "t"], ["y"], [vi("x", [2]), vi("t", [2], I32)], Y, opset=15), None),
        ("a model-local function", _local_call, None),
    ],
}
PARAMS = [(release, case) for release, cases in CASES.items() for case in cases]


@pytest.mark.parametrize("release,case", PARAMS, ids=[f"{r}: {c[0]}" for r, c in PARAMS])
def test_one_node_case_from_the_release_source(release, case):
    _, factory, expected = case
    rules = TRTRules(version=release)
    why = rules.compat(factory()).get("n")
    if expected is None:
        assert why is None, why
    else:
        phrase, cited_file = expected
        assert why is not None and phrase in why, why
        assert rules.cite("n").startswith(f"{release}:{cited_file}"), rules.cite("n")


def test_8x_notes_what_it_imports_differently():
    rules = TRTRules(version="8.6")
    g = one("ScatterND", ["d", "i", "u"], ["y"], [vi("d", [4]), vi("i", [1, 1], I64), vi("u", [1])], Y, opset=16,
            reduction="add")
    assert rules.compat(g) == {} and "reduction=add is ignored" in rules.notes["n"]
    int64 = one("Add", ["x", "c"], ["y"], [vi("x", [2], I64)], Y, [w("c", [1, 2], np.int64)])
    rules.compat(int64)
    assert any("carried as INT32" in warning for warning in rules.warnings)
    assert not any("carried as INT32" in warning for warning in TRTRules(version="10.1").graph_warnings(int64))


def test_partition_and_differences_per_release():
    g = one("LayerNormalization", ["x", "s"], ["y"], X, Y, [w("s", np.ones(4))], opset=17)
    assert partition(g, "tensorrt", trt_version="8.5", min_size=1).subgraphs == []
    assert len(partition(g, "tensorrt", trt_version="8.6", min_size=1).subgraphs) == 1
    diff = release_differences("8.6")
    assert diff["previous"] == "8.5" and {"LayerNormalization", "IsInf"} <= set(diff["now_supported"])
    assert "GroupNormalization" in diff["added"]
    assert release_differences("10.1")["now_supported"] == ["DeformConv"]
    assert release_differences("8.5")["previous"] is None
