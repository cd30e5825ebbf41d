"""Incompatibility groups (the TensorRT integration design) and the two ways of using them while growing.

For an incompatible node I, its groups are G1 = all ancestors of I and G2 = all
descendants of I. A subgraph holding a node of one group may hold no node of
the other: I would stay between them and contracting would close a cycle.

Growing a subgraph S, a candidate v is *forbidden* when some incompatible I
has a member of S among its ancestors and v among its descendants (group
"descendants": v is refused because it is in I's descendants), or the
reverse (group "ancestors"). Two trackers answer "is v forbidden, and by
which I?" with identical answers:

- ``NaiveTracker`` (teaching mode): the TensorRT integration design's algorithm literally. Both groups
  of every incompatible node are computed up front (``naive_pairs``: O(#I x N)
  time and memory, quadratic), and each joining node adds the opposite group
  of every pair it belongs to to the subgraph's forbidden set.
- ``FastTracker``: no per-node sets. Two monotone worklists propagate, from
  the members of S, "reached" (1) and "reached through an incompatible node"
  (2) forward and backward along the edges. Ids are topological, so the answer
  for v is final once every pending node of the forward worklist has an id
  >= v (backward: <= v); the worklists advance only that far, so each
  subgraph costs the id window its candidates span, not the graph. Memory is
  O(window). The blamed I (for the trace) is found on demand by a bounded
  search, with the same choice as the naive tracker: the lowest id.
"""

from __future__ import annotations

import heapq
from typing import Sequence

from ..errors import LensError
from ..ir import Graph

DESCENDANTS, ANCESTORS = "descendants", "ancestors"


# ------------------------------------------------------------ reachability --
def reach(adj: Sequence[Sequence[int]], start: int) -> set[int]:
    """Nodes reachable from ``start`` along ``adj`` (``start`` itself excluded)."""
    seen: set[int] = set()
    todo = list(adj[start])
    while todo:
        i = todo.pop()
        if i not in seen:
            seen.add(i)
            todo.extend(adj[i])
    return seen


def naive_pairs(preds: Sequence[Sequence[int]], succs: Sequence[Sequence[int]],
                incompatible_ids: Sequence[int]) -> dict[int, tuple[set[int], set[int]]]:
    """The TensorRT integration design's list of pairs of groups: I -> (ancestors of I, descendants of I)."""
    return {i: (reach(preds, i), reach(succs, i)) for i in sorted(incompatible_ids)}


def incompatibility_groups(graph: Graph, node_name: str) -> tuple[list[str], list[str]]:
    """(all ancestors, all descendants) of ``node_name`` in ``graph``, each in graph order."""
    if node_name not in graph.node_by_name:
        close = sorted(n for n in graph.node_by_name if node_name.lower() in n.lower())[:5]
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise LensError(f"no node named '{node_name}' in {graph.name}{hint}")
    node = graph.node_by_name[node_name]
    anc: dict[str, None] = {}
    todo = [node]
    while todo:
        for p in graph.input_nodes(todo.pop()):
            if p.name not in anc:
                anc[p.name] = None
                todo.append(p)
    desc: dict[str, None] = {}
    todo = [node]
    while todo:
        for c in graph.output_nodes(todo.pop()):
            if c.name not in desc:
                desc[c.name] = None
                todo.append(c)
    index = graph.index
    return sorted(anc, key=index.__getitem__), sorted(desc, key=index.__getitem__)


# ---------------------------------------------------------------- trackers --
class NaiveTracker:
    """The seed's incompatible list for one subgraph, from precomputed pairs."""

    def __init__(self, pairs: dict[int, tuple[set[int], set[int]]]) -> None:
        self.pairs = pairs
        self.forbidden: dict[int, tuple[int, str]] = {}   # node -> (lowest blamed I, group)

    def join(self, m: int) -> None:
        forbidden = self.forbidden
        for inc, (anc, desc) in self.pairs.items():   # ascending I
            if m in anc:
                group, blocked = DESCENDANTS, desc
            elif m in desc:
                group, blocked = ANCESTORS, anc
            else:
                continue
            for v in blocked:
                old = forbidden.get(v)
                if old is None or inc < old[0]:
                    forbidden[v] = (inc, group)

    def forbids(self, v: int) -> bool:
        return v in self.forbidden

    def cause(self, v: int) -> tuple[int, str] | None:
        return self.forbidden.get(v)


class FastTracker:
    """Forbidden-set queries by bounded forward/backward propagation (see module doc)."""

    __slots__ = ("preds", "succs", "bad", "down", "up", "fheap", "bheap", "fdone", "bdone", "members", "lo", "hi")

    def __init__(self, preds: Sequence[Sequence[int]], succs: Sequence[Sequence[int]],
                 incompatible: Sequence[bool] | bytearray) -> None:
        self.preds = preds
        self.succs = succs
        self.bad = incompatible
        self.down: dict[int, int] = {}   # 1: reached from a member; 2: through an incompatible node
        self.up: dict[int, int] = {}     # the same, against the edges
        self.fheap: list[int] = []
        self.bheap: list[int] = []       # negated ids: a max-heap
        self.fdone: dict[int, int] = {}
        self.bdone: dict[int, int] = {}
        self.members: list[int] = []
        self.lo = 1 << 62
        self.hi = -1

    def join(self, m: int) -> None:
        self.members.append(m)
        if m < self.lo:
            self.lo = m
        if m > self.hi:
            self.hi = m
        if self.down.get(m, 0) < 1:
            self.down[m] = 1
            heapq.heappush(self.fheap, m)
        elif self.fdone.get(m, 0) == 0:
            heapq.heappush(self.fheap, m)
        if self.up.get(m, 0) < 1:
            self.up[m] = 1
            heapq.heappush(self.bheap, -m)
        elif self.bdone.get(m, 0) == 0:
            heapq.heappush(self.bheap, -m)

    def _forward(self, v: int) -> None:
        heap, down, done, succs, bad = self.fheap, self.down, self.fdone, self.succs, self.bad
        pop, push = heapq.heappop, heapq.heappush
        while heap and heap[0] < v:
            u = pop(heap)
            s = down[u]
            if done.get(u, 0) >= s:
                continue
            done[u] = s
            out = 2 if (s == 2 or bad[u]) else 1
            for w in succs[u]:
                if down.get(w, 0) < out:
                    down[w] = out
                    push(heap, w)

    def _backward(self, v: int) -> None:
        heap, up, done, preds, bad = self.bheap, self.up, self.bdone, self.preds, self.bad
        pop, push = heapq.heappop, heapq.heappush
        while heap and -heap[0] > v:
            u = -pop(heap)
            s = up[u]
            if done.get(u, 0) >= s:
                continue
            done[u] = s
            out = 2 if (s == 2 or bad[u]) else 1
            for w in preds[u]:
                if up.get(w, 0) < out:
                    up[w] = out
                    push(heap, -w)

    def forbids(self, v: int) -> bool:
        if v > self.lo:
            self._forward(v)
            if self.down.get(v, 0) == 2:
                return True
        if v < self.hi:
            self._backward(v)
            if self.up.get(v, 0) == 2:
                return True
        return False

    def cause(self, v: int) -> tuple[int, str] | None:
        """The lowest-id incompatible node forbidding ``v`` and v's group of it; None if none."""
        if not self.forbids(v):
            return None
        best: tuple[int, str] | None = None
        bad = self.bad
        # v in desc(I), a member in anc(I): I is an ancestor of v with id > lo, reached from S.
        if v > self.lo:
            down = self.down
            for i in _bounded(self.preds, v, self.lo, v):
                if bad[i] and down.get(i, 0) >= 1 and (best is None or i < best[0]):
                    best = (i, DESCENDANTS)
        if v < self.hi:
            up = self.up
            for i in _bounded(self.succs, v, v, self.hi):
                if bad[i] and up.get(i, 0) >= 1 and (best is None or i < best[0]):
                    best = (i, ANCESTORS)
        return best


def _bounded(adj: Sequence[Sequence[int]], start: int, lo: int, hi: int) -> set[int]:
    """Nodes reachable from ``start`` along ``adj`` through ids strictly between ``lo`` and ``hi``
    (ids are topological, so along preds every id is below ``start``, along succs above)."""
    seen: set[int] = set()
    todo = [start]
    for i in todo:  # a list iterator sees what is appended while it runs
        for x in adj[i]:
            if lo < x < hi and x not in seen:
                seen.add(x)
                todo.append(x)
    return seen
