"""What the graph drawing leaves out and adds: Constant nodes (and Identity nodes of a weight)
folded into their consumers (exported models carry hundreds of them: PP-OCRv4 rec 420 of 860
nodes), and the tensor shapes written on
edges, as Netron does both. Plain functions of the IR; ``app/layout.py`` uses them."""

from __future__ import annotations

from partition.ir import Graph


def foldable_constants(graph: Graph) -> dict[str, str]:
    """Constant node -> its first consumer: every constant (``Graph.is_constant``: a Constant or
    an Identity of a weight) whose outputs only feed other nodes (one that is a graph output stays drawn)."""
    outputs = set(graph.outputs)
    folded: dict[str, str] = {}
    for node in graph.nodes:
        if not graph.is_constant(node):
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
