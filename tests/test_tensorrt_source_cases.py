"""One-node cases written from onnx-tensorrt 10.1-GA's source (not from our tables): what the parser does.

Each case names the source line (release/10.1-GA, ``shared/reference/onnx-tensorrt`` beside the checkout) whose
behaviour it states. ``None`` means the parser imports the node; a string is a phrase the refusal
must contain, and the refusal must cite the file named in the case. These are the audit's cases:
the missed refusals (we accepted, the parser refuses), the extra refusals (we refused, the parser
accepts), the dispatch and plugin lookup.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from partition import load_model
from partition.tensorrt.rules import TRTRules

F, F16, BF16, U8, I8, I32, I64, B = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.UINT8,
                                     TensorProto.INT8, TensorProto.INT32, TensorProto.INT64, TensorProto.BOOL)


def vi(name, shape, t=F):
    return helper.make_tensor_value_info(name, t, shape)


def w(name, values, dtype=np.int64):
    return numpy_helper.from_array(np.asarray(values, dtype=dtype), name)


def node_model(op, inputs, outputs, ins, outs, inits=(), opset=17, domain="", extra=(), **attrs):
    node = helper.make_node(op, inputs, outputs, name="n", domain=domain or None, **attrs)
    graph = helper.make_graph([node], "t", ins, outs, list(inits))
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra]
    m = helper.make_model(graph, opset_imports=opsets)
    m.ir_version = 8
    return load_model(m.SerializeToString())


X4 = [vi("x", [1, 2, 8, 8])]


def _scan(dtype):
    body = helper.make_graph([helper.make_node("Add", ["s", "e"], ["s2"], name="acc"),
                              helper.make_node("Identity", ["s2"], ["o"], name="out")], "body",
                             [vi("s", [2], dtype), vi("e", [2], dtype)], [vi("s2", [2], dtype), vi("o", [2], dtype)])
    return node_model("Scan", ["init", "xs"], ["final", "ys"], [vi("init", [2], dtype), vi("xs", [3, 2], dtype)],
                      [vi("final", None, dtype), vi("ys", None, dtype)], body=body, num_scan_inputs=1)
Y = [vi("y", None)]

# (case id, model factory, expected: None = imported, or (phrase in the reason, cited file))
CASES = [
    # ---- missed refusals: the parser refuses
    ("pool 4 spatial dims (importerUtils.cpp:1399)",
     lambda: node_model("MaxPool", ["x"], ["y"], [vi("x", [1, 1, 4, 4, 4, 4])], Y, kernel_shape=[2, 2, 2, 2]),
     ("spatial dimensions", "importerUtils.cpp")),
    ("pool 1-D on rank 3 (expanded)",
     lambda: node_model("AveragePool", ["x"], ["y"], [vi("x", [1, 2, 8])], Y, kernel_shape=[2]), None),
    ("pool 3-D", lambda: node_model("MaxPool", ["x"], ["y"], [vi("x", [1, 1, 4, 4, 4])], Y, kernel_shape=[2, 2, 2]),
     None),
    ("ConvTranspose rank 6 (onnxOpImporters.cpp:898)",
     lambda: node_model("ConvTranspose", ["x", "k"], ["y"], [vi("x", [1, 2, 3, 3, 3, 3])], Y,
                        [w("k", np.ones((2, 1, 1, 1, 1, 1)), np.float32)]),
     ("rank 6", "onnxOpImporters.cpp")),
    ("ConvTranspose output_shape needing negative pre-padding (onnxOpImporters.cpp:994)",
     # total = 1*(4-1) + 0 + (3-1)+1 - 9 = -3 -> begin = -1
     lambda: node_model("ConvTranspose", ["x", "k"], ["y"], [vi("x", [1, 1, 4, 4])], Y,
                        [w("k", np.ones((1, 1, 3, 3)), np.float32)], output_shape=[9, 9]),
     ("negative pre-padding", "onnxOpImporters.cpp")),
    ("ConvTranspose output_shape with padding >= 0",
     lambda: node_model("ConvTranspose", ["x", "k"], ["y"], [vi("x", [1, 1, 4, 4])], Y,
                        [w("k", np.ones((1, 1, 3, 3)), np.float32)], output_shape=[6, 6]), None),
    ("Resize linear on 4 axes with constant scales (onnxOpImporters.cpp:4614)",
     lambda: node_model("Resize", ["x", "", "s"], ["y"], X4, Y, [w("s", [2, 1, 2, 2], np.float32)], mode="linear"),
     ("innermost 3", "onnxOpImporters.cpp")),
    ("Resize linear on the inner 2 axes",
     lambda: node_model("Resize", ["x", "", "s"], ["y"], X4, Y, [w("s", [1, 1, 2, 2], np.float32)], mode="linear"),
     None),
    ("Resize cubic on 3 axes (onnxOpImporters.cpp:4620)",
     lambda: node_model("Resize", ["x", "", "s"], ["y"], X4, Y, [w("s", [1, 2, 2, 2], np.float32)], mode="cubic"),
     ("innermost 2", "onnxOpImporters.cpp")),
    ("Resize non-iota axes with tensor scales (onnxOpImporters.cpp:4630)",
     lambda: node_model("Resize", ["x", "", "s"], ["y"], X4 + [vi("s", [2])], Y, opset=18, axes=[3, 2]),
     ("axes", "onnxOpImporters.cpp")),
    ("Resize non-iota axes with constant scales",
     lambda: node_model("Resize", ["x", "", "s"], ["y"], X4, Y, [w("s", [2, 2], np.float32)], opset=18, axes=[2, 3]),
     None),
    ("Upsample linear on 4 axes (onnxOpImporters.cpp:5968)",
     lambda: node_model("Upsample", ["x", "s"], ["y"], X4, Y, [w("s", [2, 2, 2, 2], np.float32)], opset=9,
                        mode="linear"),
     ("innermost 3", "onnxOpImporters.cpp")),
    ("Squeeze without axes on a dynamic shape (onnxOpImporters.cpp:5648)",
     lambda: node_model("Squeeze", ["x"], ["y"], [vi("x", ["n", 1, 4])], Y), ("dynamic shape", "onnxOpImporters.cpp")),
    ("Squeeze without axes on a static shape", lambda: node_model("Squeeze", ["x"], ["y"], [vi("x", [2, 1, 4])], Y),
     None),
    ("Einsum with upper-case letters (onnxOpCheckers.cpp:281)",
     lambda: node_model("Einsum", ["a", "b"], ["y"], [vi("a", [2, 3]), vi("b", [3, 4])], Y, equation="IJ,JK->IK"),
     ("equation", "onnxOpCheckers.cpp")),
    ("Einsum lower case", lambda: node_model("Einsum", ["a", "b"], ["y"], [vi("a", [2, 3]), vi("b", [3, 4])], Y,
                                             equation="ij,jk->ik"), None),
    ("LSTM activation Affine (OnnxAttrs.cpp:215 throws)",
     lambda: node_model("LSTM", ["x", "W", "R"], ["y"], [vi("x", [2, 1, 3])], Y,
                        [w("W", np.ones((1, 8, 3)), np.float32), w("R", np.ones((1, 8, 2)), np.float32)], hidden_size=2,
                        activations=["Affine", "Tanh", "Tanh"]),
     ("activations", "OnnxAttrs.cpp")),
    ("GRU with mapped activations",
     lambda: node_model("GRU", ["x", "W", "R"], ["y"], [vi("x", [2, 1, 3])], Y,
                        [w("W", np.ones((1, 6, 3)), np.float32), w("R", np.ones((1, 6, 2)), np.float32)], hidden_size=2,
                        activations=["Sigmoid", "Relu"]), None),
    ("RandomUniform dtype DOUBLE (onnxOpCheckers.cpp:113)",
     lambda: node_model("RandomUniform", [], ["y"], [], Y, shape=[2], dtype=TensorProto.DOUBLE),
     ("dtype", "onnxOpCheckers.cpp")),
    ("RandomNormal dtype FLOAT16", lambda: node_model("RandomNormal", [], ["y"], [], Y, shape=[2], dtype=F16), None),
    ("ReduceL2 on INT32: the trailing sqrt (importerUtils.cpp:1732)",
     lambda: node_model("ReduceL2", ["x"], ["y"], [vi("x", [2, 3], I32)], Y), ("INT32", "importerUtils.cpp")),
    ("ReduceLogSum on INT64: the trailing log",
     lambda: node_model("ReduceLogSum", ["x"], ["y"], [vi("x", [2, 3], I64)], Y), ("INT64", "importerUtils.cpp")),
    ("ReduceSum on INT32", lambda: node_model("ReduceSum", ["x"], ["y"], [vi("x", [2, 3], I32)], Y), None),
    ("GroupNormalization rank 2 (importerUtils.cpp:1313)",
     lambda: node_model("GroupNormalization", ["x", "s", "b"], ["y"], [vi("x", [2, 4])], Y,
                        [w("s", [1.0, 1.0], np.float32), w("b", [0.0, 0.0], np.float32)], opset=18, num_groups=2),
     ("rank 2", "importerUtils.cpp")),
    ("HardSwish on BF16 (onnxOpImporters.cpp:6388)",
     lambda: node_model("HardSwish", ["x"], ["y"], [vi("x", [2], BF16)], Y), ("BFLOAT16", "onnxOpImporters.cpp")),
    ("Dropout with an empty training_mode input (onnxOpImporters.cpp:1709)",
     lambda: node_model("Dropout", ["x", "", ""], ["y"], [vi("x", [2])], Y), ("empty name", "onnxOpImporters.cpp")),
    ("Dropout with ratio only", lambda: node_model("Dropout", ["x"], ["y"], [vi("x", [2])], Y), None),
    ("per-axis QuantizeLinear without axis: axis 0 taken (onnxOpImporters.cpp:1538)",
     lambda: node_model("QuantizeLinear", ["x", "s", "z"], ["y"], [vi("x", [1, 3, 4, 4])], [vi("y", None, I8)],
                        [w("s", [0.5, 0.5, 0.5], np.float32), w("z", [0, 0, 0], np.int8)]),
     ("axis 0", "onnxOpImporters.cpp")),
    ("per-axis QuantizeLinear with axis=1",
     lambda: node_model("QuantizeLinear", ["x", "s", "z"], ["y"], [vi("x", [1, 3, 4, 4])], [vi("y", None, I8)],
                        [w("s", [0.5, 0.5, 0.5], np.float32), w("z", [0, 0, 0], np.int8)], axis=1), None),
    ("MaxPool with an empty Indices slot (onnxOpCheckers.cpp:468)",
     lambda: node_model("MaxPool", ["x"], ["y", ""], X4, Y, kernel_shape=[2, 2]), ("Indices", "onnxOpCheckers.cpp")),
    ("LayerNormalization with empty extra outputs (ModelImporter.cpp:222)",
     lambda: node_model("LayerNormalization", ["x", "s"], ["y", "", ""], [vi("x", [2, 4])], Y,
                        [w("s", np.ones(4), np.float32)]), ("first output", "ModelImporter.cpp")),
    ("BatchNormalization with training outputs (ModelImporter.cpp:222)",
     lambda: node_model("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"], X4,
                        Y + [vi("rm", None), vi("rv", None)],
                        [w(n, np.ones(2), np.float32) for n in ("s", "b", "m", "v")], opset=14),
     ("training outputs", "ModelImporter.cpp")),
    # ---- further checks of the 10.1 importers and checkers
    ("Cast to FLOAT8E4M3FN (onnxOpImporters.cpp: TRT will reject casts to FP8)",
     lambda: node_model("Cast", ["x"], ["y"], [vi("x", [2])], Y, opset=19, to=TensorProto.FLOAT8E4M3FN),
     ("quantized", "onnxOpImporters.cpp")),
    ("CumSum with a computed axis", lambda: node_model("CumSum", ["x", "a"], ["y"], [vi("x", [4]), vi("a", [], I64)], Y),
     ("initializer", "onnxOpImporters.cpp")),
    ("Pad with computed axes", lambda: node_model("Pad", ["x", "p", "", "a"], ["y"],
                                                  [vi("x", [4]), vi("a", [1], I64)], Y, [w("p", [1, 1])], opset=18),
     ("axes", "onnxOpImporters.cpp")),
    ("Unsqueeze with computed axes", lambda: node_model("Unsqueeze", ["x", "a"], ["y"], [vi("x", [4]), vi("a", [1], I64)],
                                                        Y), ("axes", "onnxOpImporters.cpp")),
    ("Resize antialias=1", lambda: node_model("Resize", ["x", "", "s"], ["y"], X4, Y, [w("s", [1, 1, 2, 2], np.float32)],
                                              opset=18, mode="linear", antialias=1), ("antialias", "onnxOpCheckers.cpp")),
    ("Resize tf_crop_and_resize", lambda: node_model("Resize", ["x", "", "s"], ["y"], X4, Y,
                                                     [w("s", [1, 1, 2, 2], np.float32)],
                                                     coordinate_transformation_mode="tf_crop_and_resize"),
     ("coordinate_transformation_mode", "onnxOpCheckers.cpp")),
    ("Upsample cubic", lambda: node_model("Upsample", ["x", "s"], ["y"], X4, Y, [w("s", [1, 1, 2, 2], np.float32)],
                                          opset=9, mode="cubic"), ("mode", "onnxOpCheckers.cpp")),
    ("ScatterND reduction=add (refused in 10.1)",
     lambda: node_model("ScatterND", ["d", "i", "u"], ["y"], [vi("d", [4]), vi("i", [1, 1], I64), vi("u", [1])], Y,
                        opset=16, reduction="add"), ("reduction", "onnxOpImporters.cpp")),
    ("Mod fmod=0 on FLOAT", lambda: node_model("Mod", ["a", "b"], ["y"], [vi("a", [2]), vi("b", [2])], Y),
     ("fmod", "onnxOpImporters.cpp")),
    ("Mod fmod=0 on INT32", lambda: node_model("Mod", ["a", "b"], ["y"], [vi("a", [2], I32), vi("b", [2], I32)], Y),
     None),
    ("ReverseSequence with batch_axis == time_axis",
     lambda: node_model("ReverseSequence", ["x", "l"], ["y"], [vi("x", [2, 2, 3]), vi("l", [2], I64)], Y,
                        batch_axis=0, time_axis=0), ("cannot be the same", "onnxOpCheckers.cpp")),
    ("EyeLike of rank 3", lambda: node_model("EyeLike", ["x"], ["y"], [vi("x", [2, 2, 2])], Y),
     ("rank 3", "onnxOpImporters.cpp")),
    ("RandomUniformLike of an initializer", lambda: node_model("RandomUniformLike", ["x"], ["y"], [], Y,
                                                               [w("x", [1.0, 2.0], np.float32)]),
     ("initializer", "onnxOpImporters.cpp")),
    ("LpNormalization p=3", lambda: node_model("LpNormalization", ["x"], ["y"], [vi("x", [2, 4])], Y, p=3),
     ("p=3", "onnxOpCheckers.cpp")),
    ("Gelu approximate=erf", lambda: node_model("Gelu", ["x"], ["y"], [vi("x", [2])], Y, opset=20, approximate="erf"),
     ("approximate", "onnxOpImporters.cpp")),
    ("Gelu approximate=tanh", lambda: node_model("Gelu", ["x"], ["y"], [vi("x", [2])], Y, opset=20,
                                                 approximate="tanh"), None),
    ("MaxPool dilations 2", lambda: node_model("MaxPool", ["x"], ["y"], X4, Y, kernel_shape=[2, 2], dilations=[2, 2]),
     ("dilations", "onnxOpCheckers.cpp")),
    ("Dropout training_mode=True", lambda: node_model("Dropout", ["x", "", "t"], ["y"], [vi("x", [2])], Y,
                                                      [w("t", True, np.bool_)]), ("training", "onnxOpImporters.cpp")),
    ("BatchNormalization training_mode=1",
     lambda: node_model("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], X4, Y,
                        [w(n, np.ones(2), np.float32) for n in ("s", "b", "m", "v")], opset=15, training_mode=1),
     ("training_mode", "onnxOpCheckers.cpp")),
    ("LSTM input_forget=1",
     lambda: node_model("LSTM", ["x", "W", "R"], ["y"], [vi("x", [2, 1, 3])], Y,
                        [w("W", np.ones((1, 8, 3)), np.float32), w("R", np.ones((1, 8, 2)), np.float32)], hidden_size=2,
                        input_forget=1), ("input_forget", "onnxOpCheckers.cpp")),
    ("bidirectional RNN with different activations per direction",
     lambda: node_model("RNN", ["x", "W", "R"], ["y"], [vi("x", [2, 1, 3])], Y,
                        [w("W", np.ones((2, 2, 3)), np.float32), w("R", np.ones((2, 2, 2)), np.float32)], hidden_size=2,
                        direction="bidirectional", activations=["Tanh", "Relu"]),
     ("both directions", "onnxOpCheckers.cpp")),
    ("Split sizes from a graph input", lambda: node_model("Split", ["x", "s"], ["a", "b"], [vi("x", [4]), vi("s", [2], I64)],
                                                          [vi("a", None), vi("b", None)]), None),
    ("Trilu k from a graph input", lambda: node_model("Trilu", ["x", "k"], ["y"], [vi("x", [3, 3]), vi("k", [], I64)], Y,
                                                      opset=14), None),
    ("Clip min from a graph input", lambda: node_model("Clip", ["x", "lo"], ["y"], [vi("x", [2]), vi("lo", [])], Y), None),
    ("DeformConv on rank 5", lambda: node_model("DeformConv", ["x", "k", "o"], ["y"],
                                                [vi("x", [1, 2, 3, 5, 5]), vi("o", [1, 54, 3, 3, 3])], Y,
                                                [w("k", np.ones((2, 2, 3, 3, 3)), np.float32)], opset=19),
     ("rank 5", "importerUtils.cpp")),
    # ---- extra refusals: the parser accepts
    ("Clip on INT32 (onnxOpImporters.cpp:578)", lambda: node_model("Clip", ["x"], ["y"], [vi("x", [2], I32)], Y), None),
    ("Clip on INT64 with tensor bounds",
     lambda: node_model("Clip", ["x", "lo", "hi"], ["y"], [vi("x", [2], I64), vi("lo", [], I64), vi("hi", [], I64)], Y),
     None),
    ("CumSum on INT64 (no type check in its importer)",
     lambda: node_model("CumSum", ["x", "a"], ["y"], [vi("x", [4], I64)], Y, [w("a", 0)]), None),
    ("Scan over INT64 (no type check for a Scan's inputs, onnxOpImporters.cpp:4965)",
     lambda: _scan(I64), None),
    ("Reshape with the shape from a graph input (ShapeTensor wraps any tensor)",
     lambda: node_model("Reshape", ["x", "s"], ["y"], [vi("x", [2, 3]), vi("s", [2], I64)], Y), None),
    ("Expand with the shape from a graph input",
     lambda: node_model("Expand", ["x", "s"], ["y"], [vi("x", [1, 3]), vi("s", [2], I64)], Y), None),
    ("Tile with repeats from a graph input",
     lambda: node_model("Tile", ["x", "r"], ["y"], [vi("x", [2, 3]), vi("r", [2], I64)], Y), None),
    ("ConstantOfShape from a graph input",
     lambda: node_model("ConstantOfShape", ["s"], ["y"], [vi("s", [2], I64)], Y), None),
    ("Slice starts/ends from graph inputs",
     lambda: node_model("Slice", ["x", "s", "e"], ["y"], [vi("x", [4]), vi("s", [1], I64), vi("e", [1], I64)], Y),
     None),
    ("Pad pads from a graph input",
     lambda: node_model("Pad", ["x", "p"], ["y"], [vi("x", [4]), vi("p", [2], I64)], Y), None),
    ("QuantizeLinear with no zero point: INT8, not UINT8 (onnxOpImporters.cpp:1424)",
     lambda: node_model("QuantizeLinear", ["x", "s"], ["q"], [vi("x", [4])], [vi("q", [4], U8)],
                        [w("s", 0.5, np.float32)]), None),
    ("DequantizeLinear with a UINT8 zero-point initializer of 0 (imported as INT32)",
     lambda: node_model("DequantizeLinear", ["x", "s", "z"], ["y"], [vi("x", [4], I8)], Y,
                        [w("s", 0.5, np.float32), w("z", 0, np.uint8)]), None),
    ("Shape of a UINT8 network input",
     lambda: node_model("Shape", ["x"], ["y"], [vi("x", [2, 3], U8)], [vi("y", [2], I64)]), None),
    ("Identity of a UINT8 network input to a network output",
     lambda: node_model("Identity", ["x"], ["y"], [vi("x", [2, 3], U8)], [vi("y", [2, 3], U8)]), None),
    # ---- dispatch and plugins
    ("ai.onnx.ml op: the plugin lookup (ModelImporter.cpp:157 ignores the domain)",
     lambda: node_model("Normalizer", ["x"], ["y"], [vi("x", [2, 3])], Y, domain="ai.onnx.ml", extra=[("ai.onnx.ml", 3)]),
     ("no importer", "onnxOpImporters.cpp")),
    ("bundled plugin, default version 1",
     lambda: node_model("EfficientNMS_TRT", ["b", "s"], ["y"], [vi("b", [1, 10, 4]), vi("s", [1, 10, 2])], Y,
                        domain="trt", extra=[("trt", 1)]), None),
    ("bundled plugin, a version it does not have (onnxOpImporters.cpp:6442)",
     lambda: node_model("EfficientNMS_TRT", ["b", "s"], ["y"], [vi("b", [1, 10, 4]), vi("s", [1, 10, 2])], Y,
                        domain="trt", extra=[("trt", 1)], plugin_version="7"),
     ("plugin_version 7", "onnxOpImporters.cpp")),
    ("bundled plugin in another namespace",
     lambda: node_model("EfficientNMS_TRT", ["b", "s"], ["y"], [vi("b", [1, 10, 4]), vi("s", [1, 10, 2])], Y,
                        domain="trt", extra=[("trt", 1)], plugin_namespace="mine"),
     ("plugin_namespace 'mine'", "onnxOpImporters.cpp")),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_one_node_case_from_the_10_1_source(case):
    _, factory, expected = case
    graph = factory()
    rules = TRTRules(version="10.1")
    why = rules.compat(graph).get("n")
    if expected is None:
        assert why is None, why
    else:
        phrase, cited_file = expected
        assert why is not None and phrase in why, why
        assert rules.cite("n").startswith(f"10.1:{cited_file}"), rules.cite("n")


def test_if_with_a_constant_condition_imports_only_the_taken_branch():
    # onnxOpImporters.cpp:2595 "For constant conditions, parse only the selected subgraph"
    def branch(name, op):
        return helper.make_graph([helper.make_node(op, ["x"], [f"{name}_out"], name=f"{name}_node")], name, [],
                                 [vi(f"{name}_out", None)])
    for cond, expect in ((True, None), (False, "Det")):
        node = helper.make_node("If", ["c"], ["y"], name="n", then_branch=branch("then", "Relu"),
                                else_branch=branch("else", "Det"))
        graph = helper.make_graph([node], "t", [vi("x", [4])], Y, [w("c", cond, np.bool_)])
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        why = TRTRules().compat(load_model(m.SerializeToString())).get("n")
        assert (why is None) if expect is None else (expect in why), why


def test_user_plugin_takes_any_version_and_namespace():
    g = node_model("MyOp", ["x"], ["y"], [vi("x", [2])], Y, domain="me", extra=[("me", 1)], plugin_version="3",
                   plugin_namespace="ns")
    rules = TRTRules(plugins=["MyOp"])
    assert rules.compat(g) == {}
    assert "plugin_version 3, plugin_namespace 'ns'" in rules.notes["n"]
