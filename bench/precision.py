"""Cost of ``sglens precision``: model runs and seconds per 100 nodes of the search.

Models (all built in memory, opset 17 / IR 8):

- ``trouble-L``: ``sample_models/builders_fp16.py``'s post-LN transformer, ``L`` layers stacked
  (46 nodes per layer), fed hidden states with one massive-activation channel at 1000: the
  first layer's attention logits and LayerNorm squares overflow FP16, the later layers do not;
- ``resnet18``: ``bench/real_models.py``'s ResNet-18 (real ImageNet shapes, He-initialised
  weights), input uniform in [-3, 3]: FP16 needs no pins;
- ``resnet_small``: the sample CNN, input uniform in [-3, 3];
- with ``--rapidocr``: the three real PP-OCR models shipped in the ``rapidocr_onnxruntime``
  1.4.4 wheel (fetched once with ``pip download --no-deps`` into ``~/.cache/sglens/wheels``):
  text detection (DBNet, 672 nodes, 1x3x320x320), direction classifier (566 nodes, 1x3x48x192)
  and recognition (SVTR-LCNet with attention blocks, 860 nodes, 1x3x48x320), inputs uniform in
  [-1, 1] (their normalised-image range).

Each is investigated once per target with ``engine.precision_report.investigate`` (backend
``tensorrt``: its subgraphs are the first-level groups), rtol 1e-2 and atol 1e-2, except
ResNet-18 whose logits reach ~360: atol 0.5 there (0.14 % of the range; FP16's own rounding of
its outputs moves them by up to 0.2, and atol 1e-2 then asks for 27 pins of diffuse rounding,
not overflow: the answer to "which nodes must stay FP32" for that tolerance is "most"). Reported:
nodes, candidates, the search's model runs (reference and baseline included; the two analysis
runs are not), seconds of the whole investigation, and both per 100 nodes.

    .venv/bin/python bench/precision.py [--layers 1,2,4,8] [--targets fp16[,bf16]] [--rapidocr] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _models(layers: list[int]):
    from bench.real_models import build as build_real
    from sample_models.builders_fp16 import build_fp16_trouble_transformer, fp16_trouble_inputs
    for n in layers:
        yield f"trouble-{n}", build_fp16_trouble_transformer(layers=n), fp16_trouble_inputs(), 1e-2
    model, _ = build_real("resnet18")
    rng = np.random.default_rng(0)
    shape = [d.dim_value or 1 for d in model.graph.input[0].type.tensor_type.shape.dim]
    yield "resnet18", model, {model.graph.input[0].name: rng.uniform(-3, 3, shape).astype(np.float32)}, 0.5
    small = onnx.load(str(Path(__file__).resolve().parent.parent / "sample_models" / "resnet_small.onnx"))
    shape = [d.dim_value or 1 for d in small.graph.input[0].type.tensor_type.shape.dim]
    yield "resnet_small", small, {small.graph.input[0].name: rng.uniform(-3, 3, shape).astype(np.float32)}, 1e-2


RAPIDOCR = "rapidocr_onnxruntime==1.4.4"
RAPIDOCR_MODELS = {"ch_PP-OCRv4_det_infer.onnx": (1, 3, 320, 320),
                   "ch_ppocr_mobile_v2.0_cls_infer.onnx": (1, 3, 48, 192),
                   "ch_PP-OCRv4_rec_infer.onnx": (1, 3, 48, 320)}


def _rapidocr_models():
    """The real PP-OCR models of the rapidocr wheel (downloaded once through pip)."""
    import subprocess
    import zipfile
    cache = Path.home() / ".cache" / "sglens" / "wheels"
    cache.mkdir(parents=True, exist_ok=True)
    wheels = sorted(cache.glob("rapidocr_onnxruntime-1.4.4-*.whl"))
    if not wheels:
        subprocess.run([sys.executable, "-m", "pip", "download", RAPIDOCR, "--no-deps", "-d", str(cache)],
                       check=True)
        wheels = sorted(cache.glob("rapidocr_onnxruntime-1.4.4-*.whl"))
    rng = np.random.default_rng(0)
    with zipfile.ZipFile(wheels[0]) as z:
        for name, shape in RAPIDOCR_MODELS.items():
            model = onnx.load_model_from_string(z.read(f"rapidocr_onnxruntime/models/{name}"))
            feeds = {model.graph.input[0].name: rng.uniform(-1, 1, shape).astype(np.float32)}
            yield name.split("_infer")[0], model, feeds, 1e-2


def measure(name: str, model: onnx.ModelProto, feeds: dict, target: str, atol: float) -> dict:
    from engine.precision_report import PrecisionRequest, investigate
    from partition.onnx_io import load_model
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.onnx"
        onnx.save(model, path)
        graph = load_model(str(path))
    t0 = time.perf_counter()
    report = investigate(graph, feeds, PrecisionRequest(target=target, atol=atol, rtol=1e-2, max_runs=1000))
    seconds = time.perf_counter() - t0
    nodes = len(graph.nodes)
    return {"model": name, "target": target, "atol": atol, "nodes": nodes, "candidates": report["candidates"],
            "pins": len(report["pins"]), "runs": report["runs"], "search_runs": report["search_runs"],
            "capped": report["capped"], "verified": (report["verified"] or {}).get("match"),
            "seconds": round(seconds, 3), "runs_per_100_nodes": round(100 * report["runs"] / nodes, 1),
            "seconds_per_100_nodes": round(100 * seconds / nodes, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", default="1,2,4,8")
    ap.add_argument("--targets", default="fp16")
    ap.add_argument("--rapidocr", action="store_true", help="also the real PP-OCR models (pip download)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    import itertools
    models = _models([int(v) for v in args.layers.split(",") if v])
    if args.rapidocr:
        models = itertools.chain(models, _rapidocr_models())
    for name, model, feeds, atol in models:
        for target in args.targets.split(","):
            rows.append(measure(name, model, feeds, target, atol))
            if not args.json:
                r = rows[-1]
                print(f"{r['model']:>13} {r['target']}: {r['nodes']:4d} nodes, {r['pins']:3d} pins, "
                      f"{r['runs']:4d} runs ({r['runs_per_100_nodes']:6.1f} /100 nodes), "
                      f"{r['seconds']:7.2f} s ({r['seconds_per_100_nodes']:6.3f} s /100 nodes)"
                      + (" capped" if r["capped"] else "") + ("" if r["verified"] else " NOT verified"),
                      flush=True)
    if args.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
