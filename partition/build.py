"""The pass driver: one loop for every partitioning algorithm, one record of its decisions.

``run_pass(prop, state, grower)`` is seed 000's loop, shared by every backend:

    for each free node in id order:  grower.start(seed)     (select, or the backend's own test)
        grow -> cycle check -> exclude the highest re-entry point, reset, grow again
        filter -> split into connected pieces -> cycle check each -> create_subgraph_node

Only growth differs between algorithms, so it is a pluggable ``Grower``:
``BreadthFirst`` (seed 000: FIFO, ``select_input`` on producers then
``select_output`` on consumers) here, the TensorRT depth-first growth with
incompatibility tracking (seed 004) in ``partition/tensorrt/algorithm.py``.

State of one property's pass (``PassState``), all indexed by node id:

- ``order[i]`` / ``views[i]``: the node with id ``i``. Ids follow an iterative
  post-order DFS from the graph outputs (inputs visited in input-index order),
  then unreached nodes in file order, as MXNet's ``build_subgraph.cc`` numbers
  them. This order is topological.
- ``preds[i]`` / ``succs[i]``: distinct producer ids in input-index order /
  distinct consumer ids in id order (outer-scope reads of bodies count).
- ``status[i]``: FREE (may still be taken), TAKEN (in a subgraph of this pass),
  REJECTED (its subgraph was refused by ``create_subgraph_node`` or ``--min-size``).
- ``reasons[name]``: a typed ``Reason`` per node not (yet) in a subgraph,
  written only by the ``note_*`` methods; ``cycle_log``: every cycle avoided.
- ``cycles``: a ``CycleChecker`` holding the subgraphs formed so far.

Trace events are ``EventKind``s emitted through ``state.emit`` (built only when
tracing). Where MXNet ignores subgraphs formed earlier in its cycle check,
bounds its search, and neither splits nor re-checks filtered subgraphs, we do
all four exactly; see ``partition/cycles.py``. For selectors that judge a node
by itself (the built-in ``ContainOpSelector``) with tracing off, the exclusion
loop runs incrementally (``partition/trim.py``) with the same exclusions.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections import deque
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from .adjacency import adjacency, graph_adjacency, seed_order  # noqa: F401 - adjacency, seed_order re-exported
from .cycles import CycleChecker
from .errors import SelectorError
from .ir import Graph, Node, TensorInfo
from .selectors import ContainOpSelector, NodeView, SubgraphSelector
from .trace import CycleLog, EventKind, Reason, ReasonKind, Snapshot, TraceEvent
from .trim import Trimmer

if TYPE_CHECKING:  # api.py imports this module; the property is only a type here
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
            table = self._accept[op_types] = [n.op_type in op_types for n in self.order]
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
        found = per_graph[prefix] = {n: pos for pos, n in enumerate(names) if n.startswith(prefix)}
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


# ------------------------------------------------------------------ growers --
class Grower:
    """How one algorithm grows a subgraph from a seed; the driver does the rest.

    ``start`` decides whether ``seed`` starts a subgraph (emitting the ``seed``
    event and noting a reason if not); ``grow`` returns the candidates, never
    taking a node in ``excluded``; ``reset`` forgets the growth (after a cycle);
    ``filter`` returns the candidates kept, ``dropped`` notes why the others went.
    ``accepts``, when set, says the growth takes exactly the free connected nodes
    with ``accepts[id]`` true (the driver may then trim incrementally).
    """

    accepts: list[bool] | None = None
    #: When set, ``start(seed)`` is exactly ``fixed_accepts[seed]`` with no event and no
    #: other effect than ``note_not_selected`` on a no; the driver then skips the call.
    fixed_accepts: list[bool] | None = None

    def __init__(self, state: PassState) -> None:
        self.state = state

    def start(self, seed: int) -> Iterator[TraceEvent]:
        raise NotImplementedError

    def grow(self, seed: int, excluded: set[int]) -> Iterator[TraceEvent]:
        raise NotImplementedError

    def reset(self) -> None:
        raise NotImplementedError

    def filter(self, seed: int, members: list[int]) -> list[int]:
        return members

    def keeps_all(self) -> bool:
        """Whether ``filter`` returns its members unchanged, whatever they are."""
        return type(self).filter is Grower.filter

    def filter_note(self, kept: list[int]) -> str:
        """What the ``filter`` event says about the result ("" for nothing)."""
        return ""

    def dropped(self, seed: int, members: list[int], kept: list[int]) -> None:
        kept_set = set(kept)
        for i in members:
            if i not in kept_set:
                self.state.note_filtered(i, seed)


class BreadthFirst(Grower):
    """Seed 000's growth through a user ``SubgraphSelector`` (a fresh one per seed)."""

    def __init__(self, prop: SubgraphProperty, state: PassState) -> None:
        super().__init__(state)
        self.prop = prop
        self.selector: SubgraphSelector | None = None
        fixed = getattr(prop, "fixed_op_types", None)  # ContainOpProperty's (api.py)
        if not state.tracing and fixed is not None and fixed() is not None:
            # The built-in property's selector is a ContainOpSelector over its op set every
            # time: its answers are the op table, so one selector serves every seed.
            self.selector = _new_selector(prop)
            if type(self.selector) is ContainOpSelector:
                self.fixed_accepts = self.accepts = state.accepts_op(self.selector.op_types)

    def start(self, seed: int) -> Iterator[TraceEvent]:
        state = self.state
        selector = self.selector = _new_selector(self.prop)
        self.accepts = None
        if not state.tracing and type(selector) is ContainOpSelector:
            self.accepts = state.accepts_op(selector.op_types)
        view = state.views[seed]
        chosen = bool(_ask(selector.select, "select", view))
        if state.tracing:
            yield state.emit(EventKind.SEED, node=view.name, result=chosen)
        if not chosen:
            state.note_not_selected(seed, type(selector).__name__)
        return chosen

    def reset(self) -> None:
        assert self.selector is not None
        _ask(self.selector.reset, "reset")

    def keeps_all(self) -> bool:
        """True for the one selector of a fixed op table when it keeps the API's default filter."""
        return self.selector is not None and type(self.selector).filter is SubgraphSelector.filter

    def filter(self, seed: int, members: list[int]) -> list[int]:
        assert self.selector is not None
        if type(self.selector).filter is SubgraphSelector.filter:  # the API's default keeps everything
            return members
        views = self.state.views
        return [v.id for v in _call_filter(self.selector, [views[i] for i in members])]

    def grow(self, seed: int, excluded: set[int]) -> Iterator[TraceEvent]:
        """FIFO: select_input on producers, then select_output on consumers."""
        state, selector = self.state, self.selector
        assert selector is not None
        if self.accepts is not None:
            return _grow_by_op(state, self.accepts, seed, excluded)
        status, views, tracing = state.status, state.views, state.tracing
        members = [seed]
        in_set = {seed}
        head = 0  # members[head:] is the FIFO queue: nodes found and not yet expanded
        while head < len(members):
            cur = members[head]
            head += 1
            cur_view = views[cur]
            for kind, neighbours in ((EventKind.SELECT_INPUT, state.preds[cur]),
                                     (EventKind.SELECT_OUTPUT, state.succs[cur])):
                method = selector.select_input if kind is EventKind.SELECT_INPUT else selector.select_output
                for nb in neighbours:
                    if nb in in_set:
                        continue
                    if status[nb] != FREE or nb in excluded:
                        if tracing:
                            why = "excluded after a cycle" if nb in excluded else "already in a subgraph"
                            yield state.emit(EventKind.REFUSE, node=cur_view.name, neighbour=views[nb].name,
                                             reason=why, candidates=state.snapshot(members),
                                             extra={"cause": "excluded" if nb in excluded else "taken"})
                        continue
                    ok = bool(_ask(method, kind.value, cur_view, views[nb]))
                    if ok:
                        members.append(nb)
                        in_set.add(nb)
                    else:
                        state.note_refused(nb, kind.value, cur)
                    if tracing:
                        yield state.emit(kind, node=cur_view.name, neighbour=views[nb].name, result=ok,
                                         candidates=state.snapshot(members), queue=state.snapshot(members, head))
        return members


def _grow_by_op(state: PassState, accept: list[bool], seed: int, excluded: set[int] | tuple = ()) -> list[int]:
    """``BreadthFirst.grow`` for a selector judging each node alone (``accept``), tracing off:
    the nodes found, and their order, are exactly those the selector calls give."""
    status, preds, succs = state.status, state.preds, state.succs
    members = [seed]
    in_set = {seed}
    queue = deque([seed])
    while queue:
        cur = queue.popleft()
        for nb in (*preds[cur], *succs[cur]):  # producers first, then consumers, as grow asks
            if accept[nb] and nb not in in_set and status[nb] == FREE and nb not in excluded:
                members.append(nb)
                in_set.add(nb)
                queue.append(nb)
    return members


def _grow_marked(state: PassState, avail: bytearray, seed: int, mark: bytearray) -> tuple[list[int], list[int]]:
    """``_grow_by_op`` with nothing excluded, ``avail[i]`` standing for "accepted and free",
    marking the members in ``mark`` (the trimmer's candidate flags, which it would set next):
    the member list is the FIFO queue itself. Also returns the consumers outside the members
    (the exits the trimmer's reach starts from)."""
    preds, succs = state.preds, state.succs
    members = [seed]
    exits: list[int] = []
    mark[seed] = 1
    for cur in members:  # a list iterator sees what is appended while it runs
        for nb in preds[cur]:  # producers first, then consumers, as grow asks
            if avail[nb] and not mark[nb]:
                mark[nb] = 1
                members.append(nb)
        for nb in succs[cur]:
            if not mark[nb]:
                if avail[nb]:
                    mark[nb] = 1
                    members.append(nb)
                else:
                    exits.append(nb)
    return members, exits


# ------------------------------------------------------------------ driver --
def generic_pass(prop: SubgraphProperty, state: PassState) -> Iterator[TraceEvent]:
    """Seed 000's algorithm: the driver with breadth-first growth through ``prop``'s selectors."""
    return run_pass(prop, state, BreadthFirst(prop, state))


def run_pass(prop: SubgraphProperty, state: PassState, grower: Grower) -> Iterator[TraceEvent]:
    """Every free node in id order may seed a subgraph; see the module docstring."""
    if grower.fixed_accepts is not None and grower.accepts is not None and not state.tracing:
        _run_fixed(prop, state, grower)
        return
    total = len(state.order)
    status = state.status
    fixed = grower.fixed_accepts
    for seed in range(total):
        if state.progress is not None and seed & 4095 == 0:
            state.progress(seed, total)
        if status[seed] != FREE:
            continue
        if fixed is not None:
            if not fixed[seed]:
                state.note_not_selected(seed, "ContainOpSelector")
                continue
        else:
            chosen = yield from grower.start(seed)
            if not chosen:
                continue
        members = yield from _grow_acyclic(state, grower, seed)
        yield from _filter_and_create(prop, state, grower, seed, members)


def _run_fixed(prop: SubgraphProperty, state: PassState, grower: Grower) -> None:
    """``run_pass`` for a fixed op table with tracing off (the built-in selector): with no
    event to yield, the seed loop makes plain calls (no two generators per seed)."""
    total = len(state.order)
    status, progress, fixed = state.status, state.progress, grower.fixed_accepts
    assert fixed is not None
    keeps_all, in_s = grower.keeps_all(), state.trimmer.in_s
    avail = bytearray(fixed)  # accepted and free (FREE is 0), kept up to date below
    if any(status):
        avail = bytearray(a and s == FREE for a, s in zip(fixed, status))
    for seed in range(total):
        if progress is not None and seed & 4095 == 0:
            progress(seed, total)
        if status[seed] != FREE:
            continue
        if not fixed[seed]:
            state.note_not_selected(seed, "ContainOpSelector")
            continue
        members = _trimmed(state, seed, *_grow_marked(state, avail, seed, in_s))
        if members is None:
            members = _quiet(_exclusion_loop(state, grower, seed))
        if keeps_all:  # what ``_filter_and_create`` comes to when filter keeps everything
            state.add_subgraph(prop, members)
        else:
            _quiet(_filter_and_create(prop, state, grower, seed, members))
        for i in members:
            if status[i] != FREE:  # taken, or rejected with its subgraph
                avail[i] = 0


def _quiet(steps: Iterator[TraceEvent]) -> Any:
    """Run a step generator with tracing off (it yields nothing) and return its result."""
    try:
        while True:
            next(steps)
    except StopIteration as done:
        return done.value


def _grow_acyclic(state: PassState, grower: Grower, seed: int) -> Iterator[TraceEvent]:
    """Grow from ``seed``; on a cycle exclude a node, reset and grow again (MXNet's rule)."""
    if grower.accepts is not None and not state.tracing:
        members = _trimmed(state, seed, _grow_by_op(state, grower.accepts, seed), None)
        if members is not None:
            return members
    return (yield from _exclusion_loop(state, grower, seed))


def _trimmed(state: PassState, seed: int, members: list[int], exits: list[int] | None) -> list[int] | None:
    """The exclusion loop for grown ``members``, incrementally (``partition/trim.py``); None when
    out of its scope. ``exits``: the members are marked in the trimmer's flags (``_grow_marked``)."""
    trimmer = state.trimmer
    if len(members) == 1:
        if exits is not None:
            trimmer.in_s[seed] = 0
        return members
    done = trimmer.trim(seed, members, exits)
    if done is None:
        return None
    final, paths, victims = done
    if victims:
        state.note_cycles(seed, paths, victims)
    return final


def _exclusion_loop(state: PassState, grower: Grower, seed: int) -> Iterator[TraceEvent]:
    """Grow, check, exclude, reset and grow again, with the grower's own growth."""
    excluded: set[int] = set()
    while True:
        members = yield from grower.grow(seed, excluded)
        if len(members) == 1:
            return members
        if not state.tracing and state.trimmer.acyclic(members):
            return members  # no cycle (the witness search below is only needed for one)
        witness = state.cycles.find_cycle(members)
        if witness is None:
            return members
        others = [i for i in witness.offenders if i != seed]
        victim = max(others) if others else seed
        state.note_cycle(seed, witness.path, victim)
        if state.tracing:
            path = state.names(witness.path)
            name = state.order[victim].name
            yield state.emit(EventKind.CYCLE, node=state.order[seed].name, path=path,
                             candidates=state.names(members), reason=f"contracting would close {' -> '.join(path)}",
                             extra={"excluded": name})
            yield state.emit(EventKind.EXCLUDE, node=name,
                             reason="the highest re-entry point on the cycle" if others else
                             "the seed is the only re-entry point: it stays alone")
        if victim == seed:  # MXNet's fallback: the seed alone
            return [seed]
        excluded.add(victim)
        grower.reset()
        if state.tracing:
            yield state.emit(EventKind.RESET, node=state.order[seed].name)


def _filter_and_create(prop: SubgraphProperty, state: PassState, grower: Grower,
                       seed: int, members: list[int]) -> Iterator[TraceEvent]:
    views = state.views
    kept = grower.filter(seed, members)
    if state.tracing:
        yield state.emit(EventKind.FILTER, node=views[seed].name, candidates=state.names(members),
                         result=state.names(kept), reason=grower.filter_note(kept))
    if len(kept) != len(members):
        grower.dropped(seed, members, kept)
    if not kept:
        return
    components = _components(state, kept) if len(kept) != len(members) else [kept]
    if len(components) > 1 and state.tracing:
        yield state.emit(EventKind.SPLIT, node=views[seed].name, candidates=state.names(kept),
                         result=tuple(state.names(c) for c in components))
    for component in components:
        if len(components) > 1 and len(component) > 1:
            witness = state.cycles.find_cycle(component)
            if witness is not None:
                state.note_filter_cycle(component, seed, witness.path)
                if state.tracing:
                    yield state.emit(EventKind.REJECT, node=views[seed].name, candidates=state.names(component),
                                     path=state.names(witness.path), reason="cycle after filter",
                                     extra={"cause": "cycle"})
                continue
        node, sid = state.add_subgraph(prop, component)
        if state.tracing:
            if node is None:
                yield state.emit(EventKind.REJECT, node=views[seed].name, candidates=state.names(component),
                                 subgraph_id=sid, reason="create_subgraph_node returned None",
                                 extra={"cause": "create_subgraph_node"})
            else:
                yield state.emit(EventKind.SUBGRAPH, node=node.name, candidates=state.names(component),
                                 subgraph_id=sid, result=(list(node.inputs), list(node.outputs)))


def _new_selector(prop: SubgraphProperty) -> SubgraphSelector:
    try:
        return prop.create_subgraph_selector()
    except Exception as exc:  # noqa: BLE001 - user code
        raise SelectorError(f"{type(prop).__name__}.create_subgraph_selector raised "
                            f"{type(exc).__name__}: {exc}") from exc


def _ask(method: Callable[..., Any], call: str, *views: NodeView) -> Any:
    """Call a user selector method; a raise becomes a SelectorError naming the call."""
    try:
        return method(*views)
    except Exception as exc:  # noqa: BLE001 - user code: report the call and the nodes
        owner = type(getattr(method, "__self__", method)).__name__
        args = ", ".join(f"{v.name} ({v.op_type})" for v in views)
        raise SelectorError(f"{owner}.{call}({args}) raised {type(exc).__name__}: {exc}") from exc


def _call_filter(selector: SubgraphSelector, candidates: list[NodeView]) -> list[NodeView]:
    try:
        kept = selector.filter(list(candidates))
    except Exception as exc:  # noqa: BLE001 - user code
        raise SelectorError(f"{type(selector).__name__}.filter({len(candidates)} candidates from "
                            f"{candidates[0].name}) raised {type(exc).__name__}: {exc}") from exc
    allowed = {v.id: v for v in candidates}
    result: dict[int, NodeView] = {}
    for v in kept or ():
        if not isinstance(v, NodeView) or v.id not in allowed or allowed[v.id] is not v:
            raise SelectorError(f"{type(selector).__name__}.filter returned {v!r}, which is not one "
                                f"of the candidates it was given; return a subset of them")
        result[v.id] = v
    return list(result.values())


def _components(state: PassState, kept: list[int]) -> list[list[int]]:
    """Weakly connected components of ``kept``, each in id order, ordered by smallest id."""
    kept_set = set(kept)
    seen: set[int] = set()
    components: list[list[int]] = []
    for start in sorted(kept):
        if start in seen:
            continue
        seen.add(start)
        comp, stack = [], [start]
        while stack:
            i = stack.pop()
            comp.append(i)
            for j in (*state.preds[i], *state.succs[i]):
                if j in kept_set and j not in seen:
                    seen.add(j)
                    stack.append(j)
        components.append(sorted(comp))
    return components
