"""The dependency engine: API, ordering rule, errors, nested work, hooks.

Each test runs on both engines unless it is about threads.  Every wait in a test
has a timeout (pytest-timeout marks and explicit ones), so a deadlock fails.
"""

from __future__ import annotations

import json
import threading
import time
import traceback
from typing import Iterator

import pytest

import engine
from engine import (Context, DeadlockError, Engine, EngineClosedError, EngineError,
                    EngineTimeoutError, FnProperty, NaiveEngine, NoGPUError,
                    OnCompleteError, OperatorError, Profiler, ThreadedEngine,
                    VariableError, create_engine)

CPU = Context.cpu()
pytestmark = pytest.mark.timeout(60)


@pytest.fixture(params=["naive", "threaded"])
def eng(request: pytest.FixtureRequest) -> Iterator[Engine]:
    e = create_engine(request.param, num_cpu_workers=2)
    yield e
    e.shutdown(wait=False)  # a failed test may leave work pending


@pytest.fixture
def threaded() -> Iterator[ThreadedEngine]:
    e = ThreadedEngine(num_cpu_workers=2)
    yield e
    e.shutdown(wait=False)  # a failed test may leave work pending


# --- API and the ordering rule ---------------------------------------------

def test_create_engine_by_name_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SGLENS_ENGINE", raising=False)
    assert isinstance(create_engine(), ThreadedEngine)
    monkeypatch.setenv("SGLENS_ENGINE", "naive")
    assert isinstance(create_engine(num_cpu_workers=3), NaiveEngine)
    assert isinstance(create_engine("threaded", num_cpu_workers=1), ThreadedEngine)
    monkeypatch.setenv("SGLENS_ENGINE", "bogus")
    with pytest.raises(EngineError, match="SGLENS_ENGINE.*naive"):
        create_engine()


def test_writes_keep_push_order_and_count_versions(eng: Engine) -> None:
    v, r = eng.new_variable(), eng.new_variable()
    order: list[int] = []
    for i in range(200):
        eng.push_sync(lambda rc, i=i: order.append(i), CPU, [r], [v])
    eng.wait_for_var(v, timeout=10)
    assert order == list(range(200))
    assert v.version == 200
    assert r.version == 0  # reads do not bump the version


def test_reads_run_concurrently(threaded: ThreadedEngine) -> None:
    # Two readers of one variable meet at a barrier: only possible if both run
    # at once.  A writer pushed after them must wait for both.
    v, o1, o2 = (threaded.new_variable() for _ in range(3))
    barrier = threading.Barrier(2, timeout=10)
    met: list[int] = []
    writer_saw: list[int] = []

    def reader(rc: engine.RunContext) -> None:
        met.append(barrier.wait())

    threaded.push_sync(reader, CPU, [v], [o1])
    threaded.push_sync(reader, CPU, [v], [o2])
    threaded.push_sync(lambda rc: writer_saw.append(len(met)), CPU, [], [v])
    threaded.wait_for_all(timeout=20)
    assert sorted(met) == [0, 1]
    assert writer_saw == [2]


def test_writers_never_overlap_readers(threaded: ThreadedEngine) -> None:
    v = threaded.new_variable()
    outs = [threaded.new_variable() for _ in range(50)]
    running = {"readers": 0, "writers": 0}
    bad: list[str] = []
    lock = threading.Lock()

    def enter(kind: str) -> None:
        with lock:
            running[kind] += 1
            if running["writers"] > 1 or (running["writers"] and running["readers"]):
                bad.append(str(running))

    def leave(kind: str) -> None:
        with lock:
            running[kind] -= 1

    def read(rc: engine.RunContext) -> None:
        enter("readers"); time.sleep(0.0005); leave("readers")

    def write(rc: engine.RunContext) -> None:
        enter("writers"); time.sleep(0.0005); leave("writers")

    for i, o in enumerate(outs):
        threaded.push_sync(write if i % 5 == 0 else read, CPU,
                           [v] if i % 5 else [], [v] if i % 5 == 0 else [o])
    threaded.wait_for_all(timeout=20)
    assert bad == []
    assert v.version == 10


def test_variable_in_both_lists_is_mutated_without_deadlock(eng: Engine) -> None:
    v = eng.new_variable()
    eng.push_sync(lambda rc: None, CPU, [v, v], [v, v])
    eng.wait_for_var(v, timeout=10)
    assert v.version == 1
    op = eng.new_operator(lambda rc, done: done(), [v], [v])
    assert op.const_vars == () and op.mutable_vars == (v,)


def test_each_function_gets_the_context_it_was_pushed_with(eng: Engine) -> None:
    # The engine reuses the CPU RunContext while pushes share one Context: a
    # push with another one (or a wait in between) must not see a stale one.
    ctxs = [Context.cpu(0), Context.cpu(1), Context.cpu(0), Context.cpu(1)]
    seen: list[tuple[int, Context, object]] = []
    vs = [eng.new_variable() for _ in range(4)]
    for i in range(200):
        ctx = ctxs[i % 3 if i % 7 else 1]
        eng.push_sync(lambda rc, i=i, ctx=ctx: seen.append((i, ctx, rc.ctx)) or None, ctx,
                      [vs[(i + 1) % 4]], [vs[i % 4]])
        if i % 50 == 0:
            eng.wait_for_var(vs[i % 4])
    eng.wait_for_all(timeout=10)
    assert len(seen) == 200
    assert all(rc_ctx is ctx for _, ctx, rc_ctx in seen)


def test_wait_for_fresh_variable_returns_at_once(eng: Engine) -> None:
    v = eng.new_variable()
    t = time.perf_counter()
    eng.wait_for_var(v, timeout=1)
    eng.wait_for_all(timeout=1)
    assert time.perf_counter() - t < 0.05
    assert v.version == 0 and v.error is None


def test_wait_for_var_waits_for_readers_too(threaded: ThreadedEngine) -> None:
    v, o = threaded.new_variable(), threaded.new_variable()
    gate, done = threading.Event(), []
    threaded.push_sync(lambda rc: (gate.wait(10), done.append(1)), CPU, [v], [o])
    waiter = threading.Thread(target=threaded.wait_for_var, args=(v, 10))
    waiter.start()
    time.sleep(0.05)
    assert waiter.is_alive()  # the read of v is still running
    gate.set()
    waiter.join(10)
    assert not waiter.is_alive() and done == [1]


def test_operator_reuse_and_delete(eng: Engine) -> None:
    v = eng.new_variable()
    hits: list[int] = []

    def fn(rc: engine.RunContext, on_complete: engine.core.OnComplete) -> None:
        hits.append(1)
        on_complete()

    op = eng.new_operator(fn, [], [v])
    for _ in range(5):
        eng.push(op, CPU)
    eng.delete_operator(op)
    with pytest.raises(OperatorError, match="deleted"):
        eng.push(op, CPU)
    eng.wait_for_all(timeout=10)
    assert hits == [1] * 5 and v.version == 5


def test_delete_variable_runs_after_pending_work(eng: Engine) -> None:
    v, r = eng.new_variable(), eng.new_variable()
    log: list[str] = []
    for i in range(3):
        eng.push_sync(lambda rc, i=i: (time.sleep(0.01), log.append(f"w{i}")), CPU, [], [v])
    eng.push_sync(lambda rc: (time.sleep(0.01), log.append("r")), CPU, [v], [r])
    eng.delete_variable(lambda rc: log.append("deleted"), CPU, v)
    with pytest.raises(VariableError, match="deleted by delete_variable"):
        eng.push_sync(lambda rc: None, CPU, [v], [])
    eng.wait_for_all(timeout=10)
    assert log == ["w0", "w1", "w2", "r", "deleted"]


def test_foreign_and_bad_arguments_are_refused(eng: Engine) -> None:
    other = NaiveEngine()
    v = other.new_variable()
    with pytest.raises(VariableError, match="not a variable of this engine"):
        eng.push_sync(lambda rc: None, CPU, [v], [])
    with pytest.raises(OperatorError, match="callable"):
        eng.push_sync(42, CPU, [], [])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Context"):
        eng.push_sync(lambda rc: None, "cpu", [], [])  # type: ignore[arg-type]


def test_threaded_push_is_thread_safe(threaded: ThreadedEngine) -> None:
    v = threaded.new_variable()
    box = [0]
    seen: list[tuple[int, int]] = []

    def pusher(tid: int) -> None:
        for i in range(1000):
            def inc(rc: engine.RunContext, i: int = i) -> None:
                box[0] += 1  # not atomic: only the engine's write order protects it
                seen.append((tid, i))
            threaded.push_sync(inc, CPU, [], [v])

    threads = [threading.Thread(target=pusher, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    threaded.wait_for_all(timeout=30)
    assert box[0] == 4000 and v.version == 4000
    for tid in range(4):  # each thread's pushes ran in its push order
        assert [i for t, i in seen if t == tid] == list(range(1000))


def test_priority_orders_ready_work() -> None:
    eng = ThreadedEngine(num_cpu_workers=1)
    try:
        gate, started, order = threading.Event(), threading.Event(), []
        eng.push_sync(lambda rc: (started.set(), gate.wait(10)), CPU, [], [eng.new_variable()])
        assert started.wait(10)  # the only worker is busy: the rest queue up
        for p in (0, 5, 1, 9):
            eng.push_sync(lambda rc, p=p: order.append(p), CPU, [], [eng.new_variable()],
                          priority=p)
        gate.set()
        eng.wait_for_all(timeout=10)
        assert order == [9, 5, 1, 0]
    finally:
        eng.shutdown()


def test_cpu_prioritized_is_not_queued_behind_normal_work() -> None:
    eng = ThreadedEngine(num_cpu_workers=1)
    try:
        gate, started, ran = threading.Event(), threading.Event(), threading.Event()
        eng.push_sync(lambda rc: (started.set(), gate.wait(10)), CPU, [], [eng.new_variable()])
        assert started.wait(10)
        eng.push_sync(lambda rc: ran.set(), CPU, [], [eng.new_variable()],
                      prop=FnProperty.CPU_PRIORITIZED)
        assert ran.wait(5)  # while the only normal worker is still blocked
        assert not gate.is_set()
        gate.set()
        eng.wait_for_all(timeout=10)
    finally:
        eng.shutdown()


def test_async_function_finishes_only_on_complete(eng: Engine) -> None:
    v, o = eng.new_variable(), eng.new_variable()
    log: list[str] = []

    def fn(rc: engine.RunContext, on_complete: engine.core.OnComplete) -> None:
        def later() -> None:
            time.sleep(0.05)
            log.append("async done")
            on_complete()
        threading.Thread(target=later).start()

    eng.push_async(fn, CPU, [], [v])
    eng.push_sync(lambda rc: log.append("reader"), CPU, [v], [o])
    eng.wait_for_all(timeout=10)
    assert log == ["async done", "reader"]


# --- errors ----------------------------------------------------------------

def _fail(rc: engine.RunContext) -> None:
    raise ValueError("boom in _fail")


def test_error_reraised_with_traceback_then_cleared(eng: Engine) -> None:
    v = eng.new_variable()
    eng.push_sync(_fail, CPU, [], [v])
    with pytest.raises(ValueError, match="boom") as info:
        eng.wait_for_var(v, timeout=10)
    names = [f.name for f in traceback.extract_tb(info.value.__traceback__)]
    assert "_fail" in names  # the original frame, not just the re-raise
    assert any("_fail" in n for n in info.value.__notes__)
    eng.wait_for_var(v, timeout=10)  # cleared: no second raise
    eng.wait_for_all(timeout=10)     # ...and reported once only
    eng.push_sync(lambda rc: None, CPU, [], [v])  # the variable is usable again
    eng.wait_for_var(v, timeout=10)
    assert v.version == 2


def test_dependents_are_skipped_and_inherit_the_error(eng: Engine) -> None:
    a, b, c, d = (eng.new_variable() for _ in range(4))
    ran: list[str] = []
    eng.push_sync(_fail, CPU, [], [a])
    eng.push_sync(lambda rc: ran.append("b"), CPU, [a], [b])
    eng.push_sync(lambda rc: ran.append("c"), CPU, [b], [c])
    eng.push_sync(lambda rc: ran.append("d"), CPU, [], [d])  # independent
    eng.push_sync(lambda rc: ran.append("noskip"), CPU, [c], [], prop=FnProperty.NO_SKIP)
    with pytest.raises(ValueError) as info:
        eng.wait_for_var(c, timeout=10)
    assert sorted(ran) == ["d", "noskip"]
    assert b.error is info.value  # the same object, inherited along the chain
    assert (a.version, b.version, c.version) == (1, 1, 1)
    with pytest.raises(ValueError):
        eng.wait_for_var(b, timeout=10)  # b's value is bad too: it raises for b
    eng.wait_for_all(timeout=10)          # the original was reported: clean now
    assert a.error is None and b.error is None


def test_wait_for_all_raises_errors_without_variables(eng: Engine) -> None:
    def fail2(rc: engine.RunContext) -> None:
        raise KeyError("second")
    eng.push_sync(_fail, CPU, [], [])
    eng.push_sync(fail2, CPU, [], [eng.new_variable()])
    with pytest.raises(ValueError) as info:
        eng.wait_for_all(timeout=10)
    assert any("1 more engine error" in n and "second" in n for n in info.value.__notes__)
    eng.wait_for_all(timeout=10)  # cleared


def test_async_errors_are_not_lost(eng: Engine) -> None:
    v1, v2, v3 = (eng.new_variable() for _ in range(3))

    def raises_before(rc: engine.RunContext, on_complete: engine.core.OnComplete) -> None:
        raise RuntimeError("async raised")

    def reports(rc: engine.RunContext, on_complete: engine.core.OnComplete) -> None:
        threading.Thread(target=on_complete, args=(OSError("from helper thread"),)).start()

    def raises_after(rc: engine.RunContext, on_complete: engine.core.OnComplete) -> None:
        on_complete()
        raise LookupError("after on_complete")

    eng.push_async(raises_before, CPU, [], [v1])
    eng.push_async(reports, CPU, [], [v2])
    eng.push_async(raises_after, CPU, [], [v3])
    with pytest.raises(RuntimeError, match="async raised"):
        eng.wait_for_var(v1, timeout=10)
    with pytest.raises(OSError, match="helper thread"):
        eng.wait_for_var(v2, timeout=10)
    eng.wait_for_var(v3, timeout=10)  # it completed fine before raising
    # The late error is recorded when raises_after returns, which may be just after the
    # wait above (on_complete released it): ask until it shows up.
    deadline = time.monotonic() + 10
    with pytest.raises(LookupError, match="after on_complete"):
        while time.monotonic() < deadline:
            eng.wait_for_all(timeout=10)
            time.sleep(0.001)


def test_on_complete_twice_is_a_clear_error(eng: Engine) -> None:
    v = eng.new_variable()
    caught: list[BaseException] = []
    returned = threading.Event()

    def twice(rc: engine.RunContext, on_complete: engine.core.OnComplete) -> None:
        on_complete()
        try:
            on_complete()
        except OnCompleteError as exc:
            caught.append(exc)
        returned.set()

    eng.push_async(twice, CPU, [], [v])
    # The first call completes the function, so a wait may return before the second call
    # is made; the error it records is raised by the next wait. Wait for the body to return.
    assert returned.wait(10)
    with pytest.raises(OnCompleteError, match="'.*twice' was called twice"):
        eng.wait_for_all(timeout=10)
    assert len(caught) == 1 and v.version == 1


def test_hook_errors_are_reported(eng: Engine) -> None:
    class BadHooks:
        def fn_start(self, rec: engine.FnRecord) -> None:
            raise RuntimeError("hook broke")

        def fn_end(self, rec: engine.FnRecord) -> None:
            pass

    e = type(eng)(hooks=BadHooks())
    try:
        v = e.new_variable()
        e.push_sync(lambda rc: None, CPU, [], [v])
        with pytest.raises(RuntimeError, match="hook broke"):
            e.wait_for_all(timeout=10)
        assert v.version == 1 and v.error is None  # the function itself ran fine
    finally:
        e.shutdown()


def test_no_gpu_gives_a_clear_error() -> None:
    if engine.gpu.device_count() > 0:
        pytest.skip("a GPU is present")
    with pytest.raises(NoGPUError, match="--device cpu"):
        Context.gpu(0)


def test_timeouts_name_the_pending_work(threaded: ThreadedEngine) -> None:
    v = threaded.new_variable()
    threaded.push_async(lambda rc, done: None, CPU, [], [v], name="never_completes")
    with pytest.raises(EngineTimeoutError, match="never_completes"):
        threaded.wait_for_var(v, timeout=0.1)
    with pytest.raises(EngineTimeoutError, match="on_complete"):
        threaded.wait_for_all(timeout=0.1)
    threaded.shutdown(wait=False)
    with pytest.raises(EngineClosedError):
        threaded.push_sync(lambda rc: None, CPU, [], [])


# --- nested work (the control-flow design's deadlock) --------------------------------------

def _control_flow_op(eng: Engine, depth: int, out: engine.Var, log: list[int]):
    """An operator that runs a 'subgraph' through the engine and waits for it."""
    def fn(rc: engine.RunContext) -> None:
        inner = eng.new_variable()
        if depth > 0:
            eng.push_sync(_control_flow_op(eng, depth - 1, inner, log), CPU, [], [inner])
        for _ in range(3):
            eng.push_sync(lambda rc: log.append(depth), CPU, [], [inner])
        eng.wait_for_var(inner, timeout=20)
        assert inner.version == 3 + (depth > 0)
    return fn


@pytest.mark.parametrize("name", ["naive", "threaded"])
def test_nested_push_and_wait_with_one_worker(name: str) -> None:
    eng = create_engine(name, num_cpu_workers=1)
    try:
        outs = [eng.new_variable() for _ in range(6)]
        log: list[int] = []
        for o in outs:  # six control-flow ops, three levels deep, one worker
            eng.push_sync(_control_flow_op(eng, 2, o, log), CPU, [], [o])
        eng.wait_for_all(timeout=30)
        assert sorted(log) == sorted([0, 1, 2] * 3 * 6)
        if isinstance(eng, ThreadedEngine):  # spare workers leave again
            deadline = time.time() + 5
            while eng.num_threads() > 1 and time.time() < deadline:
                eng.push_sync(lambda rc: None, CPU, [], [])  # wakes idle spares
                time.sleep(0.01)
            assert eng.num_threads() == 1
    finally:
        eng.shutdown()


def test_waiting_for_itself_is_a_deadlock_error(eng: Engine) -> None:
    v = eng.new_variable()

    def waits_for_own_var(rc: engine.RunContext) -> None:
        eng.wait_for_var(v)

    def waits_for_all(rc: engine.RunContext) -> None:
        eng.wait_for_all()

    eng.push_sync(waits_for_own_var, CPU, [v], [eng.new_variable()])
    with pytest.raises(DeadlockError, match="waits_for_own_var.*includes itself"):
        eng.wait_for_all(timeout=10)
    eng.push_sync(waits_for_all, CPU, [], [])
    with pytest.raises(DeadlockError, match="wait_for_all"):
        eng.wait_for_all(timeout=10)


# --- profiling --------------------------------------------------------------

def test_profiler_records_a_timeline(eng: Engine) -> None:
    prof = Profiler()
    e = type(eng)(hooks=prof)
    try:
        a, b = e.new_variable(), e.new_variable()
        e.push_sync(lambda rc: time.sleep(0.01), CPU, [], [a], name="conv.fwd")
        e.push_sync(lambda rc: time.sleep(0.01), CPU, [a], [b], name="conv.bwd")
        e.push_sync(_fail, CPU, [], [a], name="bad.fn")
        e.push_sync(lambda rc: None, CPU, [a], [b], name="skipped.fn")
        with pytest.raises(ValueError):
            e.wait_for_all(timeout=10)
        recs = {r.name: r for r in prof.timeline()}
        assert set(recs) == {"conv.fwd", "conv.bwd", "bad.fn", "skipped.fn"}
        fwd = recs["conv.fwd"]
        assert fwd.ctx == CPU and fwd.worker and fwd.stream is None
        assert fwd.end_ns - fwd.start_ns >= 9_000_000
        assert recs["conv.fwd"].end_ns <= recs["conv.bwd"].start_ns  # a dependency
        assert isinstance(recs["bad.fn"].error, ValueError) and not recs["bad.fn"].skipped
        assert recs["skipped.fn"].skipped and recs["skipped.fn"].error is recs["bad.fn"].error
        totals = prof.total_by(lambda r: r.name.split(".")[0])
        assert totals["conv"] >= 0.018 and "skipped" not in totals
        trace = json.loads(prof.chrome_trace())["traceEvents"]
        assert len(trace) == 4 and {t["ph"] for t in trace} == {"X"}
    finally:
        e.shutdown()


# --- bounded stress ------------------------------------------------------------

@pytest.mark.timeout(60)
def test_stress_mixed_work_ends_clean(threaded: ThreadedEngine) -> None:
    import random
    rng = random.Random(7)
    vars_ = [threaded.new_variable() for _ in range(20)]
    counts = [0] * 20
    expected_errors = 0
    for i in range(3000):
        w = rng.randrange(20)
        reads = rng.sample(range(20), rng.randrange(0, 4))
        kind = rng.random()

        def body(w: int = w) -> None:
            counts[w] += 1
        if kind < 0.01:
            expected_errors += 1
            threaded.push_sync(_fail, CPU, [vars_[r] for r in reads], [vars_[w]])
        elif kind < 0.3:
            def afn(rc, done, body=body):  # type: ignore[no-untyped-def]
                body()
                threading.Thread(target=done).start() if rng.random() < 0.1 else done()
            threaded.push_async(afn, CPU, [vars_[r] for r in reads], [vars_[w]])
        else:
            threaded.push_sync(lambda rc, body=body: body(), CPU,
                               [vars_[r] for r in reads], [vars_[w]])
    try:
        threaded.wait_for_all(timeout=50)
    except ValueError:
        pass
    assert expected_errors > 0
    assert sum(v.version for v in vars_) == 3000  # every write completed (ran or skipped)
    assert threaded._pending == 0
    for v in vars_:
        st = v.state()
        assert (st["readers"], st["writing"], st["queued"], st["error"]) == (0, False, [], None)
