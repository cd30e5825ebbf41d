"""Ops that ONNX defines as functions, run as their function body.

Many newer operators (Attention, RotaryEmbedding, SoftmaxCrossEntropyLoss,
NegativeLogLikelihoodLoss, CenterCropPad, AffineGrid, the window ops, ...) come with
a body in their schema: a small graph of simpler ops. Where no hand-written kernel
exists, ``registry.kernel_for`` falls back to ``function_kernel`` here, which asks
onnx for the body (for "context dependent" functions the body depends on the input
types, so it is built per call signature and cached) and runs its nodes in order
through the same lookup. Everything stays on ``xp``: the body's nodes are ordinary
kernels, so the expansion runs on cupy as well as numpy.
"""

from __future__ import annotations

import functools
from typing import Any, Mapping

import numpy as np
import onnx
from onnx import helper

from partition.onnx_io import _attr_value, _make_attr

from .registry import Kernel, KernelNotFound, kernel_for

#: Bodies built so far: (op, domain, opset, attrs, input types) -> compiled body.
_BODIES: dict[tuple, "_Body"] = {}


class _Body:
    """A function body as (kernel, inputs, outputs, attrs) steps, ready to run."""

    def __init__(self, proto: onnx.FunctionProto, attrs: Mapping[str, Any]) -> None:
        opsets = {o.domain: o.version for o in proto.opset_import}
        defaults = {a.name: a for a in proto.attribute_proto}
        self.inputs = list(proto.input)
        self.outputs = list(proto.output)
        self.steps: list[tuple[Kernel, list[str], list[str], dict[str, Any]]] = []
        for node in proto.node:
            node_attrs = _bind_attrs(node, attrs, defaults)
            if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
                raise KernelNotFound(f"the function body of '{proto.name}' holds a control-flow node "
                                     f"({node.op_type}); expanding it is not supported")
            fn = kernel_for(node.op_type, node.domain, opsets)
            if node.op_type in ("Split", "MaxPool"):
                node_attrs["_n_outputs"] = len(node.output)
            self.steps.append((fn, list(node.input), list(node.output), node_attrs))

    def run(self, xp: Any, inputs: list[Any], n_outputs: int) -> tuple:
        env: dict[str, Any] = {n: v for n, v in zip(self.inputs, inputs) if n}
        for fn, ins, outs, attrs in self.steps:
            args = [env[n] if n else None for n in ins]
            while args and args[-1] is None:
                args.pop()
            results = fn(xp, *args, **attrs)
            for name, value in zip(outs, results):
                if name:
                    env[name] = value
        return tuple(env.get(n) for n in self.outputs[:n_outputs])


def _bind_attrs(node: onnx.NodeProto, attrs: Mapping[str, Any],
                defaults: Mapping[str, onnx.AttributeProto]) -> dict[str, Any]:
    """A body node's attributes, with references to the caller's attributes resolved."""
    bound: dict[str, Any] = {}
    for a in node.attribute:
        if a.ref_attr_name:
            if a.ref_attr_name in attrs:
                bound[a.name] = attrs[a.ref_attr_name]
            elif a.ref_attr_name in defaults:
                bound[a.name] = _attr_value(defaults[a.ref_attr_name])
            continue  # neither given nor defaulted: the body op's own default applies
        bound[a.name] = _attr_value(a)
    return bound


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
    body = _Body(proto, attrs)
    if len(_BODIES) > 512:  # a bound on memory for models with very many signatures
        _BODIES.clear()
    _BODIES[key] = body
    return body


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

    def kernel(xp: Any, *inputs: Any, _n_outputs: int | None = None, **attrs: Any) -> tuple:
        n_outputs = _n_outputs if _n_outputs is not None else len(schema.outputs)
        body = _build(schema, body_opset, list(inputs), attrs, n_outputs)
        return body.run(xp, list(inputs), n_outputs)

    kernel.__name__ = f"function_{op_type}"
    return kernel
