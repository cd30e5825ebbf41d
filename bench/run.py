"""Latency of real-shaped and sample models on our engine beside onnxruntime, in one process.

    python bench/run.py [--repeat 20] [--warmup 3] [--models a,b] [--engine threaded|naive]
                        [--workers N] [--json OUT.json] [--samples] [--profile [N]] [--cpu]
                        [--block 5] [--pause 0.05] [--blas-threads N]

Models: the real-shaped ones of ``bench/real_models.py`` (ResNet-18 at
1x3x224x224, a 2-layer transformer at sequence 128, a bidirectional LSTM
tagger over 100 steps, a silero-VAD-like streaming step with If and LSTM),
built here with random weights; ``--samples`` adds the small sample models.
The summary line gives the geometric mean of the engine/ort ratios over the
real models (target <= 2, none > 5) and the per-node floor on ``vad_stream``
(engine time / nodes that ran).

``--cpu`` adds CPU time per run, onnxruntime on one thread against our engine
with BLAS on one thread (best of ``--repeat``, alternating):
per-core efficiency; on a machine loaded far beyond its cores, wall-time ratios
mostly say who got the CPUs.

``--profile [N]`` runs each chosen model N more times under cProfile and
prints the 25 most expensive functions by own time (and, with ``--json``,
nothing more: profiles are for reading).

Per model (median of ``--repeat`` runs after ``--warmup``; onnxruntime and
our engine alternate in blocks of ``--block`` runs, each block after a ``--pause``
and one untimed run, so a noisy neighbour slows both alike while neither side's thread pool runs
into the other's -- onnxruntime's threads spin on after a run, and run-by-run
alternation had both sides of a 2-core machine slower than either alone; see
``paired_latency``). The header prints the load average at start and end and
the cores' busy share over the run (from /proc/stat: other containers on the
host show there, not in the load average):

- ``ort``: onnxruntime CPU on the whole model;
- ``engine``: our engine, unpartitioned, numpy kernels; ``ratio`` = engine / ort;
- ``ort_sub``: partitioned with the ``default`` backend over every op type of
  the model, each subgraph run by onnxruntime as subgraph executor (what the
  engine adds around onnxruntime: pushes, boundaries, weights);
- on a machine with cupy and a GPU: ``gpu`` (our engine on cupy, beside
  numpy) and the per-subgraph GPU times of the ``default`` partition with
  ``--executor auto``.

Models whose ops have no kernel yet are listed as skipped. Never run from the tests.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import math
import os
import pstats
import shlex
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from engine import gpu  # noqa: E402
from engine.kernels import native  # noqa: E402
from engine.executor import Executor, missing_ops  # noqa: E402
from engine.inputs import random_inputs  # noqa: E402
from engine.measure import measure  # noqa: E402
from engine.plan import CALIBRATION_RUNS  # noqa: E402
from partition import load_model  # noqa: E402
from partition.runner import partition  # noqa: E402
from sample_models.generate import build_all  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from real_models import REAL_MODELS, build, count_nodes  # noqa: E402

FLOOR_MODEL = "vad_stream"


def ort_session(model):
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def ort_latency(model, feeds, repeat, warmup) -> float:
    sess = ort_session(model)
    for _ in range(warmup):
        sess.run(None, feeds)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def paired_latency(model, graph, feeds, repeat, warmup, block=5, pause=0.05, min_seconds=0.0,
                   max_repeat=400, **kw) -> tuple[float, float, int, int]:
    """Medians of onnxruntime and our engine run in *alternating blocks* on the same
    inputs: ``block`` timed runs of one side (after a ``pause`` and one untimed run),
    then of the other, until each has ``repeat``. Load that comes and goes still hits
    both sides alike, but neither side's threads run into the other's: onnxruntime's
    pool keeps spinning ~30 ms after ``run`` returns (measured: a process sleeping
    20 ms after a ResNet-18 run used 20 ms of CPU), which took the second core from
    whatever ran next -- run-by-run alternation measured both sides of a 2-core
    machine slower than either alone (onnxruntime's ResNet-18 27 ms instead of 13).
    Our engine's helper threads block instead of spinning. ``block=1, pause=0`` is
    the old run-by-run pairing.

    ``min_seconds``: past ``repeat`` runs each, blocks go on (up to ``max_repeat`` runs a
    side) until each side's timed runs add up to that much, and a block then lasts at least
    20 ms: a sub-millisecond model's median of 10 runs, taken right after each pause, swung
    by 2x from run to run. Returns both medians, the peak bytes and the runs per side."""
    sess = ort_session(model)
    with Executor(graph, **kw) as ex:
        for _ in range(warmup):
            sess.run(None, feeds)
            ex.run(feeds)
        for _ in range(2 * CALIBRATION_RUNS):   # and past its trial runs, as engine.measure does
            if not ex.calibrating:
                break
            ex.run(feeds)
        t_ort, t_eng, peak = [], [], 0

        def more() -> int:
            """Runs each side times next: 0 when done."""
            if len(t_eng) < repeat:
                return min(block, repeat - len(t_eng))
            if len(t_eng) >= max_repeat or min(sum(t_ort), sum(t_eng)) >= min_seconds:
                return 0
            longest = max(statistics.median(t_ort), statistics.median(t_eng))
            return min(max(block, math.ceil(0.02 / max(longest, 1e-6))), max_repeat - len(t_eng))
        while n := more():
            time.sleep(pause)
            sess.run(None, feeds)  # untimed: wakes onnxruntime's pool after our block
            for _ in range(n):
                t0 = time.perf_counter()
                sess.run(None, feeds)
                t_ort.append(time.perf_counter() - t0)
            time.sleep(pause)  # onnxruntime's threads stop spinning
            ex.run(feeds)  # untimed, as onnxruntime's first
            for _ in range(n):
                t0 = time.perf_counter()
                res = ex.run(feeds)
                t_eng.append(time.perf_counter() - t0)
                peak = max(peak, res.peak_bytes)
    return statistics.median(t_ort), statistics.median(t_eng), peak, len(t_eng)


def engine_latency(graph, feeds, repeat, warmup, **kw):
    with Executor(graph, **kw) as ex:
        return measure(ex, feeds, repeat=repeat, warmup=warmup)


def executed_nodes(graph) -> int:
    """Nodes one run executes: top level plus the *then* branch of each If (what
    vad_stream takes) and every other body once; Constant nodes are not counted
    (the executor evaluates them once, at bind time)."""
    total = 0
    for node in graph.nodes:
        total += node.op_type != "Constant"
        bodies = list(node.subgraphs.values())
        if node.op_type == "If":
            bodies = [node.subgraphs["then_branch"]]
        total += sum(executed_nodes(b) for b in bodies)
    return total


def cpu_times(model, graph, feeds, repeat, warmup, **kw) -> tuple[float, float]:
    """Best CPU seconds per run of onnxruntime on ONE thread (its calling thread's
    CPU time) and of our engine (the process's CPU time, every thread) with BLAS on
    one thread (engine/kernels/blas.py), alternating: per-core efficiency, one
    thread each. CPU time is what a loaded machine inflates least:
    the figure to read when the load average is far above the core count."""
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    with Executor(graph, **kw) as ex, threadpool_limits(1, user_api="blas"):
        for _ in range(warmup):
            sess.run(None, feeds)
            ex.run(feeds)
        t_ort, t_eng = [], []
        for _ in range(repeat):
            t0 = time.thread_time()
            sess.run(None, feeds)
            t_ort.append(time.thread_time() - t0)
            t0 = time.process_time()
            ex.run(feeds)
            t_eng.append(time.process_time() - t0)
    return min(t_ort), min(t_eng)


def _cpu_ticks() -> tuple[int, int] | None:
    """(busy, total) CPU ticks of the whole machine from /proc/stat (None elsewhere).
    The load average can miss what shares the cores (other containers on the same
    host); the busy share of the cores cannot."""
    try:
        with open("/proc/stat") as fh:
            vals = [int(v) for v in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
    return sum(vals[:8]) - idle, sum(vals[:8])


def _busy_share(start: tuple[int, int] | None, end: tuple[int, int] | None) -> str:
    if start is None or end is None or end[1] <= start[1]:
        return ""
    return f"; cores busy {100 * (end[0] - start[0]) / (end[1] - start[1]):.0f}% during the run " \
        "(this benchmark included)"


def _fmt_load(load: tuple[float, float, float]) -> str:
    return ", ".join(f"{x:.1f}" for x in load)


def profile_model(name, graph, feeds, args, kernels=None) -> None:
    """cProfile over every thread: the engine's workers start after the hook is set,
    and each enables a profile of its own on its first profiled call. ``kernels``: the
    executor's kernel lookup (a model with onnxruntime-fallback nodes passes its ``OrtFallback``)."""
    profiles: list[cProfile.Profile] = []

    def start_thread_profile(*_: object) -> None:
        prof = cProfile.Profile()
        profiles.append(prof)
        prof.enable()  # replaces this bootstrap hook for the rest of the thread

    main = cProfile.Profile()
    threading.setprofile(start_thread_profile)
    try:
        with Executor(graph, engine_name=args.engine, workers=args.workers,
                      blas_threads=args.blas_threads, kernels=kernels) as ex:
            ex.run(feeds)
            main.enable()
            for _ in range(args.profile):
                ex.run(feeds)
            main.disable()
    finally:
        threading.setprofile(None)  # type: ignore[arg-type]
    stats = pstats.Stats(main)
    for prof in profiles:  # the workers have left (executor closed): safe to read
        stats.add(prof)
    print(f"\n--- cProfile of {name}: {args.profile} runs, all threads, top 25 by own time ---")
    stats.sort_stats("tottime").print_stats(25)


def bench_model(name, model, args, feeds=None) -> dict:
    graph = load_model(model.SerializeToString())
    if feeds is None:
        feeds = random_inputs(graph, {}, seed=0, default_dim=2)
    row: dict = {"model": name, "nodes": count_nodes(model.graph),
                 "executed_nodes": executed_nodes(graph), "real": name in REAL_MODELS}
    opts = dict(engine_name=args.engine, workers=args.workers, blas_threads=args.blas_threads)
    missing = missing_ops(graph)
    if missing:
        row["ort_ms"] = ort_latency(model, feeds, args.repeat, args.warmup) * 1e3
        row["engine_ms"] = None
        row["skipped"] = f"no kernel for {missing}"
    else:
        t_ort, t_eng, peak, _runs = paired_latency(model, graph, feeds, args.repeat, args.warmup,
                                            block=args.block, pause=args.pause, **opts)
        row["ort_ms"], row["engine_ms"] = t_ort * 1e3, t_eng * 1e3
        row["ratio"] = t_eng / t_ort
        row["peak_bytes"] = peak
    if args.cpu and not missing:
        c_ort, c_eng = cpu_times(model, graph, feeds, args.repeat, args.warmup, **opts)
        row["ort1_cpu_ms"], row["engine_cpu_ms"] = c_ort * 1e3, c_eng * 1e3
    if args.profile and not missing:
        profile_model(name, graph, feeds, args)
    ops = sorted({n.op_type for n in graph.nodes})
    part = partition(graph, "default", ops=ops)
    if args.samples_sub:
        if not missing_ops(part.graph, skip_subgraph_nodes=True):
            m = engine_latency(part.graph, feeds, args.repeat, args.warmup, executor="onnxruntime", **opts)
            row["ort_sub_ms"] = m.seconds * 1e3
            row["ort_sub_subgraphs"] = len(part.subgraphs)
    if gpu.device_count() > 0 and not missing:
        m = engine_latency(graph, feeds, args.repeat, args.warmup, device="gpu", **opts)
        row["gpu_ms"] = m.seconds * 1e3
        m = engine_latency(part.graph, feeds, args.repeat, args.warmup, device="gpu",
                           executor="auto", **opts)
        row["gpu_subgraphs"] = [{"node": s["node"], "executor": s["executor"],
                                 "device_ms": (s["device_seconds"] or 0) * 1e3,
                                 "host_ms": s["seconds"] * 1e3} for s in m.subgraphs]
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--models", default="", help="comma-separated names (default: the real models, "
                   "plus the sample files with --samples)")
    p.add_argument("--samples", action="store_true", help="also the small sample models")
    p.add_argument("--samples-sub", action="store_true",
                   help="also the partitioned run with onnxruntime as subgraph executor (ort_sub)")
    p.add_argument("--profile", type=int, nargs="?", const=20, default=0, metavar="N",
                   help="profile N extra runs per model with cProfile (default 20)")
    p.add_argument("--cpu", action="store_true",
                   help="also CPU time per run: onnxruntime on one thread vs our engine (best of --repeat)")
    p.add_argument("--engine", default=None, choices=("threaded", "naive"))
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--blas-threads", type=int, default=None,
                   help="BLAS threads for our engine (default and 0: BLAS's own; engine/kernels/blas.py)")
    p.add_argument("--block", type=int, default=5,
                   help="timed runs per side before switching (1 = alternate run by run)")
    p.add_argument("--pause", type=float, default=0.05,
                   help="seconds of rest before each block (onnxruntime's threads spin ~30 ms)")
    p.add_argument("--json", metavar="OUT.json")
    args = p.parse_args(argv)
    if args.repeat < 1 or args.warmup < 0 or args.block < 1 or not 0 <= args.pause <= 10:
        p.error("--repeat and --block must be >= 1, --warmup >= 0, --pause in [0, 10] s")
    load_start, busy_start = os.getloadavg(), _cpu_ticks()
    samples = build_all() if (args.samples or any(".onnx" in m for m in args.models.split(","))) else {}
    chosen = [m.strip() for m in args.models.split(",") if m.strip()] \
        or list(REAL_MODELS) + list(samples)
    rows = []
    for n in chosen:
        if n in REAL_MODELS:
            model, feeds = build(n)
            rows.append(bench_model(n, model, args, feeds))
        else:
            rows.append(bench_model(n, samples[n], args))
    print(f"engine={args.engine or os.environ.get('SGLENS_ENGINE') or 'threaded'} "
          f"workers={args.workers or os.cpu_count()} repeat={args.repeat} warmup={args.warmup} "
          f"block={args.block} pause={args.pause:g}s onnxruntime={ort.__version__} numpy={np.__version__} "
          f"on {os.cpu_count()} CPUs")
    print("compiled kernels: " + ("on (engine/kernels/_native)" if native.available()
                                  else "OFF: the numpy paths ran (no C compiler at install?)"))
    print(f"load average at start {_fmt_load(load_start)}, at end {_fmt_load(os.getloadavg())}"
          + _busy_share(busy_start, _cpu_ticks()))
    print(f"{'model':<26}{'nodes':>6}{'ort ms':>9}{'engine ms':>11}{'ratio':>7}{'ort-sub ms':>12}"
          + (f"{'gpu ms':>9}" if any('gpu_ms' in r for r in rows) else ""))
    for r in rows:
        eng = "skip" if r.get("engine_ms") is None else f"{r['engine_ms']:.3f}"
        ratio = "-" if "ratio" not in r else f"{r['ratio']:.2f}" + ("*" if r["real"] else "")
        sub = "-" if "ort_sub_ms" not in r else f"{r['ort_sub_ms']:.3f}"
        gpu_ms = f"{r['gpu_ms']:>9.3f}" if "gpu_ms" in r else ""
        print(f"{r['model']:<26}{r['nodes']:>6}{r['ort_ms']:>9.3f}{eng:>11}{ratio:>7}{sub:>12}{gpu_ms}"
              + (f"   ({r['skipped']})" if "skipped" in r else ""))
    for r in rows:
        if "engine_cpu_ms" in r:
            print(f"cpu {r['model']:<22} onnxruntime 1 thread {r['ort1_cpu_ms']:.3f} ms, ours unsplit "
                  f"{r['engine_cpu_ms']:.3f} ms: {r['engine_cpu_ms'] / r['ort1_cpu_ms']:.2f}x")
    real = [r["ratio"] for r in rows if r["real"] and "ratio" in r]
    if real:
        geo = math.exp(sum(math.log(x) for x in real) / len(real))
        ok = geo <= 2 and max(real) <= 5
        print(f"* real models: geometric mean ratio {geo:.2f}, worst {max(real):.2f} "
              f"(target: geomean <= 2, none > 5 -> {'MET' if ok else 'MISSED'})")
    for r in rows:
        if r["model"] == FLOOR_MODEL and r.get("engine_ms"):
            print(f"per-node floor on {FLOOR_MODEL}: {r['engine_ms'] * 1e3 / r['executed_nodes']:.1f} us "
                  f"per executed node ({r['executed_nodes']} nodes; onnxruntime "
                  f"{r['ort_ms'] * 1e3 / r['executed_nodes']:.1f} us)")
    given = " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    print(f"reproduce: .venv/bin/python bench/run.py {given}".rstrip()
          + "   (add --profile for cProfile tables)")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
