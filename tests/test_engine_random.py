"""MXNet's randomized engine test, redone (tests/cpp/engine/threaded_engine_test.cc).

10,000 random workloads over 100 variables; each writes one variable and reads
2 to 19 (possibly including the one it writes).  Every engine's final values
must equal the serial run's exactly, for several seeds and worker counts, with
the three push styles and random priorities mixed in.
"""

from __future__ import annotations

import random
from typing import Callable

import pytest

import engine
from engine import Context, Engine, NaiveEngine, ThreadedEngine

CPU = Context.cpu()
NVARS, NWORK = 100, 10_000
MOD = (1 << 61) - 1

Workload = tuple[int, tuple[int, ...]]


def make_workloads(seed: int) -> list[Workload]:
    rng = random.Random(seed)
    return [(rng.randrange(NVARS), tuple(rng.sample(range(NVARS), rng.randint(2, 19))))
            for _ in range(NWORK)]


def step(vals: list[int], k: int, w: int, reads: tuple[int, ...]) -> None:
    # Order-sensitive in every input, so any reordering changes the result.
    acc = vals[w] * 1_000_003 + k
    for i, r in enumerate(reads):
        acc += (i + 1) * vals[r]
    vals[w] = acc % MOD


def serial(work: list[Workload]) -> list[int]:
    vals = list(range(NVARS))
    for k, (w, reads) in enumerate(work):
        step(vals, k, w, reads)
    return vals


def run_engine(eng: Engine, work: list[Workload], seed: int) -> tuple[list[int], list[int]]:
    rng = random.Random(seed + 1000)
    vals = list(range(NVARS))
    vs = [eng.new_variable() for _ in range(NVARS)]
    for k, (w, reads) in enumerate(work):
        const, mut = [vs[r] for r in reads], [vs[w]]
        style, prio = rng.random(), rng.randrange(3)
        if style < 0.6:
            eng.push_sync(lambda rc, k=k, w=w, reads=reads: step(vals, k, w, reads),
                          CPU, const, mut, priority=prio)
        elif style < 0.8:
            def afn(rc: engine.RunContext, done: Callable[..., None],
                    k: int = k, w: int = w, reads: tuple[int, ...] = reads) -> None:
                step(vals, k, w, reads)
                done()
            eng.push_async(afn, CPU, const, mut, priority=prio)
        else:
            op = eng.new_operator(lambda rc, done, k=k, w=w, reads=reads:
                                  (step(vals, k, w, reads), done()), const, mut)
            eng.push(op, CPU, priority=prio)
    eng.wait_for_all(timeout=60)
    return vals, [v.version for v in vs]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_workloads_equal_serial_run(seed: int) -> None:
    work = make_workloads(seed)
    expected = serial(work)
    writes = [0] * NVARS
    for w, _ in work:
        writes[w] += 1
    engines: list[Engine] = [NaiveEngine(), ThreadedEngine(num_cpu_workers=1),
                             ThreadedEngine(num_cpu_workers=2 + seed)]
    try:
        for eng in engines:
            vals, versions = run_engine(eng, work, seed)
            assert vals == expected, f"{type(eng).__name__} differs from the serial run"
            assert versions == writes
    finally:
        for eng in engines:
            eng.shutdown(wait=False)


def test_the_check_can_fail() -> None:
    # The serial result really depends on order: swapping two dependent steps
    # changes it, so the equality above is a real test of ordering.
    work = make_workloads(0)[:200]
    i = next(i for i in range(199) if work[i][0] in work[i + 1][1])
    swapped = work[:i] + [work[i + 1], work[i]] + work[i + 2:]
    vals_a, vals_b = list(range(NVARS)), list(range(NVARS))
    for k, (w, r) in enumerate(work):
        step(vals_a, k, w, r)
    for k, (w, r) in enumerate(swapped):
        step(vals_b, k if k not in (i, i + 1) else (2 * i + 1 - k), w, r)
    assert vals_a != vals_b
