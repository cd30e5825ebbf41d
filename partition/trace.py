"""Trace events and partition results: the plain data every view reads.

The partitioner is a generator of ``TraceEvent``; the CLI (``sglens trace``),
the web debugger's stepping and the tests all read the same events. A
``PartitionResult`` is what a finished run returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence, overload

from .ir import Graph

#: Every kind of event, in the words the trace uses.
EVENT_KINDS = (
    "pass_start",      # a property's pass begins (property)
    "seed",            # select(node) was asked; result says if growth starts
    "select_input",    # select_input(node, neighbour)
    "select_output",   # select_output(node, neighbour)
    "refuse",          # a neighbour not offered to the selector (reason says why)
    "cycle",           # contracting the candidates would close a cycle (path)
    "exclude",         # a candidate is excluded and growth restarts
    "reset",           # selector.reset()
    "filter",          # selector.filter(candidates) -> kept (result)
    "split",           # filtered candidates were disconnected: split into components
    "reject",          # create_subgraph_node returned None, or a cycle after filter
    "subgraph",        # a subgraph was created (subgraph_id, candidates = its nodes)
    "pass_end",        # a property's pass is over
)


class Snapshot(Sequence[str]):
    """Node names of ``ids[start:stop]`` for a list of node ids that only ever grows.

    An event's candidate set is such a window on the growing candidate list, so
    every event shares that list instead of copying it: trace memory stays linear
    in the number of events, not quadratic. Compares equal to the tuple of names.
    """

    __slots__ = ("_order", "_ids", "_start", "_stop")

    def __init__(self, order: Sequence[Any], ids: Sequence[int], start: int = 0, stop: int | None = None) -> None:
        self._order, self._ids = order, ids
        self._start, self._stop = start, len(ids) if stop is None else stop

    def __len__(self) -> int:
        return max(0, self._stop - self._start)

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[str, ...]: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return tuple(self)[index]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self._order[self._ids[self._start + index]].name

    def __iter__(self) -> Iterator[str]:
        order, ids = self._order, self._ids
        for k in range(self._start, self._stop):
            yield order[ids[k]].name

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (Snapshot, tuple, list)):
            return tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return repr(tuple(self))


@dataclass(slots=True)  # a large trace holds hundreds of thousands of these
class TraceEvent:
    """One step of partitioning. ``candidates`` and ``queue`` are snapshots."""

    step: int
    kind: str
    property: str = ""
    node: str | None = None
    neighbour: str | None = None
    result: Any = None
    candidates: tuple[str, ...] = ()
    queue: tuple[str, ...] = ()
    reason: str = ""
    path: tuple[str, ...] = ()
    subgraph_id: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        # Field by field, not dataclasses.asdict: that would deep-copy the graph behind a Snapshot.
        result = self.result
        if isinstance(result, tuple):
            result = [list(r) if isinstance(r, (tuple, Snapshot)) else r for r in result]
        return {"step": self.step, "kind": self.kind, "property": self.property, "node": self.node,
                "neighbour": self.neighbour, "result": result, "candidates": list(self.candidates),
                "queue": list(self.queue), "reason": self.reason, "path": list(self.path),
                "subgraph_id": self.subgraph_id, "extra": dict(self.extra)}


@dataclass
class SubgraphInfo:
    """One subgraph of a result: its nodes in graph order and its boundary tensors."""

    id: int
    property: str
    nodes: list[str]
    inputs: list[str]
    outputs: list[str]
    node_name: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data = {"id": self.id, "property": self.property, "nodes": list(self.nodes),
                "inputs": list(self.inputs), "outputs": list(self.outputs), "node_name": self.node_name}
        data.update(self.extra)
        return data


@dataclass
class PartitionResult:
    """What a backend's passes produced on one graph.

    ``graph`` is the partitioned graph (subgraph nodes in place), ``original``
    the input graph. ``excluded`` maps every node of the original graph that is
    in no subgraph to the reason why.
    """

    backend: str
    original: Graph
    graph: Graph
    subgraphs: list[SubgraphInfo]
    excluded: dict[str, str]
    seconds: float
    cycles: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "nodes": len(self.original.nodes),
            "subgraphs": [s.to_json() for s in self.subgraphs],
            "excluded": [{"node": n, "reason": r} for n, r in self.excluded.items()],
            "cycles": self.cycles,
            "summary": self.summary,
            "seconds": self.seconds,
        }

    def subgraph_of(self) -> dict[str, int]:
        """Original node name -> id of the subgraph holding it."""
        return {n: s.id for s in self.subgraphs for n in s.nodes}
