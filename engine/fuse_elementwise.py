"""Elementwise chains on a device as one generated kernel each (bind time, device runs only).

On a GPU a cupy call costs ~10-30 us of host time and launches one kernel, whatever
its size; a chain such as ``Add(bias) -> Add(residual)`` or ``Mul -> Add -> Sigmoid``
over one activation is one launch per node, and on small tensors the launches are the
run. This pass finds maximal chains of float elementwise nodes in which every
intermediate has exactly one reader and is not a graph output (``fuse.py``'s rule), and
replaces each with one node whose kernel is an ``ElementwiseKernel`` written from the
chain: each external input a broadcast parameter (ONNX broadcasting is numpy's, which
is cupy's), each node one C expression on the previous ones' locals.

The source depends only on the chain's ops, attributes and wiring, never on tensor
names or values (weights stay parameters, so ``set_weight`` reaches them); cupy compiles
it once per dtype. At a call the kernel runs only when every input is a device array of
one float dtype (float32 or float64); otherwise -- integer shape arithmetic, a mixed
dtype, a source this NVRTC rejects (``kernels/device.py:_generated``) -- the chain runs
as written, node by node, with the same kernels. Numbers: the same float operations as
the xp kernels, in the same order, in the input's dtype (CUDA's float overloads).
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable, Sequence

import numpy as np

from partition.ir import Graph, Node

from .chain_parts import DEFAULT_DOMAINS, FUSED_DOMAIN, Fused, sole_reader
from .kernels import device
from .kernels.registry import kernel_attrs

#: op -> C expression over its inputs ``{0}``, ``{1}`` (float semantics of the xp kernels:
#: Relu keeps a NaN, as ``maximum`` does).
_EXPRESSIONS: dict[str, str] = {
    "Add": "({0} + {1})", "Sub": "({0} - {1})", "Mul": "({0} * {1})", "Div": "({0} / {1})",
    "Pow": "pow({0}, {1})", "Neg": "(-{0})", "Abs": "fabs({0})", "Exp": "exp({0})",
    "Log": "log({0})", "Sqrt": "sqrt({0})", "Tanh": "tanh({0})", "Erf": "erf({0})",
    "Sin": "sin({0})", "Cos": "cos({0})", "Floor": "floor({0})", "Ceil": "ceil({0})",
    "Reciprocal": "((T)1 / {0})", "Sigmoid": "((T)1 / ((T)1 + exp(-{0})))",
    "Relu": "({0} < (T)0 ? (T)0 : {0})", "LeakyRelu": "({0} < (T)0 ? {0} * (T){alpha} : {0})",
}
_ARITY = {op: 2 if "{1}" in e else 1 for op, e in _EXPRESSIONS.items()}
_DTYPES = frozenset({np.dtype(np.float32), np.dtype(np.float64)})


def _fusible(node: Node, skip: frozenset[str]) -> bool:
    return (node.op_type in _EXPRESSIONS and node.domain in DEFAULT_DOMAINS and not node.subgraphs
            and node.name not in skip and len(node.outputs) == 1 and bool(node.outputs[0])
            and len(node.inputs) == _ARITY[node.op_type] and all(node.inputs))


def fuse_elementwise(graph: Graph, nodes: Sequence[Node], kernel_of: Callable[[Node], Any],
                     skip: frozenset[str] = frozenset()) -> tuple[list[Node], list[Fused]]:
    """``nodes`` with each chain of two or more fusible nodes replaced by one fused node
    (at its last node's place: every input is ready there); the fusions made. ``skip``:
    nodes that must stay as they are (the device plan's host nodes)."""
    sole = sole_reader(graph, nodes)
    taken: set[int] = set()
    fused: list[Fused] = []
    replace: dict[int, Node] = {}
    for i, first in enumerate(nodes):
        if i in taken or not _fusible(first, skip):
            continue
        chain = [i]
        while True:
            out = nodes[chain[-1]].outputs[0]
            nxt = next((k for op in _EXPRESSIONS if (k := sole(out, op)) is not None), None)
            if nxt is None or nxt in taken or not _fusible(nodes[nxt], skip):
                break
            chain.append(nxt)
        if len(chain) < 2:
            continue
        parts = tuple(nodes[k] for k in chain)
        kernels = [kernel_of(p) for p in parts]
        if any(k is None for k in kernels):
            continue
        inputs, source = chain_source(parts)
        node = Node(f"{first.name}+{len(parts) - 1}", "+".join(p.op_type for p in parts), inputs,
                    (parts[-1].outputs[0],), FUSED_DOMAIN)
        fused.append(Fused(node, parts, _chain_kernel(parts, kernels, inputs, source)))
        taken.update(chain)
        replace[chain[-1]] = node
    return [replace.get(i, n) for i, n in enumerate(nodes) if i not in taken or i in replace], fused


def chain_source(parts: Sequence[Node]) -> tuple[tuple[str, ...], str]:
    """(the chain's external inputs, in first-read order; the kernel's operation). Inputs
    are parameters ``a0, a1, ...``, each node's result a local ``t0, t1, ...``, the last one
    the output ``y``."""
    inputs: dict[str, str] = {}
    local: dict[str, str] = {}
    lines = []
    for k, node in enumerate(parts):
        args = []
        for t in node.inputs:
            if t not in local and t not in inputs:
                inputs[t] = f"a{len(inputs)}"
            args.append(local.get(t) or inputs[t])
        attrs = {"alpha": repr(float(node.attrs.get("alpha", 0.01)))} if node.op_type == "LeakyRelu" else {}
        local[node.outputs[0]] = f"t{k}"
        lines.append(f"const T t{k} = {_EXPRESSIONS[node.op_type].format(*args, **attrs)};")
    lines.append(f"y = t{len(parts) - 1};")
    return tuple(inputs), "\n".join(lines)


def _chain_kernel(parts: tuple[Node, ...], kernels: list[Any], inputs: tuple[str, ...],
                  source: str) -> Callable[..., tuple]:
    """``(xp, *inputs) -> (y,)``: the generated kernel where it applies, else the chain as written."""
    name = "sglens_ew_" + hashlib.sha1(source.encode()).hexdigest()[:12]
    params = ", ".join(f"T a{k}" for k in range(len(inputs)))
    steps = [(kernel, kernel_attrs(p), p.inputs, p.outputs[0]) for kernel, p in zip(kernels, parts)]

    def as_written(xp: Any, args: Sequence[Any]) -> tuple:
        env = dict(zip(inputs, args))
        for kernel, attrs, ins, out in steps:
            env[out] = kernel(xp, *[env[t] for t in ins], **attrs)[0]
        return (env[parts[-1].outputs[0]],)

    def run(xp: Any, *args: Any) -> tuple:
        dtype = getattr(args[0], "dtype", None)
        if xp is not np and dtype in _DTYPES and all(
                isinstance(a, xp.ndarray) and a.dtype == dtype for a in args):
            launch = device._generated(xp, name, lambda cp: cp.ElementwiseKernel(
                params, "T y", source, name))
            if launch is not None:
                try:
                    return (launch(*args),)
                except device.KernelUnavailable:   # warned once; the chain as written from now on
                    pass
        return as_written(xp, args)
    return run
