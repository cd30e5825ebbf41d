"""Float16 on the host: computed in float32, rounded where the model rounds.

numpy has no float16 arithmetic of its own: a ufunc converts element by element and a
float16 matmul has no BLAS. Measured on this project's 2-core VM (numpy 2.4, a 128x256
tensor): Add 20x, Div 24x, Maximum 11x the float32 time; a 258x256 @ 256x4 product 45x.
A float16 model -- what exporters and onnxruntime's float16 converter write for GPUs, and
what a TensorRT user often has -- ran BERT-mini in 2.7 s against onnxruntime's 14 ms and
ResNet-18 in 13 s against 29 ms (``sglens compare``, before this module).

onnxruntime's CPU provider computes such a model in float32 too: its InsertCastTransformer
puts a Cast to float32 before each node it has no float16 kernel for and a Cast back after,
then drops the pairs that cancel, so a chain of such nodes stays in float32 and only the
model's own Casts round (its optimized ResNet-18 keeps five Casts; all 20 convolutions run
in float32). On numpy we do the same; on cupy float16 is native and nothing changes:

- ``widened(graph)`` (Graph -> Graph, the executor applies it to every graph it binds on
  the host): each float16 *source* becomes float32 -- weights (exactly), Constant and
  ConstantOfShape values, the dtype attributes of EyeLike, the Random* ops, SequenceEmpty,
  the window functions and DequantizeLinear -- and a Cast to float16 becomes
  ``RoundToFloat16`` (domain ``sglens.host``): rounded to float16, stored in float32, the
  very value the model's Cast makes. Every value computed from them is then float32.
- the edges: float16 feeds are widened as a run starts; outputs and kept values the model
  declares float16 are rounded back as it ends (``narrowed``); a subgraph that onnxruntime or
  TensorRT runs gets its declared float16 inputs and weights, and hands back float32
  (``engine/subgraph_ops.py``).

What differs from the operator definitions, as on onnxruntime: between two of the model's
roundings values keep float32 precision; a CastLike to a float16 tensor no longer rounds
(its target is float32 by then). Live tensors take twice the memory they would in float16.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

import numpy as np

from partition.ir import Graph, Initializer, Node

from partition.dtypes import ONNX_TYPE_CODES

from .kernels.elementwise import HOST_DOMAIN

_FLOAT, _FLOAT16 = ONNX_TYPE_CODES["FLOAT"], ONNX_TYPE_CODES["FLOAT16"]
#: Ops whose output type is an attribute (ONNX data type code), and the attribute's name.
_DTYPE_ATTRS = {
    "EyeLike": "dtype", "RandomNormal": "dtype", "RandomUniform": "dtype",
    "RandomNormalLike": "dtype", "RandomUniformLike": "dtype", "Bernoulli": "dtype",
    "SequenceEmpty": "dtype", "HannWindow": "output_datatype", "HammingWindow": "output_datatype",
    "BlackmanWindow": "output_datatype", "MelWeightMatrix": "output_datatype",
    "DequantizeLinear": "output_dtype",
}


def widened(graph: Graph) -> Graph:
    """``graph`` with its float16 sources made float32 (the module docstring); the graph
    itself when it has none. Bodies of If/Loop/Scan and of subgraph nodes are left as they
    are: each is bound by an executor of its own, which widens it in turn."""
    inits = {name: _widened_weight(init) for name, init in graph.initializers.items()}
    nodes = [_widened_node(node) for node in graph.nodes]
    if all(a is b for a, b in zip(nodes, graph.nodes)) and \
            all(inits[name] is init for name, init in graph.initializers.items()):
        return graph
    return graph.replace(nodes=nodes, initializers=inits)


def _widened_weight(init: Initializer) -> Initializer:
    if init.dtype != "FLOAT16":
        return init
    return Initializer(init.name, "FLOAT", init.shape, lambda: init.value.astype(np.float32))


def _makes_float16(node: Node) -> bool:
    """Whether ``node`` is a float16 source: a Cast to it, a float16 constant, a dtype attribute."""
    if node.domain not in ("", "ai.onnx"):
        return False
    op, attrs = node.op_type, node.attrs
    if op == "Cast":
        return attrs.get("to") == _FLOAT16
    if op in ("Constant", "ConstantOfShape"):
        value = attrs.get("value")
        return isinstance(value, np.ndarray) and value.dtype == np.float16
    key = _DTYPE_ATTRS.get(op)
    return key is not None and attrs.get(key) == _FLOAT16


def _widened_node(node: Node) -> Node:
    if not _makes_float16(node):
        return node
    op, attrs = node.op_type, node.attrs
    if op == "Cast":
        return replace(node, op_type="RoundToFloat16", domain=HOST_DOMAIN, attrs={})
    if op in ("Constant", "ConstantOfShape"):
        return replace(node, attrs={**attrs, "value": attrs["value"].astype(np.float32)})
    return replace(node, attrs={**attrs, _DTYPE_ATTRS[op]: _FLOAT})


def computes_in_float16(graph: Graph) -> bool:
    """Whether ``graph`` (bodies included) holds float16 weights or tensors, or casts to float16:
    its values then carry float16's 11 significant bits, whoever computes them."""
    todo = [graph]
    while todo:  # iterative: nesting depth is the model's to choose
        g = todo.pop()
        if any(i.dtype == "FLOAT16" for i in g.initializers.values()) or \
                any(t.dtype == "FLOAT16" for t in g.tensors.values()) or \
                any(_makes_float16(n) for n in g.nodes):
            return True
        todo.extend(body for n in g.nodes for body in n.subgraphs.values())
    return False


def widen(value: Any) -> Any:
    """A float16 array as float32 (a value entering a host run), a sequence's elements likewise;
    anything else as it is."""
    if isinstance(value, list):
        return [widen(v) for v in value]
    return value.astype(np.float32) if getattr(value, "dtype", None) == np.float16 else value


def float16_tensors(declared: Mapping[str, Any]) -> frozenset[str]:
    """The names ``declared`` (tensor name -> ``TensorInfo``) types float16; found once, at bind
    time, so a run of a model without any pays nothing at its edges."""
    return frozenset(name for name, info in declared.items() if info.dtype == "FLOAT16")


def narrowed(values: Mapping[str, Any], float16: frozenset[str]) -> dict[str, Any]:
    """``values`` with the float32 arrays named in ``float16`` (``float16_tensors``) rounded back
    to float16: what leaves a host run is what the model says."""
    out = dict(values)
    for name in float16.intersection(values):
        if getattr(values[name], "dtype", None) == np.float32:
            out[name] = values[name].astype(np.float16)
    return out
