"""The ``tensorrt`` backend: seed 004's partitioning as a ``partition_pass``.

Subgraphs are added one by one. From each free compatible seed (in id order)
growth is depth-first over inputs and outputs, inputs first. A node joins
when it is (1) TensorRT compatible, (2) not in another subgraph and (3) not in
the current subgraph's incompatible list; once it joins, the list gains the
opposite group of every incompatible node it is an ancestor or descendant of,
and its neighbours are pushed for a visit.

The groups alone do not make the contraction acyclic once several subgraphs
are contracted (a path may leave S, run through an earlier subgraph, and come
back: MXNet's pass returns such cyclic partitions). So the grown set is then
checked exactly against the subgraphs formed so far (``state.cycles``); on a
cycle the highest-id node on the witness path other than the seed is excluded
and growth restarts, as in ``partition/build.py``. Finally the selector's
``filter`` drops subgraphs with fewer than ``min_size`` compute nodes.

``mode="teaching"`` uses the seed's quadratic groups; ``mode="fast"`` the
bounded propagation of ``groups.FastTracker``. They make identical decisions
(same events, same partition).
"""

from __future__ import annotations

import weakref
from typing import Any, Iterable, Iterator

from ..api import NodeView, SubgraphProperty, SubgraphSelector, register_backend_factory
from ..build import FREE, REJECTED, PassState, adjacency
from ..errors import LensError
from ..ir import Graph
from ..trace import TraceEvent
from .groups import ANCESTORS, FastTracker, NaiveTracker, naive_pairs
from .options import TENSORRT_HINTS, TENSORRT_OPTIONS
from .rules import TRTRules

MODES = ("fast", "teaching")


class _Context:
    """Per-graph facts a pass needs: ids, edges, compatibility."""

    def __init__(self, graph: Graph, rules: TRTRules, order: list, preds: list[list[int]],
                 succs: list[list[int]], mode: str) -> None:
        self.graph = graph
        self.order = order
        self.id_of = {n.name: i for i, n in enumerate(order)}
        self.preds = preds
        self.succs = succs
        self.reasons = rules.compat(graph)                  # name -> reason, incompatible only
        bad = bytearray(len(order))
        for name in self.reasons:
            bad[self.id_of[name]] = 1
        self.bad = bad
        self.compute = [rules.is_compute(n) for n in order]
        self.mode = mode
        self._pairs: dict[int, tuple[set[int], set[int]]] | None = None

    @classmethod
    def from_graph(cls, graph: Graph, rules: TRTRules, mode: str) -> "_Context":
        order, preds, succs = adjacency(graph)
        return cls(graph, rules, order, preds, succs, mode)

    def tracker(self) -> NaiveTracker | FastTracker:
        if self.mode == "teaching":
            if self._pairs is None:
                self._pairs = naive_pairs(self.preds, self.succs, [i for i, b in enumerate(self.bad) if b])
            return NaiveTracker(self._pairs)
        return FastTracker(self.preds, self.succs, self.bad)


class TensorRTSelector(SubgraphSelector):
    """The seed's selector: compatible nodes not in the subgraph's incompatible list.

    Stateful as the API wants: ``select_input``/``select_output`` returning True
    means the node joins, so the incompatible list is updated right there.
    Usable with the generic pass too (then growth is breadth-first).
    """

    def __init__(self, ctx: _Context, min_size: int) -> None:
        self.ctx = ctx
        self.min_size = min_size
        self.tracker = ctx.tracker()

    def select(self, node: NodeView) -> bool:
        ok = not self.ctx.bad[node.id]
        if ok:
            self.tracker.join(node.id)
        return ok

    def admits(self, i: int) -> bool:
        return not self.ctx.bad[i] and not self.tracker.forbids(i)

    def _take(self, node: NodeView) -> bool:
        if not self.admits(node.id):
            return False
        self.tracker.join(node.id)
        return True

    def select_input(self, node: NodeView, input_node: NodeView) -> bool:
        return self._take(input_node)

    def select_output(self, node: NodeView, output_node: NodeView) -> bool:
        return self._take(output_node)

    def compute_count(self, candidates: Iterable[int]) -> int:
        compute = self.ctx.compute
        return sum(1 for i in candidates if compute[i])

    def filter(self, candidates: list[NodeView]) -> list[NodeView]:
        return candidates if self.compute_count(v.id for v in candidates) >= self.min_size else []

    def reset(self) -> None:
        self.tracker = self.ctx.tracker()


class TensorRTProperty(SubgraphProperty):
    """Seed 004's TensorRT partitioning; see the module docstring."""

    property_name = "tensorrt"

    def __init__(self, min_size: int = 2, exclude_data_dependent: bool = True, mode: str = "fast",
                 fallback_ops: Iterable[str] = (), table: dict[str, Any] | None = None,
                 trt_version: str | None = None, plugins: Iterable[str] = ()) -> None:
        if mode not in MODES:
            raise LensError(f"tensorrt: mode must be one of {', '.join(MODES)}, not {mode!r}")
        if int(min_size) < 1:
            raise LensError(f"tensorrt: --min-size must be at least 1, not {min_size}")
        self.min_size = int(min_size)
        self.mode = mode
        self.rules = TRTRules(table, version=trt_version, exclude_data_dependent=exclude_data_dependent,
                              fallback_ops=fallback_ops, plugins=plugins)
        self._contexts: "weakref.WeakKeyDictionary[Graph, _Context]" = weakref.WeakKeyDictionary()

    # ----------------------------------------------------------- contexts --
    def context(self, graph: Graph, state: PassState | None = None) -> _Context:
        ctx = self._contexts.get(graph)
        if ctx is None:
            if state is not None:
                ctx = _Context(graph, self.rules, state.order, state.preds, state.succs, self.mode)
            else:
                ctx = _Context.from_graph(graph, self.rules, self.mode)
            self._contexts[graph] = ctx
        return ctx

    def create_subgraph_selector(self) -> SubgraphSelector:
        # Only reached through the generic pass, which builds views first: the
        # selector finds its graph from the first view it is shown.
        return _LazySelector(self)

    def explain(self, node: NodeView) -> str | None:
        return self.context(node.graph).reasons.get(node.name)

    def summary_fields(self) -> dict[str, Any]:
        """Which rule table decided (``"tensorrt_rules": "10.1"``), and its warnings (opset, plugins)."""
        notes = self.rules.notes  # bounded: a model may have thousands of plugin nodes
        return {"tensorrt_rules": self.rules.version, "tensorrt_warnings": list(self.rules.warnings),
                "tensorrt_notes": dict(list(notes.items())[:200]), "tensorrt_note_count": len(notes)}

    # --------------------------------------------------------------- pass --
    def partition_pass(self, state: PassState) -> Iterator[TraceEvent]:
        ctx = self.context(state.graph, state)
        bad, status, order, tracing = ctx.bad, state.status, state.order, state.tracing
        total = len(order)
        for seed in range(total):
            if state.progress is not None and seed & 4095 == 0:
                state.progress(seed, total)
            if status[seed] != FREE:
                continue
            if bad[seed]:
                if tracing:
                    yield state.emit("seed", node=order[seed].name, result=False, reason=ctx.reasons[order[seed].name])
                continue
            if tracing:
                yield state.emit("seed", node=order[seed].name, result=True)
            selector = TensorRTSelector(ctx, self.min_size)
            members = yield from self._grow_acyclic(state, ctx, selector, seed)
            yield from self._filter_and_create(state, selector, seed, members)

    def _grow_acyclic(self, state: PassState, ctx: _Context, selector: TensorRTSelector,
                      seed: int) -> Iterator[TraceEvent]:
        excluded: set[int] = set()
        order = state.order
        while True:
            members = yield from self._grow(state, ctx, selector, seed, excluded)
            if len(members) == 1:
                return members
            witness = state.cycles.find_cycle(members)
            if witness is None:
                return members
            others = [i for i in witness.offenders if i != seed]
            victim = max(others) if others else seed
            path = state.names(witness.path)
            name = order[victim].name
            log = getattr(state, "cycle_log", None)
            if log is not None:
                log.append({"property": state.prop_name, "seed": order[seed].name, "path": list(path),
                            "excluded": name})
            state.reasons[name] = (f"excluded from the subgraph grown from {order[seed].name}: it would "
                                   f"close the cycle {' -> '.join(path)}")
            if state.tracing:
                yield state.emit("cycle", node=order[seed].name, path=path, candidates=state.names(members),
                                 reason=f"contracting would close {' -> '.join(path)}",
                                 extra={"excluded": name, "path": list(path)})
                yield state.emit("exclude", node=name, reason="highest id on the cycle's path, seed excepted")
            if victim in excluded or victim == seed:
                return [seed]
            excluded.add(victim)
            selector.reset()
            if state.tracing:
                yield state.emit("reset", node=order[seed].name)

    def _grow(self, state: PassState, ctx: _Context, selector: TensorRTSelector, seed: int,
              excluded: set[int]) -> Iterator[TraceEvent]:
        """Depth-first growth, inputs first; returns members in join order."""
        status, preds, succs, bad, order = state.status, ctx.preds, ctx.succs, ctx.bad, state.order
        tracing = state.tracing
        tracker = selector.tracker
        tracker.join(seed)
        members = [seed]
        in_set = {seed}
        refused: set[int] = set()
        # Stack of (from, neighbour, is_input); pushed reversed so the first input pops first.
        stack: list[tuple[int, int, bool]] = []
        stack.extend((seed, o, False) for o in reversed(succs[seed]))
        stack.extend((seed, p, True) for p in reversed(preds[seed]))
        seed_name = order[seed].name
        while stack:
            cur, nb, is_input = stack.pop()
            if nb in in_set or nb in refused:
                continue
            why = None
            extra: dict[str, Any] = {}
            if bad[nb]:
                why = ctx.reasons[order[nb].name]
                extra = {"incompatible_node": True}
            elif status[nb] != FREE:
                why = ("in a subgraph dropped for --min-size" if status[nb] == REJECTED
                       else "already in another subgraph")
            elif nb in excluded:
                why = "excluded after a cycle"
            elif tracker.forbids(nb):
                refused.add(nb)
                if tracing or order[nb].name not in state.reasons:
                    inc, group = tracker.cause(nb)  # type: ignore[misc]
                    inc_name = order[inc].name
                    holds = "a descendant" if group == ANCESTORS else "an ancestor"
                    why = (f"in the {group} of incompatible node {inc_name}, and the subgraph grown from "
                           f"{seed_name} holds {holds} of it")
                    extra = {"incompatible": inc_name, "group": group}
                    state.reasons.setdefault(order[nb].name, f"refused by the subgraph grown from {seed_name}: "
                                                             f"in the {group} of incompatible node {inc_name}")
                else:
                    why = "in the incompatible list"
            if why is not None:
                refused.add(nb)
                if tracing:
                    yield state.emit("refuse", node=order[cur].name, neighbour=order[nb].name, reason=why,
                                     candidates=state.snapshot(members), extra=extra)
                continue
            tracker.join(nb)
            members.append(nb)
            in_set.add(nb)
            if tracing:
                yield state.emit("select_input" if is_input else "select_output", node=order[cur].name,
                                 neighbour=order[nb].name, result=True, candidates=state.snapshot(members),
                                 queue=state.names([e[1] for e in reversed(stack[-20:])]))
            stack.extend((nb, o, False) for o in reversed(succs[nb]))
            stack.extend((nb, p, True) for p in reversed(preds[nb]))
        return members

    def _filter_and_create(self, state: PassState, selector: TensorRTSelector, seed: int,
                           members: list[int]) -> Iterator[TraceEvent]:
        order = state.order
        views = state.views
        kept = [v.id for v in selector.filter([views[i] for i in members])]
        if state.tracing:
            yield state.emit("filter", node=order[seed].name, candidates=state.names(members),
                             result=state.names(kept),
                             reason="" if kept else f"below --min-size {self.min_size}")
        if not kept:
            k = selector.compute_count(members)
            noun = "node" if k == 1 else "nodes"
            for i in members:
                state.status[i] = REJECTED
                name = order[i].name
                why = f"subgraph of {k} compute {noun} is below --min-size {self.min_size}"
                earlier = state.reasons.get(name, "")
                if earlier.startswith("refused"):  # say why the bigger neighbour did not take it
                    why += f"; earlier {earlier}"
                state.reasons[name] = why
            return
        node, sid = state.add_subgraph(self, kept)
        if state.tracing:
            if node is None:
                yield state.emit("reject", node=order[seed].name, candidates=state.names(kept), subgraph_id=sid,
                                 reason="create_subgraph_node returned None")
            else:
                yield state.emit("subgraph", node=node.name, candidates=state.names(kept), subgraph_id=sid,
                                 result=(list(node.inputs), list(node.outputs)))


class _LazySelector(TensorRTSelector):
    """A TensorRTSelector that builds its context from the first view (generic pass)."""

    def __init__(self, prop: TensorRTProperty) -> None:  # noqa: D107 - no super: context comes later
        self.prop = prop
        self.min_size = prop.min_size
        self.ctx = None  # type: ignore[assignment]

    def _ensure(self, view: NodeView) -> None:
        if self.ctx is None:
            self.ctx = self.prop.context(view.graph)
            self.tracker = self.ctx.tracker()

    def select(self, node: NodeView) -> bool:
        self._ensure(node)
        return super().select(node)

    def select_input(self, node: NodeView, input_node: NodeView) -> bool:
        self._ensure(node)
        return super().select_input(node, input_node)

    def select_output(self, node: NodeView, output_node: NodeView) -> bool:
        self._ensure(node)
        return super().select_output(node, output_node)

    def filter(self, candidates: list[NodeView]) -> list[NodeView]:
        if candidates:
            self._ensure(candidates[0])
        return super().filter(candidates)

    def reset(self) -> None:
        if self.ctx is not None:
            self.tracker = self.ctx.tracker()


def tensorrt_backend(min_size: int = 2, exclude_data_dependent: bool = True, mode: str = "fast",
                     fallback_ops: Iterable[str] = (), trt_version: str | None = None,
                     trt_plugins: Iterable[str] = (), **unknown: Any) -> list[SubgraphProperty]:
    """Factory for ``register_backend_factory("tensorrt", ...)``."""
    if unknown.pop("ops", None):
        raise LensError("backend 'tensorrt' decides support from TensorRT's operator table and takes no --ops; "
                        "use fallback_ops to force ops out")
    if unknown:
        raise LensError(f"backend 'tensorrt' has no option(s) {', '.join(sorted(unknown))}; it takes min_size, "
                        "exclude_data_dependent, mode, fallback_ops, trt_version and trt_plugins")
    plugins = [p for p in trt_plugins.split(",") if p.strip()] if isinstance(trt_plugins, str) else trt_plugins
    return [TensorRTProperty(min_size=min_size, exclude_data_dependent=exclude_data_dependent, mode=mode,
                             fallback_ops=fallback_ops, trt_version=trt_version, plugins=plugins)]


def register() -> None:
    """Register the ``tensorrt`` backend (called from ``partition/__init__``)."""
    register_backend_factory("tensorrt", tensorrt_backend, TENSORRT_OPTIONS, TENSORRT_HINTS)

