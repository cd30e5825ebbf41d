"""Each ``If`` replaced by the branch it took: the local check's view into control flow.

``compare``'s local check (``engine/isolate.py``) runs each node out of tolerance alone on
onnxruntime's own values of its inputs. onnxruntime exposes only the top-level graph's tensors,
so an ``If`` could only be judged as one node, and a node is never run alone with a body: a
float16 silero-VAD, whose STFT, LSTM and decoder all sit in one top-level ``If``, read "differ"
with nothing checked. For one run the condition has one value, and the ``If`` computes exactly
its taken branch; hoisting that branch's nodes into the graph gives the same values with every
body tensor exposed to both runtimes.

``flatten_taken_branches(graph, values)``: a Graph -> Graph pass. ``values`` are the condition
tensors' values (onnxruntime's, in the comparison). A branch's nodes are renamed
``<If name>/<node name>`` (node names are identity here and a body's may repeat the graph's);
its tensors keep their names (ONNX forbids a body to redefine a name of its enclosing scope, and
references to that scope stay as they are); its outputs reach the ``If``'s outputs through
``Identity`` nodes. An ``If`` whose condition is unknown, or whose branch redefines a name the
graph already has (a file that breaks that rule), stays as it is. ``Loop`` and ``Scan`` run a body
many times with values that change per iteration: they are not flattened.

Nested ``If``s come up as ordinary nodes of the flattened graph; their conditions are then
top-level tensors, and a second pass flattens them (``compare.diagnose`` repeats it).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from partition.ir import Graph, Node


def flatten_taken_branches(graph: Graph, values: Mapping[str, Any]) -> tuple[Graph, list[str]]:
    """``graph`` with every top-level ``If`` whose condition is in ``values`` replaced by its taken
    branch, and the names of the ``If`` nodes replaced (empty: ``graph`` itself, unchanged)."""
    names = {t for n in graph.nodes for t in n.outputs if t} | set(graph.inputs) | set(graph.initializers)
    node_names = {n.name for n in graph.nodes}
    nodes: list[Node] = []
    initializers = dict(graph.initializers)
    tensors = dict(graph.tensors)
    flattened: list[str] = []
    for node in graph.nodes:
        branch = _taken_branch(node, values, graph)
        hoisted = None if branch is None else _hoisted(node, branch, names, node_names)
        if hoisted is None:
            nodes.append(node)
            continue
        nodes += hoisted
        names |= {t for n in hoisted for t in n.outputs if t} | set(branch.initializers)
        node_names |= {n.name for n in hoisted}
        initializers.update(branch.initializers)
        tensors.update({t: info for t, info in branch.tensors.items() if t not in tensors})
        flattened.append(node.name)
    if not flattened:
        return graph, []
    return graph.replace(nodes=nodes, initializers=initializers, tensors=tensors), flattened


def _taken_branch(node: Node, values: Mapping[str, Any], graph: Graph) -> Graph | None:
    """The branch an ``If`` takes on ``values`` (or the graph's weights); None for any other node
    or an unknown condition."""
    if node.op_type != "If" or node.domain not in ("", "ai.onnx") or not node.inputs:
        return None
    cond = values.get(node.inputs[0])
    if cond is None and node.inputs[0] in graph.initializers:
        cond = graph.initializers[node.inputs[0]].value
    if cond is None:
        return None
    flat = np.asarray(cond).reshape(-1)
    if flat.size != 1:   # the operator's own rule: one element (onnxruntime refused it already)
        return None
    return node.subgraphs.get("then_branch" if bool(flat[0]) else "else_branch")


def _hoisted(node: Node, branch: Graph, names: set[str], node_names: set[str]) -> list[Node] | None:
    """The branch's nodes under the ``If``'s name, then one ``Identity`` per ``If`` output; None
    when the branch redefines a tensor name the graph has, or has a different number of outputs."""
    defined = {t for n in branch.nodes for t in n.outputs if t} | set(branch.initializers)
    if defined & names or len(branch.outputs) != len(node.outputs):
        return None
    hoisted = [Node.trusted(f"{node.name}/{n.name}", n.op_type, n.inputs, n.outputs, n.domain, n.attrs,
                            n.subgraphs) for n in branch.nodes]
    hoisted += [Node.trusted(f"{node.name}/{out}", "Identity", (inner,), (out,), "", {}, {})
                for inner, out in zip(branch.outputs, node.outputs) if out]
    if any(n.name in node_names for n in hoisted):
        return None
    return hoisted
