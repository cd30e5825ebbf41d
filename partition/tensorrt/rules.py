"""TensorRT compatibility of ONNX nodes, with a reason a person understands.

The operator table is data (``partition/data/tensorrt_ops.json``, from
onnx-tensorrt's ``docs/operators.md`` for TensorRT 10.x); this module only
interprets it. For each node, in this order:

1. domain: only the default ONNX domain (custom domains need a plugin);
2. the default-domain opset of the model is within the table's range;
3. the op is in the table and marked supported;
4. ops with data-dependent output shapes (NonZero, NonMaxSuppression) are out
   unless ``exclude_data_dependent=False``;
5. ``fallback_ops`` given by the user are out (like Torch-TensorRT's
   ``torch_executed_ops``);
6. attribute restrictions (``Resize mode=cubic``, ``Cast to=DOUBLE``, ...);
7. input/output element types, where known;
8. inputs that must be build-time constants, checked against their producers
   (initializers, ``Constant`` nodes, nodes folding constants; for "shape"
   inputs also TensorRT shape tensors computed from ``Shape``);
9. ``If``/``Loop``/``Scan``: every node of every body passes, recursively.

``TRTRules.check(graph, node)`` returns None (compatible) or the reason.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ..dtypes import ONNX_TYPE_NAMES
from ..ir import Graph, Node

TABLE_PATH = Path(__file__).resolve().parent.parent / "data" / "tensorrt_ops.json"


@lru_cache(maxsize=4)
def load_table(path: str | None = None) -> dict[str, Any]:
    """The operator table as a dict (cached)."""
    with open(path or TABLE_PATH, encoding="utf-8") as f:
        return json.load(f)


class _OpRule:
    """One op's row of the table, pre-digested for fast checks."""

    __slots__ = ("name", "supported", "types", "input_types", "output_types", "index_inputs",
                 "index_outputs", "constant_inputs", "attrs", "data_dependent", "control_flow",
                 "max_outputs", "max_outputs_message", "simple")

    def __init__(self, name: str, row: Mapping[str, Any], type_sets: Mapping[str, list[str]]) -> None:
        def types(spec: Any) -> frozenset[str] | None:
            if spec is None:
                return None
            return frozenset(type_sets[spec] if isinstance(spec, str) else spec)

        self.name = name
        self.supported = bool(row.get("supported", True))
        self.types = types(row.get("types"))
        self.input_types = {int(k): types(v) for k, v in row.get("input_types", {}).items()}
        self.output_types = {int(k): types(v) for k, v in row.get("output_types", {}).items()}
        self.index_inputs = frozenset(row.get("index_inputs", ()))
        self.index_outputs = frozenset(row.get("index_outputs", ()))
        self.constant_inputs = {int(k): v for k, v in row.get("constant_inputs", {}).items()}
        self.attrs = [dict(a, allowed=(list(type_sets[a["allowed"]]) if isinstance(a["allowed"], str)
                                       else a["allowed"])) for a in row.get("attrs", ())]
        self.data_dependent = bool(row.get("data_dependent_shape", False))
        self.control_flow = bool(row.get("control_flow", False))
        self.max_outputs = row.get("max_outputs")
        self.max_outputs_message = row.get("max_outputs_message", "")
        self.simple = not (self.attrs or self.constant_inputs or self.control_flow or self.max_outputs)

    def allowed(self, index: int, is_input: bool) -> frozenset[str] | None:
        per = self.input_types if is_input else self.output_types
        if index in per:
            return per[index]
        if index in (self.index_inputs if is_input else self.index_outputs):
            return None
        return self.types


def _names(types: Iterable[str]) -> str:
    order = ["FLOAT", "FLOAT16", "BFLOAT16", "INT8", "UINT8", "INT32", "INT64", "BOOL", "FLOAT8E4M3FN", "INT4"]
    return ", ".join(sorted(types, key=lambda t: (order.index(t) if t in order else 99, t)))


class TRTRules:
    """Interprets the table; ``check`` gives a node's reason, ``compat`` a whole graph's."""

    def __init__(self, table: Mapping[str, Any] | None = None, *, exclude_data_dependent: bool = True,
                 fallback_ops: Iterable[str] = ()) -> None:
        self.table = dict(table) if table is not None else load_table()
        self.version = self.table.get("tensorrt_version", "?")
        self.exclude_data_dependent = exclude_data_dependent
        self.fallback_ops = frozenset(fallback_ops)
        self.domains = frozenset(self.table.get("domains", ["", "ai.onnx"]))
        opset = self.table.get("opset", {})
        self.opset_min = int(opset.get("min", 1))
        self.opset_max = int(opset.get("max", 10 ** 6))
        type_sets = self.table.get("type_sets", {})
        self.rules = {name: _OpRule(name, row, type_sets) for name, row in self.table["ops"].items()}
        self.shape_ops = frozenset(self.table.get("shape_ops", ()))
        self.non_compute_ops = frozenset(self.table.get("non_compute_ops", ("Constant", "Identity")))

    # ---------------------------------------------------------- whole graph --
    def compat(self, graph: Graph) -> dict[str, str]:
        """Node name -> reason, for every incompatible node of ``graph`` (top level)."""
        out: dict[str, str] = {}
        opset_reason = self.opset_reason(graph)
        scope = _Scope(graph, None)
        for node in graph.nodes:
            why = opset_reason if opset_reason and node.domain in self.domains else None
            why = why or self._check(scope, node)
            if why:
                out[node.name] = why
        return out

    def check(self, graph: Graph, node: Node) -> str | None:
        """The reason ``node`` of ``graph`` cannot go to TensorRT, or None."""
        if node.domain in self.domains:
            opset_reason = self.opset_reason(graph)
            if opset_reason:
                return opset_reason
        return self._check(_Scope(graph, None), node)

    def opset_reason(self, graph: Graph) -> str | None:
        version = graph.opset.get("", graph.opset.get("ai.onnx"))
        if version is None:
            return None
        if not self.opset_min <= version <= self.opset_max:
            return (f"default-domain opset {version} is outside the range TensorRT {self.version} parses "
                    f"({self.opset_min}-{self.opset_max})")
        return None

    # ------------------------------------------------------------ one node --
    def _check(self, scope: "_Scope", node: Node) -> str | None:
        op = node.op_type
        if node.domain not in self.domains:
            if node.is_subgraph:
                return f"{op}: an earlier pass's subgraph node (domain '{node.domain}'), not an ONNX operator"
            return (f"{node.domain}.{op}: custom domain '{node.domain}' is not parsed by TensorRT's ONNX "
                    "parser (needs a plugin)")
        rule = self.rules.get(op)
        if rule is None:
            return f"{op}: not in TensorRT {self.version}'s ONNX operator table"
        if not rule.supported:
            return f"{op}: not supported by TensorRT {self.version}'s ONNX parser"
        if rule.data_dependent and self.exclude_data_dependent:
            return f"{op}: output shape depends on input values"
        if op in self.fallback_ops:
            return f"{op}: forced to fall back (fallback_ops)"
        if not rule.simple:
            why = self._attrs(rule, node)
            if why:
                return why
            if rule.max_outputs is not None and len([t for t in node.outputs if t]) > rule.max_outputs:
                return rule.max_outputs_message or f"{op}: more than {rule.max_outputs} outputs not supported"
        why = self._types(scope, rule, node)
        if why:
            return why
        if rule.constant_inputs:
            why = self._constants(scope, rule, node)
            if why:
                return why
        if rule.control_flow:
            return self._bodies(scope, node)
        return None

    def _attrs(self, rule: _OpRule, node: Node) -> str | None:
        for spec in rule.attrs:
            name = spec["name"]
            if name not in node.attrs and "default" not in spec:
                continue
            value = node.attrs.get(name, spec.get("default"))
            if spec.get("as") == "dtype":
                value = ONNX_TYPE_NAMES.get(int(value), str(value))
            if isinstance(value, bytes):
                value = value.decode("utf-8", "replace")
            if value not in spec["allowed"]:
                return spec["message"].format(value=value, op=node.op_type)
        return None

    def _types(self, scope: "_Scope", rule: _OpRule, node: Node) -> str | None:
        graph = scope.graph
        tensors, inits = graph.tensors, graph.initializers
        for index, t in enumerate(node.inputs):
            if not t:
                continue
            info = tensors.get(t)
            dtype = info.dtype if info is not None else None
            if dtype is None:
                if t in inits:
                    dtype = inits[t].dtype
                elif scope.outer is not None:
                    dtype = scope.dtype(t)
                if dtype is None:
                    continue
            allowed = rule.allowed(index, True)
            if allowed is None:
                continue
            if dtype is not None and dtype not in allowed:
                return (f"{node.op_type} on {dtype}: type not supported (input {index} '{t}'; "
                        f"{node.op_type} takes {_names(allowed)})")
        for index, t in enumerate(node.outputs):
            if not t:
                continue
            allowed = rule.allowed(index, False)
            if allowed is None:
                continue
            info = tensors.get(t)
            dtype = info.dtype if info is not None else None
            if dtype is not None and dtype not in allowed:
                return (f"{node.op_type} producing {dtype}: type not supported (output {index} '{t}'; "
                        f"{node.op_type} gives {_names(allowed)})")
        return None

    def _constants(self, scope: "_Scope", rule: _OpRule, node: Node) -> str | None:
        for index, kind in sorted(rule.constant_inputs.items()):
            if index >= len(node.inputs) or not node.inputs[index]:
                continue
            t = node.inputs[index]
            origin = scope.non_constant_origin(t, kind == "shape", self.shape_ops)
            if origin is not None:
                what = "a build-time constant" if kind == "constant" else "a build-time constant or shape tensor"
                return f"{node.op_type}: input {index} '{t}' must be {what}, but it comes from {origin}"
        return None

    def _bodies(self, scope: "_Scope", node: Node) -> str | None:
        for key, body in node.subgraphs.items():
            inner = _Scope(body, scope)
            for sub in body.nodes:
                why = self._check(inner, sub)
                if why:
                    return f"{node.op_type}: node '{sub.name}' ({sub.op_type}) in its {key} is not compatible: {why}"
        return None

    # ---------------------------------------------------------- utilities --
    def is_compute(self, node: Node) -> bool:
        return node.op_type not in self.non_compute_ops


class _Scope:
    """A graph and the graphs around it (for bodies reading outer tensors)."""

    __slots__ = ("graph", "outer", "_const")

    def __init__(self, graph: Graph, outer: "_Scope | None") -> None:
        self.graph = graph
        self.outer = outer
        self._const: dict[tuple[str, bool], str | None] = {}

    def _owner(self, t: str) -> "_Scope | None":
        scope: _Scope | None = self
        while scope is not None:
            g = scope.graph
            if t in g.initializers or g.producer(t) is not None or t in g.inputs:
                return scope
            scope = scope.outer
        return None

    def dtype(self, t: str) -> str | None:
        scope: _Scope | None = self
        while scope is not None:
            info = scope.graph.info(t)
            if info.dtype is not None:
                return info.dtype
            scope = scope.outer
        return None

    def non_constant_origin(self, t: str, shape_ok: bool, shape_ops: frozenset[str]) -> str | None:
        """None when ``t`` is known at build time, else where the dynamic value comes from."""
        owner = self._owner(t)
        if owner is None:
            return f"'{t}', defined nowhere in the model"
        return owner._origin(t, shape_ok, shape_ops, 0)

    def _origin(self, t: str, shape_ok: bool, shape_ops: frozenset[str], depth: int) -> str | None:
        key = (t, shape_ok)
        if key in self._const:
            return self._const[key]
        g = self.graph
        result: str | None
        if t in g.initializers:
            result = None
        elif t in g.inputs:
            result = f"graph input '{t}'" if not g.is_body else f"body input '{t}' of {g.name}"
        else:
            node = g.producer(t)
            if node is None:
                owner = self.outer._owner(t) if self.outer is not None else None
                result = owner._origin(t, shape_ok, shape_ops, depth + 1) if owner else f"'{t}', defined nowhere"
            elif depth > 64:
                result = f"node '{node.name}' ({node.op_type}), too deep a chain to fold"
            elif node.op_type == "Constant" and not node.domain:
                result = None
            elif node.op_type in ("Shape", "Size") and not node.domain and (
                    shape_ok or _static(g.info(node.inputs[0]).shape if node.inputs else None)):
                result = None  # static shape, or a TensorRT shape tensor (known once input shapes are)
            elif node.domain or node.subgraphs or node.op_type.startswith("Random") or \
                    not [i for i in node.inputs if i]:
                result = f"node '{node.name}' ({node.op_type})"
            else:
                inner_ok = shape_ok and node.op_type in shape_ops
                result = None
                for i in node.inputs:
                    if i and self._origin(i, inner_ok, shape_ops, depth + 1) is not None:
                        result = f"node '{node.name}' ({node.op_type}), which reads the dynamic '{i}'"
                        break
        self._const[key] = result
        return result


def _static(shape: Any) -> bool:
    return shape is not None and all(isinstance(d, int) for d in shape)


def explain_op_table(rules: TRTRules, op_type: str) -> dict[str, Any]:
    """The table's row for ``op_type`` in plain words (for docs and ``sglens groups``)."""
    rule = rules.rules.get(op_type)
    if rule is None:
        return {"op": op_type, "in_table": False}
    return {"op": op_type, "in_table": True, "supported": rule.supported,
            "types": sorted(rule.types or ()), "constant_inputs": rule.constant_inputs,
            "attrs": [{k: v for k, v in a.items() if k != "message"} for a in rule.attrs],
            "data_dependent_shape": rule.data_dependent}


def incompatible(rules: TRTRules, graph: Graph, names: Sequence[str]) -> dict[str, str]:
    """Reasons for the given node names only (a convenience for tests and reports)."""
    reasons = rules.compat(graph)
    return {n: reasons[n] for n in names if n in reasons}
