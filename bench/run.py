"""Latency of each sample model on our engine beside onnxruntime, in the same process.

    python bench/run.py [--repeat 50] [--warmup 5] [--models a,b] [--engine threaded|naive]
                        [--workers N] [--json OUT.json]

Per model (median of ``--repeat`` runs after ``--warmup``):

- ``ort``: onnxruntime CPU on the whole model;
- ``engine``: our engine, unpartitioned, numpy kernels; ``ratio`` = engine / ort;
- ``ort_sub``: partitioned with the ``default`` backend over every op type of
  the model, each subgraph run by onnxruntime as subgraph executor (what the
  engine adds around onnxruntime: pushes, boundaries, weights);
- on a machine with cupy and a GPU: ``gpu`` (our engine on cupy, beside
  numpy) and the per-subgraph GPU times of the ``default`` partition with
  ``--executor auto``.

The CPU target is ``ratio <= 2`` on the CNN (resnet_small, conv_bn_relu_chain)
and transformer samples. Models whose ops have no kernel yet are listed as
skipped. Never run from the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402

from engine import gpu  # noqa: E402
from engine.executor import Executor, missing_ops  # noqa: E402
from engine.inputs import random_inputs  # noqa: E402
from engine.measure import measure  # noqa: E402
from partition import load_model  # noqa: E402
from partition.runner import partition  # noqa: E402
from sample_models.generate import build_all  # noqa: E402

TARGETS = {"resnet_small.onnx", "conv_bn_relu_chain.onnx", "transformer_block.onnx"}


def ort_latency(model, feeds, repeat, warmup) -> float:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    for _ in range(warmup):
        sess.run(None, feeds)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def engine_latency(graph, feeds, repeat, warmup, **kw):
    with Executor(graph, **kw) as ex:
        return measure(ex, feeds, repeat=repeat, warmup=warmup)


def bench_model(name, model, args) -> dict:
    graph = load_model(model.SerializeToString())
    feeds = random_inputs(graph, {}, seed=0, default_dim=2)
    row: dict = {"model": name, "nodes": len(graph.nodes)}
    row["ort_ms"] = ort_latency(model, feeds, args.repeat, args.warmup) * 1e3
    opts = dict(engine_name=args.engine, workers=args.workers)
    missing = missing_ops(graph)
    if missing:
        row["engine_ms"] = None
        row["skipped"] = f"no kernel for {missing}"
    else:
        m = engine_latency(graph, feeds, args.repeat, args.warmup, **opts)
        row["engine_ms"] = m.seconds * 1e3
        row["ratio"] = m.seconds * 1e3 / row["ort_ms"]
        row["peak_bytes"] = m.peak_bytes
    ops = sorted({n.op_type for n in graph.nodes})
    part = partition(graph, "default", ops=ops)
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
    p.add_argument("--repeat", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--models", default="", help="comma-separated file names (default: all)")
    p.add_argument("--engine", default=None, choices=("threaded", "naive"))
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--json", metavar="OUT.json")
    args = p.parse_args(argv)
    models = build_all()
    chosen = [m.strip() for m in args.models.split(",") if m.strip()] or list(models)
    rows = [bench_model(n, models[n], args) for n in chosen]
    print(f"engine={args.engine or os.environ.get('SGLENS_ENGINE') or 'threaded'} "
          f"workers={args.workers or os.cpu_count()} repeat={args.repeat} warmup={args.warmup} "
          f"onnxruntime={ort.__version__} numpy={np.__version__}")
    print(f"{'model':<26}{'nodes':>6}{'ort ms':>9}{'engine ms':>11}{'ratio':>7}{'ort-sub ms':>12}"
          + (f"{'gpu ms':>9}" if any('gpu_ms' in r for r in rows) else ""))
    for r in rows:
        eng = "skip" if r.get("engine_ms") is None else f"{r['engine_ms']:.3f}"
        ratio = "-" if "ratio" not in r else f"{r['ratio']:.2f}" + ("*" if r["model"] in TARGETS else "")
        sub = "-" if "ort_sub_ms" not in r else f"{r['ort_sub_ms']:.3f}"
        gpu_ms = f"{r['gpu_ms']:>9.3f}" if "gpu_ms" in r else ""
        print(f"{r['model']:<26}{r['nodes']:>6}{r['ort_ms']:>9.3f}{eng:>11}{ratio:>7}{sub:>12}{gpu_ms}"
              + (f"   ({r['skipped']})" if "skipped" in r else ""))
    print("* target: ratio <= 2 on CPU")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
