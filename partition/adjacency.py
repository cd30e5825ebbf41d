"""Node ids and integer adjacency of a graph, as every partitioning pass numbers them.

Ids follow an iterative post-order DFS from the graph outputs (inputs visited in
input-index order), then unreached nodes in file order, as MXNet's
``build_subgraph.cc`` numbers them. This order is topological. By id:
``preds[i]`` are the distinct producers of what node i reads (read order) and
``succs[i]`` the distinct consumers (id order); outer-scope reads of bodies count.

Computed once per graph (graphs never change) and cached; callers must not
modify the lists. Speed (100k-node chain, 0.25 s -> ~0.12 s): producer positions
come from one ``dict(zip(...))`` over the output names and one list comprehension
over the read lists; when the DFS order is the file order (exporters usually
write nodes that way) the position lists are the id lists, with no remapping.
"""

from __future__ import annotations

import weakref
from typing import NamedTuple

from .ir import Graph, Node


class Adjacency(NamedTuple):
    order: list[Node]          # id -> node
    preds: list[list[int]]     # id -> producer ids, read order
    succs: list[list[int]]     # id -> consumer ids, ascending
    positions: list[int]       # id -> position in graph.nodes
    identity: bool             # ids are positions (the DFS order is the file order)
    has_bodies: bool           # some node has a body (control flow, function call): reads != inputs


_CACHE: "weakref.WeakKeyDictionary[Graph, Adjacency]" = weakref.WeakKeyDictionary()


def graph_adjacency(graph: Graph) -> Adjacency:
    """The cached ``Adjacency`` of ``graph``."""
    cached = _CACHE.get(graph)
    if cached is not None:
        return cached
    has_bodies = any(n.subgraphs for n in graph.nodes)
    pred_pos, where = _pred_positions(graph, has_bodies)
    positions = _seed_positions(graph, pred_pos, where)
    nodes = graph.nodes
    identity = _is_identity(positions)
    if identity:
        order, preds = list(nodes), pred_pos
    else:
        rank = [0] * len(positions)
        for node_id, pos in enumerate(positions):
            rank[pos] = node_id
        order = [nodes[p] for p in positions]
        preds = [[rank[p] for p in pred_pos[pos]] for pos in positions]
    result = Adjacency(order, preds, _successors(preds), positions, identity, has_bodies)
    _CACHE[graph] = result
    return result


def adjacency(graph: Graph) -> tuple[list[Node], list[list[int]], list[list[int]]]:
    """Nodes in seed order, and by id: producer ids (read order) and consumer ids (id order)."""
    adj = graph_adjacency(graph)
    return adj.order, adj.preds, adj.succs


def seed_order(graph: Graph) -> list[Node]:
    """Iterative post-order DFS from the outputs, then unreached nodes in file order."""
    return graph_adjacency(graph).order


def _is_identity(positions: list[int]) -> bool:
    return positions == list(range(len(positions)))


def _pred_positions(graph: Graph, has_bodies: bool) -> tuple[list[list[int]], dict[str, int]]:
    """Per node position: positions of the distinct producers of what it reads, in read order;
    and tensor -> position of its producer."""
    nodes = graph.nodes
    # The IR may keep its constructor's tensor -> writer position map (``Graph._writer_pos``,
    # filled when the file order stood); read it only if it is there, never make it here.
    where: dict[str, int] | None = graph.__dict__.get("_writer_pos")
    if where is None:
        outs = [n.outputs for n in nodes]
        if all(len(o) == 1 for o in outs):  # the common case: one tensor per node
            where = dict(zip([o[0] for o in outs], range(len(nodes))))
        else:
            where = {t: i for i, o in enumerate(outs) for t in o}
        where.pop("", None)  # omitted optional outputs are no tensor
    get = where.get
    # A node without bodies reads its inputs ("" and repeats drop out below: "" has no
    # producer, a repeated producer is listed once), so ``graph._reads`` is built only
    # for graphs with control flow or function calls.
    if has_bodies:
        reads = graph._reads
        read_lists = [reads[n.name] for n in nodes]
    else:
        read_lists = [n.inputs for n in nodes]
    result: list[list[int]] = []
    append = result.append
    for ts in read_lists:  # one and two reads written out: nearly every node of a model
        n = len(ts)
        if n == 1:
            p = get(ts[0])
            append([] if p is None else [p])
        elif n == 2:
            p, q = get(ts[0]), get(ts[1])
            if p is None:
                append([] if q is None else [q])
            else:
                append([p] if q is None or q == p else [p, q])
        else:
            append(_several(ts, get))
    return result, where


def _several(ts: tuple[str, ...], get) -> list[int]:
    preds = [p for t in ts if (p := get(t)) is not None]
    if len(preds) > 1 and (preds[0] == preds[1] if len(preds) == 2 else len(set(preds)) < len(preds)):
        preds = list(dict.fromkeys(preds))  # two tensors of one producer
    return preds


def _seed_positions(graph: Graph, preds: list[list[int]], where: dict[str, int]) -> list[int]:
    visited = bytearray(len(graph.nodes))
    order: list[int] = []
    for out in graph.outputs:
        start = where.get(out, -1)
        if start < 0 or visited[start]:
            continue
        visited[start] = 1
        stack = [(start, iter(preds[start]))]  # the DFS path: (node, its inputs not yet looked at)
        while stack:
            top, inputs = stack[-1]
            for child in inputs:  # resumes where this node's last visit stopped
                if not visited[child]:
                    visited[child] = 1
                    stack.append((child, iter(preds[child])))
                    break
            else:  # every input done: post-order
                stack.pop()
                order.append(top)
    if len(order) < len(visited):
        order.extend(i for i in range(len(graph.nodes)) if not visited[i])
    return order


def _successors(preds: list[list[int]]) -> list[list[int]]:
    succs: list[list[int]] = [[] for _ in preds]
    for i, ps in enumerate(preds):  # i ascends, so each list comes out sorted by id
        for p in ps:
            succs[p].append(i)
    return succs
