"""Sample models shaped like real exports: symbolic dims and torch-style name scopes.

Real models declare ``batch``, ``height``, ``width`` or ``sequence`` as symbolic dims
and name their nodes after the module tree (``/model.0/conv/Conv``); both matter to
the web UI (input shapes, hierarchy by name scope). These two carry both, and an
example shape in their metadata (``sglens.input_shapes``) as an exporter may.
"""
from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import TensorProto

from ._common import GraphBuilder, make_model, tensor_info

INPUT_SHAPES_KEY = "sglens.input_shapes"  # read by engine.input_spec


def _conv_block(b: GraphBuilder, x: str, scope: str, c_in: int, c_out: int, stride: int) -> str:
    """Conv + BN + SiLU (Sigmoid * x), named as a torch export of ``scope`` would be."""
    y = b.conv(x, f"{scope}/conv/Conv", c_in, c_out, k=3, stride=stride)
    y = b.batchnorm(y, f"{scope}/bn/BatchNormalization", c_out)
    s = b.op("Sigmoid", [y], f"{scope}/act/Sigmoid")
    return b.op("Mul", [y, s], f"{scope}/act/Mul")


def build_cnn_dynamic(seed: int = 11) -> onnx.ModelProto:
    """A YOLO-like backbone on ``images[batch, 3, height, width]`` -> ``scores[batch, 10]``."""
    b = GraphBuilder(np.random.default_rng(seed))
    y = "images"
    channels = [3, 16, 32, 32, 64]
    for i, (c_in, c_out) in enumerate(zip(channels[:-1], channels[1:])):
        y = _conv_block(b, y, f"/model.{i}", c_in, c_out, stride=2 if i < 3 else 1)
    y = b.op("GlobalAveragePool", [y], "/head/pool/GlobalAveragePool")
    y = b.op("Flatten", [y], "/head/Flatten", axis=1)
    w = b.weight("head.fc.weight", [10, channels[-1]])
    bias = b.const("head.fc.bias", 0.01 * b.rng.standard_normal(10))
    b.op("Gemm", [y, w, bias], "/head/fc/Gemm", outputs=["scores"], transB=1)
    g = b.graph("cnn_dynamic", [tensor_info("images", ["batch", 3, "height", "width"])],
                [tensor_info("scores", ["batch", 10])])
    model = make_model(g, "CNN with symbolic batch and spatial dims, torch-style node names.")
    onnx.helper.set_model_props(model, {INPUT_SHAPES_KEY: json.dumps({"images": [1, 3, 96, 128]})})
    return model


D_MODEL, HEADS, VOCAB = 64, 4, 100


def _encoder_layer(b: GraphBuilder, x: str, scope: str) -> str:
    """Post-LN encoder layer with run-time head reshapes (works for any sequence length)."""
    split = b.const(f"{scope}/attention/split_shape", [0, 0, HEADS, D_MODEL // HEADS], dtype=np.int64)
    merge = b.const(f"{scope}/attention/merge_shape", [0, 0, D_MODEL], dtype=np.int64)
    heads = {}
    for name, perm in (("query", [0, 2, 1, 3]), ("key", [0, 2, 3, 1]), ("value", [0, 2, 1, 3])):
        y = b.dense(x, f"{scope}/attention/{name}", D_MODEL, D_MODEL)
        y = b.op("Reshape", [y, split], f"{scope}/attention/{name}/Reshape")
        heads[name] = b.op("Transpose", [y], f"{scope}/attention/{name}/Transpose", perm=perm)
    scores = b.op("MatMul", [heads["query"], heads["key"]], f"{scope}/attention/MatMul")
    scale = b.const(f"{scope}/attention/scale", 1.0 / np.sqrt(D_MODEL // HEADS))
    scores = b.op("Mul", [scores, scale], f"{scope}/attention/Mul")
    probs = b.op("Softmax", [scores], f"{scope}/attention/Softmax", axis=-1)
    ctx = b.op("MatMul", [probs, heads["value"]], f"{scope}/attention/MatMul_1")
    ctx = b.op("Transpose", [ctx], f"{scope}/attention/Transpose", perm=[0, 2, 1, 3])
    ctx = b.op("Reshape", [ctx, merge], f"{scope}/attention/Reshape")
    ctx = b.dense(ctx, f"{scope}/attention/output", D_MODEL, D_MODEL)
    h = _layernorm(b, b.op("Add", [x, ctx], f"{scope}/attention/Add"), f"{scope}/attention/LayerNorm")
    y = b.dense(h, f"{scope}/intermediate", D_MODEL, 2 * D_MODEL)
    y = b.op("Relu", [y], f"{scope}/intermediate/Relu")
    y = b.dense(y, f"{scope}/output", 2 * D_MODEL, D_MODEL)
    return _layernorm(b, b.op("Add", [h, y], f"{scope}/output/Add"), f"{scope}/output/LayerNorm")


def _layernorm(b: GraphBuilder, x: str, name: str) -> str:
    gamma = b.const(f"{name}.weight", 1.0 + 0.1 * b.rng.standard_normal(D_MODEL))
    beta = b.const(f"{name}.bias", 0.1 * b.rng.standard_normal(D_MODEL))
    return b.op("LayerNormalization", [x, gamma, beta], name, axis=-1, epsilon=1e-5)


def build_transformer_dynamic(seed: int = 12) -> onnx.ModelProto:
    """A 2-layer BERT-like encoder on ``input_ids[batch, sequence]`` (int64)."""
    b = GraphBuilder(np.random.default_rng(seed))
    table = b.weight("embeddings.word_embeddings.weight", [VOCAB, D_MODEL])
    x = b.op("Gather", [table, "input_ids"], "/embeddings/word_embeddings/Gather", axis=0)
    for i in range(2):
        x = _encoder_layer(b, x, f"/encoder/layer.{i}")
    b.op("Identity", [x], "/output/Identity", outputs=["last_hidden_state"])
    g = b.graph("transformer_dynamic",
                [tensor_info("input_ids", ["batch", "sequence"], TensorProto.INT64)],
                [tensor_info("last_hidden_state", ["batch", "sequence", D_MODEL])])
    model = make_model(g, "2-layer encoder with a symbolic sequence length, torch-style node names.")
    onnx.helper.set_model_props(model, {INPUT_SHAPES_KEY: json.dumps({"input_ids": [1, 32]})})
    return model
