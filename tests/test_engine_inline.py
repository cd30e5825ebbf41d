"""``push(..., inline=True)``: a ready CPU function runs on the pushing thread;
one that must wait is queued and run by a worker; grants, errors and versions
behave as for any push (the dependency-engine design's rule is unchanged)."""

from __future__ import annotations

import threading
from typing import Iterator

import pytest

from engine import Context, ThreadedEngine

CPU = Context.cpu()


@pytest.fixture
def threaded() -> Iterator[ThreadedEngine]:
    eng = ThreadedEngine(num_cpu_workers=2)
    yield eng
    eng.shutdown()


def test_ready_inline_push_runs_on_the_pushing_thread(threaded: ThreadedEngine) -> None:
    v = threaded.new_variable()
    ran_on: list[threading.Thread] = []
    op = threaded.new_operator(lambda rc: ran_on.append(threading.current_thread()), [], [v],
                               is_async=False)
    threaded.push(op, CPU, inline=True)
    assert ran_on == [threading.current_thread()]  # done before push returned
    assert v.version == 1
    threaded.push(op, CPU)  # without the hint: a worker runs it
    threaded.wait_for_var(v)
    assert ran_on[1] is not threading.current_thread() and v.version == 2


def test_inline_push_behind_a_writer_waits_for_it(threaded: ThreadedEngine) -> None:
    v = threaded.new_variable()
    gate, order = threading.Event(), []
    threaded.push_sync(lambda rc: (gate.wait(10), order.append("writer")), CPU, [], [v])
    op = threaded.new_operator(lambda rc: order.append("reader"), [v], [], is_async=False)
    threaded.push(op, CPU, inline=True)  # not ready: queued, push returns at once
    assert order == []
    gate.set()
    threaded.wait_for_var(v)
    threaded.wait_for_all()
    assert order == ["writer", "reader"]


def test_inline_failure_marks_variables_and_is_raised_by_the_wait(threaded: ThreadedEngine) -> None:
    v, w = threaded.new_variable(), threaded.new_variable()

    def boom(rc: object) -> None:
        raise ValueError("inline boom")
    threaded.push(threaded.new_operator(boom, [], [v], is_async=False), CPU, inline=True)
    threaded.push_sync(lambda rc: None, CPU, [v], [w])  # skipped: inherits the error
    with pytest.raises(ValueError, match="inline boom"):
        threaded.wait_for_var(w)
    with pytest.raises(ValueError, match="inline boom"):
        threaded.wait_for_var(v)
    threaded.wait_for_all()  # both reported: nothing left


def test_an_idle_worker_is_woken_beside_a_long_function(threaded: ThreadedEngine) -> None:
    # The wake-up rule must not count a worker inside a function as free: two
    # functions that can only finish together need both workers.
    barrier = threading.Barrier(2, timeout=10)
    a, b = threaded.new_variable(), threaded.new_variable()
    threaded.push_sync(lambda rc: barrier.wait(), CPU, [], [a])
    threaded.push_sync(lambda rc: barrier.wait(), CPU, [], [b])
    threaded.wait_for_all(timeout=20)
