"""The dependency engine's core: variables, operators, the ordering rule.

The rule (the dependency-engine design): *two functions that share a variable which at least one of
them mutates run in push order; functions that only read a variable may run in
parallel.*  It is kept with one FIFO queue per variable, as in MXNet's
``ThreadedVar``.

STATE -- the whole of it, all guarded by the engine's one lock ``Engine._lock``
(one lock, because under the GIL finer locks buy nothing and cost correctness):

``Var`` (one per ``new_variable()``)
  ``version``       int; +1 per completed write (ran, failed or was skipped)
  ``error``         exception of the last write that failed or was skipped, or None;
                    cleared when ``wait_for_var`` raises it, or by ``wait_for_all``
  ``_readers``      int; granted reads not yet complete
  ``_writing``      bool; a granted write is not yet complete
  ``_queue``        deque of ``(Block, is_write)`` waiting, in push order; its head
                    is never grantable at rest (a write behind readers, or
                    anything behind a writer)
  ``_deleted``      bool; ``delete_variable`` was pushed: later pushes are refused
  ``_write_event``  GPU event recorded after the last write, or None (CPU write)
  ``_read_events``  GPU events recorded after each read since the last write

``Block`` (one push of one function; it carries the function, its property and
its checked variable lists, fixed at push -- the Operator's, or push_sync's own)
  ``wait``          grants still missing; +1 while the push is in progress so a
                    half-pushed block never starts; 0 means ready to run
  ``done``          completed (a second ``on_complete`` is an error)
  ``stream``        the GPU stream it ran on (None on CPU / not yet run)
  ``record``        its ``FnRecord`` while hooks are set, else None
  ``finished``      NaiveEngine only: set on completion (async functions)
  ``inline``        ThreadedEngine: pushed with ``inline=True`` and run by the pusher

``Engine``
  ``_pending``      pushed user blocks not yet complete (``wait_for_all`` waits for 0)
  ``_errors``       ``(push seq, error)`` of original errors (not inherited ones)
                    not yet reported; raised in push order
  ``_failed_vars``  variables whose ``error`` is set
  ``_deleted_seen`` a ``delete_variable`` was pushed: pushes check their variables
  ``_idle_waiters`` threads waiting for ``_pending == 0`` (completions notify only then)
  ``_cpu_run_ctx``  the RunContext last given on CPU, given again for the same ctx

The threaded engine adds its worker pools (``threaded.py``, state listed there).
A variable in both lists of one push counts as mutated only, so a push never
waits for itself.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from itertools import count
from typing import Any, Callable, Iterable, Sequence

from . import gpu
from .context import Context, FnProperty, RunContext
from .errors import (DeadlockError, OnCompleteError, OperatorError,
                     VariableError)
from .locks import YieldingLock
from .profiling import EngineHooks, FnRecord

SyncFn = Callable[[RunContext], None]
OnComplete = Callable[..., None]
AsyncFn = Callable[[RunContext, OnComplete], None]

# Properties whose functions run even when an input holds an error.
_NO_SKIP = frozenset({FnProperty.DELETE_VAR, FnProperty.NO_SKIP})
# Members as globals for the hot paths: ``FnProperty.NORMAL`` is a lookup through
# the enum's metaclass, ~8x the cost of a global in Python 3.11.
NORMAL, DELETE_VAR = FnProperty.NORMAL, FnProperty.DELETE_VAR

# The block running on this thread, if any: nested waits need it (deadlock checks).
_tls = threading.local()


class Var:
    """A dependency token (the engine design's ``VarHandle``). ``version`` is readable."""

    __slots__ = ("engine", "name", "version", "error", "_readers", "_writing",
                 "_queue", "_deleted", "_write_event", "_read_events")

    def __init__(self, engine: "Engine", name: str) -> None:
        self.engine = engine
        self.name = name
        self.version = 0
        self.error: BaseException | None = None
        self._readers = 0
        self._writing = False
        self._queue: deque[tuple[Block, bool]] = deque()
        self._deleted = False
        self._write_event: Any = None
        self._read_events: list[Any] = []

    def state(self) -> dict[str, Any]:
        """A snapshot of the state listed in this module's docstring (for tests)."""
        with self.engine._lock:
            return {"version": self.version, "error": self.error,
                    "readers": self._readers, "writing": self._writing,
                    "queued": [(b.name, w) for b, w in self._queue],
                    "deleted": self._deleted}

    def __repr__(self) -> str:
        return f"<Var {self.name} v{self.version}>"


class Operator:
    """A function with its variable lists, made once and pushed many times."""

    __slots__ = ("engine", "fn", "const_vars", "mutable_vars", "prop", "_name",
                 "is_async", "deleted")

    def __init__(self, engine: "Engine", fn: Callable[..., None], const_vars: Iterable[Var],
                 mutable_vars: Iterable[Var], prop: FnProperty, is_async: bool,
                 name: str | None) -> None:
        self.engine = engine
        self.fn = fn
        self.const_vars, self.mutable_vars = checked_vars(engine, fn, const_vars,
                                                          mutable_vars, name)
        self.prop = prop if prop.__class__ is FnProperty else FnProperty(prop)
        self._name = name  # the function's name is looked up only when asked for
        self.is_async = is_async
        self.deleted = False

    @property
    def name(self) -> str:
        return self._name or _fn_name(self.fn)

    def __repr__(self) -> str:
        return f"<Operator {self.name}>"


def checked_vars(engine: "Engine", fn: Callable[..., None], const_vars: Iterable[Var],
                 mutable_vars: Iterable[Var], name: str | None
                 ) -> tuple[tuple[Var, ...], tuple[Var, ...]]:
    """A function's variable lists as tuples, checked to be this engine's, repeats
    dropped, and a variable in both lists mutated only. Runs once per push_sync, so
    the common case (no repeats) is kept to a few tuple builds."""
    if not callable(fn):
        raise OperatorError(f"engine function must be callable, got {fn!r}")
    mutable = tuple(mutable_vars)
    const = tuple(const_vars)
    for v in const:
        if v.__class__ is not Var or v.engine is not engine:
            _bad_var(engine, v, name, fn)
    for v in mutable:
        if v.__class__ is not Var or v.engine is not engine:
            _bad_var(engine, v, name, fn)
    if len(mutable) > 1 and len(set(mutable)) != len(mutable):
        mutable = tuple(dict.fromkeys(mutable))  # dedupe, keep order
    if len(const) > 1:
        if len(set(const)) != len(const):
            const = tuple(dict.fromkeys(const))
        if mutable and not set(const).isdisjoint(mutable):
            # A variable in both lists is mutated only: reading it too would make
            # the push wait for its own write grant (the deadlock the issue forbids).
            const = tuple(v for v in const if v not in mutable)
    elif const and const[0] in mutable:
        const = ()
    return const, mutable


def _bad_var(engine: "Engine", v: Any, name: str | None, fn: Callable[..., Any]) -> None:
    if not isinstance(v, Var) or v.engine is not engine:  # else a subclass of Var: fine
        raise VariableError(f"{name or _fn_name(fn)}: {v!r} is not a variable of this engine; "
                            "make variables with this engine's new_variable()")


class Block:
    """One push of a function: what the queues hold and the workers run. It carries
    the function and its checked variable lists itself (an Operator's, or
    ``checked_vars``'s for ``push_sync``), so a push makes one object, not two."""

    __slots__ = ("engine", "fn", "const_vars", "mutable_vars", "prop", "is_async", "_name",
                 "ctx", "priority", "seq", "wait", "done", "stream", "record", "finished",
                 "inline")
    is_wait = False  # True only for the engine's internal wait_for_var blocks

    def __init__(self, engine: "Engine", fn: Callable[..., None], const_vars: tuple[Var, ...],
                 mutable_vars: tuple[Var, ...], prop: FnProperty, is_async: bool,
                 name: str | None, ctx: Context, priority: int, seq: int) -> None:
        self.engine = engine
        self.fn = fn
        self.const_vars = const_vars
        self.mutable_vars = mutable_vars
        self.prop = prop
        self.is_async = is_async
        self._name = name
        self.ctx = ctx
        self.priority = priority
        self.seq = seq
        self.wait = 0
        self.done = False
        self.stream: Any = None
        self.record: FnRecord | None = None
        self.finished: threading.Event | None = None  # only NaiveEngine waits on it
        self.inline = False

    name = Operator.name  # the same property: a block has the operator's ``_name`` and ``fn``


def _fn_name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


# --- the ordering rule: append on push, release on completion (lock held) ----

def append_read(var: Var, block: Block) -> None:
    """Grant a read now if no write is running or queued, else queue it."""
    if var._writing or var._queue:
        var._queue.append((block, False))
    else:
        var._readers += 1
        block.wait -= 1


def append_write(var: Var, block: Block) -> None:
    """Grant a write now if the variable is idle, else queue it."""
    if var._writing or var._readers or var._queue:
        var._queue.append((block, True))
    else:
        var._writing = True
        block.wait -= 1


def release_read(var: Var, ready: list[Block]) -> None:
    var._readers -= 1
    if var._readers == 0:
        _grant_head(var, ready)


def release_write(var: Var, ready: list[Block]) -> None:
    var._writing = False
    _grant_head(var, ready)


def _grant_head(var: Var, ready: list[Block]) -> None:
    """Grant the queue's head: one write, or every read up to the next write.
    A block granted its last variable is ready."""
    q = var._queue
    if not q:
        return
    if q[0][1]:
        if var._readers == 0:
            block = q.popleft()[0]
            var._writing = True
            block.wait -= 1
            if block.wait == 0:
                ready.append(block)
        return
    while q and not q[0][1]:
        block = q.popleft()[0]
        var._readers += 1
        block.wait -= 1
        if block.wait == 0:
            ready.append(block)


class _OnComplete:
    """The callback an async function gets; calling it twice is an error."""

    __slots__ = ("engine", "block")

    def __init__(self, engine: "Engine", block: Block) -> None:
        self.engine = engine
        self.block = block

    def __call__(self, error: BaseException | None = None) -> None:
        """Finish the function; pass ``error`` to fail it from another thread."""
        engine, block = self.engine, self.block
        with engine._lock:
            twice = block.done
            block.done = True
        if twice:
            # MXNet's CallbackOnComplete does not guard this and corrupts its
            # counters; here it is a clear error, raised to the caller *and*
            # recorded, since the caller is often a helper thread nobody joins.
            err = OnCompleteError(
                f"on_complete of async function {block.name!r} was called twice; "
                "call it exactly once, when the function's work is finished")
            engine._report(err, block.seq)
            raise err
        engine._finish(block, error, original=error is not None)


class Engine:
    """The engine design's interface. Subclasses: NaiveEngine, ThreadedEngine."""

    name = "engine"
    _lock_type: Callable[[], Any] = YieldingLock  # engine/locks.py: no lock convoy under the GIL

    def __init__(self, hooks: EngineHooks | None = None) -> None:
        self._lock = self._lock_type()
        self._all_done = threading.Condition(self._lock)  # type: ignore[arg-type]
        self._hooks = hooks
        self._seq = count()
        self._var_ids = count()
        self._pending = 0
        self._errors: list[tuple[int, BaseException]] = []
        self._failed_vars: set[Var] = set()
        self._deleted_seen = False
        self._idle_waiters = 0
        self._gpu_seen = False  # set once a GPU event is recorded on a variable
        # The RunContext last given on CPU: reused while pushes share one ctx
        # (one object less per function; a RunContext is read, never written).
        self._cpu_run_ctx = RunContext(Context("cpu"), None)

    # --- the engine design's API ---------------------------------------------

    def new_variable(self, name: str | None = None) -> Var:
        return Var(self, name or f"var{next(self._var_ids)}")

    def new_operator(self, fn: AsyncFn | SyncFn, const_vars: Sequence[Var],
                     mutable_vars: Sequence[Var], prop: FnProperty = FnProperty.NORMAL,
                     *, is_async: bool = True, name: str | None = None) -> Operator:
        """An operator to push many times. ``fn`` is async (as in the engine design), unless
        ``is_async=False``."""
        return Operator(self, fn, const_vars, mutable_vars, prop, is_async, name)

    def push(self, op: Operator, ctx: Context, priority: int = 0, *, inline: bool = False) -> None:
        """Push ``op``. ``inline=True`` (a hint for small CPU functions): if every
        variable grants at once, run it now on the pushing thread instead of
        handing it to a worker -- same grants, errors and completion, no thread
        hand-off (two wake-ups, tens of us on a busy machine). Otherwise, and on
        GPU, it is queued as usual."""
        if not isinstance(op, Operator) or op.engine is not self:
            raise OperatorError(f"{op!r} is not an operator of this engine")
        if op.deleted:
            raise OperatorError(f"operator {op.name!r} was deleted; make a new one")
        if not isinstance(ctx, Context):
            raise TypeError(f"{op.name}: ctx must be a Context, got {ctx!r}")
        self._push_block(Block(self, op.fn, op.const_vars, op.mutable_vars, op.prop,
                               op.is_async, op._name, ctx, priority, next(self._seq)), inline)

    def calls_direct(self) -> bool:
        """Whether a caller that alone can push on a function's variables (so each would grant
        at once) may call the function itself instead of pushing it: nothing here would see
        the difference -- no hooks recording functions, no GPU events to order it after.
        (``Executor.run``'s one-function runs, under its run lock.)"""
        return self._hooks is None and not self._gpu_seen

    def push_async(self, fn: AsyncFn, ctx: Context, const_vars: Sequence[Var],
                   mutable_vars: Sequence[Var], prop: FnProperty = FnProperty.NORMAL,
                   priority: int = 0, *, name: str | None = None) -> None:
        self.push(Operator(self, fn, const_vars, mutable_vars, prop, True, name), ctx, priority)

    def push_sync(self, fn: SyncFn, ctx: Context, const_vars: Sequence[Var],
                  mutable_vars: Sequence[Var], prop: FnProperty = FnProperty.NORMAL,
                  priority: int = 0, *, name: str | None = None) -> None:
        # The hot path: one Block, no Operator.
        const, mutable = checked_vars(self, fn, const_vars, mutable_vars, name)
        if ctx.__class__ is not Context and not isinstance(ctx, Context):
            raise TypeError(f"{name or _fn_name(fn)}: ctx must be a Context, got {ctx!r}")
        if prop.__class__ is not FnProperty:
            prop = FnProperty(prop)
        self._push_block(Block(self, fn, const, mutable, prop, False, name, ctx, priority,
                               next(self._seq)))

    def delete_operator(self, op: Operator) -> None:
        """Refuse later pushes of ``op``; pushes already made still run."""
        op.deleted = True

    def delete_variable(self, delete_fn: SyncFn, ctx: Context, var: Var) -> None:
        """Run ``delete_fn`` after all earlier work on ``var``; refuse later pushes.

        ``delete_fn`` runs even if ``var`` holds an error: cleanup must happen, and
        the error itself is still reported by ``wait_for_all``.
        """
        name = f"delete_variable({var.name})"
        const, mutable = checked_vars(self, delete_fn, (), (var,), name)
        self._push_block(Block(self, delete_fn, const, mutable, DELETE_VAR, False, name, ctx, 0,
                               next(self._seq)))  # marks var deleted

    def wait_for_var(self, var: Var, timeout: float | None = None) -> None:
        raise NotImplementedError

    def wait_for_all(self, timeout: float | None = None) -> None:
        raise NotImplementedError

    def shutdown(self, wait: bool = True) -> None:
        """Release threads (ThreadedEngine; after pending work if ``wait``)."""

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # --- shared machinery ---------------------------------------------------

    def _push_block(self, block: Block, inline: bool = False) -> None:
        raise NotImplementedError

    def _complete(self, block: Block, error: BaseException | None, original: bool) -> None:
        """Mark and release the block's variables (engine-specific); lock not held."""
        raise NotImplementedError

    def _admit_locked(self, block: Block) -> None:
        """Refuse pushes naming a deleted variable; a delete marks its variable.
        Until the first delete there is nothing to check (the common case)."""
        if block.prop is not DELETE_VAR and not self._deleted_seen:
            return
        for v in block.const_vars + block.mutable_vars:
            if v._deleted:
                raise VariableError(
                    f"{block.name}: variable {v.name!r} was deleted by delete_variable; "
                    "make a new variable instead of reusing it")
        if block.prop is DELETE_VAR:
            self._deleted_seen = True
            for v in block.mutable_vars:
                v._deleted = True

    def _wait_idle_locked(self, timeout: float | None = None) -> bool:
        """Wait (lock held) until no pushed function is pending."""
        self._idle_waiters += 1
        try:
            return self._all_done.wait_for(lambda: self._pending == 0, timeout)
        finally:
            self._idle_waiters -= 1

    def _check_wait(self, what: str, var: Var | None) -> None:
        """Refuse a wait on a foreign variable, or one that would wait for itself."""
        if var is not None and (not isinstance(var, Var) or var.engine is not self):
            raise VariableError(f"{what}: {var!r} is not a variable of this engine")
        block: Block | None = getattr(_tls, "block", None)
        if block is None or block.engine is not self:
            return
        if var is None or var in block.const_vars or var in block.mutable_vars:
            raise DeadlockError(
                f"function {block.name!r} called {what} for "
                f"{'all work' if var is None else 'variable ' + repr(var.name)}, which "
                "includes itself, so it would wait forever; wait only for variables "
                "the function does not list, or return and wait outside the engine")

    def _inherited_error(self, block: Block) -> BaseException | None:
        if block.prop in _NO_SKIP:
            return None
        for v in block.const_vars + block.mutable_vars:
            if v.error is not None:
                return v.error
        return None

    def _execute(self, block: Block, stream: Any = None) -> bool:
        """Run (or skip) one ready block on this thread.  True: a sync function ran
        without error on CPU with no hooks, and the caller releases its variables
        (``_complete(block, None, False)``; a worker, under the lock it takes to
        pop its next block).  Every other block is completed here or by its
        ``on_complete``."""
        if self._failed_vars:  # no variable holds an error: nothing can be inherited
            err = self._inherited_error(block)
            if err is not None:  # an input failed: skip, and pass the error on
                self._finish(block, err, original=False)
                return False
        block.stream = stream
        if self._hooks is not None:
            self._hook_start(block, stream)
        run_ctx = self._cpu_run_ctx  # read once: another worker may replace it
        if stream is not None or run_ctx.ctx is not block.ctx:
            run_ctx = RunContext(block.ctx, stream)
            if stream is None:
                self._cpu_run_ctx = run_ctx
        prev = getattr(_tls, "block", None)
        _tls.block = block
        try:
            try:
                if self._gpu_seen:  # only GPU work leaves events to order after
                    self._prepare(block, stream)
                if block.is_async:
                    block.fn(run_ctx, _OnComplete(self, block))
                    return False
                block.fn(run_ctx)
            except Exception as exc:  # the function failed: its error, not ours
                with self._lock:
                    late, block.done = block.done, True
                if late:  # async, after on_complete: no variable left to mark
                    self._report(_note(exc, block, "after calling on_complete"), block.seq)
                else:
                    self._finish(block, exc, original=True)
                return False
            block.done = True
            if stream is None and self._hooks is None:
                return True  # _finish has nothing to add: the caller completes it
            self._finish(block, None, original=False)
            return False
        finally:
            _tls.block = prev

    def _prepare(self, block: Block, stream: Any) -> None:
        """Order this function after GPU producers of its variables (#18951)."""
        for v in block.const_vars + block.mutable_vars:
            if v._write_event is not None:
                _wait_event(stream, v._write_event)
        for v in block.mutable_vars:
            for e in v._read_events:  # write-after-read: wait for GPU readers too
                _wait_event(stream, e)

    def _finish(self, block: Block, error: BaseException | None, original: bool) -> None:
        """Complete a block: events, hooks, error bookkeeping, then release vars."""
        stream = block.stream
        if stream is not None and error is None:
            try:
                self._record_gpu_events(block, gpu.record_event(stream))
            except Exception as exc:  # a sticky CUDA error surfaces here
                error, original = exc, True
        if original and error is not None:
            _note(error, block, f"on {block.ctx}")
        if self._hooks is not None:
            self._hook_end(block, error, skipped=error is not None and not original)
        self._complete(block, error, original)

    def _record_gpu_events(self, block: Block, event: Any) -> None:
        with self._lock:
            self._gpu_seen = True
            for v in block.const_vars:
                v._read_events.append(event)
            for v in block.mutable_vars:
                v._write_event = event
                v._read_events = []

    def _mark_vars_locked(self, block: Block, error: BaseException | None,
                          original: bool) -> None:
        if error is not None and original:
            self._errors.append((block.seq, error))
        if block.prop is DELETE_VAR:
            for v in block.mutable_vars:  # a deleted variable reports nothing
                v.error = None
                self._failed_vars.discard(v)
            return
        if error is None and not self._gpu_seen:  # the common case: count the write
            for v in block.mutable_vars:
                v.version += 1
            return
        for v in block.mutable_vars:
            v.version += 1
            if block.stream is None:  # a CPU write supersedes the GPU events
                v._write_event = None
                v._read_events = []
            if error is not None:
                v.error = error
                self._failed_vars.add(v)

    def _take_var_error_locked(self, var: Var) -> BaseException | None:
        """The error wait_for_var raises, cleared (and marked reported)."""
        err = var.error
        if err is not None:
            var.error = None
            self._failed_vars.discard(var)
            self._errors = [(s, e) for s, e in self._errors if e is not err]
        return err

    def _take_all_errors_locked(self) -> BaseException | None:
        errors = [e for _, e in sorted(self._errors, key=lambda se: se[0])]
        self._errors = []
        for v in self._failed_vars:
            v.error = None
        self._failed_vars.clear()
        if not errors:
            return None
        first = errors[0]
        if len(errors) > 1:
            others = "; ".join(f"{type(e).__name__}: {e}" for e in errors[1:6])
            first.add_note(f"{len(errors) - 1} more engine error(s): {others}")
        return first

    def _report(self, error: BaseException, seq: int) -> None:
        """Record an error that has no variable to mark (wait_for_all raises it)."""
        with self._lock:
            self._errors.append((seq, error))

    def _hook_start(self, block: Block, stream: Any) -> None:
        rec = FnRecord(block.name, block.ctx, block.prop, block.priority,
                       worker=threading.current_thread().name,
                       stream=None if stream is None else int(getattr(stream, "ptr", 0)))
        if stream is not None:
            rec.start_event = gpu.record_event(stream, timing=True)
        rec.start_ns = time.perf_counter_ns()
        block.record = rec
        try:
            self._hooks.fn_start(rec)  # type: ignore[union-attr]
        except Exception as exc:
            self._report(exc, block.seq)

    def _hook_end(self, block: Block, error: BaseException | None, skipped: bool) -> None:
        rec = block.record
        if rec is None:  # skipped: never started
            rec = FnRecord(block.name, block.ctx, block.prop, block.priority)
        rec.end_ns = time.perf_counter_ns()
        if block.stream is not None and not skipped:
            try:
                rec.end_event = gpu.record_event(block.stream, timing=True)
            except Exception:  # the error is reported by _finish already
                pass
        rec.error, rec.skipped = error, skipped
        try:
            self._hooks.fn_end(rec)  # type: ignore[union-attr]
        except Exception as exc:
            self._report(exc, block.seq)


def _wait_event(stream: Any, event: Any) -> None:
    # On GPU the stream waits (no host sync); on CPU the host must wait.
    if stream is None:
        event.synchronize()
    else:
        stream.wait_event(event)


def _note(exc: BaseException, block: Block, where: str) -> BaseException:
    exc.add_note(f"raised by engine function {block.name!r} {where}")
    return exc


def raise_error(error: BaseException | None) -> None:
    """Re-raise in the caller; the original traceback is kept on the object."""
    if error is not None:
        raise error.with_traceback(error.__traceback__)
