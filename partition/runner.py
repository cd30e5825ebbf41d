"""Running a backend's passes over a graph: lazily (stepping) or all at once.

``PartitionRun(graph, backend, trace=True).events()`` yields one
``TraceEvent`` at a time, so a debugger can advance step by step; once it is
exhausted ``run.result`` holds the ``PartitionResult``. ``partition(...)`` is
the same with tracing off, which costs the algorithm nothing but a flag test.
"""

from __future__ import annotations

import functools
import time
from typing import Any, Callable, Iterator, Sequence

from .api import SubgraphProperty
from .errors import BackendOptionError
from .registry import Selection, current_registry
from .build import TAKEN, PassState, Tracer, generic_pass
from .gcpause import paused_gc
from .ir import Graph, Node
from .trace import CycleLog, EventKind, PartitionResult, Reason, ReasonKind, SubgraphInfo, TraceEvent


class PartitionRun:
    """One partitioning of ``graph`` by a backend, or by explicit ``properties`` (a rule the web made).

    ``backend`` is a ``Selection`` (validated at the edge, used as it is) or a backend name with
    ``options`` (a library call: validated here, once). Properties and options never mix: options
    given beside explicit properties would be ignored, so that is an error.
    """

    def __init__(self, graph: Graph, backend: str | Selection = "default", *, trace: bool = True,
                 properties: Sequence[SubgraphProperty] | None = None,
                 progress: Callable[[int, int], None] | None = None, **options: Any) -> None:
        self.graph = graph
        self.progress = progress
        self.tracer = Tracer(trace)
        self.result: PartitionResult | None = None
        self.seconds = 0.0
        self.selection: Selection | None = None
        if properties is not None:
            if options or isinstance(backend, Selection):
                raise BackendOptionError("explicit properties take no backend options")
            self.backend, self.properties = backend, list(properties)
            return
        registry = current_registry()
        if not isinstance(backend, Selection):
            backend = registry.select(backend, options)
        elif options:
            raise BackendOptionError("a Selection already holds its options; pass none beside it")
        self.selection, self.backend = backend, backend.backend
        self.properties = registry.build(backend)

    def events(self) -> Iterator[TraceEvent]:
        """Partition, yielding each event; sets ``self.result`` at the end."""
        graph = self.graph
        reasons: dict[str, Reason] = {}
        groups: dict[str, tuple[int, str, list[str], Node]] = {}  # new node -> (id, property, names, node)
        cycles = CycleLog()
        next_id = 0
        start = time.perf_counter()
        pending: Sequence[tuple[int, list[str], Node]] = ()  # the last pass's subgraphs, contracted lazily
        for prop in self.properties:
            graph = contract(graph, pending)
            state = PassState(graph, prop.property_name, self.tracer, next_id, self.progress)
            if self.tracer.on:
                yield self._paused(state.emit(EventKind.PASS_START, reason=type(prop).__name__), start)
                start = time.perf_counter()
            for event in _pass_of(prop)(state):
                yield self._paused(event, start)
                start = time.perf_counter()
            for sid, members, node in state.found:
                flat = [m for name in members for m in (groups.pop(name)[2] if name in groups else [name])]
                groups[node.name] = (sid, prop.property_name, flat, node)
            pending = state.found
            reasons.update(state.reasons)  # reads the pass's pending cycle reasons too
            cycles.extend(state.cycle_log)
            reasons.update(_explanations(prop, state))
            next_id = state.next_id
            if self.tracer.on:
                yield self._paused(state.emit(EventKind.PASS_END, result=len(state.found)), start)
                start = time.perf_counter()
        self.seconds += time.perf_counter() - start
        final = graph if not pending else functools.partial(contract, graph, pending)
        self.result = _result(self.backend, self.graph, final, groups, reasons, cycles, self.seconds)
        for prop in self.properties:  # a backend's own summary fields, e.g. tensorrt's "tensorrt_rules"
            self.result.summary.update(getattr(prop, "summary_fields", dict)())

    def _paused(self, event: TraceEvent, start: float) -> TraceEvent:
        # Time spent by the consumer between steps is not partitioning time.
        self.seconds += time.perf_counter() - start
        return event

    def run(self) -> PartitionResult:
        for _ in self.events():
            pass
        assert self.result is not None
        return self.result


def _pass_of(prop: SubgraphProperty) -> Callable[[PassState], Iterator[TraceEvent]]:
    """The property's own algorithm, or the generic one (``SubgraphProperty.partition_pass``)."""
    own = prop.partition_pass
    return own if own is not None else functools.partial(generic_pass, prop)


def partition(graph: Graph, backend: str = "default", *,
              properties: Sequence[SubgraphProperty] | None = None,
              progress: Callable[[int, int], None] | None = None, **options: Any) -> PartitionResult:
    """Partition ``graph`` with tracing off."""
    run = PartitionRun(graph, backend, trace=False, properties=properties, progress=progress, **options)
    with paused_gc():
        return run.run()


def contract(graph: Graph, found: Sequence[tuple[int, list[str], Node]]) -> Graph:
    """Replace each found subgraph by its node, at the position of its first member."""
    if not found:
        return graph
    first_pos: dict[int, Node] = {}
    taken: set[str] = set()
    for _sid, members, node in found:
        taken.update(members)
        first_pos[min(graph.index[n] for n in members)] = node
    nodes: list[Node] = []
    for pos, node in enumerate(graph.nodes):
        if pos in first_pos:
            nodes.append(first_pos[pos])
        if node.name not in taken:
            nodes.append(node)
    return graph.replace(nodes=nodes)


def _explanations(prop: SubgraphProperty, state: PassState) -> dict[str, Reason]:
    """The property's own reasons for the nodes it left out (they beat the generic ones)."""
    found: dict[str, Reason] = {}
    for view, status in zip(state.views, state.status):
        if status != TAKEN:
            why = prop.explain(view)
            if why:
                found[view.name] = Reason(ReasonKind.UNSUPPORTED, view.name, {"rule": why})
    return found


def _result(backend: str, original: Graph, final: Any, groups: dict[str, tuple[int, str, list[str], Node]],
            reasons: dict[str, Reason], cycles: CycleLog, seconds: float) -> PartitionResult:
    """``groups`` holds exactly the subgraph nodes of the final graph (earlier ones a later pass
    swallowed were removed), so the subgraphs are read from it, not from the graph."""
    subgraphs: list[SubgraphInfo] = []
    covered: set[str] = set()
    for sid, prop_name, members, node in groups.values():
        covered.update(members)
        subgraphs.append(SubgraphInfo(sid, prop_name, members, list(node.inputs), list(node.outputs),
                                      node.name))
    subgraphs.sort(key=lambda s: s.id)
    left_out = {n.name: reasons.get(n.name) or Reason(ReasonKind.NOT_SELECTED, n.name)
                for n in original.nodes if n.name not in covered}
    return PartitionResult(backend, original, final, subgraphs, left_out, seconds, cycles)
