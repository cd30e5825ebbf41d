"""Debug sessions: one live ``PartitionRun`` per browser tab, stepped on demand.

A session holds the run's event generator and every event seen so far, so
"back", "first" and any earlier step are answered from the list and "forward"
pulls one more event from the live generator: a plugin's selector runs for
real, one call at a time. Session ids are random (``secrets``): a tab sees
only the session it created. The store keeps at most ``max_sessions`` and a
byte estimate per client (``app.quota``): a client over its share loses its own
least recently used sessions, not other clients'. Over the count, the oldest
session of the remote address holding the most sessions goes (addresses, as in
the quota: fresh cookies from one address add up and evict their own).
"""

from __future__ import annotations

import bisect
import secrets
import threading
import time
from collections import OrderedDict
from typing import Any, Callable, Iterator

from partition.errors import LensError, SelectorError
from partition.ir import Graph
from partition.runner import PartitionRun
from partition.trace import EVENT_KINDS, TraceEvent

from .errors import ApiError
from .quota import BYTES_PER_EVENT, BYTES_PER_NODE, ClientQuota, group_of

#: Largest number of events a "run to" call pulls at once.
MAX_RUN = 2_000_000


class DebugSession:
    def __init__(self, sid: str, model_id: str, graph: Graph, run: PartitionRun, label: str,
                 max_events: int = MAX_RUN) -> None:
        self.id = sid
        self.max_events = max_events
        self.model_id = model_id
        self.graph = graph
        self.run = run
        self.label = label
        self.events: list[TraceEvent] = []
        self.done = False
        self.error: str | None = None
        self._gen: Iterator[TraceEvent] = run.events()
        self.lock = threading.Lock()
        self.last_used = time.time()
        self.groups: dict[str, list[str]] = {}     # subgraph node -> original members
        self.subgraph_steps: list[int] = []          # indexes of "subgraph" events
        self.members: list[list[str]] = []           # their original members

    # ---- pulling events ----
    def _pull(self) -> bool:
        if self.done:
            return False
        if len(self.events) >= self.max_events:   # the trace would outgrow the client's share
            self.done = True
            self.error = (f"the trace is longer than {self.max_events} events, more than this server keeps "
                          "for one client (SGLENS_CLIENT_CACHE_BYTES); debug a smaller model or a narrower "
                          "selection")
            return False
        try:
            event = next(self._gen)
        except StopIteration:
            self.done = True
            return False
        except LensError as exc:
            self.done, self.error = True, str(exc)
            return False
        except Exception as exc:  # noqa: BLE001 - a plugin's code: report it, keep serving
            self.done, self.error = True, f"{type(exc).__name__}: {exc}"
            return False
        if event.kind == "subgraph":
            flat = [m for c in event.candidates for m in self.groups.get(c, [c])]
            if event.node:
                self.groups[event.node] = flat
            self.subgraph_steps.append(len(self.events))
            self.members.append(flat)
        self.events.append(event)
        return True

    def ensure(self, index: int) -> None:
        while len(self.events) <= index and self._pull():
            pass

    def run_until(self, start: int, match: Callable[[TraceEvent], bool]) -> tuple[int, bool]:
        """``(index, hit)``: the first event after ``start`` matching ``match`` and True; else the
        last event reached (the trace's end, or ``MAX_RUN`` events on) and False, so the page can
        say the breakpoint was not reached instead of showing the last event as if it matched."""
        i = start + 1
        pulled = 0
        while True:
            self.ensure(i)
            if i >= len(self.events):
                return len(self.events) - 1, False
            if match(self.events[i]):
                return i, True
            i += 1
            pulled += 1
            if pulled > MAX_RUN:
                return i - 1, False

    def original(self, name: str | None) -> list[str]:
        if not name:
            return []
        return self.groups.get(name, [name])

    def state(self, index: int) -> dict[str, Any]:
        """What the page needs to draw step ``index``: the event and the subgraphs made up to it."""
        from .serialize import event_json
        from .teaching import explain, selector_call
        if index < 0:
            return {"index": -1, "known": len(self.events), "done": self.done, "error": self.error,
                    "event": None, "subgraphs": []}
        e = self.events[index]
        data = event_json(e, explain(e, self.graph))
        data["call"] = selector_call(e)
        upto = bisect.bisect_right(self.subgraph_steps, index)
        expand = lambda names: [m for n in names for m in self.original(n)]  # noqa: E731
        return {
            "index": index, "known": len(self.events), "done": self.done,
            "error": self.error if self.done and index == len(self.events) - 1 else None,
            "event": data,
            "highlight": {"node": self.original(e.node), "neighbour": self.original(e.neighbour),
                          "candidates": expand(e.candidates), "queue": expand(e.queue),
                          "path": expand(e.path)},
            "subgraphs": [{"id": self.events[s].subgraph_id, "nodes": self.members[k]}
                          for k, s in enumerate(self.subgraph_steps[:upto])],
        }


def breakpoint_matcher(graph: Graph, spec: dict[str, Any]) -> Callable[[TraceEvent], bool]:
    """A predicate from ``{"node": name, "op": op_type, "kind": kind, "cycle": true}`` (any of them)."""
    node = spec.get("node") or None
    op = spec.get("op") or None
    kind = spec.get("kind") or None
    cycle = bool(spec.get("cycle"))
    if kind is not None and kind not in EVENT_KINDS:
        raise ApiError(f"unknown event kind '{kind}'; one of {', '.join(EVENT_KINDS)}")
    if not (node or op or kind or cycle):
        raise ApiError("a breakpoint needs 'node', 'op', 'kind' or 'cycle'")
    by_name = graph.node_by_name
    # A name or op type the model lacks can never match: refuse it, rather than run to the
    # end of the trace as if the user had asked for that.
    if node is not None and node not in by_name:
        holder = _body_holder(graph, node)
        if holder is not None:   # the selector steps over the top-level graph only
            raise ApiError(f"node '{node}' is inside the body of '{holder}': the selector steps over the "
                           f"top-level graph, so break at '{holder}'")
        raise ApiError(f"no node named '{node}' in this model; give a node name as the graph shows it")
    if op is not None and all(n.op_type != op for n in graph.nodes):
        raise ApiError(f"no node of op type '{op}' in this model (op types are case-sensitive, e.g. 'Conv')")

    def op_of(name: str | None) -> str | None:
        n = by_name.get(name or "")
        return n.op_type if n is not None else None

    def match(e: TraceEvent) -> bool:
        if cycle and e.kind == "cycle":
            return True
        if kind and e.kind == kind:
            return True
        if node and node in (e.node, e.neighbour):
            return True
        if op and op in (op_of(e.node), op_of(e.neighbour)):
            return True
        return False
    return match


def _body_holder(graph: Graph, name: str) -> str | None:
    """The top-level node whose bodies (at any depth) hold a node named ``name``, if any."""
    for top in graph.nodes:
        stack = list(top.subgraphs.values())
        while stack:
            body = stack.pop()
            for n in body.nodes:
                if n.name == name:
                    return top.name
                stack.extend(n.subgraphs.values())
    return None


class SessionStore:
    """Live debug sessions, limited by count and by estimated bytes per client (``quota``)."""

    def __init__(self, max_sessions: int = 64, total_bytes: int = 1 << 30, client_bytes: int = 256 << 20) -> None:
        self.max_sessions = max_sessions
        self._quota: ClientQuota[DebugSession] = ClientQuota(total_bytes, client_bytes)
        self._order: OrderedDict[str, str] = OrderedDict()   # sid -> client, oldest first
        self._lock = threading.Lock()

    def create(self, model_id: str, graph: Graph, backend: str, options: dict[str, Any],
               properties: list | None = None, client: str = "-") -> DebugSession:
        try:
            # the properties were built from ``options`` by the API (``selection``); the run takes them as they are
            run = PartitionRun(graph, backend, trace=True, properties=properties) if properties is not None \
                else PartitionRun(graph, backend, trace=True, **options)
        except LensError:
            raise
        except Exception as exc:  # noqa: BLE001 - a plugin's factory raised
            raise SelectorError(f"backend '{backend}' could not be set up: {type(exc).__name__}: {exc}") from None
        sid = secrets.token_urlsafe(16)
        base = len(graph.nodes) * BYTES_PER_NODE
        max_events = max(1000, (self._quota.client_bytes - base) // BYTES_PER_EVENT)
        session = DebugSession(sid, model_id, graph, run, backend, max_events=max_events)
        with self._lock:
            self._quota.put(sid, session, client, session_bytes(session))
            self._order[sid] = client
            # Over the count: the oldest session of the address holding the most sessions goes
            # (grouped by address: fresh cookies from one address cannot outvote another).
            for gone in [k for k in self._order if k not in self._quota]:
                self._order.pop(gone, None)
            while len(self._order) > self.max_sessions:
                counts: dict[str, int] = {}
                for c in self._order.values():
                    counts[group_of(c)] = counts.get(group_of(c), 0) + 1
                others = [(k, c) for k, c in self._order.items() if k != sid]
                victim = max(others, key=lambda kc: counts[group_of(kc[1])])[0]   # oldest of the biggest
                self._quota.pop(victim)
                self._order.pop(victim, None)
        return session

    def get(self, sid: str) -> DebugSession:
        session = self._quota.get(sid)
        if session is None:
            raise ApiError("no such debug session (it may have expired); start a new one", 404)
        session.last_used = time.time()
        return session

    def charge(self, session: DebugSession) -> None:
        """Re-estimate a session's bytes after it pulled events."""
        self._quota.resize(session.id, session_bytes(session))

    def delete(self, sid: str) -> None:
        with self._lock:
            self._quota.pop(sid)
            self._order.pop(sid, None)

    def usage(self) -> dict[str, int]:
        return self._quota.usage()

    def __len__(self) -> int:
        return len(self._quota)


def session_bytes(session: DebugSession) -> int:
    return len(session.graph.nodes) * BYTES_PER_NODE + len(session.events) * BYTES_PER_EVENT
