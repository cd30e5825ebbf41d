"""The state of one executor run (``_Run``), a bound node (``_Step``) and what a run
returns (``RunResult``); split from ``engine/executor.py``, which uses them.

``_Run`` holds the values of one run, the reference counts that free a tensor at
its last reader, peak-memory accounting and the per-node times; the executor's
engine functions and inline bodies write into it.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from partition.ir import Node

from .context import RunContext
from .values import SubgraphRecord, nbytes, to_numpy

# ------------------------------------------------------------ run records --
@dataclass
class RunResult:
    """What one run produced and measured."""

    outputs: dict[str, Any]
    node_seconds: dict[str, float]
    subgraphs: list[SubgraphRecord]
    peak_bytes: int
    weight_bytes: int
    seconds: float
    values: dict[str, Any] = field(default_factory=dict)   # every tensor, if kept
    device: str = "cpu"
    pool_peak_bytes: int | None = None   # GPU: cupy memory-pool used_bytes high-water mark

    def numpy_outputs(self) -> dict[str, np.ndarray]:
        return {k: to_numpy(v) for k, v in self.outputs.items()}


# ------------------------------------------------------------------- steps --
@dataclass
class _Step:
    """One node, bound: what it reads, what it writes, what runs it."""

    node: Node
    reads: tuple[str, ...]              # distinct tensors it depends on
    frees: tuple[str, ...]              # of those, the ones this run may drop
    call: Callable[["_Run", list, RunContext], tuple]
    weights: tuple[str, ...]            # weights among its reads (persistent vars)
    n_outputs: int                      # outputs the kernel must return (named ones)


class _Run:
    """The state of one run: values, variables, counts, measurements."""

    def __init__(self, ex: Any, outer: Mapping[str, Any], keep: bool) -> None:  # ex: its Executor
        self.ex = ex
        self.keep = keep
        self.outer = outer
        self.values: dict[str, Any] = {}
        self.refs: dict[str, int] = dict(ex._refcounts)
        self.lock = threading.Lock()
        self.live = 0
        self.peak = 0
        self.node_seconds: dict[str, float] = {}
        self.node_events: dict[str, tuple[Any, Any]] = {}
        self.subgraph_spans: list[tuple[SubgraphRecord, Any, Any]] = []  # GPU: device time read at the end
        self.subgraphs: list[SubgraphRecord] = []
        self.error: BaseException | None = None
        self.deferred: deque[tuple[Any, Any]] = deque()  # GPU: (array, event) freed once event done
        self.inputs_ready: Any = None   # GPU: recorded after the feeds' copies (Executor._start_run)
        self._ordered: set[int] = set()  # GPU: the streams already waiting for it
        self.pool = ex.xp.get_default_memory_pool() if ex.xp is not np else None
        self.pool_peak = self.pool.used_bytes() if self.pool is not None else None

    def order_after_inputs(self, stream: Any) -> None:
        """``stream`` waits (on the device) for the feeds' copies before this run's work on it."""
        ready = self.inputs_ready
        if ready is not None and stream.ptr not in self._ordered:
            self._ordered.add(stream.ptr)
            stream.wait_event(ready)

    def get(self, name: str) -> Any:
        if not name:
            return None
        v = self.values.get(name, _MISSING)
        if v is not _MISSING:
            return v
        w = self.ex._weights.get(name, _MISSING)
        if w is not _MISSING:
            return w
        v = self.outer.get(name, _MISSING)
        if v is not _MISSING:
            return v
        raise KeyError(f"tensor '{name}' has no value (freed too early, or never produced)")

    def put(self, name: str, value: Any) -> None:
        size = nbytes(value)
        with self.lock:
            self.values[name] = value
            self.live += size
            if self.live > self.peak:
                self.peak = self.live
            if self.pool is not None:
                self.pool_peak = max(self.pool_peak, self.pool.used_bytes())
            if self.refs.get(name) == 0 and not self.keep \
                    and name not in self.ex._outputs:
                self.live -= self._drop_locked(name, None)

    def store(self, names: Sequence[str], values: Sequence[Any], frees: Sequence[str],
              stream: Any, done_event: Any = None) -> None:
        """A node's outputs in, then its inputs released: ``put`` each, then
        ``release``, under one lock (this runs once per node). On a stream, the inputs it
        frees stay alive until an event after the node's kernels is done: ``done_event``
        (its timing end event) or one recorded here for all of them."""
        outputs, refs, keep, vals = self.ex._outputs, self.refs, self.keep, self.values
        with self.lock:
            live = self.live
            for name, value in zip(names, values):
                if not name:
                    continue
                vals[name] = value
                live += value.nbytes if value.__class__ is np.ndarray else nbytes(value)
                if live > self.peak:
                    self.peak = live
                if not keep and refs.get(name) == 0 and name not in outputs:
                    live -= self._drop_locked(name, None)
            if self.pool is not None:
                self.pool_peak = max(self.pool_peak, self.pool.used_bytes())
            if not keep:
                for t in frees:
                    n = refs[t] - 1
                    refs[t] = n
                    if n == 0 and t not in outputs:
                        if stream is not None and done_event is None:
                            done_event = self.ex._gpu_event(stream)
                        live -= self._drop_locked(t, stream, done_event)
            self.live = live

    def publish(self, names: Sequence[str], values: Sequence[Any], frees: Sequence[str],
                segment_peak: int) -> None:
        """What a generated segment (``engine/codegen.py``) hands over at its end: the
        tensors others read, the releases of what it read, and the most bytes it held
        at once (its locals and what it released, from what the run held when it
        started)."""
        with self.lock:
            if segment_peak > self.peak:
                self.peak = segment_peak
        self.store(names, values, frees, None)

    def release(self, name: str, count: int) -> int:
        """``count`` reads of ``name`` done (a generated segment's, at its last one):
        the bytes dropped, if that was the last read of the run."""
        with self.lock:
            n = self.refs[name] - count
            self.refs[name] = n
            if n == 0 and not self.keep and name not in self.ex._outputs:
                freed = self._drop_locked(name, None)
                self.live -= freed
                return freed
        return 0

    def _drop_locked(self, name: str, stream: Any, event: Any = None) -> int:
        """Drop ``name``'s value; the bytes it held (the caller takes them off ``live``)."""
        value = self.values.pop(name, None)
        if value is None:
            return 0
        if stream is not None:
            # Kernels reading it may still be queued on this stream: keep the array
            # alive until they are done, or the pool could hand it out to another
            # stream's work. Released oldest first, as far as the events say done: one
            # query per drop, where filtering the whole list queried every pending event.
            deferred = self.deferred
            deferred.append((value, event if event is not None else self.ex._gpu_event(stream)))
            while deferred and deferred[0][1].done:
                deferred.popleft()
        return value.nbytes if value.__class__ is np.ndarray else nbytes(value)


_MISSING = object()
