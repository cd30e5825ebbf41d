"""Fake quantization: a QuantizeLinear whose one reader is a DequantizeLinear with the same
scale and zero point, as one step (``plan="segments"``, called by ``engine/fuse.py``).

A QDQ model -- onnxruntime's ``quantize_static`` output, the form TensorRT takes for explicit
INT8 -- sends every activation through such a pair. Run as written, the pair makes a float32
quotient, its rounding, an int8 array and a float32 array again: five arrays and two node
dispatches. As one step it is the same float32 arithmetic in place on one array
(``kernels.quant.fake_quantize``): divide, round to nearest even, add the zero point, clip to
the integer type's range, subtract the zero point, multiply. The result is equal to the pair's
bit for bit (the integer values between are exact in float32). BERT-mini in QDQ has 146 pairs.

A run that keeps every tensor (the debugger) runs the pair as written, so the int8 tensor is
there to look at.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from partition.ir import Graph, Node

from .chain_parts import DEFAULT_DOMAINS, FUSED_DOMAIN, Fused, sole_reader, spliced
from .kernels.quant import fake_quantize


def fuse_fake_quant(graph: Graph, nodes: Sequence[Node],
                    const: Callable[[str], Any]) -> tuple[list[Node], list[Fused]]:
    """``nodes`` with each such Q -> DQ pair replaced by one step; the fusions made."""
    sole = sole_reader(graph, nodes)
    fused: list[Fused] = []
    drop: set[int] = set()
    replace: dict[int, Node] = {}
    for i, q in enumerate(nodes):
        if q.op_type != "QuantizeLinear" or q.domain not in DEFAULT_DOMAINS or len(q.inputs) != 3:
            continue
        j = sole(q.outputs[0], "DequantizeLinear")
        if j is None:
            continue
        kernel = _pair_kernel(q, nodes[j], const)
        if kernel is None:
            continue
        node = Node(f"{q.name}+dequantize", "FakeQuantize", q.inputs, (nodes[j].outputs[0],), FUSED_DOMAIN)
        fused.append(Fused(node, (q, nodes[j]), kernel))
        drop.update((i, j))
        replace[j] = node
    return spliced(nodes, drop, replace), fused


def _pair_kernel(q: Node, dq: Node, const: Callable[[str], Any]) -> Callable[..., tuple] | None:
    """The fused kernel when the pair is plain: the same constant scale and integer zero point
    (by name), the same axis, no blocks and no output type of its own."""
    x, scale, zp = q.inputs
    if dq.inputs[1:] != (scale, zp) or any(a in q.attrs or a in dq.attrs
                                              for a in ("block_size", "output_dtype")):
        return None
    axis = int(q.attrs.get("axis", 1))
    if int(dq.attrs.get("axis", 1)) != axis:
        return None
    s, z = const(scale), const(zp)
    if s is None or z is None or np.dtype(z.dtype).kind not in "iu" or np.dtype(s.dtype).kind != "f":
        return None
    info = np.iinfo(np.dtype(z.dtype))

    def kernel(xp: Any, x: Any, scale: Any, zero_point: Any) -> tuple:
        return (fake_quantize(xp, x, scale, zero_point, axis=axis, low=info.min, high=info.max),)
    return kernel
