"""Our engine beside onnxruntime on models nobody here wrote, in one process, interleaved.

    python bench/cores.py [--repeat 10] [--models ppocr_det,...] [--real] [--json OUT]

What ``docs/kernels.md`` cites for the compiled kernels and for who owns the cores:
the third-party models of ``~/.cache/sglens-test-models`` (PP-OCR det/rec/cls from
the rapidocr wheel, Magika; fetched by ``tests/acceptance/wheel_models.py``) at
realistic input shapes, every ``~/.cache/sglens-bench/models/*.onnx`` export that
exists (``bench/real_engine.py``'s), and with ``--real`` the four models of
``bench/run.py``. Each row: onnxruntime and our engine in alternating blocks on the
same inputs (``bench/run.py``'s ``paired_latency``), medians, their ratio, and
our time per executed node. ``bench/cores_kernels.py`` has the per-layer figures of
the compiled conv kernels. Never run from the tests.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.append(str(Path(__file__).resolve().parent))  # after the repo: bench/engine.py is not engine/

import numpy as np  # noqa: E402
import onnx  # noqa: E402

from engine.inputs import random_inputs  # noqa: E402
from partition import load_model  # noqa: E402
from run import executed_nodes, paired_latency  # noqa: E402

TEST_MODELS = Path(os.environ.get("SGLENS_TEST_MODELS", "~/.cache/sglens-test-models")).expanduser()
BENCH_MODELS = Path("~/.cache/sglens-bench/models").expanduser()
#: Input sizes of the symbolic dims, per third-party model (what the apps feed them).
SHAPES = {"ppocr_det": (1, 3, 320, 320), "ppocr_rec": (1, 3, 48, 320),
          "ppocr_cls": (1, 3, 48, 192), "magika": (1, 2048)}


def third_party() -> dict[str, Path]:
    found = {p.stem: p for p in sorted(TEST_MODELS.glob("*.onnx")) if p.stem in SHAPES}
    found.update({p.stem: p for p in sorted(BENCH_MODELS.glob("*.onnx")) if p.with_suffix(".npz").exists()})
    return found


def feeds_for(name: str, graph) -> dict[str, np.ndarray]:
    saved = BENCH_MODELS / f"{name}.npz"  # an export's own inputs, saved beside it
    if saved.exists():
        with np.load(saved) as data:
            arrays = [data[k] for k in data.files]
            names = list(data.files)
        wanted = [i for i in graph.inputs if i not in graph.initializers]
        if set(names) != set(wanted) and len(names) == len(wanted):
            names = wanted  # saved under other names (an export's renamed input): in order
        return dict(zip(names, arrays))
    feeds = random_inputs(graph, {}, seed=0, default_dim=1)
    shape = SHAPES.get(name)
    if shape is not None:
        (key, value), = feeds.items()
        rng = np.random.default_rng(0)
        if value.dtype.kind == "f":
            feeds[key] = rng.standard_normal(shape).astype(value.dtype)
        else:
            feeds[key] = rng.integers(0, 256, shape).astype(value.dtype)
    return feeds


def bench_one(name: str, model: onnx.ModelProto, args) -> dict:
    graph = load_model(model.SerializeToString())
    feeds = feeds_for(name, graph)
    t_ort, t_eng, _, _ = paired_latency(model, graph, feeds, args.repeat, args.warmup, block=args.block)
    return {"model": name, "ort_ms": t_ort * 1e3, "engine_ms": t_eng * 1e3, "ratio": t_eng / t_ort,
            "us_per_node": t_eng * 1e6 / max(1, executed_nodes(graph))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--block", type=int, default=5)
    ap.add_argument("--models", default="", help="comma-separated names (default: all found)")
    ap.add_argument("--real", action="store_true", help="add bench/run.py's four models")
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    models = {name: onnx.load(str(path)) for name, path in third_party().items()}
    if args.real:
        from real_models import REAL_MODELS, build
        models.update({name: build(name)[0] for name in REAL_MODELS})
    if args.models:
        keep = set(args.models.split(","))
        models = {k: v for k, v in models.items() if k in keep}
    print(f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores "
          f"(numbers from a shared machine are only comparable within a row)")
    rows = []
    for name, model in models.items():
        try:
            row = bench_one(name, model, args)
        except Exception as exc:  # noqa: BLE001 -- one model's failure is a row, not the end
            row = {"model": name, "error": f"{type(exc).__name__}: {exc}"[:200]}
        rows.append(row)
        if "error" in row:
            print(f"{name:24s} error {row['error']}", flush=True)
        else:
            print(f"{name:24s} ort {row['ort_ms']:9.2f} ms  engine {row['engine_ms']:9.2f} ms  "
                  f"ratio {row['ratio']:5.2f}  {row['us_per_node']:7.1f} us/node", flush=True)
    ratios = [r["ratio"] for r in rows if "ratio" in r]
    if ratios:
        print(f"geometric mean ratio {math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f} "
              f"over {len(ratios)} models; worst {max(ratios):.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
