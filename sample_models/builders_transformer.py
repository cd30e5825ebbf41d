"""Builder for one transformer encoder block (seq 16, d_model 64, 4 heads)."""
from __future__ import annotations

import numpy as np
import onnx

from ._common import GraphBuilder, make_model, tensor_info

SEQ, D_MODEL, HEADS = 16, 64, 4
D_HEAD = D_MODEL // HEADS
D_FF = 4 * D_MODEL


def _layernorm(b: GraphBuilder, x: str, name: str) -> str:
    gamma = b.const(f"{name}/gamma", 1.0 + 0.1 * b.rng.standard_normal(D_MODEL))
    beta = b.const(f"{name}/beta", 0.1 * b.rng.standard_normal(D_MODEL))
    return b.op("LayerNormalization", [x, gamma, beta], name, axis=-1, epsilon=1e-5)


def _heads_shape(b: GraphBuilder, x: str) -> str:
    """[batch, seq, HEADS, D_HEAD] computed at run time via Shape/Gather/Concat.

    This keeps a data-dependent Reshape target in the graph, which a
    partitioner must treat as a shape subgraph rather than a constant.
    """
    shape = b.op("Shape", [x], "attn/split_shape/shape")
    idx = b.const("attn/split_shape/batch_seq_idx", [0, 1], dtype=np.int64)
    batch_seq = b.op("Gather", [shape, idx], "attn/split_shape/gather", axis=0)
    tail = b.const("attn/split_shape/heads_dhead", [HEADS, D_HEAD], dtype=np.int64)
    return b.op("Concat", [batch_seq, tail], "attn/split_shape/concat", axis=0)


def _attention(b: GraphBuilder, x: str) -> str:
    """Multi-head self-attention on the LayerNorm'd input ``x``; returns projected output."""
    heads_shape = _heads_shape(b, x)
    perms = {"q": [0, 2, 1, 3], "k": [0, 2, 3, 1], "v": [0, 2, 1, 3]}  # k is pre-transposed
    split: dict[str, str] = {}
    for name, perm in perms.items():
        y = b.dense(x, f"attn/{name}_proj", D_MODEL, D_MODEL)
        y = b.op("Reshape", [y, heads_shape], f"attn/{name}_split")
        split[name] = b.op("Transpose", [y], f"attn/{name}_heads", perm=perm)
    scores = b.op("MatMul", [split["q"], split["k"]], "attn/scores")
    sqrt_d = b.const("attn/sqrt_dhead", np.sqrt(D_HEAD))
    scores = b.op("Div", [scores, sqrt_d], "attn/scale")
    probs = b.op("Softmax", [scores], "attn/softmax", axis=-1)
    ctx = b.op("MatMul", [probs, split["v"]], "attn/context")
    ctx = b.op("Transpose", [ctx], "attn/merge_transpose", perm=[0, 2, 1, 3])
    # Constant-shape Reshape: the counterpart of the computed one above.
    merged_shape = b.const("attn/merge_shape", [1, SEQ, D_MODEL], dtype=np.int64)
    ctx = b.op("Reshape", [ctx, merged_shape], "attn/merge_heads")
    return b.dense(ctx, "attn/out_proj", D_MODEL, D_MODEL)


def _gelu(b: GraphBuilder, x: str, scope: str) -> str:
    """Exact GELU spelled with Erf, as PyTorch exports it before opset 20."""
    sqrt2 = b.const(f"{scope}/sqrt2", np.sqrt(2.0))
    one = b.const(f"{scope}/one", 1.0)
    half = b.const(f"{scope}/half", 0.5)
    y = b.op("Div", [x, sqrt2], f"{scope}/div")
    y = b.op("Erf", [y], f"{scope}/erf")
    y = b.op("Add", [y, one], f"{scope}/add_one")
    y = b.op("Mul", [x, y], f"{scope}/mul_x")
    return b.op("Mul", [y, half], f"{scope}/mul_half")


def build_transformer_block(seed: int = 4) -> onnx.ModelProto:
    """Pre-LN encoder block: x + MHA(LN(x)), then h + FFN(LN(h))."""
    b = GraphBuilder(np.random.default_rng(seed))
    x = "input"
    attn = _attention(b, _layernorm(b, x, "attn/ln"))
    h = b.op("Add", [x, attn], "attn/residual")
    y = _layernorm(b, h, "ffn/ln")
    y = b.dense(y, "ffn/fc1", D_MODEL, D_FF)
    y = _gelu(b, y, "ffn/gelu")
    y = b.dense(y, "ffn/fc2", D_FF, D_MODEL)
    b.op("Add", [h, y], "ffn/residual", outputs=["output"])
    g = b.graph("transformer_block",
                [tensor_info("input", [1, SEQ, D_MODEL])],
                [tensor_info("output", [1, SEQ, D_MODEL])])
    return make_model(g, "One pre-LN transformer encoder block (4 heads, Erf GELU).")
