"""What one step of control flow costs: Scan, Loop and If on our engine beside onnxruntime.

Reproduce from the repository root:

    PYTHONPATH=$PWD .venv/bin/python bench/control_flow.py
    PYTHONPATH=$PWD .venv/bin/python bench/control_flow.py --runs 30 --steps 2000

Each probe is a model built here whose time is nearly all control flow, so the printed
microseconds a step are what the executor spends around a body (and the body's few
small kernels), not arithmetic:

- ``scan_add``: a Scan carrying a state of 4 floats, a body of two nodes (Add, Mul);
- ``scan_knn``: skl2onnx's kNN Scan at its benchmark shape -- 16 queries of 30 features
  carried through unchanged, one training row a step, a Sub and a ReduceSumSquare;
- ``loop_add``: a Loop of ``--steps`` trips, a body of two nodes over 4 floats;
- ``if_chain``: twenty chained Ifs whose branches are one node each (per If).

Both sides run on one thread (onnxruntime's intra-op threads set to 1; our executor's
serial function), interleaved run by run, median of ``--runs``. Printed per probe: the
microseconds a step of each, their ratio, and the reproduce line. The real models these
shapes come from are in ``bench/real_engine.py`` (``--families classical-ml,vad``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.executor import Executor  # noqa: E402
from partition import load_model  # noqa: E402

F = TensorProto.FLOAT


def _model(nodes: list, inputs: list, outputs: list) -> onnx.ModelProto:
    model = helper.make_model(helper.make_graph(nodes, "probe", inputs, outputs),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8   # onnxruntime refuses onnx's newer defaults
    return model


def _vi(name: str, shape: list | None, dtype: int = F) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


def scan_add(steps: int, rng: np.random.Generator) -> tuple[onnx.ModelProto, dict, int]:
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "x"], ["s2"]), helper.make_node("Mul", ["s2", "x"], ["y"])],
        "body", [_vi("s", [4]), _vi("x", [4])], [_vi("s2", [4]), _vi("y", [4])])
    model = _model([helper.make_node("Scan", ["s0", "xs"], ["s_end", "ys"], body=body, num_scan_inputs=1)],
                   [_vi("s0", [4]), _vi("xs", [steps, 4])], [_vi("s_end", None), _vi("ys", None)])
    feeds = {"s0": rng.standard_normal(4).astype(np.float32),
             "xs": rng.standard_normal((steps, 4)).astype(np.float32)}
    return model, feeds, steps


def scan_knn(steps: int, rng: np.random.Generator) -> tuple[onnx.ModelProto, dict, int]:
    rows = 569   # the breast-cancer training set skl2onnx's kNN scans (bench/sklearn_models.py)
    body = helper.make_graph(
        [helper.make_node("Identity", ["q"], ["q2"]), helper.make_node("Sub", ["q", "row"], ["d"]),
         helper.make_node("ReduceSumSquare", ["d"], ["d2"], axes=[1], keepdims=0),
         helper.make_node("Identity", ["d2"], ["dist"])],
        "body", [_vi("q", [16, 30]), _vi("row", [30])], [_vi("q2", [16, 30]), _vi("dist", [16])])
    model = _model([helper.make_node("Scan", ["queries", "train"], ["q_end", "dists"], body=body,
                                     num_scan_inputs=1)],
                   [_vi("queries", [16, 30]), _vi("train", [rows, 30])], [_vi("q_end", None), _vi("dists", None)])
    feeds = {"queries": rng.standard_normal((16, 30)).astype(np.float32),
             "train": rng.standard_normal((rows, 30)).astype(np.float32)}
    return model, feeds, rows


def loop_add(steps: int, rng: np.random.Generator) -> tuple[onnx.ModelProto, dict, int]:
    i64, b = TensorProto.INT64, TensorProto.BOOL
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "x"], ["s2"]), helper.make_node("Mul", ["s2", "x"], ["s3"]),
         helper.make_node("Identity", ["c"], ["c2"])],
        "body", [_vi("i", [], i64), _vi("c", [], b), _vi("s", [4])], [_vi("c2", [], b), _vi("s3", [4])])
    model = _model([helper.make_node("Loop", ["trips", "", "s0"], ["s_end"], body=body)],
                   [_vi("trips", [], i64), _vi("s0", [4]), _vi("x", [4])], [_vi("s_end", None)])
    feeds = {"trips": np.array(steps, np.int64), "s0": rng.standard_normal(4).astype(np.float32),
             "x": (rng.standard_normal(4) * 0.01).astype(np.float32)}
    return model, feeds, steps


def if_chain(steps: int, rng: np.random.Generator) -> tuple[onnx.ModelProto, dict, int]:
    count = 20
    nodes, value = [], "x"
    for k in range(count):
        then = helper.make_graph([helper.make_node("Neg", [value], [f"t{k}"])], f"then{k}", [], [_vi(f"t{k}", [4])])
        other = helper.make_graph([helper.make_node("Abs", [value], [f"e{k}"])], f"else{k}", [], [_vi(f"e{k}", [4])])
        nodes.append(helper.make_node("If", ["c"], [f"y{k}"], then_branch=then, else_branch=other))
        value = f"y{k}"
    model = _model(nodes, [_vi("c", [], TensorProto.BOOL), _vi("x", [4])], [_vi(value, None)])
    feeds = {"c": np.array(bool(rng.integers(2))), "x": rng.standard_normal(4).astype(np.float32)}
    return model, feeds, count


PROBES: dict[str, Callable[[int, np.random.Generator], tuple[onnx.ModelProto, dict, int]]] = {
    "scan_add": scan_add, "scan_knn": scan_knn, "loop_add": loop_add, "if_chain": if_chain}


def time_probe(name: str, steps: int, runs: int, rng: np.random.Generator) -> dict:
    model, feeds, n = PROBES[name](steps, rng)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    ours, theirs = [], []
    with Executor(load_model(model.SerializeToString())) as ex:
        got = ex.run(feeds).numpy_outputs()
        for w, out in zip(want, sess.get_outputs()):
            np.testing.assert_allclose(got[out.name], w, rtol=1e-4, atol=1e-5, err_msg=f"{name}: {out.name}")
        ex._modes.choice = True   # the serial function: one thread, as onnxruntime here
        for _ in range(3):
            ex.run(feeds)
            sess.run(None, feeds)
        for k in range(runs):
            for side in ((ex, ours), (sess, theirs)) if k % 2 else ((sess, theirs), (ex, ours)):
                start = time.perf_counter()
                side[0].run(feeds) if side[0] is ex else side[0].run(None, feeds)
                side[1].append(time.perf_counter() - start)
    ours_us, ort_us = statistics.median(ours) * 1e6 / n, statistics.median(theirs) * 1e6 / n
    return {"probe": name, "steps": n, "ours_us": ours_us, "ort_us": ort_us, "ratio": ours_us / ort_us}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("probes", nargs="*", default=list(PROBES), help=f"which (default: all of {list(PROBES)})")
    p.add_argument("--runs", type=int, default=20, help="timed runs per side (median)")
    p.add_argument("--steps", type=int, default=1000, help="steps of scan_add and loop_add")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    unknown = [n for n in args.probes if n not in PROBES]
    if unknown or args.runs < 1 or args.steps < 1:
        p.error(f"unknown probe(s) {unknown}; --runs and --steps must be >= 1")
    rng = np.random.default_rng(args.seed)
    print(f"onnxruntime {ort.__version__} (1 thread), numpy {np.__version__}; median of {args.runs} runs")
    print(f"{'probe':<10} {'steps':>6} {'ours us/step':>13} {'ort us/step':>12} {'ratio':>6}")
    for name in args.probes:
        row = time_probe(name, args.steps, args.runs, rng)
        print(f"{row['probe']:<10} {row['steps']:>6} {row['ours_us']:>13.2f} {row['ort_us']:>12.2f} "
              f"{row['ratio']:>6.2f}")
    print(f"reproduce: PYTHONPATH=$PWD .venv/bin/python bench/control_flow.py {' '.join(args.probes)} "
          f"--runs {args.runs} --steps {args.steps} --seed {args.seed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
