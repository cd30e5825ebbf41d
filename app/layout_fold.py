"""What the graph drawing leaves out and adds: Constant nodes (and Identity nodes of a weight)
folded into their consumers (exported models carry hundreds of them: PP-OCRv4 rec 420 of 860
nodes), and the tensor shapes written on
edges, as Netron does both. Plain functions of the IR; ``app/layout.py`` uses them."""

from __future__ import annotations

from partition.ir import Graph


def is_constant_node(graph: Graph, node) -> bool:
    """A Constant, or an Identity of a weight: exporters alias shared weights that way (the
    Hugging Face T5 export draws 180 of them in a row above its 520 real nodes)."""
    if node.domain not in ("", "ai.onnx"):
        return False
    if node.op_type == "Constant":
        return not any(node.inputs)
    return node.op_type == "Identity" and len(node.inputs) == 1 and node.inputs[0] in graph.initializers


def foldable_constants(graph: Graph) -> dict[str, str]:
    """Constant node -> its first consumer: every Constant (or Identity of a weight) whose
    outputs only feed other nodes (one that is a graph output stays drawn)."""
    outputs = set(graph.outputs)
    folded: dict[str, str] = {}
    for node in graph.nodes:
        if not is_constant_node(graph, node):
            continue
        if any(t in outputs for t in node.outputs):
            continue
        consumers = [c for t in node.outputs if t for c in graph.consumers(t)]
        if consumers:
            folded[node.name] = consumers[0].name
    return folded


def shape_text(graph: Graph, tensor: str) -> str | None:
    """``1×3×640×640`` (a symbolic dim by its name, an unknown one as ?), or None when unknown."""
    shape = graph.info(tensor).shape
    if shape is None:
        return None
    return "×".join("?" if d is None else str(d) for d in shape) if shape else "scalar"
