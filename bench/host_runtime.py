"""A partitioned graph with the rest on our engine or on onnxruntime (``--host-runtime``), beside
onnxruntime on the whole model and our engine unpartitioned, in one process.

    python bench/host_runtime.py [MODEL] [--ops MatMul,Add] [--subgraph-runtime onnxruntime]
                                 [--rounds 30] [--warmup 5] [--spin]

The four runs alternate round by round (a noisy neighbour slows all alike); each line is the
median of ``--rounds``. ``--spin`` lets the subgraph and region sessions' idle threads spin
(onnxruntime's default), to see what ``engine/subgraph_ops.py`` turns off and why
(``docs/running.md``, "Host runtime"). Inputs are fresh random values; symbolic dims are 2.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.executor import Executor  # noqa: E402
from engine.host_regions import HOST_PROPERTY, host_regions  # noqa: E402
from partition.onnx_io import load_model  # noqa: E402
from partition.runner import partition  # noqa: E402


def _spinning_sessions() -> None:
    """Make every later onnxruntime session spin while idle (the library default)."""
    import onnxruntime as ort
    real = ort.SessionOptions.add_session_config_entry

    def add(self, key, value):
        if key != "session.intra_op.allow_spinning":
            real(self, key, value)
    ort.SessionOptions.add_session_config_entry = add


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", nargs="?", default="sample_models/transformer_block.onnx")
    p.add_argument("--ops", default="MatMul,Add")
    p.add_argument("--subgraph-runtime", default="onnxruntime")
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--spin", action="store_true")
    args = p.parse_args(argv)
    if args.spin:
        _spinning_sessions()
    import onnxruntime as ort
    graph = load_model(args.model)
    part = partition(graph, "default", ops=args.ops.split(","))
    regions = host_regions(part.graph)
    rng = np.random.default_rng()
    feeds = {n: rng.standard_normal([d if isinstance(d, int) and d > 0 else 2 for d in graph.info(n).shape])
             .astype(np.float32) for n in graph.inputs}
    session = ort.InferenceSession(args.model, providers=["CPUExecutionProvider"])
    ours = Executor(graph)
    rest_ours = Executor(part.graph, subgraph_runtime=args.subgraph_runtime)
    rest_ort = Executor(regions.graph, subgraph_runtime=args.subgraph_runtime,
                        runtime_by_property=((HOST_PROPERTY, "onnxruntime"),))
    runs = {"onnxruntime, whole model": lambda: session.run(None, feeds),
            "ours, unpartitioned": lambda: ours.run(feeds),
            "partitioned, rest on ours": lambda: rest_ours.run(feeds),
            "partitioned, rest on onnxruntime": lambda: rest_ort.run(feeds)}
    times: dict[str, list[float]] = {k: [] for k in runs}
    for f in runs.values():
        for _ in range(args.warmup):
            f()
    for _ in range(args.rounds):
        for name, f in runs.items():
            t0 = time.perf_counter()
            f()
            times[name].append(time.perf_counter() - t0)
    print(f"{args.model}: {len(graph.nodes)} nodes, {len(part.subgraphs)} subgraph(s) on {args.subgraph_runtime}, "
          f"{len(regions.subgraphs)} host region(s); sessions {'spin' if args.spin else 'sleep'} while idle")
    for name, ts in times.items():
        print(f"  {name:34s} median {statistics.median(ts) * 1e3:8.3f} ms")
    for ex in (ours, rest_ours, rest_ort):
        ex.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
