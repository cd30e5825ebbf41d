"""Which inputs TensorRT's parser needs as constants, and the values it checks.

The parser distinguishes (see ``docs/tensorrt.md``):

- ``weights``: the input must be an initializer or a ``Constant`` node's output
  (``is_weights()`` in onnxOpImporters.cpp; the parser folds nothing, so
  ``Add(init, init)`` is already a tensor);
- ``any``: any tensor (Clip min/max, TopK K, Resize scales, and the shape operands of
  Reshape, Expand, Tile, Slice, Pad, ConstantOfShape: the parser wraps any tensor in a
  shape tensor, so whether a shape resolves is a build-time question, not a parse one);
- ``not_weights``: must be a tensor, not an initializer (RandomUniformLike).

Value checks run where the value is known (initializer or Constant).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..ir import Graph, Node


class Scope:
    """A graph and the graphs around it (for bodies reading outer tensors)."""

    __slots__ = ("graph", "outer", "opset")

    def __init__(self, graph: Graph, outer: "Scope | None") -> None:
        self.graph = graph
        self.outer = outer
        #: the model's default-domain opset (bodies inherit it)
        self.opset: int | None = outer.opset if outer is not None else graph.opset.get(
            "", graph.opset.get("ai.onnx"))

    def owner(self, t: str) -> "Scope | None":
        scope: Scope | None = self
        while scope is not None:
            g = scope.graph
            if t in g.initializers or g.producer(t) is not None or t in g.inputs:
                return scope
            scope = scope.outer
        return None

    def dtype(self, t: str) -> str | None:
        info = self.graph.tensors.get(t)
        if info is not None and info.dtype is not None:
            return info.dtype
        scope: Scope | None = self
        while scope is not None:
            g = scope.graph
            info = g.tensors.get(t)
            if info is not None and info.dtype is not None:
                return info.dtype
            if t in g.initializers:
                return g.initializers[t].dtype
            scope = scope.outer
        return None

    def shape(self, t: str) -> tuple[Any, ...] | None:
        owner = self.owner(t) or self
        return owner.graph.info(t).shape

    def is_graph_output(self, t: str) -> bool:
        return self.outer is None and t in self.graph.outputs

    def weights_value(self, t: str) -> np.ndarray | None | bool:
        """The value when ``t`` is weights (initializer/Constant), False when it is a tensor."""
        owner = self.owner(t)
        if owner is None:
            return False
        g = owner.graph
        if t in g.initializers:
            try:
                return np.asarray(g.initializers[t].value)
            except Exception:  # noqa: BLE001 - unreadable data: weights, value unknown
                return None
        node = g.producer(t)
        if node is not None and node.op_type == "Constant" and not node.domain:
            return _constant_value(node)
        return False

    def producer_text(self, t: str) -> str:
        owner = self.owner(t)
        if owner is None:
            return f"'{t}', defined nowhere in the model"
        g = owner.graph
        if t in g.inputs:
            return f"graph input '{t}'" if not g.is_body else f"body input '{t}' of {g.name}"
        node = g.producer(t)
        return f"node '{node.name}' ({node.op_type})" if node is not None else f"'{t}'"


def _static(shape: Any) -> bool:
    return shape is not None and all(isinstance(d, int) for d in shape)


def _constant_value(node: Node) -> np.ndarray | None:
    attrs = node.attrs
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if key in attrs:
            try:
                return np.asarray(attrs[key])
            except Exception:  # noqa: BLE001 - odd attribute payloads: value unknown
                return None
    return None


def check_input(scope: Scope, node: Node, index: int, spec: Mapping[str, Any]) -> tuple[str, str] | None:
    """(reason, citation) when input ``index`` of ``node`` breaks ``spec``, else None."""
    t = node.inputs[index]
    op, what = node.op_type, spec.get("what")
    label = f"input {index} '{t}'" + (f" ({what})" if what else "")
    kind = spec.get("kind", "any")
    if kind == "weights":
        if scope.weights_value(t) is False:
            return (f"{op}: {label} must be an initializer or a Constant node's output, but it comes from "
                    f"{scope.producer_text(t)}", spec["cite"])
    elif kind == "not_weights":
        if scope.weights_value(t) is not False:
            return f"{op}: {label} must be a computed tensor, not an initializer", spec["cite"]
    if spec.get("static_shape"):
        shape = scope.shape(t)
        if shape is not None and not _static(shape):
            return f"{op}: {label} must have a static shape, not {list(shape)}", spec["cite"]
    return _check_value(scope, node, t, label, spec)


def _check_value(scope: Scope, node: Node, t: str, label: str, spec: Mapping[str, Any]) -> tuple[str, str] | None:
    checks = [k for k in ("equals", "less_than", "all_zero", "positive") if k in spec]
    if not checks:
        return None
    value = scope.weights_value(t)
    if value is None or value is False or getattr(value, "size", 0) == 0:
        return None  # a tensor (or unreadable): the parser cannot check it either
    op, cite = node.op_type, spec.get("value_cite", spec["cite"])
    flat = np.asarray(value).reshape(-1)
    if "equals" in spec and bool(flat[0]) != bool(spec["equals"]):
        return f"{op}: {label} is {flat[0].item()!r}; TensorRT takes only {spec['equals']!r} (inference)", cite
    if "less_than" in spec and flat.dtype.kind in "iuf" and int(flat.max()) >= int(spec["less_than"]):
        return f"{op}: {label} is {int(flat.max())}; TensorRT takes less than {spec['less_than']}", cite
    if spec.get("all_zero") and flat.dtype.kind in "iuf" and np.any(flat != 0):
        return (f"{op}: {label} is not all zeros; TensorRT supports only symmetric quantization "
                "(zero point 0): quantize symmetrically (onnxruntime's quantize_static: "
                "extra_options={'ActivationSymmetric': True, 'WeightSymmetric': True})", cite)
    if spec.get("positive") and flat.dtype.kind == "f" and not np.all(flat > 0):
        return f"{op}: {label} has a coefficient <= 0; the scale must be positive", cite
    return None
