"""Models for the UI tests, built here (opset 17, IR 8).

A YOLO-style model with long, scoped node names (``/model.22/cv3.2/cv3.2.1/conv/Conv``), built
here: opset 17, IR 8. Each block is a diamond Conv -> Sigmoid -> Mul -> Add with a MaxPool side
branch joining at the Add, so a backend taking Conv,Sigmoid,Mul,Add,Concat meets a cycle check
(the path runs through the MaxPool) and ``filter([...])`` over many long names at once.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

OPS = "Conv,Sigmoid,Mul,Add,Concat"   # the YOLOv8n selection


def long_names_model(blocks: int = 12, channels: int = 4):
    """``blocks`` diamonds in a chain, then a Concat of every block's output."""
    rng = np.random.default_rng(0)
    nodes, inits, outs, prev = [], [], [], "images"
    for b in range(blocks):
        scope = f"/model.{b + 10}/cv3.{b % 3}/cv3.{b % 3}.{b % 2}"
        w = f"model.{b + 10}.cv3.{b % 3}.{b % 3}.{b % 2}.conv.weight"
        inits.append(numpy_helper.from_array(rng.standard_normal((channels, channels, 1, 1)).astype(np.float32) * 0.3, w))
        names = {k: f"{scope}/{k.lower()}/{k}" for k in ("Conv", "Sigmoid", "Mul", "MaxPool", "Add")}
        out = {k: v + "_output_0" for k, v in names.items()}
        nodes += [
            oh.make_node("Conv", [prev, w], [out["Conv"]], name=names["Conv"]),
            oh.make_node("Sigmoid", [out["Conv"]], [out["Sigmoid"]], name=names["Sigmoid"]),
            oh.make_node("Mul", [out["Conv"], out["Sigmoid"]], [out["Mul"]], name=names["Mul"]),
            oh.make_node("MaxPool", [out["Conv"]], [out["MaxPool"]], name=names["MaxPool"],
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]),
            oh.make_node("Add", [out["Mul"], out["MaxPool"]], [out["Add"]], name=names["Add"]),
        ]
        prev = out["Add"]
        outs.append(prev)
    nodes.append(oh.make_node("Concat", outs, ["output0"], name="/model.23/Concat_long_output_join", axis=1))
    graph = oh.make_graph(nodes, "yolo_long_names",
                          [oh.make_tensor_value_info("images", TensorProto.FLOAT, [1, channels, 8, 8])],
                          [oh.make_tensor_value_info("output0", TensorProto.FLOAT, [1, channels * blocks, 8, 8])], inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)


def bookkeeping_heavy_model():
    """More Constant/Identity/Shape nodes than compute ones, as in PP-OCR or silero-VAD exports."""
    nodes, prev = [], "x"
    for k in range(4):
        nodes += [oh.make_node("Constant", [], [f"c{k}"], name=f"const{k}",
                               value=numpy_helper.from_array(np.full((1, 4), 0.5, np.float32))),
                  oh.make_node("Constant", [], [f"d{k}"], name=f"const_b{k}",
                               value=numpy_helper.from_array(np.full((1, 4), 2.0, np.float32))),
                  oh.make_node("Identity", [prev], [f"i{k}"], name=f"ident{k}"),
                  oh.make_node("Shape", [f"i{k}"], [f"s{k}"], name=f"shape{k}"),
                  oh.make_node("Mul", [f"i{k}", f"c{k}"], [f"m{k}"], name=f"mul{k}"),
                  oh.make_node("Add", [f"m{k}", f"d{k}"], [f"a{k}"], name=f"add{k}"),
                  oh.make_node("Relu", [f"a{k}"], [f"r{k}"], name=f"relu{k}")]
        prev = f"r{k}"
    g = oh.make_graph(nodes, "bookkeeping", [oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                      [oh.make_tensor_value_info(prev, TensorProto.FLOAT, [1, 4])])
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)


def converging_edges_model(blocks: int = 3):
    """Magika's activation pattern: one tensor read by a chain of Muls and the Add that closes it,
    so several edges meet at each node; the batch axis is an exporter's placeholder ``unk__7``."""
    nodes, prev = [], "x"
    for b in range(blocks):
        a, m1, m2, m3 = (f"{k}{b}" for k in ("a", "m1_", "m2_", "m3_"))
        nodes += [oh.make_node("Relu", [prev], [a], name=f"relu{b}"),
                  oh.make_node("Mul", [a, a], [m1], name=f"square{b}"),
                  oh.make_node("Mul", [m1, a], [m2], name=f"cube{b}"),
                  oh.make_node("Mul", [m2, a], [m3], name=f"fourth{b}"),
                  oh.make_node("Add", [a, m3], [f"out{b}"], name=f"close{b}")]
        prev = f"out{b}"
    g = oh.make_graph(nodes, "converging",
                      [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["unk__7", 2048, 64])],
                      [oh.make_tensor_value_info(prev, TensorProto.FLOAT, ["unk__7", 2048, 64])])
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)


def control_flow_top_model():
    """A top level of bookkeeping around one If that holds all the compute (the float16 silero-VAD
    of onnxruntime's converter: Casts, an Equal on the sample rate, the If, Identities)."""
    def branch(name, scale):
        k = numpy_helper.from_array(np.array(scale, np.float32), f"k_{name}")
        return oh.make_graph([oh.make_node("Mul", ["x32", f"k_{name}"], [f"m_{name}"], name=f"mul_{name}"),
                              oh.make_node("Relu", [f"m_{name}"], [f"r_{name}"], name=f"relu_{name}")],
                             name, [], [oh.make_tensor_value_info(f"r_{name}", TensorProto.FLOAT, None)], [k])
    rate = numpy_helper.from_array(np.array(16000, np.int64), "rate")
    nodes = [oh.make_node("Cast", ["x"], ["x32"], name="cast_in", to=TensorProto.FLOAT),
             oh.make_node("Equal", ["sr", "rate"], ["is16k"], name="equal_rate"),
             oh.make_node("If", ["is16k"], ["y_if"], name="if_rate",
                          then_branch=branch("then", 2.0), else_branch=branch("else", 0.5)),
             oh.make_node("Identity", ["y_if"], ["y"], name="ident_out")]
    g = oh.make_graph(nodes, "control_flow_top",
                      [oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8]),
                       oh.make_tensor_value_info("sr", TensorProto.INT64, [])],
                      [oh.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])], [rate])
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)
