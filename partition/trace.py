"""Trace events and partition results: the plain data every view reads.

The partitioner is a generator of ``TraceEvent``; the CLI (``sglens trace``),
the web debugger's stepping and the tests all read the same events. A
``PartitionResult`` is what a finished run returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from typing import Any, Iterator, Sequence, overload

from .ir import Graph

class EventKind(str, Enum):
    """Every kind of trace event. String-valued: ``kind == "cycle"`` and the JSON
    (``"kind": "cycle"``) read the same as before the enum existed."""

    PASS_START = "pass_start"        # a property's pass begins (property)
    SEED = "seed"                    # select(node) was asked; result says if growth starts
    SELECT_INPUT = "select_input"    # select_input(node, neighbour)
    SELECT_OUTPUT = "select_output"  # select_output(node, neighbour)
    REFUSE = "refuse"                # a neighbour not offered to the selector (reason says why)
    CYCLE = "cycle"                  # contracting the candidates would close a cycle (path)
    EXCLUDE = "exclude"              # a candidate is excluded and growth restarts
    RESET = "reset"                  # selector.reset()
    FILTER = "filter"                # selector.filter(candidates) -> kept (result)
    SPLIT = "split"                  # filtered candidates were disconnected: split into components
    REJECT = "reject"                # create_subgraph_node returned None, or a cycle after filter
    SUBGRAPH = "subgraph"            # a subgraph was created (subgraph_id, candidates = its nodes)
    PASS_END = "pass_end"            # a property's pass is over

    def __str__(self) -> str:  # f"{kind}" gives "cycle", not "EventKind.CYCLE"
        return self.value


#: Every kind of event, in the words the trace uses (the enum's values, in order).
EVENT_KINDS: tuple[str, ...] = tuple(k.value for k in EventKind)


class ReasonKind(str, Enum):
    """Why a node ended in no subgraph. String-valued, like ``EventKind``."""

    UNSUPPORTED = "unsupported"                # the property's explain(): the backend cannot take the op
    NOT_SELECTED = "not_selected"              # select() said no, or nothing was ever said
    REFUSED = "refused"                        # select_input/select_output said no when growing
    INCOMPATIBLE_GROUP = "incompatible_group"  # TensorRT: in a group of an incompatible node
    CYCLE = "cycle"                            # excluded: contracting with it would close a cycle
    FILTERED = "filtered"                      # dropped by the selector's filter()
    FILTER_CYCLE = "filter_cycle"              # a piece left by filter() would close a cycle
    BELOW_MIN_SIZE = "below_min_size"          # TensorRT: subgraph below --min-size
    REJECTED = "rejected"                      # create_subgraph_node returned None

    def __str__(self) -> str:
        return self.value


#: Every kind of reason (the enum's values, in order).
REASON_KINDS: tuple[str, ...] = tuple(k.value for k in ReasonKind)

#: Short labels a report groups reasons under (what the summary's ``left_out_supported`` shows).
REASON_LABELS: dict[str, str] = {
    "unsupported": "unsupported op", "not_selected": "not selected", "refused": "refused by the selector",
    "incompatible_group": "incompatibility group", "cycle": "would close a cycle",
    "filtered": "dropped by filter", "filter_cycle": "would close a cycle",
    "below_min_size": "subgraph below --min-size", "rejected": "rejected by create_subgraph_node",
}


def _reason_text(kind: ReasonKind, d: dict[str, Any]) -> str:
    """The English sentence of a reason, made from its data (only when someone reads it)."""
    if kind is ReasonKind.UNSUPPORTED:
        return d["rule"]
    if kind is ReasonKind.NOT_SELECTED:
        if "selector" not in d:
            return "not selected"
        return f"not selected: {d['selector']}.select returned False for {d['op_type']}"
    if kind is ReasonKind.REFUSED:
        return f"refused by {d['call']} from {d['from']}"
    if kind is ReasonKind.INCOMPATIBLE_GROUP:
        return (f"refused by the subgraph grown from {d['seed']}: in the {d['group']} of incompatible "
                f"node {d['incompatible']}")
    if kind is ReasonKind.CYCLE:
        return f"excluded from the subgraph grown from {d['seed']}: it would close the cycle {' -> '.join(d['path'])}"
    if kind is ReasonKind.FILTERED:
        return f"dropped by filter of the subgraph grown from {d['seed']}"
    if kind is ReasonKind.FILTER_CYCLE:
        return f"part of a filtered subgraph that would close the cycle {' -> '.join(d['path'])}"
    if kind is ReasonKind.BELOW_MIN_SIZE:
        k = d["compute_nodes"]
        text = f"subgraph of {k} compute {'node' if k == 1 else 'nodes'} is below --min-size {d['min_size']}"
        earlier = d.get("earlier")
        return f"{text}; earlier {earlier.text}" if earlier is not None else text
    return f"subgraph {d['subgraph_id']} rejected by create_subgraph_node"


@dataclass(slots=True)
class Reason:
    """Why ``node`` is in no subgraph: a ``kind``, the facts (``data``), and ``text`` made from them.

    Written only by ``PassState``'s ``note_*`` methods; reports and the web app read
    ``kind`` and ``data``, people read ``text``. The text is built on demand: a
    large model records hundreds of thousands of reasons that later ones replace.
    """

    kind: ReasonKind
    node: str
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return _reason_text(self.kind, self.data)

    def to_json(self) -> dict[str, Any]:
        """``{"node", "reason" (the text), "kind"}`` plus ``"data"`` when there are facts beyond the text."""
        out: dict[str, Any] = {"node": self.node, "reason": self.text, "kind": str(self.kind)}
        data = {k: (v.to_json() if isinstance(v, Reason) else list(v) if isinstance(v, (tuple, Snapshot)) else v)
                for k, v in self.data.items() if k != "rule"}  # a rule's text is the reason itself
        if data:
            out["data"] = data
        return out


def _position(index: int, length: int) -> int:
    """A sequence index (negative from the end) as a position, or IndexError."""
    position = index + length if index < 0 else index
    if not 0 <= position < length:
        raise IndexError(index)
    return position


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
        return self._order[self._ids[self._start + _position(index, len(self))]].name

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


class CycleLog(Sequence[dict[str, Any]]):
    """Every cycle a pass avoided, as ``{"property", "seed", "path", "excluded"}`` dicts made when read.

    A chain with skips at 100k nodes logs ~130k cycles. The log keeps three
    parallel lists of node ids (seed, witness path, excluded node; -1 for a piece
    left by ``filter``, whose ``path`` reads as a list) and, per pass, which
    property and node numbering the ids after a given index belong to: no object
    per entry, so recording an exclusion is three list appends (or three
    ``extend`` calls for a batch) and the garbage collector has nothing to walk.
    The dicts and their names are built only when someone reads them; a cycle's
    ``path`` is a ``Snapshot`` (equal to the list of names). Compares equal to
    the list of its dicts.
    """

    __slots__ = ("_seeds", "_paths", "_victims", "_parts")

    def __init__(self) -> None:
        self._seeds: list[int] = []
        self._paths: list[Sequence[int]] = []
        self._victims: list[int] = []  # excluded id, or -1 for a filtered piece
        self._parts: list[tuple[int, str, Sequence[Any]]] = []  # (first index, property, nodes by id)

    def _part(self, prop: str, order: Sequence[Any]) -> None:
        parts = self._parts
        if not parts or parts[-1][1] != prop or parts[-1][2] is not order:
            parts.append((len(self._seeds), prop, order))

    def add(self, prop: str, order: Sequence[Any], seed: int, path: Sequence[int], excluded: int) -> None:
        self._part(prop, order)
        self._seeds.append(seed)
        self._paths.append(path)
        self._victims.append(excluded)

    def add_many(self, prop: str, order: Sequence[Any], seed: int, paths: list[Sequence[int]],
                 excluded: list[int]) -> None:
        """``add`` for each (path, excluded) pair, all from one seed."""
        self._part(prop, order)
        self._seeds.extend([seed] * len(paths))
        self._paths.extend(paths)
        self._victims.extend(excluded)

    def extend(self, other: "CycleLog") -> None:
        base = len(self._seeds)
        for start, prop, order in other._parts:
            self._parts.append((base + start, prop, order))
        self._seeds.extend(other._seeds)
        self._paths.extend(other._paths)
        self._victims.extend(other._victims)

    def entry(self, k: int) -> tuple[str, Sequence[Any], int, Sequence[int], int]:
        """(property, nodes by id, seed id, path ids, excluded id or -1) of entry ``k``."""
        parts = self._parts
        j = len(parts) - 1
        while parts[j][0] > k:  # few parts: one per pass
            j -= 1
        _start, prop, order = parts[j]
        return prop, order, self._seeds[k], self._paths[k], self._victims[k]

    @staticmethod
    def _dict(entry: tuple[str, Sequence[Any], int, Sequence[int], int]) -> dict[str, Any]:
        prop, order, seed, path, excluded = entry
        names = Snapshot(order, path)
        return {"property": prop, "seed": order[seed].name, "path": names if excluded >= 0 else list(names),
                "excluded": order[excluded].name if excluded >= 0 else None}

    def _entries(self) -> Iterator[tuple[str, Sequence[Any], int, Sequence[int], int]]:
        parts, seeds, paths, victims = self._parts, self._seeds, self._paths, self._victims
        for j, (start, prop, order) in enumerate(parts):
            stop = parts[j + 1][0] if j + 1 < len(parts) else len(seeds)
            for k in range(start, stop):
                yield prop, order, seeds[k], paths[k], victims[k]

    def to_json(self) -> list[dict[str, Any]]:
        """Every entry with its path as a list of names (what a result's JSON holds)."""
        out = []
        for prop, order, seed, path, excluded in self._entries():
            out.append({"property": prop, "seed": order[seed].name, "path": [order[i].name for i in path],
                        "excluded": order[excluded].name if excluded >= 0 else None})
        return out

    def __len__(self) -> int:
        return len(self._seeds)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [self._dict(self.entry(k)) for k in range(len(self))[index]]
        return self._dict(self.entry(_position(index, len(self))))

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return map(self._dict, self._entries())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (CycleLog, list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, like a list

    def __repr__(self) -> str:
        return f"CycleLog({list(self)!r})"


@dataclass(slots=True)  # a large trace holds hundreds of thousands of these
class TraceEvent:
    """One step of partitioning. ``candidates`` and ``queue`` are snapshots."""

    step: int
    kind: EventKind
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

    def __post_init__(self) -> None:
        if not isinstance(self.kind, EventKind):
            self.kind = EventKind(self.kind)  # a plain string from older code: must be a known kind

    def to_json(self) -> dict[str, Any]:
        # Field by field, not dataclasses.asdict: that would deep-copy the graph behind a Snapshot.
        result = self.result
        if isinstance(result, tuple):
            result = [list(r) if isinstance(r, (tuple, Snapshot)) else r for r in result]
        return {"step": self.step, "kind": str(self.kind), "property": self.property, "node": self.node,
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

    ``graph`` is the partitioned graph (subgraph nodes in place), built on first
    read (the run gives a function making it: a report of the subgraphs does not
    need it, and contracting a 100k-node graph is a tenth of a second); ``original``
    the input graph. ``reasons`` maps every node of the original graph that is
    in no subgraph to its ``Reason``; ``excluded`` is the same with the reasons'
    texts (what people read).
    """

    backend: str
    original: Graph
    _graph: Any  # the partitioned Graph, or a function of no arguments returning it
    subgraphs: list[SubgraphInfo]
    reasons: dict[str, Reason]
    seconds: float
    cycles: Sequence[dict[str, Any]] = field(default_factory=CycleLog)  # a CycleLog from a run
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def graph(self) -> Graph:
        """The partitioned graph: subgraph nodes in place of their members."""
        if not isinstance(self._graph, Graph):
            self._graph = self._graph()
        return self._graph

    @cached_property
    def excluded(self) -> dict[str, str]:
        """Node name -> the text of its reason, for every node in no subgraph."""
        return {n: r.text for n, r in self.reasons.items()}

    def to_json(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "nodes": len(self.original.nodes),
            "subgraphs": [s.to_json() for s in self.subgraphs],
            "excluded": [r.to_json() for r in self.reasons.values()],
            "cycles": self.cycles.to_json() if isinstance(self.cycles, CycleLog) else
            [{**c, "path": list(c["path"])} for c in self.cycles],
            "summary": self.summary,
            "seconds": self.seconds,
        }

    def subgraph_of(self) -> dict[str, int]:
        """Original node name -> id of the subgraph holding it."""
        return {n: s.id for s in self.subgraphs for n in s.nodes}
