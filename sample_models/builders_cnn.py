"""Builders for the feed-forward sample models: ResNet-ish CNN, MLP, fusion chain, TRT cycle."""
from __future__ import annotations

import numpy as np
import onnx

from ._common import GraphBuilder, make_model, tensor_info


def _residual_block(b: GraphBuilder, x: str, scope: str, c_in: int, c_out: int,
                    stride: int) -> str:
    """Conv-BN-Relu-Conv-BN + shortcut, Add, Relu.

    A strided 1x1 Conv+BN projection replaces the identity shortcut when the
    shape changes, so a selector sees both shortcut kinds.
    """
    y = b.conv(x, f"{scope}/conv1", c_in, c_out, k=3, stride=stride)
    y = b.batchnorm(y, f"{scope}/bn1", c_out)
    y = b.op("Relu", [y], f"{scope}/relu1")
    y = b.conv(y, f"{scope}/conv2", c_out, c_out, k=3)
    y = b.batchnorm(y, f"{scope}/bn2", c_out)
    shortcut = x
    if stride != 1 or c_in != c_out:
        shortcut = b.conv(x, f"{scope}/proj/conv", c_in, c_out, k=1, stride=stride)
        shortcut = b.batchnorm(shortcut, f"{scope}/proj/bn", c_out)
    y = b.op("Add", [y, shortcut], f"{scope}/add")
    return b.op("Relu", [y], f"{scope}/relu_out")


def build_resnet_small(seed: int = 1) -> onnx.ModelProto:
    """Small ResNet: stem, 3 residual blocks (one with projection), GAP, Gemm -> logits."""
    b = GraphBuilder(np.random.default_rng(seed))
    y = b.conv("input", "stem/conv", 3, 16, k=3)
    y = b.batchnorm(y, "stem/bn", 16)
    y = b.op("Relu", [y], "stem/relu")
    y = b.op("MaxPool", [y], "stem/maxpool", kernel_shape=[2, 2], strides=[2, 2])
    y = _residual_block(b, y, "block1", 16, 16, stride=1)  # 16x16x16, identity shortcut
    y = _residual_block(b, y, "block2", 16, 32, stride=2)  # -> 32x8x8, projection shortcut
    y = _residual_block(b, y, "block3", 32, 32, stride=1)
    y = b.op("GlobalAveragePool", [y], "head/gap")
    y = b.op("Flatten", [y], "head/flatten", axis=1)
    w = b.weight("head/fc/W", [10, 32])
    bias = b.const("head/fc/B", 0.01 * b.rng.standard_normal(10))
    b.op("Gemm", [y, w, bias], "head/fc", outputs=["logits"], transB=1)
    g = b.graph("resnet_small",
                [tensor_info("input", [1, 3, 32, 32])],
                [tensor_info("logits", [1, 10])])
    return make_model(g, "Small ResNet-style CNN (Conv-BN-Relu, residual Add, projection shortcut).")


def build_mlp(seed: int = 2) -> onnx.ModelProto:
    """3 x (MatMul, Add, Relu) then Softmax, with a symbolic batch dim ``N``."""
    b = GraphBuilder(np.random.default_rng(seed))
    y = "input"
    widths = [64, 128, 64, 10]
    for i, (d_in, d_out) in enumerate(zip(widths[:-1], widths[1:]), start=1):
        y = b.dense(y, f"fc{i}", d_in, d_out)
        y = b.op("Relu", [y], f"fc{i}/relu")
    b.op("Softmax", [y], "head/softmax", outputs=["probs"], axis=-1)
    g = b.graph("mlp", [tensor_info("input", ["N", 64])], [tensor_info("probs", ["N", 10])])
    return make_model(g, "MLP: MatMul/Add/Relu x3 + Softmax, symbolic batch N.")


def build_conv_bn_relu_chain(seed: int = 3) -> onnx.ModelProto:
    """Positive and negative cases for a Conv-BN-Relu fuser (the subgraph API tutorial's selector).

    rep1..rep4: Conv->BN->Relu (fusable). neg_no_relu: Conv->BN only.
    neg_no_bn: Conv->Relu only. shared: the Conv output feeds both its BN and a
    later Add, so fusing Conv into BN would drop a tensor someone else reads.
    """
    b = GraphBuilder(np.random.default_rng(seed))
    c = 8
    y = "input"
    for i in range(1, 5):
        y = b.conv(y, f"rep{i}/conv", c, c)
        y = b.batchnorm(y, f"rep{i}/bn", c)
        y = b.op("Relu", [y], f"rep{i}/relu")
    y = b.conv(y, "neg_no_relu/conv", c, c)
    y = b.batchnorm(y, "neg_no_relu/bn", c)
    y = b.conv(y, "neg_no_bn/conv", c, c)
    y = b.op("Relu", [y], "neg_no_bn/relu")
    conv_out = b.conv(y, "shared/conv", c, c)
    y = b.batchnorm(conv_out, "shared/bn", c)
    y = b.op("Relu", [y], "shared/relu")
    b.op("Add", [y, conv_out], "shared/add", outputs=["output"])
    g = b.graph("conv_bn_relu_chain",
                [tensor_info("input", [1, c, 16, 16])],
                [tensor_info("output", [1, c, 16, 16])])
    return make_model(g, "Conv-BN-Relu chain with negative cases for a fusion selector.")


def build_trt_cycle() -> onnx.ModelProto:
    """The TensorRT integration design's cycle example: A -> B -> C and A -> D -> C, D unsupported by TensorRT.

    A=Relu, B=Sigmoid, C=Add, D=Det (onnx-tensorrt has no Det importer). Grouping
    {A, B, C} into one TensorRT node would create the cycle TRT -> D -> TRT.
    Det reduces the [4,4] matrix to a scalar that C broadcasts over B's output.
    """
    b = GraphBuilder()
    a = b.op("Relu", ["input"], "A", outputs=["a_out"])
    bo = b.op("Sigmoid", [a], "B", outputs=["b_out"])
    d = b.op("Det", [a], "D", outputs=["d_out"])
    b.op("Add", [bo, d], "C", outputs=["output"])
    g = b.graph("trt_cycle", [tensor_info("input", [4, 4])], [tensor_info("output", [4, 4])])
    return make_model(g, "Seed-004 cycle: A->B->C, A->D->C; D (Det) unsupported by TensorRT.")
