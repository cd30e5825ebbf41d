"""Which nodes must stay FP32: delta debugging over subgraphs, then over their nodes.

``search(runner, feeds, tolerance, groups, max_runs)``:

1. runs the FP32 reference (no node reduced) and the fully reduced model; if the latter
   is within tolerance of the former, the answer is "no pins needed";
2. with more than one group (the backend's subgraphs), finds a 1-minimal set of groups
   whose nodes, all pinned to FP32, bring the outputs back within tolerance (ddmin,
   Zeller & Hildebrandt 2002, with "pins pass" as the property: the full set passes, the
   empty set fails);
3. inside those guilty groups, finds a 1-minimal set of nodes the same way, the other
   groups staying reduced;
4. re-runs with exactly the pins found (the verification), and once per pin with only
   that node reduced (the error each one causes alone).

Deterministic: groups and nodes keep graph order, chunks are contiguous, the first
passing chunk wins. Every configuration is run at most once (a cache by pin set).
``max_runs`` caps the ddmin runs of steps 2-3: when it is reached the search stops with
the passing set it holds (not necessarily minimal) and says so (``capped``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .precision import PrecisionError, PrecisionRunner
from .tolerance import Tolerance, compare_arrays

#: Pins checked one by one for "the error it causes alone" (each costs a run).
MAX_ALONE = 64


@dataclass(frozen=True)
class Group:
    """A named set of candidate nodes bisected as one unit first (a backend's subgraph)."""

    name: str
    nodes: tuple[str, ...]


@dataclass
class Verdict:
    """One configuration's outputs against the FP32 reference."""

    match: bool
    max_abs: float | None          # None: an output is NaN/inf where the reference is finite
    mismatched: int
    worst_output: str
    weak: tuple[str, ...] = ()     # outputs whose reference is mostly at or below atol

    def to_json(self) -> dict[str, Any]:
        return {"match": self.match, "max_abs": self.max_abs, "mismatched": self.mismatched,
                "worst_output": self.worst_output, "weak": list(self.weak)}


@dataclass
class SearchResult:
    target: str
    tolerance: Tolerance
    pins: list[str]
    no_pins_needed: bool
    capped: bool
    search_runs: int
    runs: int
    max_runs: int
    seconds: float
    baseline: Verdict                       # everything reduced
    verified: Verdict | None                # exactly the pins
    groups: list[dict[str, Any]]
    alone: dict[str, dict[str, Any]]
    history: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "tolerance": self.tolerance.to_json(), "pins": list(self.pins),
                "no_pins_needed": self.no_pins_needed, "capped": self.capped,
                "search_runs": self.search_runs, "runs": self.runs, "max_runs": self.max_runs,
                "seconds": round(self.seconds, 4), "baseline": self.baseline.to_json(),
                "verified": None if self.verified is None else self.verified.to_json(),
                "groups": self.groups, "alone": self.alone, "history": self.history}


class _Capped(Exception):
    """The run budget is spent; the search keeps the passing set it holds."""


def judge(ours: Mapping[str, np.ndarray], ref: Mapping[str, np.ndarray], tol: Tolerance) -> Verdict:
    """All outputs within ``tol`` of the reference? Also the worst output's max abs error."""
    match, worst, worst_name, mismatched, weak = True, 0.0, "", 0, []
    for name, r in ref.items():
        c = compare_arrays(ours[name], r, tol)
        match = match and c["match"]
        if c.get("weak"):
            weak.append(name)
        mismatched += c["mismatched"] or 0
        err = c["max_abs"] if c["max_abs"] is not None else float("inf")
        if err > worst or not worst_name:
            worst, worst_name = err, name
    return Verdict(match, worst if np.isfinite(worst) else None, mismatched, worst_name, tuple(weak))


def ddmin(items: Sequence[str], passes: Callable[[tuple[str, ...]], bool]) -> tuple[str, ...]:
    """A 1-minimal subset of ``items`` that ``passes`` (``items`` itself passes, () fails).

    Raises ``_Capped`` (from ``passes``) with the best subset so far in its args."""
    current, n = tuple(items), 2
    while len(current) >= 2:
        size = len(current)
        bounds = [round(i * size / n) for i in range(n + 1)]
        chunks = [current[bounds[i]:bounds[i + 1]] for i in range(n) if bounds[i] < bounds[i + 1]]
        reduced = False
        for chunk in chunks:
            if _try(passes, chunk, current):
                current, n, reduced = chunk, 2, True
                break
        if not reduced and len(chunks) > 2:
            for chunk in chunks:
                rest = tuple(x for x in current if x not in set(chunk))
                if _try(passes, rest, current):
                    current, n, reduced = rest, max(n - 1, 2), True
                    break
        if not reduced:
            if n >= size:
                break
            n = min(size, 2 * n)
    return current


def _try(passes: Callable[[tuple[str, ...]], bool], subset: tuple[str, ...],
         current: tuple[str, ...]) -> bool:
    try:
        return passes(subset)
    except _Capped:
        raise _Capped(current) from None


class _Search:
    def __init__(self, runner: PrecisionRunner, feeds: Mapping[str, Any], tol: Tolerance,
                 max_runs: int, progress: Callable[[dict[str, Any]], None] | None) -> None:
        self.runner, self.feeds, self.tol, self.max_runs = runner, feeds, tol, max_runs
        self.progress = progress or (lambda event: None)
        self.runs = 0
        self.search_runs = 0
        self.history: list[dict[str, Any]] = []
        self._cache: dict[frozenset[str], bool] = {}
        self.candidates: list[str] = []
        self.reference: dict[str, np.ndarray] = {}

    def outputs(self, reduced: Sequence[str]) -> dict[str, np.ndarray]:
        self.runs += 1
        return self.runner.run(self.feeds, reduced)[0]

    def verdict(self, pins: Sequence[str], stage: str) -> Verdict:
        pinned = set(pins)
        v = judge(self.outputs([n for n in self.candidates if n not in pinned]), self.reference, self.tol)
        event = {"run": self.runs, "stage": stage, "pins": len(pinned), "match": v.match,
                 "max_abs": v.max_abs, "candidate": sorted(pinned, key=self._order.get)[:200]}
        self.history.append({k: event[k] for k in ("run", "stage", "pins", "match", "max_abs")})
        self.progress(event)
        return v

    def passes(self, pins: frozenset[str], stage: str) -> bool:
        hit = self._cache.get(pins)
        if hit is not None:
            return hit
        if self.search_runs >= self.max_runs:
            raise _Capped()
        self.search_runs += 1
        ok = self.verdict(pins, stage).match
        self._cache[pins] = ok
        return ok

    def start(self, candidates: list[str]) -> Verdict:
        self.candidates = candidates
        self._order = {n: i for i, n in enumerate(candidates)}
        self.reference = self.outputs([])
        self.progress({"run": self.runs, "stage": "reference", "pins": len(candidates), "match": True,
                       "max_abs": 0.0, "candidate": []})
        base = self.verdict([], "all reduced")
        self._cache[frozenset()] = base.match
        self._cache[frozenset(candidates)] = True    # the reference itself
        return base


def search(runner: PrecisionRunner, feeds: Mapping[str, Any], tolerance: Tolerance,
           groups: Sequence[Group], max_runs: int = 200,
           progress: Callable[[dict[str, Any]], None] | None = None,
           suspects: Sequence[str] = ()) -> SearchResult:
    """The pins (node names, graph order) that bring the reduced run within ``tolerance``.

    ``suspects``: nodes the analysis saw in trouble. If pinning just those passes (one run),
    ddmin starts from them instead of from every candidate, whose contiguous halves seldom
    pass when the culprits sit far apart (the FP16 trouble transformers of 1-4 layers: 40-53
    search runs instead of 54-62, the same 6 pins); a wrong lead costs that one run."""
    if max_runs < 1:
        raise PrecisionError(f"--max-runs {max_runs}: needs at least 1")
    t0 = time.perf_counter()
    groups = [g for g in groups if g.nodes]
    candidates = [n for g in groups for n in g.nodes]
    s = _Search(runner, feeds, tolerance, max_runs, progress)
    base = s.start(candidates)
    group_rows = [{"name": g.name, "nodes": len(g.nodes), "guilty": False} for g in groups]
    if base.match:
        return SearchResult(runner.target, tolerance, [], True, False, 0, s.runs, max_runs,
                            time.perf_counter() - t0, base, base, group_rows, {}, s.history)
    start = _suspects_that_pass(s, candidates, suspects)
    pins, capped = (start, False) if start else _guilty_groups(s, groups)
    if not capped:
        try:
            pins = ddmin(pins, lambda p: s.passes(frozenset(p), "nodes"))
        except _Capped as cap:
            pins, capped = cap.args[0] if cap.args else pins, True
    held = set(pins)
    for row, g in zip(group_rows, groups):
        row["guilty"] = not held.isdisjoint(g.nodes)
    verified = s.verdict(pins, "verify")
    alone = _alone(s, pins)
    return SearchResult(runner.target, tolerance, list(pins), False, capped, s.search_runs, s.runs,
                        max_runs, time.perf_counter() - t0, base, verified, group_rows, alone, s.history)


def _suspects_that_pass(s: _Search, candidates: Sequence[str],
                        suspects: Sequence[str]) -> tuple[str, ...]:
    """The suspects (graph order) if pinning only them passes, else () -- one run."""
    named = set(suspects)
    start = tuple(n for n in candidates if n in named)
    if not start or len(start) == len(candidates):
        return ()
    try:
        return start if s.passes(frozenset(start), "suspects") else ()
    except _Capped:
        return ()


def _guilty_groups(s: _Search, groups: Sequence[Group]) -> tuple[tuple[str, ...], bool]:
    """ddmin over the groups (when there are several): the nodes of a 1-minimal set of
    groups that pass all pinned, and whether the budget ran out first."""
    by_name = {g.name: g for g in groups}
    guilty: tuple[str, ...] = tuple(by_name)
    capped = False
    if len(groups) > 1:
        def groups_pass(names: tuple[str, ...]) -> bool:
            return s.passes(frozenset(n for name in names for n in by_name[name].nodes), "subgraphs")
        try:
            guilty = ddmin(guilty, groups_pass)
        except _Capped as cap:
            guilty, capped = cap.args[0] if cap.args else guilty, True
    return tuple(n for name in guilty for n in by_name[name].nodes), capped


def _alone(s: _Search, pins: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per pin: the outputs' error with only that node reduced (all else FP32)."""
    alone: dict[str, dict[str, Any]] = {}
    for name in list(pins)[:MAX_ALONE]:
        v = judge(s.outputs([name]), s.reference, s.tol)
        alone[name] = v.to_json()
        s.progress({"run": s.runs, "stage": "alone", "pins": len(pins), "match": v.match,
                    "max_abs": v.max_abs, "candidate": [name]})
    return alone
