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
    """A path leaving the candidates and coming back into the highest such re-entry,
    and every candidate such a path comes back into (``offenders``, ascending).

    With ids topological, a re-entry always has a higher id than the candidate its
    path left from, so the highest offender is MXNet's "highest id on the loop";
    only paths through earlier subgraphs (which MXNet does not see) can break that.
    """

    path: list[int]
    offenders: list[int]


class _Spans:
    """Disjoint merged intervals [start, end] of subgraph id spans, sorted."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []

    def add(self, lo: int, hi: int) -> None:
        if not self.ends or lo > self.ends[-1]:  # the usual case: beyond every span so far
            self.starts.append(lo)
            self.ends.append(hi)
            return
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
        self._group: dict[int, int] = {}         # node id -> index of its earlier subgraph
        self._grouped = 0                        # subgraphs already in ``_group``
        self.members: list[list[int]] = []
        self.spans = _Spans()

    def add(self, members: Sequence[int]) -> None:
        self.members.append(list(members))
        self.spans.add(min(members), max(members))

    @property
    def group(self) -> dict[int, int]:
        """Node id -> index of its earlier subgraph, brought up to date when a search needs it
        (the incremental exclusion loop never does: a pass with only in-scope seeds skips it)."""
        members, group = self.members, self._group
        for index in range(self._grouped, len(members)):
            group.update(dict.fromkeys(members[index], index))
        self._grouped = len(members)
        return group

    def find_cycle(self, candidates: Sequence[int]) -> Witness | None:
        """A witness that contracting ``candidates`` closes a cycle, or None."""
        return _Search(self, candidates).witness()


class _Search:
    """The cycle state of one candidate set.

    ``parent`` holds the outside nodes a path leaving the candidates can get to
    (breadth-first from their outside consumers, never past ``bound``: a node with
    a larger id cannot lead back, since ids grow along edges and no earlier
    subgraph reaching past ``bound`` has a member at or below it, by the merging
    of spans -- so the search is exact). ``hits`` are the candidates such a path
    comes back into: contracting the set closes a cycle exactly when there is one.
    """

    def __init__(self, checker: CycleChecker, candidates: Sequence[int]) -> None:
        self.checker = checker
        self.group = checker.group
        self.cand = set(candidates)
        self.bound = checker.spans.bound(max(candidates))
        self.parent: dict[int, int] = {}     # reached node -> the node its path came from
        self.entry: dict[int, int] = {}      # hit -> the outside node whose edge enters it
        self.hits: list[int] = []            # in the order found
        self.entered: set[int] = set()       # earlier subgraphs a path has entered
        frontier: list[int] = []
        for c in sorted(self.cand):
            for o in checker.succs[c]:
                self._step(c, o, frontier)
        self._spread(frontier)

    def _step(self, src: int, o: int, frontier: list[int]) -> None:
        if o > self.bound or o in self.parent:
            return
        if o in self.cand:
            if src not in self.cand and o not in self.entry:
                self.entry[o] = src
                self.hits.append(o)
            return
        self.parent[o] = src
        frontier.append(o)

    def _spread(self, frontier: list[int]) -> None:
        succs = self.checker.succs
        while frontier:
            nxt: list[int] = []
            for w in frontier:
                for src in self._exits(w):
                    for o in succs[src]:
                        self._step(src, o, nxt)
            frontier = nxt

    def _exits(self, w: int) -> list[int]:
        """Nodes whose consumers a path at ``w`` continues from (all members of its subgraph)."""
        g = self.group.get(w)
        if g is None:
            return [w]
        if g in self.entered:
            return []
        self.entered.add(g)
        members = self.checker.members[g]
        for m in members:
            if m != w and m not in self.parent:
                self.parent[m] = w  # a jump inside the earlier subgraph, entered at w
        return members

    def path_to(self, hit: int) -> list[int]:
        """A path from a candidate, through outside nodes only, back into candidate ``hit``."""
        path = [hit, self.entry[hit]]
        while path[-1] not in self.cand:
            path.append(self.parent[path[-1]])
        path.reverse()
        return path

    def witness(self) -> Witness | None:
        if not self.hits:
            return None
        return Witness(self.path_to(max(self.hits)), sorted(self.hits))
