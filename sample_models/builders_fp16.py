"""A post-LN transformer encoder layer with known FP16 trouble, as torch exports it (opset 17).

Large language models carry a few "massive activation" channels in their hidden states
(values of several hundred while the rest are O(1); Sun et al. 2024, "Massive Activations
in Large Language Models"). ``fp16_trouble_inputs`` makes such an input: one channel at
``outlier`` (default 1000). With it:

- the attention logits ``q . k`` reach ~1.5e5, beyond FP16's 65504, so the scores MatMul
  overflows to inf and Softmax gives NaN;
- the LayerNorm written out as torch exports it (ReduceMean, Sub, Pow 2, ReduceMean,
  Add eps, Sqrt, Div, Mul, Add) squares deviations of ~1000: ``Pow`` reaches ~2e6 and
  overflows too.

With ``outlier`` about 1 the same layer runs in FP16 without trouble. Not part of
``generate.py``'s sample set (tests and ``bench/precision.py`` build it in memory).
"""
from __future__ import annotations

import numpy as np
import onnx

from ._common import GraphBuilder, make_model, tensor_info

SEQ, D_MODEL, HEADS = 16, 64, 2
D_HEAD = D_MODEL // HEADS
D_FF = 2 * D_MODEL
OUTLIER_CHANNEL = 7


def _layer_norm(b: GraphBuilder, x: str, name: str) -> str:
    """LayerNorm spelled out in primitive ops, the way torch.onnx writes it before opset 17's op."""
    mean = b.op("ReduceMean", [x], f"{name}/mean", axes=[-1], keepdims=1)
    dev = b.op("Sub", [x, mean], f"{name}/sub")
    two = b.const(f"{name}/two", 2.0)
    sq = b.op("Pow", [dev, two], f"{name}/pow")
    var = b.op("ReduceMean", [sq], f"{name}/var", axes=[-1], keepdims=1)
    eps = b.const(f"{name}/eps", 1e-5)
    var = b.op("Add", [var, eps], f"{name}/add_eps")
    std = b.op("Sqrt", [var], f"{name}/sqrt")
    y = b.op("Div", [dev, std], f"{name}/div")
    gamma = b.const(f"{name}/gamma", 1.0 + 0.1 * b.rng.standard_normal(D_MODEL))
    beta = b.const(f"{name}/beta", 0.1 * b.rng.standard_normal(D_MODEL))
    y = b.op("Mul", [y, gamma], f"{name}/mul_gamma")
    return b.op("Add", [y, beta], f"{name}/add_beta")


def _attention(b: GraphBuilder, x: str, p: str = "") -> str:
    split_shape = b.const(f"{p}attn/split_shape", [1, SEQ, HEADS, D_HEAD], dtype=np.int64)
    parts: dict[str, str] = {}
    for name, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
        y = b.dense(x, f"{p}attn/{name}_proj", D_MODEL, D_MODEL)
        y = b.op("Reshape", [y, split_shape], f"{p}attn/{name}_split")
        parts[name] = b.op("Transpose", [y], f"{p}attn/{name}_heads", perm=perm)
    scores = b.op("MatMul", [parts["q"], parts["k"]], f"{p}attn/scores")
    scale = b.const(f"{p}attn/sqrt_dhead", np.sqrt(D_HEAD))
    scores = b.op("Div", [scores, scale], f"{p}attn/scale")
    probs = b.op("Softmax", [scores], f"{p}attn/softmax", axis=-1)
    ctx = b.op("MatMul", [probs, parts["v"]], f"{p}attn/context")
    ctx = b.op("Transpose", [ctx], f"{p}attn/merge_transpose", perm=[0, 2, 1, 3])
    merged = b.const(f"{p}attn/merge_shape", [1, SEQ, D_MODEL], dtype=np.int64)
    ctx = b.op("Reshape", [ctx, merged], f"{p}attn/merge_heads")
    return b.dense(ctx, f"{p}attn/out_proj", D_MODEL, D_MODEL)


def build_fp16_trouble_transformer(seed: int = 11, layers: int = 1) -> onnx.ModelProto:
    """Post-LN encoder layers: h = LN(x + MHA(x)); y = LN(h + FFN(h)) (ReLU FFN), ``layers`` of
    them. The first layer's nodes are named ``attn/...``, ``ffn/...``; layer k's ``layer<k>/...``.
    Only the first meets the raw input's outlier: after its LayerNorm values are O(1)."""
    b = GraphBuilder(np.random.default_rng(seed))
    y = "input"
    for k in range(layers):
        p = f"layer{k}/" if k else ""
        h = b.op("Add", [y, _attention(b, y, p)], f"{p}attn/residual")
        h = _layer_norm(b, h, f"{p}attn/ln")
        y = b.dense(h, f"{p}ffn/fc1", D_MODEL, D_FF)
        y = b.op("Relu", [y], f"{p}ffn/relu")
        y = b.dense(y, f"{p}ffn/fc2", D_FF, D_MODEL)
        y = b.op("Add", [h, y], f"{p}ffn/residual")
        y = _layer_norm(b, y, f"{p}ffn/ln")
    b.op("Identity", [y], "output/identity", outputs=["output"])
    g = b.graph("fp16_trouble_transformer", [tensor_info("input", [1, SEQ, D_MODEL])],
                [tensor_info("output", [1, SEQ, D_MODEL])])
    return make_model(g, "Post-LN transformer layers whose attention logits and LayerNorm "
                         "squares overflow FP16 when the input has a massive-activation channel.")


def fp16_trouble_inputs(seed: int = 0, outlier: float = 1000.0) -> dict[str, np.ndarray]:
    """Hidden states ~N(0, 1) with one channel at ``outlier`` (its sign alternating per token)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, SEQ, D_MODEL)).astype(np.float32)
    x[..., OUTLIER_CHANNEL] = outlier * (1.0 + 0.05 * rng.standard_normal(SEQ)).astype(np.float32)
    return {"input": x}
