"""The engine's state, piece by piece, as listed in core.py's and threaded.py's
docstrings: each test drives one piece through its transitions."""

from __future__ import annotations

import threading
import time

import pytest

from engine import Context, FnProperty, NaiveEngine, ThreadedEngine
from engine.core import Block, append_read, append_write, release_read, release_write

CPU = Context.cpu()
pytestmark = pytest.mark.timeout(30)


def _blocks(eng: NaiveEngine, n: int) -> list[Block]:
    return [Block(eng, lambda rc: None, (), (), FnProperty.NORMAL, False, "b", CPU, 0, i)
            for i in range(n)]


def test_var_queue_readers_writing_by_hand() -> None:
    # The pure rule, no threads: reads share, a write waits for them, reads
    # pushed after a write wait for it, and the queue head is granted in order.
    eng = NaiveEngine()
    v = eng.new_variable()
    r1, r2, w1, r3, r4, w2 = _blocks(eng, 6)
    for b in (r1, r2, w1, r3, r4, w2):
        b.wait = 1
    append_read(v, r1); append_read(v, r2)
    assert (v._readers, v._writing, r1.wait, r2.wait) == (2, False, 0, 0)
    append_write(v, w1); append_read(v, r3); append_read(v, r4); append_write(v, w2)
    assert [(b.seq, w) for b, w in v._queue] == [(2, True), (3, False), (4, False), (5, True)]
    ready: list[Block] = []
    release_read(v, ready)
    assert ready == [] and v._readers == 1
    release_read(v, ready)
    assert ready == [w1] and v._writing and v._readers == 0
    ready.clear()
    release_write(v, ready)
    assert ready == [r3, r4] and v._readers == 2 and not v._writing
    ready.clear()
    release_read(v, ready); release_read(v, ready)
    assert ready == [w2] and v._writing and not v._queue


def test_block_wait_counts_grants() -> None:
    eng = NaiveEngine()
    a, b = eng.new_variable(), eng.new_variable()
    first, second = _blocks(eng, 2)
    first.wait = second.wait = 3  # two variables + the push itself
    append_write(a, first); append_write(b, first)
    first.wait -= 1
    assert first.wait == 0  # both granted: ready
    append_read(a, second); append_write(b, second)
    second.wait -= 1
    assert second.wait == 2
    ready: list[Block] = []
    release_write(a, ready)
    assert second.wait == 1 and ready == []
    release_write(b, ready)
    assert second.wait == 0 and ready == [second]


def test_threaded_var_state_while_work_runs() -> None:
    eng = ThreadedEngine(num_cpu_workers=2)
    try:
        v, o1, o2 = eng.new_variable("v"), eng.new_variable(), eng.new_variable()
        gate = threading.Event()
        eng.push_sync(lambda rc: gate.wait(10), CPU, [v], [o1], name="reader1")
        eng.push_sync(lambda rc: gate.wait(10), CPU, [v], [o2], name="reader2")
        eng.push_sync(lambda rc: None, CPU, [], [v], name="writer")
        eng.push_sync(lambda rc: None, CPU, [v], [o1], name="reader3")
        deadline = time.time() + 5
        while v.state()["readers"] < 2 and time.time() < deadline:
            time.sleep(0.001)
        st = v.state()
        assert st["readers"] == 2 and not st["writing"]
        assert st["queued"] == [("writer", True), ("reader3", False)]
        assert eng._pending == 4 and sorted(b.name for b in eng._running.values()) == [
            "reader1", "reader2"]
        gate.set()
        eng.wait_for_all(timeout=10)
        st = v.state()
        assert (st["version"], st["readers"], st["writing"], st["queued"]) == (1, 0, False, [])
        assert eng._pending == 0 and eng._running == {}
        eng.delete_variable(lambda rc: None, CPU, v)
        assert v.state()["deleted"]
    finally:
        eng.shutdown()


def test_engine_error_state() -> None:
    eng = ThreadedEngine(num_cpu_workers=1)
    try:
        a, b = eng.new_variable(), eng.new_variable()

        def fail(rc: object) -> None:
            raise ValueError("x")
        eng.push_sync(fail, CPU, [], [a])
        eng.push_sync(lambda rc: None, CPU, [a], [b])
        deadline = time.time() + 5
        while eng._pending and time.time() < deadline:
            time.sleep(0.001)
        assert [type(e) for _, e in eng._errors] == [ValueError]  # the original only
        assert eng._failed_vars == {a, b} and a.error is b.error
        with pytest.raises(ValueError):
            eng.wait_for_var(b)
        assert eng._errors == [] and eng._failed_vars == {a}  # b cleared, reported
        eng.wait_for_all(timeout=5)  # reported already: no raise, all cleared
        assert eng._failed_vars == set() and a.error is None
    finally:
        eng.shutdown()


def test_pool_state_idle_blocked_threads() -> None:
    eng = ThreadedEngine(num_cpu_workers=1)
    try:
        inner, outer = eng.new_variable(), eng.new_variable()
        gate, seen = threading.Event(), {}

        def nested(rc: object) -> None:
            eng.push_sync(lambda rc: gate.wait(10), CPU, [], [inner], name="inner")
            eng.wait_for_var(inner, timeout=10)

        eng.push_sync(nested, CPU, [], [outer])
        pool = None
        deadline = time.time() + 5
        while time.time() < deadline:
            pool = eng._pools.get(("cpu", 0, "normal"))
            if pool is not None and pool.blocked == 1 and len(pool.threads) == 2:
                break
            time.sleep(0.001)
        assert pool is not None
        seen.update(blocked=pool.blocked, threads=len(pool.threads), target=pool.target)
        gate.set()
        eng.wait_for_all(timeout=10)
        assert seen == {"blocked": 1, "threads": 2, "target": 1}  # one spare, compensating
        deadline = time.time() + 5
        while (pool.blocked, len(pool.threads), pool.idle) != (0, 1, 1) and time.time() < deadline:
            time.sleep(0.001)
        assert (pool.blocked, len(pool.threads), pool.idle, pool.heap, len(pool.fifo)) == (
            0, 1, 1, [], 0)
    finally:
        eng.shutdown()
    assert pool.closing and pool.threads == set()


def _with_worker_held(eng: ThreadedEngine) -> threading.Event:
    """Occupy the only CPU worker until the returned gate is set."""
    gate, started = threading.Event(), threading.Event()
    eng.push_sync(lambda rc: (started.set(), gate.wait(10)), CPU, [], [eng.new_variable()])
    assert started.wait(10)
    return gate


def test_pool_fifo_and_heap_order_ready_blocks_by_priority() -> None:
    # Priority 0 goes to the pool's fifo in ready order; others to its heap: a
    # positive priority runs before the fifo, a negative one after it.
    eng = ThreadedEngine(num_cpu_workers=1)
    try:
        gate, order = _with_worker_held(eng), []
        for p in (0, -3, 5, 0, 2, -1):
            eng.push_sync(lambda rc, p=p: order.append(p), CPU, [], [eng.new_variable()],
                          priority=p, name=f"p{p}")
        pool = eng._cpu_pool
        assert [b.name for b in pool.fifo] == ["p0", "p0"]
        assert [b.name for _, _, b in sorted(pool.heap)] == ["p5", "p2", "p-1", "p-3"]
        gate.set()
        eng.wait_for_all(timeout=10)
        assert order == [5, 2, 0, 0, -1, -3]
        assert (len(pool.fifo), pool.heap) == (0, [])
    finally:
        eng.shutdown()


def test_a_chains_successor_is_handed_to_its_worker_not_queued() -> None:
    # Released with one ready successor and nothing else queued, the worker runs it
    # next itself: only the chain's first block passes through the pool.
    eng = ThreadedEngine(num_cpu_workers=1)
    try:
        gate = _with_worker_held(eng)
        queued, dispatch = [], eng._dispatch_locked

        def counting(block, quiet=None):
            queued.append(block.name)
            return dispatch(block, quiet)

        eng._dispatch_locked = counting
        vs = [eng.new_variable() for _ in range(6)]
        ran: list[int] = []
        eng.push_sync(lambda rc: ran.append(0), CPU, [], [vs[0]], name="c0")
        for i in range(1, 6):
            eng.push_sync(lambda rc, i=i: ran.append(i), CPU, [vs[i - 1]], [vs[i]], name=f"c{i}")
        gate.set()
        eng.wait_for_all(timeout=10)
        assert ran == [0, 1, 2, 3, 4, 5] and [v.version for v in vs] == [1] * 6
        assert queued == ["c0"] and eng._running == {}
        # Two successors ready at once: both go through the pool (priorities decide).
        a, b = eng.new_variable(), eng.new_variable()
        gate = _with_worker_held(eng)
        queued.clear()
        eng.push_sync(lambda rc: None, CPU, [], [a], name="root")
        eng.push_sync(lambda rc: None, CPU, [a], [b], name="r1")
        eng.push_sync(lambda rc: None, CPU, [a], [eng.new_variable()], name="r2")
        gate.set()
        eng.wait_for_all(timeout=10)
        assert queued == ["root", "r1", "r2"]
    finally:
        eng.shutdown()
