"""Ops that ONNX defines as functions, run as their function body.

Many newer operators (Attention, RotaryEmbedding, SoftmaxCrossEntropyLoss,
NegativeLogLikelihoodLoss, CenterCropPad, AffineGrid, the window ops, ...) come with
a body in their schema: a small graph of simpler ops. Where no hand-written kernel
exists, ``registry.kernel_for`` falls back to ``function_kernel`` here (registered with
``register_fallback`` when this module is imported, which ``engine.kernels`` does), which asks
onnx for the body (for "context dependent" functions the body depends on the input
types, so it is built per call signature and cached) and runs its nodes in order
through the same lookup. Everything stays on ``xp``: the body's nodes are ordinary
kernels, so the expansion runs on cupy as well as numpy.
"""

from __future__ import annotations

import functools
from collections import ChainMap
from typing import Any, Mapping

import numpy as np
import onnx
from onnx import helper

from partition.ir import Graph, Node
from partition.local_functions import FUNCTION_KEY
from partition.onnx_io import _import_function, _make_attr

from .registry import Kernel, KernelNotFound, kernel_attrs, kernel_for, register_fallback

#: Bodies built so far: (op, domain, opset, attrs, input types) -> compiled body.
_BODIES: dict[tuple, "_Body"] = {}


class _Body:
    """A function body imported as a graph of our IR, ready to run on any ``xp``."""

    def __init__(self, proto: onnx.FunctionProto, attrs: Mapping[str, Any],
                 schema: onnx.defs.OpSchema) -> None:
        defaults = {name: a.default_value for name, a in schema.attributes.items()
                    if a.default_value.type != onnx.AttributeProto.UNDEFINED}
        defaults.update({a.name: a for a in proto.attribute_proto})
        proto = onnx.FunctionProto.FromString(proto.SerializeToString())  # bound in a copy
        _bind_refs(proto.node, attrs, defaults)
        opsets = {o.domain: o.version for o in proto.opset_import}
        self.graph = _import_function(proto, None, {}, opsets, f"function {proto.name}")
        self.opsets = {("" if d == "ai.onnx" else d): v for d, v in opsets.items()}
        missing = [n.op_type for n in _walk(self.graph) if not _resolvable(n, self.opsets)]
        if missing:
            raise KernelNotFound(f"the ONNX function body of '{proto.name}' uses {sorted(set(missing))}, "
                                 "which have no kernel")

    def run(self, xp: Any, inputs: list[Any], n_outputs: int) -> tuple:
        values = _run_graph(self.graph, ChainMap({}), xp, self.opsets, inputs)
        return tuple(values[:n_outputs])


def local_function_kernel(xp: Any, *inputs: Any, subgraphs: Mapping[str, Graph], run_graph: Any,
                          **_attrs: Any) -> tuple:
    """A call of a model-local function: its body (instantiated at import, attribute
    references bound, in ``subgraphs["function"]``) runs on the same engine. Omitted
    trailing inputs are passed as None, as for any optional input."""
    body = subgraphs[FUNCTION_KEY]
    values = list(inputs) + [None] * (len(body.inputs) - len(inputs))
    return tuple(run_graph(body, values))


def _walk(graph: Graph) -> list[Node]:
    nodes, stack = [], [graph]
    while stack:
        g = stack.pop()
        for node in g.nodes:
            nodes.append(node)
            stack.extend(node.subgraphs.values())
    return nodes


def _resolvable(node: Node, opsets: Mapping[str, int]) -> bool:
    try:
        kernel_for(node.op_type, node.domain, opsets)
        return True
    except KernelNotFound:
        return False


def _run_graph(graph: Graph, outer: ChainMap, xp: Any, opsets: Mapping[str, int],
               inputs: list[Any]) -> list[Any]:
    """Run a body (or a control-flow branch inside one) in a child scope of ``outer``."""
    env = outer.new_child()
    for name, init in graph.initializers.items():
        env[name] = xp.asarray(init.value)
    for name, value in zip(graph.inputs, inputs):
        if name:
            env[name] = value
    for node in graph.nodes:
        fn = kernel_for(node.op_type, node.domain, opsets)
        attrs = kernel_attrs(node)
        if node.subgraphs:
            attrs["subgraphs"] = dict(node.subgraphs)
            attrs["run_graph"] = (lambda body, vals, env=env:
                                  _run_graph(body, env, xp, opsets, list(vals)))
        args = [env[n] if n else None for n in node.inputs]
        while args and args[-1] is None:
            args.pop()
        for name, value in zip(node.outputs, fn(xp, *args, **attrs)):
            if name:
                env[name] = value
    return [env.get(n) for n in graph.outputs]


def _bind_refs(nodes: Any, attrs: Mapping[str, Any], defaults: Mapping[str, onnx.AttributeProto]) -> None:
    """Replace attribute references (``ref_attr_name``) by the caller's values, in place,
    nested graphs included; a reference neither given nor defaulted is dropped, so the
    body op's own default applies."""
    stack = [nodes]
    while stack:
        for node in stack.pop():
            kept = []
            for a in node.attribute:
                if a.ref_attr_name:
                    if a.ref_attr_name in attrs:
                        kept.append(_make_attr(a.name, attrs[a.ref_attr_name]))
                    elif a.ref_attr_name in defaults:
                        bound = onnx.AttributeProto()
                        bound.CopyFrom(defaults[a.ref_attr_name])
                        bound.name = a.name
                        kept.append(bound)
                    continue
                kept.append(a)
                if a.type == onnx.AttributeProto.GRAPH:
                    stack.append(a.g.node)
            del node.attribute[:]
            node.attribute.extend(kept)


def _type_proto(value: Any) -> onnx.TypeProto:
    if value is None:
        return onnx.TypeProto()
    if isinstance(value, list):
        raise KernelNotFound("a sequence input to a function-defined op is not supported")
    dtype = helper.np_dtype_to_tensor_dtype(np.dtype(value.dtype))
    return helper.make_tensor_type_proto(dtype, list(value.shape))


def _freeze(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


def _build(schema: onnx.defs.OpSchema, opset: int, inputs: list[Any], attrs: dict[str, Any],
           n_outputs: int) -> _Body:
    key = (schema.name, schema.domain, opset, tuple(sorted((k, _freeze(v)) for k, v in attrs.items())),
           tuple(None if v is None else (str(v.dtype), tuple(v.shape)) for v in inputs), n_outputs)
    body = _BODIES.get(key)
    if body is not None:
        return body
    proto = onnx.FunctionProto()
    if schema.has_context_dependent_function:
        node = helper.make_node(schema.name, [f"in{i}" if v is not None else "" for i, v in enumerate(inputs)],
                                [f"out{i}" for i in range(n_outputs)], domain=schema.domain)
        node.attribute.extend(_make_attr(k, v) for k, v in attrs.items())
        types = [_type_proto(v).SerializeToString() for v in inputs]
        proto.ParseFromString(schema.get_context_dependent_function_with_opset_version(
            opset, node.SerializeToString(), types))
    else:
        proto.ParseFromString(schema.get_function_with_opset_version(opset))
    body = _Body(proto, attrs, schema)
    if len(_BODIES) > 512:  # a bound on memory for models with very many signatures
        _BODIES.clear()
    _BODIES[key] = body
    return body


@register_fallback
@functools.lru_cache(maxsize=None)
def function_kernel(op_type: str, domain: str, opset: int | None) -> Kernel | None:
    """A kernel running ``op_type``'s ONNX function body, or None when its schema has none."""
    try:
        schema = onnx.defs.get_schema(op_type, opset if opset is not None else onnx.defs.onnx_opset_version(),
                                      domain)
    except onnx.defs.SchemaError:
        return None
    versions = [v for v in (list(schema.function_opset_versions)
                            + list(schema.context_dependent_function_opset_versions))
                if opset is None or v <= opset]
    if not versions:
        return None
    body_opset = max(versions)

    def kernel(xp: Any, *inputs: Any, _n_outputs: int | None = None, subgraphs: Any = None,
               run_graph: Any = None, **attrs: Any) -> tuple:
        if subgraphs:
            raise ValueError(f"{op_type} has graph attributes ({sorted(subgraphs)}); running an ONNX "
                             "function body with graph attributes is not supported")
        n_outputs = _n_outputs if _n_outputs is not None else len(schema.outputs)
        body = _build(schema, body_opset, list(inputs), attrs, n_outputs)
        return body.run(xp, list(inputs), n_outputs)

    kernel.__name__ = f"function_{op_type}"
    return kernel
