"""Profiling hooks: passed to an engine (``Engine(hooks=...)``), never global.

The engine calls ``hooks.fn_start(record)`` just before a function runs and
``hooks.fn_end(record)`` when it is complete (for an async function: when it
calls ``on_complete``; for a skipped function: ``fn_start`` is not called,
``fn_end`` is, with ``skipped=True``).  A ``FnRecord`` holds enough to draw a
timeline and to sum time per group of functions: name, context, worker thread,
stream, host start/end times, device events on GPU, and the error.

``Profiler`` is the ready-made hooks object; anything with the two methods works.
A hook that raises does not break the engine: its error is reported by the next
``wait_for_all``.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from .context import Context, FnProperty
from . import gpu


@dataclass(slots=True)
class FnRecord:
    """One run (or skip) of one pushed function."""

    name: str
    ctx: Context
    prop: FnProperty
    priority: int
    worker: str = ""                  # thread name that ran it ("" if skipped)
    stream: int | None = None         # cupy stream pointer on GPU, else None
    start_ns: int = 0                 # time.perf_counter_ns() at start
    end_ns: int = 0                   # ... at completion
    error: BaseException | None = None
    skipped: bool = False             # not run: an input held an error
    start_event: Any = field(default=None, repr=False)   # cupy timing events (GPU)
    end_event: Any = field(default=None, repr=False)

    @property
    def seconds(self) -> float:
        """Host wall time from start to completion."""
        return max(0, self.end_ns - self.start_ns) / 1e9

    def device_ms(self) -> float | None:
        """Device time between the GPU events, or None on CPU (waits for the GPU)."""
        if self.start_event is None or self.end_event is None:
            return None
        return gpu.elapsed_ms(self.start_event, self.end_event)


class EngineHooks(Protocol):
    """What an engine calls; both run on the worker thread, so keep them short."""

    def fn_start(self, record: FnRecord) -> None: ...

    def fn_end(self, record: FnRecord) -> None: ...


class Profiler:
    """Collects every ``FnRecord``; summarises them as a table or a trace."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.records: list[FnRecord] = []

    def fn_start(self, record: FnRecord) -> None:
        pass

    def fn_end(self, record: FnRecord) -> None:
        with self._lock:  # list.append is atomic, but clear() in reset() is not paired
            self.records.append(record)

    def reset(self) -> None:
        with self._lock:
            self.records = []

    def timeline(self) -> list[FnRecord]:
        """Records sorted by start time (skipped ones at their completion time)."""
        with self._lock:
            recs = list(self.records)
        return sorted(recs, key=lambda r: r.start_ns or r.end_ns)

    def total_by(self, key: Callable[[FnRecord], str] = lambda r: r.name) -> dict[str, float]:
        """Seconds summed per group (default: per function name). GPU: device time."""
        totals: dict[str, float] = defaultdict(float)
        for rec in self.timeline():
            if rec.skipped:
                continue
            ms = rec.device_ms()
            totals[key(rec)] += rec.seconds if ms is None else ms / 1e3
        return dict(totals)

    def errors(self) -> list[FnRecord]:
        return [r for r in self.timeline() if r.error is not None]

    def chrome_trace(self) -> str:
        """JSON for chrome://tracing or Perfetto: one lane per worker thread."""
        recs = self.timeline()
        t0 = min((r.start_ns or r.end_ns for r in recs), default=0)
        events = []
        for r in recs:
            start = r.start_ns or r.end_ns
            events.append({
                "name": r.name, "ph": "X", "pid": str(r.ctx), "tid": r.worker or "skipped",
                "ts": (start - t0) / 1e3, "dur": max(0, r.end_ns - start) / 1e3,
                "args": {"error": repr(r.error) if r.error else None,
                         "skipped": r.skipped, "stream": r.stream},
            })
        return json.dumps({"traceEvents": events})
