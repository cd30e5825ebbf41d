"""Rule selectors made in the page: op types plus attribute conditions, as JSON. No code.

A rule is::

    {"name": "my_rule",                       # property name (letters, digits, _ -)
     "ops": ["Conv", "Relu", "Add"],          # op types that may join a subgraph
     "conditions": [                          # all must hold for a node of that op
        {"op": "Conv", "attr": "group", "cmp": "==", "value": 1},
        {"op": "*", "attr": "alpha", "cmp": "absent"}
     ]}

``cmp`` is one of ``== != < <= > >= in not_in exists absent``. A node is
selectable when its op type is in ``ops`` and every condition naming its op
(or ``*``) holds. A comparison reads the attribute as ONNX defines it: a node that
leaves it out has its schema default (a Conv without ``group`` has group 1, so
``group == 1`` holds for it); an attribute with no default, left out, fails every
comparison. ``exists`` / ``absent`` ask whether the node itself sets it. Floats compare as
ONNX stores them, in float32 (``alpha == 0.01`` holds for an alpha written as 0.01).
``rule_property(spec)`` validates the JSON and returns a ``SubgraphProperty`` for
``PartitionRun(graph, properties=[...])``.
"""

from __future__ import annotations

import operator
import re
from functools import partial
from typing import Any, Callable

import numpy as np

from partition.api import NodeView, SubgraphProperty, SubgraphSelector
from partition.errors import LensError
from partition.onnx_io import attribute_default

MAX_OPS = 500
MAX_CONDITIONS = 100

_CMPS: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
    ">": operator.gt, ">=": operator.ge,
    "in": lambda a, b: a in b, "not_in": lambda a, b: a not in b,
}
_UNARY = ("exists", "absent")
_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")


class RuleError(LensError):
    """The rule JSON is malformed."""


def _plain(value: Any) -> Any:
    """Attribute values as comparable plain data (numpy scalars/arrays -> Python)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, tuple):
        return list(value)
    return value


def _float32(value: Any) -> Any:
    """Floats as ONNX stores them (float32), in a number or a list: ``alpha == 0.01`` holds for
    a LeakyRelu whose alpha is 0.01, stored as 0.009999999776; compared as typed it never did."""
    if isinstance(value, float):
        with np.errstate(over="ignore"):   # past float32's range: inf, as ONNX would store it
            return float(np.float32(value))
    if isinstance(value, list):
        return [_float32(v) for v in value]
    return value


class Condition:
    def __init__(self, op: str, attr: str, cmp: str, value: Any) -> None:
        self.op, self.attr, self.cmp, self.value = op, attr, cmp, value

    def applies(self, op_type: str) -> bool:
        return self.op in ("*", op_type)

    def holds(self, attrs: Any, default: Callable[[str], tuple[bool, Any]]) -> bool:
        """Whether the condition holds for a node's ``attrs``; ``default(name)`` gives the
        schema's value of an attribute the node leaves out, as ``(found, value)``."""
        if self.cmp == "exists":
            return self.attr in attrs
        if self.cmp == "absent":
            return self.attr not in attrs
        if self.attr in attrs:
            value = attrs[self.attr]
        else:
            found, value = default(self.attr)
            if not found:
                return False
        try:
            return bool(_CMPS[self.cmp](_float32(_plain(value)), _float32(self.value)))
        except TypeError:
            return False

    def text(self) -> str:
        if self.cmp in _UNARY:
            return f"{self.attr} {self.cmp}"
        return f"{self.attr} {self.cmp} {self.value!r}"


class RuleSelector(SubgraphSelector):
    def __init__(self, prop: "RuleProperty") -> None:
        self.prop = prop

    def select(self, node: NodeView) -> bool:
        return self.prop.why_not(node) is None

    def select_input(self, node: NodeView, input_node: NodeView) -> bool:
        return self.prop.why_not(input_node) is None

    def select_output(self, node: NodeView, output_node: NodeView) -> bool:
        return self.prop.why_not(output_node) is None


class RuleProperty(SubgraphProperty):
    def __init__(self, name: str, ops: list[str], conditions: list[Condition]) -> None:
        self.property_name = name
        self.ops = frozenset(ops)
        self.conditions = conditions

    def create_subgraph_selector(self) -> SubgraphSelector:
        return RuleSelector(self)

    def why_not(self, node: NodeView) -> str | None:
        if node.op_type not in self.ops:
            return f"op {node.op_type} is not in the rule's op types"
        default = partial(attribute_default, node.op_type, node.domain, node.graph.opset)
        for c in self.conditions:
            if c.applies(node.op_type) and not c.holds(node.attrs, default):
                return f"{node.op_type}: condition '{c.text()}' does not hold"
        return None

    def explain(self, node: NodeView) -> str | None:
        return self.why_not(node)


def rule_property(spec: Any) -> RuleProperty:
    """Validate ``spec`` (the JSON of the module docstring) into a property."""
    if not isinstance(spec, dict):
        raise RuleError("rule: expected a JSON object {\"ops\": [...], \"conditions\": [...]}")
    name = spec.get("name") or "rule"
    if not isinstance(name, str) or not _NAME.match(name):
        raise RuleError("rule: 'name' must be 1-64 letters, digits, '_', '-' or '.'")
    ops = spec.get("ops")
    if not isinstance(ops, list) or not ops or not all(isinstance(o, str) and o.strip() for o in ops):
        raise RuleError("rule: 'ops' must be a non-empty list of op type names")
    if len(ops) > MAX_OPS:
        raise RuleError(f"rule: at most {MAX_OPS} op types")
    conds_spec = spec.get("conditions") or []
    if not isinstance(conds_spec, list) or len(conds_spec) > MAX_CONDITIONS:
        raise RuleError(f"rule: 'conditions' must be a list of at most {MAX_CONDITIONS} objects")
    conditions = []
    for i, c in enumerate(conds_spec):
        if not isinstance(c, dict):
            raise RuleError(f"rule: condition {i} must be an object")
        op, attr, cmp = c.get("op", "*"), c.get("attr"), c.get("cmp", "==")
        if not isinstance(op, str) or not isinstance(attr, str) or not attr:
            raise RuleError(f"rule: condition {i} needs 'attr' (a name) and 'op' (an op type or '*')")
        if cmp not in _CMPS and cmp not in _UNARY:
            raise RuleError(f"rule: condition {i}: 'cmp' must be one of {', '.join([*_CMPS, *_UNARY])}")
        value = c.get("value")
        if cmp in ("in", "not_in") and not isinstance(value, list):
            raise RuleError(f"rule: condition {i}: '{cmp}' needs a list value")
        if cmp not in _UNARY and not isinstance(value, (int, float, str, list, bool)):
            raise RuleError(f"rule: condition {i}: 'value' must be a number, string, boolean or list")
        conditions.append(Condition(op, attr, cmp, value))
    return RuleProperty(name, [o.strip() for o in ops], conditions)
