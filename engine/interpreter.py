"""A simple sequential interpreter over a ``Graph``: the reference path for the ONNX backend.

Nodes run in graph order through ``engine.kernels``. Bodies of If / Loop / Scan
(and of ``sglens`` subgraph nodes) run in a child scope of an environment chain,
so they read outer-scope tensors by name without copying anything.
"""

from __future__ import annotations

from collections import ChainMap
from typing import Any, Mapping, MutableMapping

import numpy as np

from partition.errors import LensError
from partition.ir import Graph, Node
from partition.local_functions import FUNCTION_KEY

from .kernels import (KernelError, KernelNotFound, is_control_flow, kernel_attrs, kernel_for,
                      missing_kernels)
from .kernels.functions import local_function_kernel
from .kernels.geometry import GeometryError

Env = MutableMapping[str, Any]


def run_graph(graph: Graph, feeds: Mapping[str, Any], xp: Any = np, opset: int | None = None) -> dict[str, Any]:
    """Run ``graph`` on ``feeds`` (name -> array); returns output name -> array.

    ``opset`` overrides the default-domain opset the graph imports (kernels are
    chosen by it); other domains use the graph's own imports.
    """
    missing = [name for name in graph.inputs if name not in feeds and name not in graph.initializers]
    if missing:
        raise KernelError(f"graph '{graph.name}' needs inputs {missing}, which were not fed; "
                          f"feed every graph input ({list(graph.inputs)})")
    if opset is None:
        # Say up front which ops cannot run, rather than failing half way through.
        absent = missing_kernels(graph)
        if absent:
            listed = ", ".join(f"'{name}' ({op})" for name, op in absent[:10])
            raise KernelNotFound(f"no kernel exists for {len(absent)} node(s) of graph '{graph.name}': "
                                 f"{listed}; the model cannot run on the reference interpreter")
    env: Env = ChainMap({})
    _bind_initializers(graph, env, xp)
    for name, value in feeds.items():
        env[name] = _as_array(xp, value)
    opsets = _opsets(graph, opset, None)
    _run_nodes(graph, env, xp, opsets)
    return {name: _lookup(env, name, graph.name, "graph output") for name in graph.outputs}


def _opsets(graph: Graph, override: int | None, outer: Mapping[str, int] | None) -> dict[str, int]:
    """Opset imports per domain: the graph's own, else the enclosing graph's.

    The default domain is kept under both spellings' one key "" so that ``kernel_for``
    (the one lookup the executor uses too) sees the same opset either way."""
    result: dict[str, int] = dict(outer or {})
    for domain, version in graph.opset.items():
        result["" if domain in ("", "ai.onnx") else domain] = int(version)
    if override is not None:
        result[""] = override
    return result


def _as_array(xp: Any, value: Any) -> Any:
    if value is None:
        return value  # an absent optional
    if isinstance(value, (list, tuple)):
        # A sequence value: each element moves to the device (on cupy a host element would
        # meet device tensors inside SequenceMap / ConcatFromSequence and fail there).
        return [_as_array(xp, v) for v in value]
    arr = np.asarray(value) if not hasattr(value, "__cuda_array_interface__") else value
    if isinstance(arr, np.ndarray) and arr.dtype == object:
        return arr  # strings stay on the host
    return xp.asarray(arr)


def _bind_initializers(graph: Graph, env: Env, xp: Any) -> None:
    for name, init in graph.initializers.items():
        env[name] = _as_array(xp, init.value)


def _lookup(env: Env, name: str, where: str, role: str) -> Any:
    try:
        return env[name]
    except KeyError:
        raise KernelError(f"{role} '{name}' of '{where}' was never computed; "
                          "it is not a graph input, weight or node output") from None


def _run_nodes(graph: Graph, env: Env, xp: Any, opsets: Mapping[str, int]) -> None:
    for node in graph.nodes:
        inputs = [_lookup(env, t, node.name, "input") if t else None for t in node.inputs]
        outputs = _run_node(node, inputs, env, xp, opsets)
        _store(node, outputs, env)


def _store(node: Node, outputs: tuple, env: Env) -> None:
    wanted = [i for i, t in enumerate(node.outputs) if t]
    if wanted and max(wanted) >= len(outputs):
        raise KernelError(f"node '{node.name}' ({node.op_type}) declares {len(node.outputs)} outputs "
                          f"but its kernel returned {len(outputs)}")
    for i in wanted:
        env[node.outputs[i]] = outputs[i]


def _run_node(node: Node, inputs: list[Any], env: Env, xp: Any, opsets: Mapping[str, int]) -> tuple:
    if node.is_subgraph:
        return tuple(_run_body(node.body, inputs, env, xp, opsets))
    fn = local_function_kernel if FUNCTION_KEY in node.subgraphs else kernel_for(node.op_type, node.domain, opsets)
    attrs = kernel_attrs(node)
    if is_control_flow(node.op_type, node.domain) or node.subgraphs:
        attrs["subgraphs"] = dict(node.subgraphs)
        attrs["run_graph"] = lambda body, values: _run_body(body, values, env, xp, opsets)
    # Trailing omitted optional inputs are dropped so kernel defaults apply.
    while inputs and inputs[-1] is None and node.inputs and not node.inputs[len(inputs) - 1]:
        inputs.pop()
    try:
        return fn(xp, *inputs, **attrs)
    except KernelError:
        raise  # a node inside a body failed; its own message names it
    except GeometryError as exc:  # says what is wrong, not where: name the node
        raise exc.at(node.name, node.op_type) from None
    except LensError:
        raise
    except Exception as exc:  # noqa: BLE001 - every kernel failure becomes a named KernelError
        shapes = [None if v is None else getattr(v, "shape", type(v).__name__) for v in inputs]
        shapes_txt = ", ".join(f"{t or '<omitted>'}: {s}" for t, s in zip(node.inputs, shapes))
        raise KernelError(f"node '{node.name}' ({node.op_type}) failed with inputs [{shapes_txt}]: "
                          f"{type(exc).__name__}: {exc}") from exc


def _run_body(body: Graph, values: list[Any], outer: Env, xp: Any,
              outer_opsets: Mapping[str, int]) -> list[Any]:
    """Run a body in a child scope of ``outer``; returns its outputs in order."""
    if len(values) > len(body.inputs):
        raise KernelError(f"body '{body.name}' takes {len(body.inputs)} inputs, got {len(values)}")
    scope: Env = outer.new_child() if isinstance(outer, ChainMap) else ChainMap({}, outer)
    _bind_initializers(body, scope, xp)
    for name, value in zip(body.inputs, values):
        scope[name] = value
    _run_nodes(body, scope, xp, _opsets(body, None, outer_opsets))
    return [_lookup(scope, name, body.name, "body output") for name in body.outputs]
