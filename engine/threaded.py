"""ThreadedEngine: worker pools per device run the blocks the core makes ready.

STATE -- beyond the core's (``core.py``), all guarded by ``Engine._lock``:

``_Pool`` (one per ``(device type, device id, kind)``, made on first use; kind is
``normal``, ``prio`` for the *_PRIORITIZED properties, ``copy`` for GPU copies)
  ``fifo``      ready blocks of priority 0 (nearly all), in the order they became
                ready (a deque: O(1) where a heap's pop compared tuples log n times)
  ``heap``      ``(-priority, seq, Block)`` ready blocks of other priorities: a
                positive one runs before the fifo, a negative one after it; ties
                in push order
  ``threads``   live worker threads
  ``idle``      workers waiting on ``cond`` and not yet woken (the waker counts
                them off, so a dispatch sees a woken worker as awake)
  ``blocked``   workers inside a nested wait (see below)
  ``target``    workers wanted running (not blocked)
  ``closing``   ``shutdown()`` was called: workers leave once nothing is ready

``ThreadedEngine``
  ``_pools``    pool key -> ``_Pool``
  ``_streams``  every GPU worker's stream (``wait_for_all`` synchronises them)
  ``_closed``   pushes are refused after ``shutdown()``
  ``_running``  seq -> Block for blocks dispatched and not complete (timeouts
                name them: an async function that never calls on_complete)
  ``_cpu_pool`` the normal CPU pool once made (most dispatches go there)

A worker takes the lock once per function: it releases the block it ran (its
variables, and its successors dispatched -- the first one to its own pool
without a wake-up, as it pops next) and pops the next block in one section.

``_WaitFor`` (one per ``wait_for_var`` call that has to wait)
  ``event``     set when granted; ``error`` / ``events`` taken from the variable
  ``abandoned`` its waiter timed out: leave the variable's error in place

NESTED WAITS (the control-flow design's deadlock: operators waiting for the subgraphs they
pushed while no thread is left to run them).  A worker that blocks in
``wait_for_var`` is *compensated*: its pool counts it as blocked and starts a
spare worker if fewer than ``target`` are left running; surplus workers leave
when they next find nothing ready.  So with one worker, a function that pushes
work and waits for it gets a second thread for the duration.  We rejected
help-while-waiting (the waiter runs queued work on its own stack): a helped
function that needs the waiter's own completion can never return to it, so the
waiter is stuck under it -- a deadlock compensation cannot have.  The price is
one thread start per nested wait that finds no spare worker.

Pushing is thread-safe (the engine design's is not): every push and completion takes the
one engine lock.
"""

from __future__ import annotations

import heapq
import os
import threading
import time
from collections import deque
from itertools import count
from typing import Any

from . import gpu
from .context import Context, FnProperty
from .core import (DELETE_VAR, NORMAL, Block, Engine, Var, _grant_head, _tls, append_write,
                   raise_error, release_write)
from .errors import EngineClosedError, EngineTimeoutError
from .profiling import EngineHooks

_PRIO = frozenset({FnProperty.CPU_PRIORITIZED, FnProperty.GPU_PRIORITIZED})
_COPY = frozenset({FnProperty.COPY_FROM_GPU, FnProperty.COPY_TO_GPU})
_CPU_NORMAL = ("cpu", 0, "normal")
_CPU = Context("cpu")
#: Pushed-and-not-complete functions past which the pusher hands the GIL to the
#: workers (one ``time.sleep(0)`` every 64 pushes).  A pusher that keeps the GIL
#: runs thousands of functions ahead; those live blocks trigger the collector's
#: older generations and leave the workers cold caches (bench/engine.py, 10k
#: no-ops, 2 CPUs, interleaved medians of 9 on a loaded machine: chain 10.2 -> 8.5
#: us, fan 10.0 -> 8.5 us; on a quieter one within noise; collections 157 -> 12
#: per 50k pushes).  Sleeping, not waiting on the backlog, so a
#: pusher that an async function's completion depends on never deadlocks.
_BACKLOG = 256


class _Pool:
    """Workers of one device and kind, sharing their ready blocks."""

    def __init__(self, engine: "ThreadedEngine", key: tuple[str, int, str], target: int) -> None:
        self.engine = engine
        self.key = key
        self.fifo: deque[Block] = deque()
        self.heap: list[tuple[int, int, Block]] = []
        self.cond = threading.Condition(engine._lock)
        self.threads: set[threading.Thread] = set()
        self.idle = 0
        self.busy = 0   # workers inside a function (between pop and completion)
        self.blocked = 0
        self.target = max(1, target)
        self.closing = False
        self._names = count()

    def spawn_locked(self) -> None:
        dev, dev_id, kind = self.key
        t = threading.Thread(target=self.engine._work, args=(self,), daemon=True,
                             name=f"sglens-{dev}{dev_id}-{kind}-{next(self._names)}")
        self.threads.add(t)
        t.start()  # the new thread needs no lock to start: safe under ours

    def wake_locked(self) -> None:
        """Wake one idle worker; it stops counting as idle now, not when it runs,
        so the next dispatch sees it as awake and does not wake a second."""
        self.idle -= 1
        self.cond.notify()

    def compensate_locked(self) -> None:
        """Keep ``target`` workers running while some are blocked in waits."""
        if (self.fifo or self.heap) and self.idle:  # a block left un-notified for this worker
            self.wake_locked()
        if not self.closing and len(self.threads) - self.blocked < self.target:
            self.spawn_locked()


class _WaitFor(Block):
    """One ``wait_for_var`` in its variable's queue: a block that runs nothing."""

    __slots__ = ("event", "error", "events", "abandoned")
    is_wait = True

    def __init__(self, engine: "ThreadedEngine", var: Var) -> None:
        # Queued as a write: it waits for every earlier read *and* write of the
        # variable (the seed: "all Fn that involves (use/mutate)" it).
        super().__init__(engine, _wait_fn, (), (var,), FnProperty.NO_SKIP, False,
                         f"wait_for_var({var.name})", _CPU, 0, next(engine._seq))
        self.wait = 1
        self.event = threading.Event()
        self.error: BaseException | None = None
        self.events: list[Any] = []
        self.abandoned = False


def _wait_fn(_rc: Any) -> None:
    """A wait's function: never called (the grant itself completes the wait)."""


class ThreadedEngine(Engine):
    """Runs functions on worker threads, in parallel where the rule allows."""

    name = "threaded"

    def __init__(self, num_cpu_workers: int | None = None, num_gpu_workers: int = 2,
                 num_prio_workers: int = 1, num_copy_workers: int = 1,
                 hooks: EngineHooks | None = None) -> None:
        super().__init__(hooks)
        self._targets = {"cpu": num_cpu_workers or os.cpu_count() or 1,
                         "gpu": num_gpu_workers, "prio": num_prio_workers,
                         "copy": num_copy_workers}
        self._pools: dict[tuple[str, int, str], _Pool] = {}
        self._streams: list[Any] = []
        self._closed = False
        self._running: dict[int, Block] = {}
        self._cpu_pool: _Pool | None = None  # the normal CPU pool, found without a key

    # --- push and complete (the core's rule, under the lock) ----------------

    def _push_block(self, block: Block, inline: bool = False) -> None:
        lock = self._lock
        lock.try_acquire(False) or lock.acquire()  # `with lock` would add two Python calls
        try:
            if self._closed:
                raise EngineClosedError(f"{block.name}: pushed after shutdown(); make a new engine")
            if block.prop is DELETE_VAR or self._deleted_seen:
                self._admit_locked(block)
            self._pending += 1
            backlog = self._pending
            wait = 0  # append_read / append_write inlined: the hot path of a push
            for v in block.const_vars:
                if v._writing or v._queue:
                    v._queue.append((block, False))
                    wait += 1
                else:
                    v._readers += 1
            for v in block.mutable_vars:
                if v._writing or v._readers or v._queue:
                    v._queue.append((block, True))
                    wait += 1
                else:
                    v._writing = True
            block.wait = wait  # the push is whole: from here grants may start it
            run_here = not wait and inline and block.ctx.device_type == "cpu"
            if run_here:
                self._running[block.seq] = block
                block.inline = True
            elif not wait:
                self._dispatch_locked(block)
        finally:
            lock.release()
        if run_here:
            if self._execute(block, None):  # ready and small: on this thread, as a worker would
                self._complete(block, None, False)
        elif backlog > _BACKLOG and not backlog & 63:
            time.sleep(0)  # the GIL to the workers: see _BACKLOG

    def _complete(self, block: Block, error: BaseException | None, original: bool) -> None:
        # Completed inside _execute (errors, hooks, GPU) on a worker, which pops next.
        tls = _tls.__dict__
        own = tls.get("pool") if tls.get("block") is block and not block.inline else None
        with self._lock:
            self._release_locked(block, error, original, own)

    def _release_locked(self, block: Block, error: BaseException | None, original: bool,
                        own: _Pool | None, take: bool = False) -> Block | None:
        """Count the block's writes, grant its variables to the next in their queues.
        ``own``: the pool of the worker that ran it and pops next, so its first ready
        successor there needs no wake-up (waking an idle peer instead makes a chain
        ping-pong between threads, measured ~2x slower).  ``take``: that worker runs
        the block's only ready successor itself when its pool has nothing queued --
        returned, not pushed on the heap and popped again."""
        if error is None and not self._gpu_seen:
            for v in block.mutable_vars:  # _mark_vars_locked's common case
                v.version += 1
        else:
            self._mark_vars_locked(block, error, original)
        del self._running[block.seq]
        ready: list[Block] = []
        for v in block.const_vars:
            v._readers -= 1
            if v._readers == 0 and v._queue:
                _grant_head(v, ready)
        for v in block.mutable_vars:
            v._writing = False
            if v._queue:
                _grant_head(v, ready)
        successor = None
        if (take and len(ready) == 1 and not own.fifo and not own.heap and own is self._cpu_pool  # type: ignore[union-attr]
                and ready[0].prop is NORMAL and ready[0].ctx.device_type == "cpu"):
            successor = ready[0]
            self._running[successor.seq] = successor
        else:
            for b in ready:
                own = self._dispatch_locked(b, own)
        self._pending -= 1
        if self._pending == 0 and self._idle_waiters:  # wake wait_for_all
            self._all_done.notify_all()
        return successor

    def _dispatch_locked(self, block: Block, quiet: _Pool | None = None) -> _Pool | None:
        """Hand a ready block to its pool (or finish a wait_for_var in place).

        No notify if the pool is ``quiet`` (the caller's worker takes it next);
        returns the ``quiet`` left for the next dispatch (only one block is free).
        An idle worker is woken only when the ready blocks outnumber the
        workers awake and between two functions (about to pop): each wake-up is
        a system call and a GIL hand-off (~5-10 us), more than a small function
        costs.  A worker running a function does not count: it may run long.
        """
        if block.is_wait:
            self._grant_wait_locked(block)
            return quiet
        pool = self._cpu_pool
        if pool is None or block.prop is not NORMAL or block.ctx.device_type != "cpu":
            pool = self._pool_for_locked(block.prop, block.ctx)
        if block.priority:
            heapq.heappush(pool.heap, (-block.priority, block.seq, block))
        else:
            pool.fifo.append(block)
        self._running[block.seq] = block
        if pool is quiet:
            return None
        if pool.idle and (len(pool.fifo) + len(pool.heap)
                          > len(pool.threads) - pool.idle - pool.blocked - pool.busy):
            pool.wake_locked()
        return quiet

    def _pool_for_locked(self, prop: FnProperty, ctx: Context) -> _Pool:
        if ctx.device_type == "cpu":
            key = ("cpu", 0, "prio" if prop in _PRIO else "normal")
        else:
            key = ("gpu", ctx.device_id,
                   "prio" if prop in _PRIO else "copy" if prop in _COPY else "normal")
        dev, _, kind = key
        if key in self._pools:
            return self._pools[key]
        target = self._targets["cpu" if dev == "cpu" and kind == "normal" else
                               "gpu" if kind == "normal" else kind]
        pool = self._pools[key] = _Pool(self, key, target)
        if key == _CPU_NORMAL:
            self._cpu_pool = pool
        for _ in range(pool.target):
            pool.spawn_locked()
        return pool

    # --- workers ------------------------------------------------------------

    def _work(self, pool: _Pool) -> None:
        """A worker: pop the best ready block, run it, repeat; leave when surplus."""
        stream = None
        if pool.key[0] == "gpu":
            stream = gpu.new_stream(pool.key[1])
            stream.use()  # cupy calls in functions default to this worker's stream
            with self._lock:
                self._streams.append(stream)
        _tls.pool = pool
        me = threading.current_thread()
        fifo, heap, lock = pool.fifo, pool.heap, self._lock
        block: Block | None = None
        done = False  # the last block ran and waits for its release (below)
        while True:
            # One critical section finishes the last block and pops the next.
            lock.try_acquire(False) or lock.acquire()
            try:
                successor = None
                if done:  # its one ready successor comes straight back (a chain)
                    successor = self._release_locked(block, None, False, pool, True)  # type: ignore[arg-type]
                if successor is not None:
                    block = successor
                else:
                    if block is not None:
                        pool.busy -= 1
                    while not (fifo or heap):
                        if pool.closing or len(pool.threads) - pool.blocked > pool.target:
                            pool.threads.discard(me)
                            return
                        pool.idle += 1  # the waker takes it off (wake_locked)
                        pool.cond.wait()
                    if heap and (heap[0][0] < 0 or not fifo):  # a priority above 0 first
                        block = heapq.heappop(heap)[2]
                    else:
                        block = fifo.popleft()
                    pool.busy += 1
            finally:
                lock.release()
            done = self._execute(block, stream)

    def _blocking_wait(self, event: threading.Event, timeout: float | None) -> bool:
        """Wait on ``event``; a worker thread is compensated while it waits."""
        pool: _Pool | None = getattr(_tls, "pool", None)
        if pool is None:
            return event.wait(timeout)
        with pool.engine._lock:
            pool.blocked += 1
            pool.compensate_locked()
        try:
            return event.wait(timeout)
        finally:
            with pool.engine._lock:
                pool.blocked -= 1

    # --- waits --------------------------------------------------------------

    def wait_for_var(self, var: Var, timeout: float | None = None) -> None:
        """Wait for all work pushed so far on ``var``; raise its error, once."""
        self._check_wait("wait_for_var", var)
        waiter = None
        with self._lock:
            if var._writing or var._readers or var._queue:
                # Busy: a waiter queued as a write is granted after every earlier
                # read and write of the variable (_grant_wait_locked).
                waiter = _WaitFor(self, var)
                append_write(var, waiter)
            else:
                # Idle (the common case after inline runs): granted at once, with
                # no waiter to make and signal (a third of a small run's cost).
                error = self._take_var_error_locked(var)
                events = [e for e in [var._write_event, *var._read_events] if e is not None]
        if waiter is not None:
            if not waiter.event.is_set() and not self._blocking_wait(waiter.event, timeout):
                with self._lock:
                    waiter.abandoned = not waiter.event.is_set()
                if waiter.abandoned:
                    raise EngineTimeoutError(
                        f"wait_for_var({var.name}) timed out after {timeout}s; started and "
                        f"not complete on it: {self._running_names(var)}; queued: "
                        f"{[n for n, _ in var.state()['queued'][:5]]}")
            error, events = waiter.error, waiter.events
        for e in events:  # GPU producers: the host waits for their events
            e.synchronize()
        raise_error(error)

    def _grant_wait_locked(self, block: Block) -> None:
        waiter: _WaitFor = block  # type: ignore[assignment]
        var = waiter.mutable_vars[0]
        if not waiter.abandoned:
            waiter.error = self._take_var_error_locked(var)
            waiter.events = [e for e in [var._write_event, *var._read_events] if e is not None]
        ready: list[Block] = []
        release_write(var, ready)  # no version bump: a wait writes nothing
        for b in ready:
            self._dispatch_locked(b)
        waiter.event.set()

    def wait_for_all(self, timeout: float | None = None) -> None:
        """Wait until no pushed function is pending; raise the first unreported error."""
        self._check_wait("wait_for_all", None)
        with self._lock:
            done = self._wait_idle_locked(timeout)
            pending, streams = self._pending, list(self._streams)
        if not done:
            raise EngineTimeoutError(
                f"wait_for_all timed out after {timeout}s with {pending} function(s) "
                f"pending, started: {self._running_names(None)} (an async function "
                "that never calls on_complete stays pending forever)")
        for s in streams:
            s.synchronize()
        with self._lock:
            error = self._take_all_errors_locked()
        raise_error(error)

    def _running_names(self, var: Var | None) -> list[str]:
        with self._lock:
            blocks = list(self._running.values())
        return [b.name for b in blocks
                if var is None or var in b.const_vars or var in b.mutable_vars][:5]

    def shutdown(self, wait: bool = True) -> None:
        """Stop the workers (after pending work, if ``wait``); refuse pushes after."""
        with self._lock:
            if wait:
                self._wait_idle_locked()
            self._closed = True
            threads = []
            for pool in self._pools.values():
                pool.closing = True
                pool.idle = 0
                pool.cond.notify_all()
                threads += pool.threads
        for t in threads:
            if t is not threading.current_thread():
                t.join(timeout=5)

    @property
    def num_cpu_workers(self) -> int:
        """Target size of the normal CPU pool (BLAS threads are shared out by it)."""
        return self._targets["cpu"]

    def num_threads(self) -> int:
        """Live worker threads over all pools (tests check spares leave)."""
        with self._lock:
            return sum(len(p.threads) for p in self._pools.values())
