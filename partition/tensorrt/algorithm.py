"""The ``tensorrt`` backend: the TensorRT integration design's partitioning as a ``partition_pass``.

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
cycle the highest re-entry point other than the seed is excluded and growth
restarts. Finally subgraphs with fewer than ``min_size`` compute nodes are
dropped. All of that but the growth is the shared driver of
``partition/build.py`` (``run_pass``); this module supplies the ``DepthFirst``
grower and the selector.

``mode="teaching"`` uses the TensorRT design's quadratic groups; ``mode="fast"`` the
bounded propagation of ``groups.FastTracker``. They make identical decisions
(same events, same partition).
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, Iterable, Iterator

from ..api import NodeView, SubgraphProperty, SubgraphSelector
from ..build import FREE, REJECTED, Grower, PassState, adjacency, run_pass
from ..ir import Graph
from ..trace import EventKind, TraceEvent
from .groups import ANCESTORS, FastTracker, NaiveTracker, naive_pairs
from .dla import loadable_report
from .options import rules_for
from .rules import TRTRules
from .table import available_versions, release_differences

MODES = ("fast", "teaching")


class _Context:
    """Per-graph facts a pass needs: ids, edges, compatibility."""

    def __init__(self, graph: Graph, rules: TRTRules, order: list, preds: list[list[int]],
                 succs: list[list[int]], mode: str) -> None:
        self.graph = graph
        self.order = order
        self.preds = preds
        self.succs = succs
        self.reasons = rules.compat(graph)                  # name -> reason, incompatible only
        reasons = self.reasons
        self.bad = bytearray([n.name in reasons for n in order])  # no name -> id map needed
        non_compute = rules.non_compute_ops  # ``rules.is_compute``, without a call per node
        self.compute = [n.op_type not in non_compute for n in order]
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
    """The TensorRT design's selector: compatible nodes not in the subgraph's incompatible list.

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
    """TensorRT partitioning as in the TensorRT integration design; see the module docstring."""

    property_name = "tensorrt"

    def __init__(self, min_size: int = 2, mode: str = "fast", rules: TRTRules | None = None,
                 target: str = "gpu") -> None:
        """Values as the backend's schema validated them (``tensorrt_backend``); a direct caller
        (a test, a plugin) passes its own ``TRTRules`` (``DLARules`` for the DLA)."""
        self.target = target
        # On the DLA every maximal region becomes a loadable, whatever its size: no minimum there.
        self.min_size = 1 if target == "dla" else min_size
        self.mode = mode
        self.rules = rules if rules is not None else TRTRules()
        self._last_state: PassState | None = None
        self._contexts: "weakref.WeakKeyDictionary[Graph, _Context]" = weakref.WeakKeyDictionary()
        self._explained: Callable[[], _Context | None] = lambda: None  # ``explain``'s last context (weakly)

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
        graph = node.graph  # asked for every node left out: the last graph's context is at hand
        ctx = self._explained()
        if ctx is None or ctx.graph is not graph:
            ctx = self.context(graph)
            self._explained = weakref.ref(ctx)
        return ctx.reasons.get(node.node.name)

    def summary_fields(self) -> dict[str, Any]:
        """Which rule table decided (``"tensorrt_rules": "10.1"``), and its warnings (opset, plugins)."""
        notes = self.rules.notes  # bounded: a model may have thousands of plugin nodes
        return {"tensorrt_rules": self.rules.version, "tensorrt_warnings": list(self.rules.warnings),
                "tensorrt_notes": dict(list(notes.items())[:200]), "tensorrt_note_count": len(notes),
                "tensorrt_release_changes": self._release_changes(), "tensorrt_target": self.target,
                **self._dla_fields()}

    def _dla_fields(self) -> dict[str, Any]:
        state, self._last_state = self._last_state, None
        if self.target != "dla" or state is None:
            return {}
        report = loadable_report(self.rules, len(state.found))
        if report["dynamic_advice"]:
            self.rules.warnings.insert(0, report["dynamic_advice"])
        if report["error"]:
            self.rules.warnings.insert(0, "ERROR: " + report["error"])
        return {"dla": report, "tensorrt_warnings": list(self.rules.warnings)}

    def _release_changes(self) -> dict[str, Any] | None:
        """What this release's table changes from the release before (ops gained, lost, checks changed)."""
        if self.rules.version not in available_versions():
            return None  # a table given by hand
        diff = release_differences(self.rules.version)
        return {k: diff[k] for k in ("previous", "added", "now_supported", "no_longer_supported")} | \
            {"changed_count": len(diff["changed"])}

    # --------------------------------------------------------------- pass --
    def partition_pass(self, state: PassState) -> Iterator[TraceEvent]:
        self._last_state = state  # its subgraphs are the DLA loadables (summary_fields reads them once)
        return run_pass(self, state, DepthFirst(self, state))


class DepthFirst(Grower):
    """The TensorRT integration design's growth: depth-first over inputs then outputs, refusing what the groups forbid."""

    def __init__(self, prop: TensorRTProperty, state: PassState) -> None:
        super().__init__(state)
        self.prop = prop
        self.ctx = prop.context(state.graph, state)
        self.selector = TensorRTSelector(self.ctx, prop.min_size)

    def start(self, seed: int) -> Iterator[TraceEvent]:
        """Only compatible nodes seed (no selector call: the table decides)."""
        state, ctx = self.state, self.ctx
        ok = not ctx.bad[seed]
        if state.tracing:
            name = state.order[seed].name
            yield state.emit(EventKind.SEED, node=name, result=ok, reason="" if ok else ctx.reasons[name])
        if ok:
            self.selector = TensorRTSelector(ctx, self.prop.min_size)
        return ok

    def reset(self) -> None:
        self.selector.reset()

    def filter(self, seed: int, members: list[int]) -> list[int]:
        return members if self.selector.compute_count(members) >= self.prop.min_size else []

    def filter_note(self, kept: list[int]) -> str:
        return "" if kept else f"below --min-size {self.prop.min_size}"

    def dropped(self, seed: int, members: list[int], kept: list[int]) -> None:
        # All or nothing; the members are not regrown from another seed (as in MXNet).
        self.state.note_below_min_size(members, self.selector.compute_count(members), self.prop.min_size)

    def grow(self, seed: int, excluded: set[int]) -> Iterator[TraceEvent]:
        """Depth-first growth, inputs first; returns members in join order."""
        state, ctx = self.state, self.ctx
        if not state.tracing:
            return self._grow_quiet(seed, excluded)
        status, preds, succs, bad, order = state.status, ctx.preds, ctx.succs, ctx.bad, state.order
        tracing = state.tracing
        tracker = self.selector.tracker
        tracker.join(seed)
        members = [seed]
        in_set = {seed}
        refused: set[int] = set()
        # Stack of (from, neighbour, is_input); pushed reversed so the first input pops first.
        stack: list[tuple[int, int, bool]] = []
        stack.extend((seed, o, False) for o in reversed(succs[seed]))
        stack.extend((seed, p, True) for p in reversed(preds[seed]))
        while stack:
            cur, nb, is_input = stack.pop()
            if nb in in_set or nb in refused:
                continue
            if bad[nb] or status[nb] != FREE or nb in excluded or tracker.forbids(nb):
                refused.add(nb)
                if tracing:
                    yield self._refusal(seed, cur, nb, members, excluded)
                elif not bad[nb] and status[nb] == FREE and nb not in excluded and not state.has_reason(nb):
                    inc, group = tracker.cause(nb)  # type: ignore[misc]
                    state.note_group(nb, seed, inc, group)
                continue
            tracker.join(nb)
            members.append(nb)
            in_set.add(nb)
            if tracing:
                yield state.emit(EventKind.SELECT_INPUT if is_input else EventKind.SELECT_OUTPUT,
                                 node=order[cur].name, neighbour=order[nb].name, result=True,
                                 candidates=state.snapshot(members),
                                 queue=state.names([e[1] for e in reversed(stack[-20:])]))
            stack.extend((nb, o, False) for o in reversed(succs[nb]))
            stack.extend((nb, p, True) for p in reversed(preds[nb]))
        return members

    def _grow_quiet(self, seed: int, excluded: set[int]) -> list[int]:
        """``grow`` with tracing off: the same members in the same order and the same reasons.

        With no event to tell, the stack holds only the neighbour ids (no (from, to,
        direction) tuple per edge), pushed with C-level ``extend``.
        """
        state, ctx = self.state, self.ctx
        status, preds, succs, bad = state.status, ctx.preds, ctx.succs, ctx.bad
        tracker = self.selector.tracker
        forbids, join = tracker.forbids, tracker.join
        join(seed)
        members = [seed]
        seen = {seed}  # members and refused nodes: neither is looked at again
        stack: list[int] = [*reversed(succs[seed]), *reversed(preds[seed])]  # the first input pops first
        pop, push = stack.pop, stack.extend
        while stack:
            nb = pop()
            if nb in seen:
                continue
            seen.add(nb)
            if bad[nb] or status[nb] != FREE or nb in excluded:
                continue
            if forbids(nb):
                if not state.has_reason(nb):
                    inc, group = tracker.cause(nb)  # type: ignore[misc]
                    state.note_group(nb, seed, inc, group)
                continue
            join(nb)
            members.append(nb)
            push(reversed(succs[nb]))
            push(reversed(preds[nb]))
        return members

    def _refusal(self, seed: int, cur: int, nb: int, members: list[int], excluded: set[int]) -> TraceEvent:
        """The ``refuse`` event for ``nb`` (tracing only), noting a group refusal's reason."""
        state, ctx, order = self.state, self.ctx, self.state.order
        extra: dict[str, Any]
        if ctx.bad[nb]:
            why, extra = ctx.reasons[order[nb].name], {"cause": "incompatible", "incompatible_node": True}
        elif state.status[nb] != FREE:
            rejected = state.status[nb] == REJECTED
            why = "in a subgraph dropped for --min-size" if rejected else "already in another subgraph"
            extra = {"cause": "rejected" if rejected else "taken"}
        elif nb in excluded:
            why, extra = "excluded after a cycle", {"cause": "excluded"}
        else:
            inc, group = self.selector.tracker.cause(nb)  # type: ignore[misc]
            inc_name = order[inc].name
            holds = "a descendant" if group == ANCESTORS else "an ancestor"
            why = (f"in the {group} of incompatible node {inc_name}, and the subgraph grown from "
                   f"{order[seed].name} holds {holds} of it")
            extra = {"cause": "group", "incompatible": inc_name, "group": group}
            state.note_group(nb, seed, inc, group)
        return state.emit(EventKind.REFUSE, node=order[cur].name, neighbour=order[nb].name, reason=why,
                          candidates=state.snapshot(members), extra=extra)


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


def tensorrt_backend(**values: Any) -> list[SubgraphProperty]:
    """Factory for the ``tensorrt`` backend: ``values`` are a validated selection's, every option of
    ``TENSORRT_OPTIONS`` present and coerced (the registry checked them; nothing is checked again)."""
    return [TensorRTProperty(min_size=values["min_size"], mode=values["mode"], rules=rules_for(values),
                             target=values["trt_target"])]
