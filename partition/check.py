"""``check_partition``: the invariants every partition must keep."""

from __future__ import annotations

from .build import adjacency
from .cycles import CycleChecker
from .errors import PartitionCheckError
from .trace import PartitionResult


def check_partition(result: PartitionResult) -> None:
    """Raise ``PartitionCheckError`` naming the violation, else return None.

    Subgraphs disjoint; each weakly connected; contracting all of them keeps
    the graph acyclic; graph inputs and outputs unchanged, in order.
    """
    original, final = result.original, result.graph
    owner: dict[str, int] = {}
    known = set(original.node_by_name)
    for sg in result.subgraphs:
        for name in sg.nodes:
            if name not in known:
                raise PartitionCheckError(f"subgraph {sg.id} holds '{name}', which is not a node of the model")
            if name in owner:
                raise PartitionCheckError(f"node '{name}' is in subgraphs {owner[name]} and {sg.id}")
            owner[name] = sg.id
    order, preds, succs = adjacency(original)
    id_of = {n.name: i for i, n in enumerate(order)}
    checker = CycleChecker(succs)
    for sg in result.subgraphs:
        ids = [id_of[n] for n in sg.nodes]
        _check_connected(sg.id, ids, preds, succs, order)
        if len(ids) > 1:
            witness = checker.find_cycle(ids)
            if witness is not None:
                path = " -> ".join(order[i].name for i in witness.path)
                raise PartitionCheckError(f"contracting subgraph {sg.id} closes the cycle {path}")
        checker.add(ids)
    if tuple(final.inputs) != tuple(original.inputs) or tuple(final.outputs) != tuple(original.outputs):
        raise PartitionCheckError(f"graph inputs/outputs changed: {list(original.inputs)} -> "
                                  f"{list(final.inputs)}, {list(original.outputs)} -> {list(final.outputs)}")


def _check_connected(sid: int, ids: list[int], preds: list[list[int]], succs: list[list[int]],
                     order: list) -> None:
    members = set(ids)
    seen = {ids[0]}
    stack = [ids[0]]
    while stack:
        i = stack.pop()
        for j in (*preds[i], *succs[i]):
            if j in members and j not in seen:
                seen.add(j)
                stack.append(j)
    if len(seen) != len(members):
        lost = sorted(members - seen)[0]
        raise PartitionCheckError(f"subgraph {sid} is not connected: '{order[lost].name}' is cut off "
                                  f"from '{order[ids[0]].name}'")
