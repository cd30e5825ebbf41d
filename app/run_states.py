"""The states of a run and the moves between them, written down once.

Modelled on Dask's own task states (a table of allowed transitions, every move checked)::

    queued --> running --> done | failed | cancelled | interrupted
      |
      +--> done | failed | cancelled      (ended before its first progress reached the server)

A queued run never becomes ``interrupted``: it did not start, so nothing was interrupted.
When the server stops (or is found gone at the next start) with runs in flight, a running
run is ``interrupted`` and a queued one ``failed`` with "never started" (``lost_with_server``).
The end states are final: nothing moves a run out of them (the store enforces it too).
"""

from __future__ import annotations

from enum import Enum


class RunState(str, Enum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"

    @property
    def final(self) -> bool:
        return not TRANSITIONS[self]


TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    RunState.QUEUED: frozenset({RunState.RUNNING, RunState.DONE, RunState.FAILED, RunState.CANCELLED}),
    RunState.RUNNING: frozenset({RunState.DONE, RunState.FAILED, RunState.CANCELLED, RunState.INTERRUPTED}),
    RunState.DONE: frozenset(),
    RunState.FAILED: frozenset(),
    RunState.CANCELLED: frozenset(),
    RunState.INTERRUPTED: frozenset(),
}

#: the states as the strings stored and sent (``Job.status``, the ``runs.status`` column, the API)
FINAL: tuple[str, ...] = tuple(s.value for s in RunState if s.final)
IN_FLIGHT: tuple[str, ...] = tuple(s.value for s in RunState if not s.final)

NEVER_STARTED = ("never started: the server stopped before a worker took this run; run it again")
INTERRUPTED = "interrupted: the server stopped while this run was running; run it again"


def can_move(current: str, to: str) -> bool:
    """Whether a run in ``current`` may move to ``to`` (both state strings)."""
    return RunState(to) in TRANSITIONS[RunState(current)]


def lost_with_server(current: str) -> tuple[str, str, str]:
    """(status, error, message) for a run left in flight by a server that stopped."""
    if RunState(current) is RunState.QUEUED:
        return RunState.FAILED.value, NEVER_STARTED, "never started (the server stopped first)"
    return RunState.INTERRUPTED.value, INTERRUPTED, "interrupted by a server restart"
