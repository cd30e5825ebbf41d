"""MXNet's exclusion loop, incrementally, for selectors whose answers depend on the node alone.

The loop of ``partition/build.py`` grows the candidate set S from a seed, and
while contracting S would close a cycle it excludes the highest re-entry point
v, resets the selector and grows again. When the selector accepts a node by
looking at that node only (the built-in ``ContainOpSelector``), growing again
without v gives exactly the connected component of the seed in S - {v}: the
nodes it could reach before, less v and whatever hung on v. This module keeps
S and its cycle facts up to date under such removals instead of growing and
searching again, and gives the same sequence of exclusions.

Facts, by node id (ids are topological: along an edge they grow):

- ``in_s[i]``: i is a candidate.
- ``reach[i]``: i is outside S and some path from S through outside nodes gets to i.
  For i in the window [seed, top]: some producer of i is in S or reached.
- i in S is a *re-entry* (a hit) when some producer of i is reached. Contracting S
  closes a cycle exactly when there is a hit (``CycleChecker``'s definition).

Both are computed by one sweep over the window in id order, since a node's facts
depend on its producers only. Removing nodes X from S changes nothing below
``min(X)``, so after an exclusion only [min(X), top] is swept again.

Scope, where the plain sweep is exact: the seed is the lowest candidate (every
free accepted node with a lower id was a seed before and is now in a subgraph),
so nothing below the seed is reached; and no subgraph formed earlier has a
member in the window, so no path jumps backwards through one. When an earlier
subgraph does reach into the window, ``trim`` returns None and the caller runs
the general loop.

The witness path of each cycle is a path leaving S and coming back into the
excluded node; it is found by walking producers back from it (first reached
producer in read order, stopping at the first candidate), so it may differ from
the one the breadth-first search of ``CycleChecker`` reports. The exclusions,
and so the partition, are the same.
"""

from __future__ import annotations

import bisect
import itertools
from typing import Sequence

from .cycles import CycleChecker


class Trimmer:
    """Per-pass scratch space (flags by node id, zero between seeds)."""

    def __init__(self, preds: Sequence[Sequence[int]], succs: Sequence[Sequence[int]],
                 checker: CycleChecker) -> None:
        self.preds = preds
        self.succs = succs
        self.checker = checker
        self.in_s = bytearray(len(preds))
        self.reach = bytearray(len(preds))

    def trim(self, seed: int, members: list[int], exits: list[int] | None = None
             ) -> tuple[list[int], list[list[int]], list[int]] | None:
        """(final members ascending, witness paths, excluded nodes) -- the exclusions in order --
        or None when out of scope. ``exits``: the caller has set ``in_s`` for the members
        already and gives the members' consumers outside them (the flags are cleared on
        return either way); the first reach then spreads from those only, instead of a
        sweep over every id of the window.

        The exclusions themselves are ``_exclude``.
        """
        top = max(members)
        in_s, reach = self.in_s, self.reach
        if seed != min(members) or self._earlier_subgraph_within(seed, top):
            if exits is not None:
                for i in members:
                    in_s[i] = 0
            return None
        end = top + 1
        hits: list[int] = []
        paths: list[list[int]] = []
        victims: list[int] = []
        try:
            if exits is None:
                for i in members:
                    in_s[i] = 1
                self._sweep(seed, top, hits)
            else:
                self._spread(exits, top, hits)
            top = self._exclude(seed, top, hits, paths, victims)
            final = list(itertools.compress(range(seed, top + 1), in_s[seed:top + 1]))
        finally:
            in_s[seed:end] = bytes(end - seed)
            reach[seed:end] = bytes(end - seed)
        return final, paths, victims

    def _exclude(self, seed: int, top: int, hits: list[int], paths: list[list[int]], victims: list[int]) -> int:
        """Exclude the highest hit until none is left, recording (path, victim); the new top.

        One loop on purpose: ~130k exclusions at 100k nodes, each a witness walk, a
        cut-off test and a re-sweep of a few ids; written inline with local names they
        cost half what they did as method calls.
        """
        in_s, reach, preds, succs = self.in_s, self.reach, self.preds, self.succs
        while hits:
            victim = hits[-1]
            # The witness: from the hit back through reached producers to a candidate
            # (the hit's own candidate producers do not count: that edge is inside S).
            back = -1
            for p in preds[victim]:
                if reach[p]:
                    back = p
                    break
            path = [victim, back]
            while not in_s[back]:
                cur, back = back, -1
                for p in preds[cur]:  # a candidate ends the walk; else the first reached producer
                    if in_s[p]:
                        back = p
                        break
                    if back < 0 and reach[p]:
                        back = p
                path.append(back)
            path.reverse()
            paths.append(path)
            victims.append(victim)
            in_s[victim] = 0
            low = victim
            starts = []
            for u in preds[victim]:
                if in_s[u]:
                    starts.append(u)
            for u in succs[victim]:  # ids above the victim: never also a producer
                if in_s[u]:
                    starts.append(u)
            if len(starts) > 1:
                if len(starts) == 2:
                    cut = self._cut_off_two(seed, top, starts[0], starts[1])
                else:
                    cut = self._cut_off(seed, starts)
                for i in cut:
                    in_s[i] = 0
                    if i < low:
                        low = i
            while not in_s[top]:
                top -= 1
            if low == victim:
                hits.pop()  # the victim was the highest hit; those below it stand
            else:
                del hits[bisect.bisect_left(hits, low):]
            for i in range(low, top + 1):  # ``_sweep(low, top, hits)``, inline
                if in_s[i]:
                    reach[i] = 0
                    for p in preds[i]:
                        if reach[p]:
                            hits.append(i)
                            break
                else:
                    r = 0
                    for p in preds[i]:
                        if in_s[p] or reach[p]:
                            r = 1
                            break
                    reach[i] = r
        return top

    def acyclic(self, members: list[int]) -> bool:
        """True when contracting ``members`` provably closes no cycle (one sweep over their id
        window); False means "maybe": the caller asks ``CycleChecker`` for the witness.

        Exact in scope (no earlier subgraph's span meets the window, so no path jumps
        backwards), where a path leaving the members and coming back stays inside the
        window since ids grow along edges.
        """
        low, top = min(members), max(members)
        if self._earlier_subgraph_within(low, top):
            return False
        in_s, reach = self.in_s, self.reach
        for i in members:
            in_s[i] = 1
        hits: list[int] = []
        try:
            self._sweep(low, top, hits)
        finally:
            end = top + 1
            in_s[low:end] = bytes(end - low)
            reach[low:end] = bytes(end - low)
        return not hits

    def _earlier_subgraph_within(self, lo: int, hi: int) -> bool:
        spans = self.checker.spans
        k = bisect.bisect_left(spans.ends, lo)  # first merged span ending at or after lo
        return k < len(spans.starts) and spans.starts[k] <= hi

    def _spread(self, exits: list[int], top: int, hits: list[int]) -> None:
        """``_sweep(seed, top, hits)`` for flags still zero outside S: reach spreads from the
        consumers of S outside it through nodes outside S (never past ``top``: nothing
        there leads back); a candidate it comes into is a hit. Sorted, as a sweep finds them."""
        in_s, reach, succs = self.in_s, self.reach, self.succs
        stack = [x for x in exits if x <= top]
        found: set[int] = set()
        while stack:
            x = stack.pop()
            if reach[x]:
                continue
            reach[x] = 1
            for y in succs[x]:
                if y <= top:
                    if in_s[y]:
                        found.add(y)
                    elif not reach[y]:
                        stack.append(y)
        hits.extend(sorted(found))

    def _sweep(self, lo: int, hi: int, hits: list[int]) -> None:
        """Recompute ``reach`` and the hits for ids lo..hi (everything below is up to date)."""
        in_s, reach, preds = self.in_s, self.reach, self.preds
        for i in range(lo, hi + 1):
            if in_s[i]:
                reach[i] = 0
                for p in preds[i]:
                    if reach[p]:
                        hits.append(i)
                        break
            else:
                r = 0
                for p in preds[i]:
                    if in_s[p] or reach[p]:
                        r = 1
                        break
                reach[i] = r

    def _cut_off(self, seed: int, starts: list[int]) -> list[int]:
        """Candidates no longer connected to the seed once a victim with the (3 or more)
        remaining neighbours ``starts`` is out of S.

        One breadth-first search per neighbour, taking turns; searches that meet are
        merged. It stops when every search but the seed's has met another or run out:
        those that ran out are cut off. The work is bounded by the smaller sides
        (usually a few nodes above the victim).
        """
        preds, succs, in_s = self.preds, self.succs, self.in_s
        n = len(starts)
        owner = {u: k for k, u in enumerate(starts)}
        parent = list(range(n))
        queues = [[u] for u in starts]
        heads = [0] * n

        def root(k: int) -> int:
            while parent[k] != k:
                k = parent[k]
            return k

        while True:
            roots = [root(k) for k in range(n)]
            first = roots[0]
            if all(r == first for r in roots):
                return []
            running = {roots[k] for k in range(n) if heads[k] < len(queues[k])}
            k_seed = owner.get(seed)
            seed_root = roots[k_seed] if k_seed is not None else None
            if seed_root is not None and running <= {seed_root}:
                break
            if seed_root is None and len(running) <= 1:
                seed_root = next(iter(running))  # the one search still running holds the seed
                break
            for k in range(n):
                q = queues[k]
                if heads[k] >= len(q):
                    continue
                x = q[heads[k]]
                heads[k] += 1
                for y in (*preds[x], *succs[x]):
                    if not in_s[y]:
                        continue
                    j = owner.get(y)
                    if j is None:
                        owner[y] = k
                        q.append(y)
                    else:
                        a, b = root(j), root(k)
                        if a != b:
                            parent[max(a, b)] = min(a, b)
        return [x for x, k in owner.items() if root(k) != seed_root]

    def _cut_off_two(self, seed: int, top: int, a: int, b: int) -> list[int]:
        """``_cut_off`` for a victim with two remaining neighbours: two searches taking turns.

        Written out per side and per edge direction: this is the innermost loop
        of the exclusions (~65k calls at 100k nodes). When the seed's side runs out
        first, everything else in S (ids up to ``top``) is cut off."""
        preds, succs, in_s = self.preds, self.succs, self.in_s
        side = {a: 1, b: 2}  # which search found a node
        queue_a, queue_b = [a], [b]
        head_a = head_b = 0
        get = side.get
        while True:
            if head_a == len(queue_a):  # a's side is a whole component without b's
                return self._rest(seed, top, queue_a) if seed in queue_a else queue_a
            x = queue_a[head_a]
            head_a += 1
            for y in preds[x]:
                if in_s[y]:
                    k = get(y)
                    if k is None:
                        side[y] = 1
                        queue_a.append(y)
                    elif k == 2:
                        return []  # the two sides meet: nothing is cut off
            for y in succs[x]:
                if in_s[y]:
                    k = get(y)
                    if k is None:
                        side[y] = 1
                        queue_a.append(y)
                    elif k == 2:
                        return []
            if head_b == len(queue_b):
                return self._rest(seed, top, queue_b) if seed in queue_b else queue_b
            x = queue_b[head_b]
            head_b += 1
            for y in preds[x]:
                if in_s[y]:
                    k = get(y)
                    if k is None:
                        side[y] = 2
                        queue_b.append(y)
                    elif k == 1:
                        return []
            for y in succs[x]:
                if in_s[y]:
                    k = get(y)
                    if k is None:
                        side[y] = 2
                        queue_b.append(y)
                    elif k == 1:
                        return []

    def _rest(self, seed: int, top: int, kept: list[int]) -> list[int]:
        """The candidates (ids seed..top) outside ``kept``."""
        keep = set(kept)
        return [x for x in itertools.compress(range(seed, top + 1), self.in_s[seed:top + 1]) if x not in keep]
