"""FlexAttention (domain ai.onnx.preview): scaled dot-product attention whose scores and
probabilities may each pass through a user graph (``score_mod``, ``prob_mod``).

A control-flow kernel: the graphs run through the caller's ``run_graph``, so they can read
outer-scope tensors and run on the same ``xp`` as everything else.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from partition.ir import Graph

from .dtypes import np_dtype
from .registry import register_control_flow

PREVIEW = "ai.onnx.preview"


@register_control_flow("FlexAttention", domain=PREVIEW)
def flex_attention(xp: Any, q: Any, k: Any, v: Any, *, subgraphs: dict[str, Graph],
                   run_graph: Callable[[Graph, list], list], scale: float | None = None,
                   softmax_precision: int | None = None, score_mod: Any = None, prob_mod: Any = None) -> Any:
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(f"FlexAttention takes rank-4 Q, K, V; got {q.shape}, {k.shape}, {v.shape}")
    hq, hkv = q.shape[1], k.shape[1]
    if hq != hkv:
        if hq % hkv:
            raise ValueError(f"FlexAttention: {hq} query heads are not a multiple of {hkv} key/value heads")
        k, v = xp.repeat(k, hq // hkv, axis=1), xp.repeat(v, hq // hkv, axis=1)
    if scale is None:
        scale = 1.0 / float(np.sqrt(q.shape[-1]))
    # Both sides scaled by sqrt(scale), in the input's precision (as ONNX's reference does).
    root = np.sqrt(np.float32(scale)).astype(q.dtype)
    scores = xp.matmul(q * root, xp.swapaxes(k * root, -1, -2))
    compute = np_dtype(softmax_precision) if softmax_precision else (
        np.dtype(np.float64) if q.dtype == np.float64 else np.dtype(np.float32))
    scores = scores.astype(compute)
    if "score_mod" in subgraphs:
        scores = run_graph(subgraphs["score_mod"], [scores])[0].astype(compute)
    scores = scores - xp.max(scores, axis=-1, keepdims=True)
    e = xp.exp(scores)
    probs = e / xp.sum(e, axis=-1, keepdims=True)
    if "prob_mod" in subgraphs:
        probs = run_graph(subgraphs["prob_mod"], [probs])[0].astype(compute)
    return xp.matmul(probs, v.astype(compute)).astype(v.dtype)
