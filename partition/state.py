"""The state and record of one property's pass (``PassState``), all indexed by node id.

- ``order[i]`` / ``views[i]``: the node with id ``i`` (ids: ``partition/adjacency.py``;
  topological, as MXNet's ``build_subgraph.cc`` numbers them).
- ``preds[i]`` / ``succs[i]``: distinct producer ids in input-index order /
  distinct consumer ids in id order (outer-scope reads of bodies count).
- ``status[i]``: FREE (may still be taken), TAKEN (in a subgraph of this pass),
  REJECTED (its subgraph was refused by ``create_subgraph_node`` or ``--min-size``).
- ``reasons[name]``: a typed ``Reason`` per node not (yet) in a subgraph,
  written only by the ``note_*`` methods; ``cycle_log``: every cycle avoided.
- ``cycles``: a ``CycleChecker`` holding the subgraphs formed so far.

Trace events are ``EventKind``s emitted through ``state.emit`` (built only when
tracing). The pass driver that uses all this is ``partition/build.py``.
"""

from __future__ import annotations

import dataclasses
import weakref
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Callable, Sequence

from .adjacency import graph_adjacency
from .cycles import CycleChecker
from .errors import SelectorError
from .ir import Graph, Node, TensorInfo
from .selectors import NodeView
from .trace import CycleLog, EventKind, Reason, ReasonKind, Snapshot, TraceEvent
from .trim import Trimmer

if TYPE_CHECKING:  # api.py imports build.py, which imports this module; the property is only a type here
    from .api import SubgraphProperty

FREE, TAKEN, REJECTED = 0, 1, 2
_EARLIER_KINDS = (ReasonKind.REFUSED, ReasonKind.INCOMPATIBLE_GROUP)


class PassState:
    """Everything one property's pass knows; see the module docstring."""

    def __init__(self, graph: Graph, prop_name: str, tracer: "Tracer", next_id: int,
                 progress: Callable[[int, int], None] | None = None) -> None:
        self.graph = graph
        self.progress = progress
        self.prop_name = prop_name
        self.tracer = tracer
        adj = graph_adjacency(graph)
        self.order, self.preds, self.succs = adj.order, adj.preds, adj.succs
        self.views = [NodeView(n, graph, i) for i, n in enumerate(self.order)]
        self.position = adj.positions  # id -> position in graph.nodes
        self._ids_are_positions = adj.identity  # then sorting ids sorts positions
        self._has_bodies = adj.has_bodies  # else a node reads just its inputs
        self.status: list[int] = [FREE] * len(self.order)
        self._reasons: dict[int, Reason] = {}
        self._cycled: dict[int, int] = {}  # excluded node id -> its latest entry in cycle_log (reason made when read)
        self._unselected: dict[int, str] = {}  # seed id -> the selector that said no (reason made when read)
        self.cycles = CycleChecker(self.succs)
        self.trimmer = Trimmer(self.preds, self.succs, self.cycles)
        self._accept: dict[frozenset[str], list[bool]] = {}
        self.cycle_log = CycleLog()  # every cycle found: seed, witness path, excluded node
        self.found: list[tuple[int, list[str], Node]] = []  # (subgraph id, member names, new node)
        self.next_id = next_id
        self._graph_outputs: frozenset[str] | None = None  # for bodies (made once)
        self._prefixed: dict[str, int] | None = None  # graph node names like ours -> position

    def emit(self, kind: EventKind, **fields: Any) -> TraceEvent:
        return self.tracer.event(kind, self.prop_name, **fields)

    @property
    def tracing(self) -> bool:
        return self.tracer.on

    def names(self, ids: Sequence[int]) -> tuple[str, ...]:
        order = self.order
        return tuple(order[i].name for i in ids)

    def snapshot(self, members: list[int], start: int = 0) -> Snapshot:
        """The names of ``members[start:]`` now, for a list that only grows (no copy)."""
        return Snapshot(self.order, members, start)

    def accepts_op(self, op_types: frozenset[str]) -> list[bool]:
        """Per node id: is its op in ``op_types`` (computed once per pass and op set)."""
        table = self._accept.get(op_types)
        if table is None:
            table = self._accept[op_types] = list(map(op_types.__contains__, map(attrgetter("op_type"), self.order)))
        return table

    # ---------------------------------------------------- the record --
    # Every reason is written here: a later decision replaces an earlier one
    # (``_set``), a refusal only fills a gap (``_default``). Reasons are kept by
    # node id; ``reasons`` gives them by name.
    # Speed: the two kinds a large pass writes by the ten thousand are kept as ids
    # until read. Cycle exclusions (~130k on a 100k-node chain with skips, most
    # replaced later when the node joins a subgraph) keep an index into
    # ``cycle_log``; seeds a fixed op set does not select (the built-in selector,
    # where nothing else can be said of them) keep nothing but their id.
    @property
    def reasons(self) -> dict[str, Reason]:
        """Node name -> its ``Reason``, for every node not (yet) in a subgraph."""
        order, reasons = self.order, self._reasons
        if self._cycled:
            log, status = self.cycle_log, self.status
            seeds, paths = log._seeds, log._paths
            for i, k in self._cycled.items():
                if status[i] == TAKEN:  # excluded once, in a subgraph since (not popped on the way)
                    continue
                name = order[i].name
                reasons[i] = Reason(ReasonKind.CYCLE, name, {"seed": order[seeds[k]].name,
                                                              "path": Snapshot(order, paths[k])})
            self._cycled.clear()
        if self._unselected:
            for i, selector in self._unselected.items():
                node = order[i]
                reasons[i] = Reason(ReasonKind.NOT_SELECTED, node.name,
                                    {"selector": selector, "op_type": node.op_type})
            self._unselected.clear()
        return {r.node: r for r in reasons.values()}

    def _set(self, i: int, kind: ReasonKind, data: dict[str, Any]) -> None:
        self._cycled.pop(i, None)
        self._unselected.pop(i, None)
        self._reasons[i] = Reason(kind, self.order[i].name, data)

    def _default(self, i: int, kind: ReasonKind, data: dict[str, Any]) -> None:
        if not self.has_reason(i):
            self._reasons[i] = Reason(kind, self.order[i].name, data)

    def has_reason(self, i: int) -> bool:
        return i in self._reasons or (i in self._cycled and self.status[i] != TAKEN) or i in self._unselected

    def note_not_selected(self, i: int, selector: str) -> None:
        if not self.has_reason(i):
            self._unselected[i] = selector  # the Reason is made when read

    def note_refused(self, i: int, call: str, source: int) -> None:
        self._default(i, ReasonKind.REFUSED, {"call": call, "from": self.order[source].name})

    def note_group(self, i: int, seed: int, incompatible: int, group: str) -> None:
        self._default(i, ReasonKind.INCOMPATIBLE_GROUP, {"seed": self.order[seed].name, "group": group,
                                                         "incompatible": self.order[incompatible].name})

    def note_cycle(self, seed: int, path: Sequence[int], victim: int) -> None:
        """``victim`` is excluded: contracting it with the seed's candidates closes ``path``."""
        self._reasons.pop(victim, None)
        self._unselected.pop(victim, None)
        self._cycled[victim] = len(self.cycle_log)
        self.cycle_log.add(self.prop_name, self.order, seed, path, victim)

    def note_cycles(self, seed: int, paths: list[list[int]], victims: list[int]) -> None:
        """``note_cycle`` for each (path, victim) in order (the incremental loop's record)."""
        base = len(self.cycle_log)
        self.cycle_log.add_many(self.prop_name, self.order, seed, paths, victims)
        self._cycled.update(zip(victims, range(base, base + len(victims))))  # a later entry wins
        for earlier in (self._reasons, self._unselected):
            if not earlier.keys().isdisjoint(victims):  # rare: one C-level test for the batch
                for victim in victims:
                    earlier.pop(victim, None)

    def note_filtered(self, i: int, seed: int) -> None:
        self._set(i, ReasonKind.FILTERED, {"seed": self.order[seed].name})

    def note_filter_cycle(self, component: Sequence[int], seed: int, path: Sequence[int]) -> None:
        names = self.names(path)
        self.cycle_log.add(self.prop_name, self.order, seed, list(path), -1)
        for i in component:
            self._set(i, ReasonKind.FILTER_CYCLE, {"seed": self.order[seed].name, "path": names})

    def note_below_min_size(self, members: Sequence[int], compute_nodes: int, min_size: int) -> None:
        """The members' subgraph is too small: they stay out, and are not offered again."""
        for i in members:
            self.status[i] = REJECTED
            earlier = None if i in self._cycled or i in self._unselected else self._reasons.get(i)
            data: dict[str, Any] = {"compute_nodes": compute_nodes, "min_size": min_size}
            if earlier is not None and earlier.kind in _EARLIER_KINDS:  # why the bigger neighbour did not take it
                data["earlier"] = earlier
            self._set(i, ReasonKind.BELOW_MIN_SIZE, data)

    def body(self, members: list[int], name: str) -> Graph:
        """``subgraph_body`` of the nodes ``members`` (ids in graph order), from the id adjacency.

        A node whose consumers are all members has no output leaving the body,
        so the per-tensor consumer lists are read only for the boundary nodes.
        """
        graph, order, succs = self.graph, self.order, self.succs
        if self._graph_outputs is None:
            self._graph_outputs = frozenset(graph.outputs)
        graph_outputs = self._graph_outputs
        reads = graph._reads if self._has_bodies else {}
        member_set = set(members)
        nodes = [order[i] for i in members]
        produced = {t for n in nodes for t in n.outputs}
        inputs: dict[str, None] = {}
        outputs: list[str] = []
        inside: set[str] | None = None
        for i, node in zip(members, nodes):
            for t in reads[node.name] if node.subgraphs else node.inputs:  # inputs: no outer reads
                if t and t not in produced:
                    inputs[t] = None
            outs = node.outputs
            if member_set.issuperset(succs[i]):  # no reader outside: only graph outputs leave
                if not graph_outputs.isdisjoint(outs):
                    outputs.extend(t for t in outs if t in graph_outputs)
            elif len(outs) == 1:  # its one tensor is what the outside reader reads
                outputs.append(outs[0])
            else:
                if inside is None:
                    inside = {n.name for n in nodes}
                outputs.extend(t for t in outs if t and (t in graph_outputs or any(
                    r.name not in inside for r in graph.consumers(t))))
        produced.discard("")
        tensors = _body_tensors(graph, (*inputs, *produced))
        return Graph.trusted(name, nodes, list(inputs), list(dict.fromkeys(outputs)), tensors, graph.opset,
                             closed=True)  # every outer read is an input

    def _position_of(self, name: str) -> int | None:
        """Position of the graph's node called ``name``, if any. Names of the default form
        ``<property>_<id>`` are looked up among the few graph nodes with that prefix (found
        once per pass), so a pass needs no name index of the whole graph."""
        prefix = f"{self.prop_name}_"
        if not name.startswith(prefix):
            return self.graph.index.get(name)
        if self._prefixed is None:
            self._prefixed = _names_with_prefix(self.graph, prefix)
        return self._prefixed.get(name)

    def add_subgraph(self, prop: SubgraphProperty, members: list[int]) -> tuple[Node | None, int]:
        """Make the subgraph node for ``members``; None when the property rejects it."""
        members = sorted(members) if self._ids_are_positions else sorted(members, key=self.position.__getitem__)
        sid = self.next_id
        body = self.body(members, f"{self.prop_name}_{sid}")
        try:
            node = prop.create_subgraph_node(body, sid)
        except Exception as exc:  # noqa: BLE001 - a user property; report it with the subgraph
            raise SelectorError(f"{type(prop).__name__}.create_subgraph_node for subgraph {sid} "
                                f"({', '.join(self.names(members[:5]))}...) raised "
                                f"{type(exc).__name__}: {exc}") from exc
        status = self.status
        if node is None:
            for i in members:
                status[i] = REJECTED
                self._set(i, ReasonKind.REJECTED, {"subgraph_id": sid})
            return None, sid
        clash = self._position_of(node.name)
        if clash is not None and clash not in {self.position[i] for i in members}:  # like a node left outside
            node = dataclasses.replace(node, name=f"{node.name}__sg{sid}")  # keep names unique
        self.next_id += 1
        for i in members:
            status[i] = TAKEN  # their entries in ``_cycled`` are skipped from now on
        for earlier in (self._reasons, self._unselected):
            if not earlier.keys().isdisjoint(members):
                for i in members:
                    earlier.pop(i, None)
        self.cycles.add(members)
        self.found.append((sid, [n.name for n in body.nodes], node))
        return node, sid


_PREFIXED: "weakref.WeakKeyDictionary[Graph, dict[str, dict[str, int]]]" = weakref.WeakKeyDictionary()


def _names_with_prefix(graph: Graph, prefix: str) -> dict[str, int]:
    """Name -> position of the graph's nodes whose name starts with ``prefix`` (cached per graph)."""
    per_graph = _PREFIXED.setdefault(graph, {})
    found = per_graph.get(prefix)
    if found is None:
        names = list(map(attrgetter("name"), graph.nodes))
        if ("\n" + "\n".join(names)).find("\n" + prefix) < 0:  # one C-level search: usually none
            found = {}
        else:
            found = {n: pos for pos, n in enumerate(names) if n.startswith(prefix)}
        per_graph[prefix] = found
    return found


class Tracer:
    """Numbers events; builds them only when tracing is on."""

    def __init__(self, on: bool) -> None:
        self.on = on
        self.step = 0

    def event(self, kind: EventKind, prop: str, **fields: Any) -> TraceEvent:
        self.step += 1
        return TraceEvent(self.step, kind, prop, **fields)



def subgraph_body(graph: Graph, members: Sequence[Node], name: str) -> Graph:
    """The body of a subgraph: one input per outer tensor, one output per tensor used outside."""
    produced = {t for n in members for t in n.outputs if t}
    inside = {n.name for n in members}
    inputs: dict[str, None] = {}
    for node in members:
        for t in graph.reads(node):
            if t not in produced:
                inputs[t] = None
    graph_outputs = graph.outputs
    outputs: list[str] = []
    for node in members:
        for t in node.outputs:
            if not t:
                continue
            if t in graph_outputs:
                outputs.append(t)
                continue
            for reader in graph.consumers(t):
                if reader.name not in inside:
                    outputs.append(t)
                    break
    tensors = _body_tensors(graph, (*inputs, *produced))
    return Graph.trusted(name, members, list(inputs), list(dict.fromkeys(outputs)), tensors, graph.opset,
                         closed=True)  # every outer read is an input


def _body_tensors(graph: Graph, names: Sequence[str]) -> dict[str, TensorInfo]:
    """The type entries a subgraph body keeps for ``names`` (weights typed from their data)."""
    tensors: dict[str, TensorInfo] = {}
    known, weights = graph.tensors, graph.initializers
    for t in names:
        info = known.get(t)
        if info is None:
            if t not in weights:
                continue  # nothing known about it: the body does not need an entry
            info = weights[t].info()
        if info.dtype or info.shape:
            tensors[t] = info
    return tensors
