"""What our single-node onnxruntime kernel adds around its session (``engine/ort_fallback.py``).

A node our kernels do not cover runs in its own onnxruntime session; a scikit-learn model is
little else (``sk_gbr`` is one ``TreeEnsembleRegressor``). Per model of ``bench/sklearn_models.py``
(converted by skl2onnx, fitted here: nothing of ours shaped them), the first node we have no kernel
for is called two ways on the inputs a real run gives it, interleaved in one process:

- ``kernel``: the executor's kernel object, as a run calls it;
- ``session``: the very session it holds, ``session.run`` on the same feeds -- the peer: what
  onnxruntime itself costs for that node.

It prints both (best of ``--rounds`` rounds of ``--calls`` calls, microseconds) and what the kernel
adds, and how to reproduce it. Interleaving in one process keeps a loaded machine's drift out of
the difference.

    PYTHONPATH=. .venv/bin/python bench/fallback.py [--rounds 40] [--calls 200] [NAME ...]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.append(str(ROOT / "bench"))  # after the root: bench/partition.py must not shadow the package

from engine.executor import Executor  # noqa: E402
from engine.ort_fallback import OrtFallback  # noqa: E402
from partition import load_model  # noqa: E402

import sklearn_models  # noqa: E402

MODELS = ("sk_gbr", "sk_forest", "sk_svc_pca")


def fallback_call(name: str):
    """(node, kernel, its session, the args a run passes it) for the model's first fallback node."""
    onnx_path, npz_path = sklearn_models.convert(name)
    graph = load_model(str(onnx_path))
    feeds = dict(np.load(npz_path))
    finder = OrtFallback()
    with Executor(graph, kernels=finder, keep_intermediates=True) as ex:
        values = ex.run(feeds).values
    node = next(n for n in graph.nodes if n.name in finder.nodes)
    kernel = finder(node, graph.opset).with_constants({})
    args = [values[t] if t else None for t in node.inputs]
    kernel(np, *args)   # builds its session
    (session,) = kernel._sessions.values()
    return node, kernel, session, args


def time_us(fn, calls: int, into: list[float]) -> None:
    """Append the mean microseconds of ``calls`` calls of ``fn`` to ``into``."""
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    into.append((time.perf_counter() - start) / calls * 1e6)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="*", default=list(MODELS))
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--calls", type=int, default=200)
    args = ap.parse_args(argv)
    print(f"{'model':12s} {'node':28s} {'session us':>10s} {'kernel us':>10s} {'added us':>9s} {'ratio':>6s}")
    for name in args.models:
        node, kernel, session, call_args = fallback_call(name)
        outputs = [t for t in node.outputs if t]
        feeds = {t: a for t, a in zip(node.inputs, call_args) if t and a is not None}
        times: dict[str, list[float]] = {"session": [], "kernel": []}
        for _ in range(args.rounds):
            time_us(lambda: session.run(outputs, feeds), args.calls, times["session"])
            time_us(lambda: kernel(np, *call_args), args.calls, times["kernel"])
        s, k = min(times["session"]), min(times["kernel"])
        print(f"{name:12s} {node.op_type:28s} {s:10.1f} {k:10.1f} {k - s:9.1f} {k / s:6.2f}")
    print(f"reproduce: PYTHONPATH=. .venv/bin/python bench/fallback.py --rounds {args.rounds} "
          f"--calls {args.calls} {' '.join(args.models)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
