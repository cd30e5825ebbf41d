"""The engine's lock (engine/locks.py): a plain non-reentrant lock to its users --
exclusion, non-blocking and timed acquires, conditions over it -- that gives the
GIL away once before blocking (its reason and figures are in the module)."""

from __future__ import annotations

import threading
import time

from engine.locks import YieldingLock


def test_it_excludes_and_counts_like_a_lock() -> None:
    lock = YieldingLock()
    total = [0]

    def add() -> None:
        for _ in range(2000):
            with lock:
                v = total[0]
                time.sleep(0) if v % 500 == 0 else None  # a GIL switch inside the section
                total[0] = v + 1
    threads = [threading.Thread(target=add) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert total[0] == 8000 and not lock.locked()


def test_non_blocking_and_timed_acquires_fail_while_held() -> None:
    lock = YieldingLock()
    assert lock.acquire()
    assert lock.acquire(False) is False
    t0 = time.monotonic()
    assert lock.acquire(True, 0.05) is False
    assert time.monotonic() - t0 >= 0.04
    done: list[bool] = []
    waiter = threading.Thread(target=lambda: done.append(lock.acquire(True, 5)))
    waiter.start()
    time.sleep(0.02)
    lock.release()  # the blocked waiter gets it
    waiter.join()
    assert done == [True] and lock.locked()
    lock.release()


def test_a_condition_waits_and_is_notified_over_it() -> None:
    lock = YieldingLock()
    cond = threading.Condition(lock)  # type: ignore[arg-type]
    ready: list[int] = []

    def produce() -> None:
        time.sleep(0.01)
        with cond:
            ready.append(1)
            cond.notify()
    threading.Thread(target=produce).start()
    with cond:
        assert cond.wait_for(lambda: ready, timeout=5)
        assert lock.locked()  # wait_for returns with the lock re-taken
    assert not lock.locked()
