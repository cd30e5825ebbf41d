"""Exact cycle checks for contracting a candidate set, counting earlier subgraphs.

Contracting a set S into one node closes a cycle exactly when some path leaves
S and comes back to S through nodes outside it. Subgraphs formed earlier are
single nodes too: a path may enter one at any member and leave from any member.
MXNet's ``build_subgraph.cc`` ignores those earlier subgraphs (so two subgraphs
can together form a cycle) and bounds its search (so it misses cycles behind
two diamonds of unselected nodes); this checker does neither.

Speed without quadratic work: ids are topological, so along original edges ids
grow. A path back into S can only pass nodes with ids above ``max(S)`` by
jumping backwards inside an earlier subgraph whose id span crosses ``max(S)``.
The spans of earlier subgraphs are kept merged (``_Spans``): the search never
looks at a node beyond the end of the merged span that contains ``max(S)``,
and that bound is exact (see ``find_cycle``).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Sequence


@dataclass
class Witness:
    """A path leaving the candidates and coming back, and the candidates on such paths."""

    path: list[int]
    offenders: list[int]


class _Spans:
    """Disjoint merged intervals [start, end] of subgraph id spans, sorted."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []

    def add(self, lo: int, hi: int) -> None:
        i = bisect.bisect_right(self.ends, lo - 1)  # first interval that ends at or after lo
        j = i
        while j < len(self.starts) and self.starts[j] <= hi:
            lo, hi = min(lo, self.starts[j]), max(hi, self.ends[j])
            j += 1
        self.starts[i:j] = [lo]
        self.ends[i:j] = [hi]

    def bound(self, x: int) -> int:
        """End of the merged interval containing ``x``, else ``x``."""
        i = bisect.bisect_right(self.starts, x) - 1
        if i >= 0 and self.ends[i] >= x:
            return self.ends[i]
        return x


class CycleChecker:
    """Holds the subgraphs formed so far and checks new candidate sets against them."""

    def __init__(self, succs: Sequence[Sequence[int]]) -> None:
        self.succs = succs
        self.group: dict[int, int] = {}          # node id -> index of its earlier subgraph
        self.members: list[list[int]] = []
        self.spans = _Spans()

    def add(self, members: Sequence[int]) -> None:
        index = len(self.members)
        self.members.append(list(members))
        for i in members:
            self.group[i] = index
        self.spans.add(min(members), max(members))

    def find_cycle(self, candidates: Sequence[int]) -> Witness | None:
        """A witness that contracting ``candidates`` closes a cycle, or None.

        Breadth-first from the candidates' outside consumers, never past
        ``bound``: any node with a larger id cannot lead back (ids grow along
        edges, and no earlier subgraph reaching past ``bound`` has a member at
        or below it, by the merging of spans), so the search is exact.
        """
        cand = set(candidates)
        bound = self.spans.bound(max(candidates))
        parent: dict[int, int] = {}
        origin: dict[int, int] = {}  # visited node -> the candidate its path left from
        frontier: list[int] = []
        for c in sorted(cand):
            for o in self.succs[c]:
                if o not in cand and o not in parent and o <= bound:
                    parent[o] = c
                    origin[o] = c
                    frontier.append(o)
        first_hit: tuple[int, int] | None = None
        offenders: set[int] = set()
        entered: set[int] = set()
        while frontier:
            nxt: list[int] = []
            for w in frontier:
                for src in self._exits(w, parent, origin, entered):
                    src_origin = origin[src]
                    for o in self.succs[src]:
                        if o in parent or o > bound:
                            continue
                        if o in cand:
                            offenders.add(o)
                            offenders.add(src_origin)
                            if first_hit is None:
                                first_hit = (o, src)
                            continue
                        parent[o] = src
                        origin[o] = src_origin
                        nxt.append(o)
            frontier = nxt
        if first_hit is None:
            return None
        target, src = first_hit
        path = [target, src]
        while path[-1] not in cand:
            path.append(parent[path[-1]])
        path.reverse()
        return Witness(path, sorted(offenders))

    def _exits(self, w: int, parent: dict[int, int], origin: dict[int, int], entered: set[int]) -> list[int]:
        """Nodes whose consumers a path at ``w`` can continue from (all members of its subgraph)."""
        g = self.group.get(w)
        if g is None:
            return [w]
        if g in entered:
            return []
        entered.add(g)
        for m in self.members[g]:
            if m != w and m not in parent:
                parent[m] = w  # a jump inside the earlier subgraph, entered at w
                origin[m] = origin[w]
        return self.members[g]
