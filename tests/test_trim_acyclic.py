"""``Trimmer.acyclic`` (the one-sweep pre-check) against ``CycleChecker.find_cycle`` (the exact search).

Where no earlier subgraph meets the candidates' id window the two must agree;
elsewhere ``acyclic`` may only say "maybe" (False), never a wrong "no cycle".
"""

from __future__ import annotations

import random

from partition.build import adjacency
from partition.cycles import CycleChecker
from partition.trim import Trimmer
from tests.golden_partitions import random_dag


def _connected_set(rng: random.Random, preds, succs, start: int, size: int, taken: set[int]) -> list[int]:
    members, frontier = {start}, [start]
    while frontier and len(members) < size:
        x = frontier.pop(rng.randrange(len(frontier)))
        for y in (*preds[x], *succs[x]):
            if y not in members and y not in taken and rng.random() < 0.7:
                members.add(y)
                frontier.append(y)
    return sorted(members)


def test_acyclic_agrees_with_exact_search():
    agreed = cycles_seen = 0
    for seed in range(60):
        rng = random.Random(seed)
        graph = random_dag(seed, 20 + seed * 2)
        _order, preds, succs = adjacency(graph)
        n = len(preds)
        checker = CycleChecker(succs)
        trimmer = Trimmer(preds, succs, checker)
        taken: set[int] = set()
        for _ in range(rng.randint(0, 3)):  # some earlier subgraphs
            sub = _connected_set(rng, preds, succs, rng.randrange(n), rng.randint(1, 5), taken)
            if len(sub) > 1 and checker.find_cycle(sub) is None:
                checker.add(sub)
                taken.update(sub)
        for _ in range(40):
            start = rng.randrange(n)
            if start in taken:
                continue
            cand = _connected_set(rng, preds, succs, start, rng.randint(2, 12), taken)
            if len(cand) < 2:
                continue
            exact = checker.find_cycle(cand) is None
            quick = trimmer.acyclic(cand)
            assert not quick or exact, (seed, cand)
            lo, hi = min(cand), max(cand)
            if not trimmer._earlier_subgraph_within(lo, hi):
                assert quick == exact, (seed, cand)
                agreed += 1
            cycles_seen += not exact
            assert not any(trimmer.in_s) and not any(trimmer.reach)  # scratch space left clean
    assert agreed > 500 and cycles_seen > 50
