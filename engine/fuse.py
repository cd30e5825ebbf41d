"""Elementwise chains fused at bind time (``plan="segments"`` only).

GELU as PyTorch and BERT exporters write it, five nodes over one tensor::

    d = Div(x, sqrt2);  e = Erf(d);  a = Add(e, 1);  m = Mul(x, a);  y = Mul(m, 0.5)

becomes one step computing the same expression with the model's own constants,
in place after the first temporary (one allocation instead of five, and on CPU
``scipy.special.erf``, ~3x faster than the vectorised approximation of the Erf
kernel; on a device the Erf kernel's own path). A chain is fused only when every
intermediate has exactly one reader and is not a graph output; the five nodes
are kept, and a run that keeps intermediates (the debugger) runs them instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import scipy.special

from partition.ir import Graph, Node

from .values import to_numpy

FUSED_DOMAIN = "sglens.fused"


@dataclass(frozen=True)
class Fused:
    node: Node                 # the synthetic node that replaces the chain
    parts: tuple[Node, ...]    # the chain, in order (run instead when intermediates are kept)
    kernel: Callable[..., tuple]


def _scalar(value: Any) -> float | None:
    if value is None or getattr(value, "size", 0) != 1:
        return None
    return float(to_numpy(value).reshape(()))  # a weight may live on the GPU


def _other(node: Node, t: str) -> str | None:
    """The input of a binary node that is not ``t`` (None if both or neither are)."""
    a, b = (node.inputs + ("", ""))[:2]
    if a == t and b != t:
        return b
    if b == t and a != t:
        return a
    return None


def gelu_kernel(div: float, one: float, half: float,
                erf_kernel: Callable[..., tuple]) -> Callable[..., tuple]:
    def gelu(xp: Any, x: Any) -> tuple:
        dtype = x.dtype
        if xp is np:
            y = scipy.special.erf(x / dtype.type(div))
        else:  # on the device: the Erf kernel's own device path
            y = erf_kernel(xp, x / dtype.type(div))[0]
        y += dtype.type(one)
        y *= x
        y *= dtype.type(half)
        return (y.astype(dtype, copy=False),)
    return gelu


def fuse(graph: Graph, nodes: Sequence[Node], const: Callable[[str], Any],
         kernel_of: Callable[[Node], Any]) -> tuple[list[Node], list[Fused]]:
    """``nodes`` with every GELU chain replaced by one fused node; the fusions made.
    ``kernel_of(node)`` is the executor's kernel lookup (the chain's Erf kernel
    serves the device path)."""
    readers: dict[str, list[int]] = {}
    for i, n in enumerate(nodes):
        for t in dict.fromkeys(graph.reads(n)):
            readers.setdefault(t, []).append(i)
    outputs = set(graph.outputs)

    def sole(t: str, op: str) -> int | None:
        r = readers.get(t, [])
        if len(r) == 1 and t not in outputs and nodes[r[0]].op_type == op and not nodes[r[0]].domain:
            return r[0]
        return None

    fused: list[Fused] = []
    drop: set[int] = set()
    replace: dict[int, Node] = {}
    for i, d in enumerate(nodes):
        if d.op_type != "Div" or d.domain or len(d.inputs) != 2 or i in drop:
            continue
        x, c_div = d.inputs
        div = _scalar(const(c_div))
        if div is None or not math.isclose(div, math.sqrt(2), rel_tol=1e-3):
            continue
        chain = [i]
        j = sole(d.outputs[0], "Erf")
        if j is not None:
            chain.append(j)
            j = sole(nodes[j].outputs[0], "Add")
        one = _scalar(const(_other(nodes[j], nodes[chain[-1]].outputs[0]) or "")) if j is not None else None
        if j is None or one is None:
            continue
        chain.append(j)
        j = sole(nodes[j].outputs[0], "Mul")
        if j is None or _other(nodes[j], nodes[chain[-1]].outputs[0]) != x:
            continue
        chain.append(j)
        j = sole(nodes[j].outputs[0], "Mul")
        half = _scalar(const(_other(nodes[j], nodes[chain[-1]].outputs[0]) or "")) if j is not None else None
        if j is None or half is None:
            continue
        chain.append(j)
        parts = tuple(nodes[k] for k in chain)
        node = Node(f"{d.name}+gelu", "Gelu", (x,), (parts[-1].outputs[0],), FUSED_DOMAIN)
        erf_kernel = kernel_of(parts[1])
        if erf_kernel is None:
            continue
        fused.append(Fused(node, parts, gelu_kernel(div, one, half, erf_kernel)))
        drop.update(chain)
        replace[chain[-1]] = node  # at the last node's place: its inputs are ready there
    out = [replace.get(i, n) for i, n in enumerate(nodes) if i not in drop or i in replace]
    return out, fused
