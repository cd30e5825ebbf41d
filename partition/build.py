"""The pass driver: one loop for every partitioning algorithm, one record of its decisions.

``run_pass(prop, state, grower)`` is the subgraph API design's loop, shared by every backend:

    for each free node in id order:  grower.start(seed)     (select, or the backend's own test)
        grow -> cycle check -> exclude the highest re-entry point, reset, grow again
        filter -> split into connected pieces -> cycle check each -> create_subgraph_node

Only growth differs between algorithms, so it is a pluggable ``Grower``:
``BreadthFirst`` (the subgraph API design: FIFO, ``select_input`` on producers then
``select_output`` on consumers) here, the TensorRT depth-first growth with
incompatibility tracking (the TensorRT integration design) in ``partition/tensorrt/algorithm.py``.

The state and record a pass reads and writes (``PassState``: ids, adjacency,
statuses, reasons, the cycle log, the subgraphs so far) are ``partition/state.py``.

Trace events are ``EventKind``s emitted through ``state.emit`` (built only when
tracing). Where MXNet ignores subgraphs formed earlier in its cycle check,
bounds its search, and neither splits nor re-checks filtered subgraphs, we do
all four exactly; see ``partition/cycles.py``. For selectors that judge a node
by itself (the built-in ``ContainOpSelector``) with tracing off, the exclusion
loop runs incrementally (``partition/trim.py``) with the same exclusions.

What made it fast (issue 10; ``bench/partition.py --sizes 100000 --no-cli``, process
CPU of the pass on a 100k-node chain with skips, 2-core machine, load ~4): ``default``
1.60-1.65 s -> 1.07-1.12 s, ``tensorrt fast`` 1.06-1.08 s -> 0.78-0.79 s, partitions
and every exclusion unchanged. The collector's survivors are handed to the oldest
generation instead of walked (``gcpause.py``); ids and edges are built once per graph
without remapping (``adjacency.py``); with a fixed op table and tracing off the seed
loop makes plain calls (``_run_fixed``), growth marks the trimmer's flags and collects
the exits its first reach spreads from, and the exclusion loop is one inline function
(``trim.py``); exclusions, unselected seeds and cycle reasons are recorded as ids and
made into ``Reason`` objects when read (``state.py``, ``trace.CycleLog``); TensorRT
remembers passing type signatures (``tensorrt/rules.py``) and grows without building
an edge tuple per push (``tensorrt/algorithm.py``).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Callable, Iterator

from .adjacency import adjacency, seed_order  # noqa: F401 - re-exported
from .errors import SelectorError
from .selectors import ContainOpSelector, NodeView, SubgraphSelector
from .state import FREE, REJECTED, TAKEN, PassState, Tracer, subgraph_body  # noqa: F401 - re-exported
from .trace import EventKind, TraceEvent

if TYPE_CHECKING:  # api.py imports this module; the property is only a type here
    from .api import SubgraphProperty


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
    """The subgraph API design's growth through a user ``SubgraphSelector`` (a fresh one per seed)."""

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
    """The subgraph API design's algorithm: the driver with breadth-first growth through ``prop``'s selectors."""
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
