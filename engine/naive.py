"""NaiveEngine: runs each function at push time, in the caller. For debugging.

No queues and no threads: push order *is* run order, so the ordering rule holds
trivially, and a traceback points straight at the push.  An async function is
waited for (its ``on_complete``) before ``push_async`` returns; on GPU the
stream is synchronised after every function.  Errors, versions, skipping and
hooks behave exactly as in ``ThreadedEngine`` (the shared code is ``core.py``).
State: the core's ``version`` / ``error`` per variable and ``_pending`` /
``_errors`` / ``_failed_vars`` per engine; plus ``_streams`` (one per GPU).
"""

from __future__ import annotations

import threading
from typing import Any

from . import gpu
from .core import Block, Engine, Var, raise_error
from .errors import EngineTimeoutError
from .profiling import EngineHooks


class NaiveEngine(Engine):
    """Serial engine; worker-count arguments are accepted and ignored, so
    callers can switch engines by name (``SGLENS_ENGINE``) alone."""

    name = "naive"
    _lock_type = threading.Lock  # one thread pushes and runs: no convoy to avoid

    def __init__(self, hooks: EngineHooks | None = None, **_worker_counts: Any) -> None:
        super().__init__(hooks)
        self._streams: dict[int, Any] = {}

    def _push_block(self, block: Block, inline: bool = False) -> None:  # always inline
        with self._lock:
            self._admit_locked(block)
            self._pending += 1
        if block.is_async:  # completed by on_complete, maybe from another thread
            block.finished = threading.Event()
        stream = None
        if block.ctx.device_type == "cpu":
            if self._execute(block, None):
                self._complete(block, None, False)
        else:
            stream = self._streams.get(block.ctx.device_id)
            if stream is None:
                stream = self._streams[block.ctx.device_id] = gpu.new_stream(block.ctx.device_id)
            with stream:
                self._execute(block, stream)
        if block.finished is not None:
            block.finished.wait()
        if stream is not None:  # after on_complete: the work it enqueued too
            stream.synchronize()

    def _complete(self, block: Block, error: BaseException | None, original: bool) -> None:
        with self._lock:
            self._mark_vars_locked(block, error, original)
            self._pending -= 1
            if self._pending == 0 and self._idle_waiters:  # wake wait_for_all
                self._all_done.notify_all()
        if block.finished is not None:
            block.finished.set()

    def wait_for_var(self, var: Var, timeout: float | None = None) -> None:
        self._check_wait("wait_for_var", var)
        with self._lock:
            error = self._take_var_error_locked(var)
        raise_error(error)

    def wait_for_all(self, timeout: float | None = None) -> None:
        self._check_wait("wait_for_all", None)
        with self._lock:
            if not self._wait_idle_locked(timeout):
                raise EngineTimeoutError(f"wait_for_all timed out after {timeout}s")
            error = self._take_all_errors_locked()
        raise_error(error)
