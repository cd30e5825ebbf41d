"""Helpers of ``rules.py`` for bodies: a function body typed per call, the weights behind a tensor, and
the bodies of a model's local functions for graphs built by hand."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..ir import Graph, Initializer, Node, TensorInfo
from .rules_constants import Scope


def _typed_body(scope: Scope, call: Node, body: Graph) -> Graph:
    """The function body with its inputs and outputs typed as the call's tensors (when known),
    and inputs the call feeds from weights (initializer or Constant) seen as weights: the
    parser maps a formal input to the caller's tensor-or-weights, so ``is_weights()`` holds inside.

    A body is shared by every call with the same attributes; types are per call,
    so this is a cheap per-call view, not a change to the body.
    """
    tensors = dict(body.tensors)
    for formal, actual in (*zip(body.inputs, call.inputs), *zip(body.outputs, call.outputs)):
        if formal and actual and formal not in tensors:
            dtype = scope.dtype(actual)
            if dtype is not None:
                tensors[formal] = TensorInfo(formal, dtype, scope.shape(actual))
    weights = {}
    for formal, actual in zip(body.inputs, call.inputs):
        source = _weights(scope, actual) if formal and actual else None
        if source is not None:
            weights[formal] = Initializer(formal, source.dtype, tuple(source.shape), lambda w=source: w.value)
    if len(tensors) == len(body.tensors) and not weights:
        return body
    view = Graph.trusted(body.name, body.nodes, body.inputs, body.outputs, tensors, body.opset)
    view.initializers = weights  # read lazily: only a value check loads one
    return view


def _weights(scope: Scope, t: str) -> Initializer | None:
    """The weights behind ``t`` (an initializer, or a Constant's value), None for a computed tensor."""
    owner = scope.owner(t)
    if owner is None:
        return None
    init = owner.graph.initializers.get(t)
    if init is not None:
        return init
    node = owner.graph.producer(t)
    if node is not None and node.op_type == "Constant" and not node.domain:
        value = scope.weights_value(t)
        if value is not None and value is not False:
            return Initializer.from_array(t, np.asarray(value))
    return None


def incompatible(rules: Any, graph: Graph, names: Sequence[str]) -> dict[str, str]:
    """Reasons for the given node names only (a convenience for tests and reports)."""
    reasons = rules.compat(graph)
    return {n: reasons[n] for n in names if n in reasons}


def local_functions_of(model: Any) -> dict[str, Graph]:
    """Bodies of a ``ModelProto``'s local functions by name, for ``TRTRules(local_functions=...)`` on graphs
    built by hand; the importer already puts each call's body on the node (``subgraphs["function"]``)."""
    import onnx
    from onnx import helper

    from ..onnx_io import load_model
    out: dict[str, Graph] = {}
    for f in model.functions:
        g = helper.make_graph(list(f.node), f.name, [onnx.ValueInfoProto(name=i) for i in f.input],
                              [onnx.ValueInfoProto(name=o) for o in f.output])
        m = helper.make_model(g, opset_imports=list(model.opset_import) or [helper.make_opsetid("", 17)])
        m.ir_version = min(model.ir_version or 8, 8)
        body = load_model(m.SerializeToString())
        out[f.name] = body.replace(is_body=True)
    return out
