"""An independent check of bench/engine.py's per-function figure (issue 23).

Same shape -- a chain (each function writes what the next reads) and a fan (one
root, N readers) of N do-nothing functions -- but written apart from
bench/engine.py: only the engine's public API (``create_engine``, ``push_sync``,
``wait_for_all``), its own timing, every runner interleaved with every other in
each round, the median of the rounds reported, and the work checked after each run
(every function ran once; every written variable is at version 1). Peers run the
same DAG in the same rounds:

  plain loop            calls the function N times (the floor: no scheduling)
  concurrent.futures    ThreadPoolExecutor(2): a chain submits each task from its
                        predecessor's done-callback, a fan submits N tasks after
                        the root's result
  dask get_sync         dask's single-threaded local scheduler (dask.local)
  dask threaded(2)      dask.threaded.get on a 2-thread pool

    .venv/bin/python bench/engine_harness.py              # N=10000, 7 rounds
    .venv/bin/python bench/engine_harness.py -n 2000 -r 3

Prints microseconds per function (wall, and the process's CPU time over all
threads, which a loaded machine inflates less) and each engine's ratio to
concurrent.futures and to dask's threaded scheduler.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine import Context, create_engine  # noqa: E402

WORKERS = 2
calls: list[None] = []


def work(*_: Any) -> None:
    """The scheduled function: records that it ran (one list append) and nothing else."""
    calls.append(None)


def timed(body: Callable[[], None]) -> tuple[float, float]:
    calls.clear()
    wall, cpu = time.perf_counter(), time.process_time()
    body()
    return time.perf_counter() - wall, time.process_time() - cpu


def expect_calls(n: int, who: str) -> None:
    if len(calls) != n:
        raise SystemExit(f"{who}: {len(calls)} functions ran, expected {n}")


def engine_runner(kind: str, shape: str, n: int) -> tuple[float, float]:
    eng = create_engine(kind, num_cpu_workers=WORKERS)
    cpu = Context.cpu()
    try:
        root, outs = eng.new_variable(), [eng.new_variable() for _ in range(n)]
        eng.push_sync(work, cpu, [], [eng.new_variable()])  # start the workers
        eng.wait_for_all()

        def chain() -> None:
            prev = root
            for v in outs:
                eng.push_sync(work, cpu, [prev], [v])
                prev = v
            eng.wait_for_all()

        def fan() -> None:
            eng.push_sync(work, cpu, [], [root])
            for v in outs:
                eng.push_sync(work, cpu, [root], [v])
            eng.wait_for_all()
        result = timed(chain if shape == "chain" else fan)
        expect_calls(n + (shape == "fan"), f"{kind} {shape}")
        if any(v.version != 1 for v in outs):
            raise SystemExit(f"{kind} {shape}: a written variable is not at version 1")
        return result
    finally:
        eng.shutdown()


def plain_runner(shape: str, n: int) -> tuple[float, float]:
    total = n + (shape == "fan")

    def loop() -> None:
        for _ in range(total):
            work(None)
    result = timed(loop)
    expect_calls(total, "plain loop")
    return result


def futures_runner(shape: str, n: int) -> tuple[float, float]:
    with ThreadPoolExecutor(WORKERS) as pool:
        pool.submit(int).result()  # threads started before the clock, as the engines'
        done: Future[None] = Future()

        def chain() -> None:
            left = [n]
            here = threading.local()

            def next_link(_: Any = None) -> None:
                # A future already done calls its callback at once, on the registering thread:
                # chained that way, 10k links recursed past Python's limit (the callback's
                # RecursionError is only logged, so the run hung). That call just says "again"
                # and this loop submits the next link.
                if getattr(here, "registering", False):
                    here.again = True
                    return
                while True:
                    if left[0] == 0:
                        done.set_result(None)
                        return
                    left[0] -= 1
                    future = pool.submit(work)
                    here.registering, here.again = True, False
                    future.add_done_callback(next_link)
                    here.registering = False
                    if not here.again:
                        return
            next_link()
            done.result()

        def fan() -> None:
            pool.submit(work).result()
            futures = [pool.submit(work) for _ in range(n)]
            for f in futures:
                f.result()
        result = timed(chain if shape == "chain" else fan)
    expect_calls(n + (shape == "fan"), f"concurrent.futures {shape}")
    return result


def dask_graph(shape: str, n: int) -> tuple[dict[str, Any], list[str]]:
    if shape == "chain":
        dsk: dict[str, Any] = {"t0": (work,)}
        dsk.update({f"t{i}": (work, f"t{i - 1}") for i in range(1, n)})
        return dsk, [f"t{n - 1}"]
    dsk = {"root": (work,)}
    dsk.update({f"t{i}": (work, "root") for i in range(n)})
    return dsk, [f"t{i}" for i in range(n)]


def dask_runner(threaded: bool, shape: str, n: int) -> tuple[float, float]:
    import dask.local
    import dask.threaded
    dsk, keys = dask_graph(shape, n)
    if threaded:
        with ThreadPoolExecutor(WORKERS) as pool:
            result = timed(lambda: dask.threaded.get(dsk, keys, pool=pool))
    else:
        result = timed(lambda: dask.local.get_sync(dsk, keys))
    expect_calls(n + (shape == "fan"), f"dask {shape}")
    return result


def runners() -> dict[str, Callable[[str, int], tuple[float, float]]]:
    table: dict[str, Callable[[str, int], tuple[float, float]]] = {
        "plain loop": plain_runner,
        "NaiveEngine": lambda s, n: engine_runner("naive", s, n),
        f"ThreadedEngine({WORKERS})": lambda s, n: engine_runner("threaded", s, n),
        f"concurrent.futures({WORKERS})": futures_runner,
    }
    try:
        import dask.threaded  # noqa: F401
    except ImportError:
        return table
    table["dask get_sync"] = lambda s, n: dask_runner(False, s, n)
    table[f"dask threaded({WORKERS})"] = lambda s, n: dask_runner(True, s, n)
    return table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=10_000, help="functions per DAG (default 10000)")
    ap.add_argument("-r", "--rounds", type=int, default=7, help="rounds; the median is kept")
    args = ap.parse_args()
    table = runners()
    times: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for _ in range(args.rounds):  # interleaved: a noisy moment hits every runner alike
        for shape in ("chain", "fan"):
            for name, run in table.items():
                times.setdefault((shape, name), []).append(run(shape, args.n))
    print(f"engine harness: chain and fan of {args.n} functions, median of {args.rounds} "
          f"interleaved rounds; {os.cpu_count()} CPUs; load average "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"{'DAG':6} {'runner':24} {'wall us/fn':>10} {'cpu us/fn':>10} "
          f"{'/futures':>9} {'/dask thr':>9}")
    for (shape, name), runs in times.items():
        wall = statistics.median(w for w, _ in runs) / args.n * 1e6
        cpu = statistics.median(c for _, c in runs) / args.n * 1e6
        peers = [statistics.median(w for w, _ in times.get((shape, p), [(float("nan"), 0)]))
                 / args.n * 1e6 for p in (f"concurrent.futures({WORKERS})",
                                          f"dask threaded({WORKERS})")]
        print(f"{shape:6} {name:24} {wall:10.2f} {cpu:10.2f} "
              + " ".join(f"{wall / p:8.2f}x" for p in peers))


if __name__ == "__main__":
    main()
