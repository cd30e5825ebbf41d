"""The partitioning algorithm of seed 000, as a generator of trace events.

State of one property's pass (``PassState``), all indexed by node id:

- ``order[i]`` / ``views[i]``: the node with id ``i``. Ids follow an iterative
  post-order DFS from the graph outputs (inputs visited in input-index order),
  then unreached nodes in file order, as MXNet's ``build_subgraph.cc`` numbers
  them. This order is topological.
- ``preds[i]`` / ``succs[i]``: distinct producer ids in input-index order /
  distinct consumer ids in id order (outer-scope reads of bodies count).
- ``status[i]``: FREE (may still be taken), TAKEN (in a subgraph of this pass),
  REJECTED (its subgraph was refused by ``create_subgraph_node``).
- ``reasons[name]``: why a node is not in a subgraph, updated as events happen.
- ``cycles``: a ``CycleChecker`` holding the subgraphs formed so far.

Growth from a seed is breadth-first (FIFO); then the cycle check, the filter,
the split into connected components and the cycle check again. Where MXNet
ignores subgraphs formed earlier in its cycle check, bounds its search, and
neither splits nor re-checks filtered subgraphs, we do all four exactly; see
``partition/cycles.py``.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from .cycles import CycleChecker
from .errors import SelectorError
from .ir import Graph, Node, TensorInfo
from .selectors import ContainOpSelector, NodeView, SubgraphSelector
from .trace import Snapshot, TraceEvent

if TYPE_CHECKING:  # api.py imports this module; the property is only a type here
    from .api import SubgraphProperty

FREE, TAKEN, REJECTED = 0, 1, 2


class PassState:
    """Everything one property's pass knows; see the module docstring."""

    def __init__(self, graph: Graph, prop_name: str, tracer: "Tracer", next_id: int,
                 progress: Callable[[int, int], None] | None = None) -> None:
        self.graph = graph
        self.progress = progress
        self.prop_name = prop_name
        self.tracer = tracer
        self.order, self.preds, self.succs = adjacency(graph)
        self.id_of: dict[str, int] = {n.name: i for i, n in enumerate(self.order)}
        self.views = [NodeView(n, graph, i) for i, n in enumerate(self.order)]
        self.status: list[int] = [FREE] * len(self.order)
        self.reasons: dict[str, str] = {}
        self.cycles = CycleChecker(self.succs)
        self.accept_cache: dict[frozenset[str], list[bool]] = {}
        self.cycle_log: list[dict[str, Any]] = []  # every cycle found: seed, witness path, excluded node
        self.found: list[tuple[int, list[str], Node]] = []  # (subgraph id, member names, new node)
        self.next_id = next_id

    def emit(self, kind: str, **fields: Any) -> TraceEvent:
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

    def add_subgraph(self, prop: SubgraphProperty, members: list[int]) -> tuple[Node | None, int]:
        """Make the subgraph node for ``members``; None when the property rejects it."""
        members = sorted(members, key=lambda i: self.graph.index[self.order[i].name])
        body = subgraph_body(self.graph, [self.order[i] for i in members], f"{self.prop_name}_{self.next_id}")
        sid = self.next_id
        try:
            node = prop.create_subgraph_node(body, sid)
        except Exception as exc:  # noqa: BLE001 - a user property; report it with the subgraph
            raise SelectorError(f"{type(prop).__name__}.create_subgraph_node for subgraph {sid} "
                                f"({', '.join(self.names(members[:5]))}...) raised "
                                f"{type(exc).__name__}: {exc}") from exc
        if node is not None and node.name in self.graph.node_by_name and \
                self.graph.index[node.name] not in {self.graph.index[self.order[i].name] for i in members}:
            node = dataclasses.replace(node, name=f"{node.name}__sg{sid}")  # keep names unique
        if node is None:
            for i in members:
                self.status[i] = REJECTED
                self.reasons[self.order[i].name] = f"subgraph {sid} rejected by create_subgraph_node"
            return None, sid
        self.next_id += 1
        for i in members:
            self.status[i] = TAKEN
            self.reasons.pop(self.order[i].name, None)
        self.cycles.add(members)
        self.found.append((sid, list(self.names(members)), node))
        return node, sid


class Tracer:
    """Numbers events; builds them only when tracing is on."""

    def __init__(self, on: bool) -> None:
        self.on = on
        self.step = 0

    def event(self, kind: str, prop: str, **fields: Any) -> TraceEvent:
        self.step += 1
        return TraceEvent(self.step, kind, prop, **fields)


def seed_order(graph: Graph) -> list[Node]:
    """Iterative post-order DFS from the outputs, then unreached nodes in file order."""
    return [graph.nodes[p] for p in _seed_positions(graph)]


def adjacency(graph: Graph) -> tuple[list[Node], list[list[int]], list[list[int]]]:
    """Nodes in seed order, and by id: producer ids (read order) and consumer ids (id order)."""
    positions = _seed_positions(graph)
    rank = [0] * len(positions)
    for node_id, pos in enumerate(positions):
        rank[pos] = node_id
    pred_positions = graph.pred_positions
    preds = [[rank[p] for p in pred_positions[pos]] for pos in positions]
    return [graph.nodes[p] for p in positions], preds, _successors(preds)


def _seed_positions(graph: Graph) -> list[int]:
    preds = graph.pred_positions
    visited = bytearray(len(graph.nodes))
    order: list[int] = []
    for out in graph.outputs:
        root = graph.producer(out)
        if root is None or visited[graph.index[root.name]]:
            continue
        start = graph.index[root.name]
        visited[start] = 1
        stack: list[list[int]] = [[start, 0]]  # [node position, next input to look at]
        while stack:
            frame = stack[-1]
            inputs = preds[frame[0]]
            k = frame[1]
            while k < len(inputs) and visited[inputs[k]]:
                k += 1
            if k == len(inputs):
                stack.pop()
                order.append(frame[0])
            else:
                frame[1] = k + 1
                visited[inputs[k]] = 1
                stack.append([inputs[k], 0])
    order.extend(i for i in range(len(graph.nodes)) if not visited[i])
    return order


def _successors(preds: list[list[int]]) -> list[list[int]]:
    succs: list[list[int]] = [[] for _ in preds]
    for i, ps in enumerate(preds):  # i ascends, so each list comes out sorted by id
        for p in ps:
            succs[p].append(i)
    return succs


def subgraph_body(graph: Graph, members: Sequence[Node], name: str) -> Graph:
    """The body of a subgraph: one input per outer tensor, one output per tensor used outside."""
    produced = {t for n in members for t in n.outputs if t}
    inside = {n.name for n in members}
    inputs: dict[str, None] = {}
    for node in members:
        for t in graph.reads(node):
            if t not in produced:
                inputs[t] = None
    graph_outputs = set(graph.outputs)
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
    tensors: dict[str, TensorInfo] = {}
    for t in (*inputs, *produced):
        info = graph.info(t)
        if info.dtype or info.shape:
            tensors[t] = info
    return Graph.trusted(name, members, list(inputs), list(dict.fromkeys(outputs)), tensors, graph.opset)


# ------------------------------------------------------------ generic pass --
def generic_pass(prop: SubgraphProperty, state: PassState) -> Iterator[TraceEvent]:
    """Seed 000's algorithm over every node in id order."""
    total = len(state.order)
    for seed in range(total):
        if state.progress is not None and seed & 4095 == 0:
            state.progress(seed, total)
        if state.status[seed] != FREE:
            continue
        selector = _new_selector(prop)
        view = state.views[seed]
        chosen = _ask(selector.select, "select", view)
        if state.tracing:
            yield state.emit("seed", node=view.name, result=chosen)
        if not chosen:
            state.reasons.setdefault(view.name, f"not selected: {type(selector).__name__}.select "
                                                f"returned False for {view.op_type}")
            continue
        members = yield from _grow_acyclic(state, selector, seed)
        yield from _filter_and_create(prop, state, selector, seed, members)


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


def _grow_acyclic(state: PassState, selector: SubgraphSelector, seed: int) -> Iterator[TraceEvent]:
    """Grow from ``seed``; on a cycle exclude a node, reset and grow again (MXNet's rule)."""
    excluded: set[int] = set()
    while True:
        members = yield from _grow(state, selector, seed, excluded)
        if len(members) == 1:
            return members
        witness = state.cycles.find_cycle(members)
        if witness is None:
            return members
        victim = _victim(witness.offenders, seed)
        path = state.names(witness.path)
        name = state.order[victim].name
        state.cycle_log.append({"property": state.prop_name, "seed": state.order[seed].name,
                                "path": list(path), "excluded": name})
        state.reasons[name] = (f"excluded from the subgraph grown from {state.order[seed].name}: it would "
                               f"close the cycle {' -> '.join(path)}")
        if state.tracing:
            yield state.emit("cycle", node=state.order[seed].name, path=path,
                             candidates=state.names(members), reason=f"contracting would close {' -> '.join(path)}")
            yield state.emit("exclude", node=name, reason="highest id among the candidates on the cycle")
        if victim in excluded:  # the seed was the only re-entry, twice: it stays alone (MXNet's fallback)
            return [seed]
        excluded.add(victim)
        _ask(selector.reset, "reset")
        if state.tracing:
            yield state.emit("reset", node=state.order[seed].name)


def _victim(offenders: Sequence[int], seed: int) -> int:
    others = [i for i in offenders if i != seed]
    return max(others) if others else seed


def _grow(state: PassState, selector: SubgraphSelector, seed: int,
          excluded: set[int]) -> Iterator[TraceEvent]:
    """Breadth-first growth: select_input on producers, then select_output on consumers."""
    if not state.tracing and type(selector) is ContainOpSelector:
        return _grow_by_op(state, selector.op_types, seed, excluded)
    status, views, tracing = state.status, state.views, state.tracing
    members = [seed]
    in_set = {seed}
    head = 0  # members[head:] is the FIFO queue: nodes found and not yet expanded
    while head < len(members):
        cur = members[head]
        head += 1
        cur_view = views[cur]
        for direction, neighbours in (("select_input", state.preds[cur]), ("select_output", state.succs[cur])):
            method = selector.select_input if direction == "select_input" else selector.select_output
            for nb in neighbours:
                if nb in in_set:
                    continue
                if status[nb] != FREE or nb in excluded:
                    if tracing:
                        why = "excluded after a cycle" if nb in excluded else "already in a subgraph"
                        yield state.emit("refuse", node=cur_view.name, neighbour=views[nb].name,
                                         reason=why, candidates=state.snapshot(members))
                    continue
                ok = bool(_ask(method, direction, cur_view, views[nb]))
                if ok:
                    members.append(nb)
                    in_set.add(nb)
                else:
                    state.reasons.setdefault(views[nb].name, f"refused by {direction} from {cur_view.name}")
                if tracing:
                    yield state.emit(direction, node=cur_view.name, neighbour=views[nb].name, result=ok,
                                     candidates=state.snapshot(members), queue=state.snapshot(members, head))
    return members


def _grow_by_op(state: PassState, op_types: frozenset[str], seed: int, excluded: set[int]) -> list[int]:
    """``_grow`` for the built-in ContainOpSelector with tracing off.

    Its answers depend on the neighbour's op type alone, so they are computed
    once per pass instead of once per call; the nodes found, and their order,
    are exactly those of ``_grow``.
    """
    accept = state.accept_cache.get(op_types)
    if accept is None:
        accept = [n.op_type in op_types for n in state.order]
        state.accept_cache[op_types] = accept
    status, preds, succs = state.status, state.preds, state.succs
    members = [seed]
    in_set = {seed}
    queue = deque([seed])
    while queue:
        cur = queue.popleft()
        for nb in (*preds[cur], *succs[cur]):  # producers first, then consumers, as _grow asks
            if accept[nb] and nb not in in_set and status[nb] == FREE and nb not in excluded:
                members.append(nb)
                in_set.add(nb)
                queue.append(nb)
    return members


def _filter_and_create(prop: SubgraphProperty, state: PassState, selector: SubgraphSelector,
                       seed: int, members: list[int]) -> Iterator[TraceEvent]:
    views = state.views
    kept_views = _call_filter(selector, [views[i] for i in members])
    kept = [v.id for v in kept_views]
    if state.tracing:
        yield state.emit("filter", node=views[seed].name, candidates=state.names(members),
                         result=state.names(kept))
    kept_set = set(kept)
    for i in members:
        if i not in kept_set:
            state.reasons[views[i].name] = f"dropped by filter of the subgraph grown from {views[seed].name}"
    if not kept:
        return
    components = _components(state, kept)
    if len(components) > 1 and state.tracing:
        yield state.emit("split", node=views[seed].name, candidates=state.names(kept),
                         result=tuple(state.names(c) for c in components))
    for component in components:
        if len(components) > 1 and len(component) > 1:
            witness = state.cycles.find_cycle(component)
            if witness is not None:
                path = " -> ".join(state.names(witness.path))
                state.cycle_log.append({"property": state.prop_name, "seed": views[seed].name,
                                        "path": list(state.names(witness.path)), "excluded": None})
                for i in component:
                    state.reasons[views[i].name] = f"part of a filtered subgraph that would close the cycle {path}"
                if state.tracing:
                    yield state.emit("reject", node=views[seed].name, candidates=state.names(component),
                                     path=state.names(witness.path), reason="cycle after filter")
                continue
        node, sid = state.add_subgraph(prop, component)
        if state.tracing:
            if node is None:
                yield state.emit("reject", node=views[seed].name, candidates=state.names(component),
                                 subgraph_id=sid, reason="create_subgraph_node returned None")
            else:
                yield state.emit("subgraph", node=node.name, candidates=state.names(component),
                                 subgraph_id=sid, result=(list(node.inputs), list(node.outputs)))


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
