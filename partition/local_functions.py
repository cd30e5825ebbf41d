"""Model-local functions (``ModelProto.functions``): instantiated per call, iteratively.

A node whose ``(domain, op_type)`` names a function of the model is a *call*.
The importer gives such a node its body as a graph of our IR in
``node.subgraphs["function"]`` (``FUNCTION_KEY``): the function's nodes with
every attribute reference (``ref_attr_name``) replaced by the caller's value,
or the function's default (``attribute_proto``), or dropped when neither is
given (the inner op's own default then applies, as in ONNX). Calls with the
same attribute values share one body object. Functions calling functions are
instantiated callees first, with an explicit stack (no recursion on nesting
depth); a function that calls itself, directly or not, is refused with the
cycle named. This module works on protobufs only; ``partition.onnx_io`` turns
a bound ``FunctionProto`` into a ``Graph``.

Our own subgraph nodes (domain ``sglens``) are local functions too and go
through the same instantiation; they stay ``Subgraph`` nodes with
``subgraphs["body"]``.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

import onnx

from .errors import ModelError

#: Key of a call node's instantiated body in ``Node.subgraphs``.
FUNCTION_KEY = "function"

Key = tuple[str, str, tuple[tuple[str, bytes], ...]]
#: Bodies per model at most: attribute values flowing through nested calls could otherwise
#: multiply instances (a crafted upload); real models have one or a few per function.
MAX_INSTANCES = 10_000


class LocalFunctions(dict):
    """``(domain, name) -> FunctionProto``, plus the bodies instantiated so far (``bodies``)."""

    def __init__(self, protos: Iterable[onnx.FunctionProto]) -> None:
        super().__init__(((f.domain, f.name), f) for f in protos)
        self.bodies: dict[Key, Any] = {}


def instance_key(call: onnx.NodeProto, f: onnx.FunctionProto) -> Key:
    """What decides a call's body: the function and the values of the attributes it declares."""
    declared = set(f.attribute) | {a.name for a in f.attribute_proto}
    given = sorted((a.name, a.SerializeToString(deterministic=True)) for a in call.attribute
                   if a.name in declared)
    return f.domain, f.name, tuple(given)


def bound_function(f: onnx.FunctionProto, call: onnx.NodeProto) -> onnx.FunctionProto:
    """A copy of ``f`` with attribute references replaced by the call's values (nested graphs too)."""
    given = {a.name: a for a in call.attribute}
    defaults = {a.name: a for a in f.attribute_proto}
    bound = onnx.FunctionProto()
    bound.CopyFrom(f)
    stack = [bound.node]
    while stack:
        for node in stack.pop():
            kept = []
            for a in node.attribute:
                if a.ref_attr_name:
                    source = given.get(a.ref_attr_name) or defaults.get(a.ref_attr_name)
                    if source is None:
                        continue  # neither given nor defaulted: the inner op's default applies
                    name, a = a.name, onnx.AttributeProto.FromString(source.SerializeToString())
                    a.name = name  # the inner op's own name for it
                kept.append(a)
                if a.type == onnx.AttributeProto.GRAPH:
                    stack.append(a.g.node)
                elif a.type == onnx.AttributeProto.GRAPHS:
                    stack.extend(g.node for g in a.graphs)
            del node.attribute[:]
            node.attribute.extend(kept)
    return bound


def calls_in(f: Any, functions: Mapping[tuple[str, str], Any]) -> list[onnx.NodeProto]:
    """The nodes of ``f`` (a function or a graph; nested graphs included) that call a local
    function, in order."""
    found: list[onnx.NodeProto] = []
    stack = [iter(f.node)]
    while stack:
        node = next(stack[-1], None)
        if node is None:
            stack.pop()
            continue
        if (node.domain, node.op_type) in functions:
            found.append(node)
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                stack.append(iter(a.g.node))
    return found


def instantiate(call: onnx.NodeProto, functions: LocalFunctions,
                import_body: Callable[[onnx.FunctionProto], Any]) -> Any:
    """The body of ``call`` (built once per instance key); callees are built before their callers.

    ``import_body`` turns a bound ``FunctionProto`` into a ``Graph``; when it
    meets a call inside, that callee is already in ``functions.bodies``.
    """
    memo = functions.bodies
    first = functions[(call.domain, call.op_type)]
    key = instance_key(call, first)
    if key in memo:
        return memo[key]
    stack: list[tuple[Key, onnx.NodeProto]] = [(key, call)]
    bound: dict[Key, onnx.FunctionProto] = {}
    path: list[Key] = []  # visited, not finished: the chain of callers (DFS discipline)
    while stack:
        key, node = stack[-1]
        if key in memo:
            stack.pop()
            continue
        if key not in bound:
            bound[key] = bound_function(functions[key[:2]], node)
            path.append(key)
            pending = _pending(bound[key], functions, memo, path)
            if pending:
                stack.extend(reversed(pending))
                continue
        if len(memo) >= MAX_INSTANCES:
            raise ModelError(f"model-local functions expand to more than {MAX_INSTANCES} distinct instances "
                             "(one per function and attribute values); the model is not importable here")
        memo[key] = import_body(bound.pop(key))
        path.remove(key)
        stack.pop()
    return memo[instance_key(call, first)]


def _pending(f: onnx.FunctionProto, functions: LocalFunctions, memo: dict,
             path: list[Key]) -> list[tuple[Key, onnx.NodeProto]]:
    pending: dict[Key, onnx.NodeProto] = {}
    for inner in calls_in(f, functions):
        key = instance_key(inner, functions[(inner.domain, inner.op_type)])
        names = [k[:2] for k in path]
        if key[:2] in names:  # by name, whatever the attribute values: ONNX functions never recurse
            chain = " -> ".join(f"{k[0]}.{k[1]}" if k[0] else k[1] for k in names[names.index(key[:2]):] + [key[:2]])
            raise ModelError(f"model-local function '{key[1]}' calls itself ({chain}); ONNX functions "
                             "cannot be recursive: fix the model's functions")
        if key not in memo:
            pending.setdefault(key, inner)
    return list(pending.items())


#: ONNX shape inference expands every call of a local function again (it has no memo), so a
#: call tree with shared callees costs its number of *paths*. Above this many expanded nodes
#: the importer skips inference (types then come from the file's value_info only).
INFER_EXPANDED_LIMIT = 1_000_000


def expanded_size(model: onnx.ModelProto, limit: int = INFER_EXPANDED_LIMIT) -> int | None:
    """Nodes the graph has with every local function call expanded; None above ``limit`` or on a cycle."""
    functions = {(f.domain, f.name): f for f in model.functions}
    if not functions:
        return len(model.graph.node)
    size: dict[tuple[str, str], int] = {}
    order: list[tuple[str, str]] = []
    state: dict[tuple[str, str], int] = {}  # 1: on the stack, 2: done
    for root in functions:
        stack = [root]
        while stack:
            name = stack[-1]
            if state.get(name) == 2:
                stack.pop()
                continue
            callees = [c for c in _callee_names(functions[name], functions) if state.get(c) != 2]
            if state.get(name) == 1 and not callees:
                state[name] = 2
                order.append(name)
                stack.pop()
                continue
            if any(state.get(c) == 1 for c in callees):
                return None  # recursive: the importer refuses it with the cycle named
            state[name] = 1
            stack.extend(callees)
    for name in order:  # callees before callers
        total = sum(size.get(c, 0) for c in _callee_names(functions[name], functions, every=True))
        size[name] = min(total + _node_count(functions[name].node), limit + 1)
    total = _node_count(model.graph.node) + sum(
        size[c] for c in _callee_names(model.graph, functions, every=True))
    return total if total <= limit else None


def _callee_names(holder: Any, functions: dict, every: bool = False) -> list[tuple[str, str]]:
    """Local functions called in ``holder``'s nodes (nested graphs too); with ``every``, once per call."""
    found = [(node.domain, node.op_type) for node in calls_in(holder, functions)]
    return found if every else list(dict.fromkeys(found))


def _node_count(nodes: Any) -> int:
    count, stack = 0, [iter(nodes)]
    while stack:
        node = next(stack[-1], None)
        if node is None:
            stack.pop()
            continue
        count += 1
        stack.extend(iter(a.g.node) for a in node.attribute if a.type == onnx.AttributeProto.GRAPH)
    return count
