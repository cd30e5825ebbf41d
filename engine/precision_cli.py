"""``sglens precision``: which nodes must stay FP32 when a model runs in FP16, BF16 or INT8.

    sglens precision MODEL [--target fp16|bf16|int8] [--inputs IN.npz | --shape ... --range ...]
                     [--atol A] [--rtol R] [--max-runs N] [--backend tensorrt|none|...]
                     [--scope subgraphs|all] [--json] [--export-onnx OUT.onnx]

Prints the pins, the runs it took, the usual suspects and the trtexec / Polygraphy
flags; ``--json`` prints the whole report (``engine/precision_report.py``). A progress
bar on stderr counts the runs. Errors are one line, exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from partition.selection import add_selection_options, selection_from_args

from .precision import TARGETS
from .run_cli import add_input_options


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "precision", help="find the nodes that must stay FP32 for FP16/BF16/INT8",
        description="Run MODEL with reduced-precision emulation (FP16/BF16 rounding as TensorRT "
                    "stores tensors, INT8 through its Q/DQ nodes) and bisect, first by the "
                    "backend's subgraphs and then node by node, to a small set of nodes that "
                    "must stay FP32 for the outputs to match the FP32 run within --atol/--rtol.")
    add_selection_options(p, "tensorrt")
    p.add_argument("--target", choices=TARGETS, default="fp16", help="reduced precision (default fp16)")
    add_input_options(p, "input arrays keyed by graph input name (realistic values matter: FP16 trouble "
                         "depends on magnitudes)")
    p.add_argument("--atol", type=float, default=1e-3, help="absolute tolerance (default 1e-3)")
    p.add_argument("--rtol", type=float, default=1e-3, help="relative tolerance (default 1e-3)")
    p.add_argument("--max-runs", type=int, default=200,
                   help="cap on the bisection's model runs (default 200); reached, the pins found "
                        "so far are printed and said not to be minimal")
    p.add_argument("--scope", choices=("subgraphs", "all"), default="subgraphs",
                   help="reduce only the backend's subgraphs (default; the rest runs FP32 as on "
                        "the fallback runtime) or every node")
    p.add_argument("--no-analysis", dest="analyse", action="store_false",
                   help="skip the per-node analysis (two runs keeping every tensor, one kernel call "
                        "per node): less memory and time on large models, no counts or suspects")
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--json", action="store_true", help="print the whole report as JSON")
    p.add_argument("--export-onnx", metavar="OUT.onnx",
                   help="write the model with the pinned nodes marked (attribute sglens_precision)")
    p.set_defaults(func=cmd_precision, memory_limit=None)


def cmd_precision(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from .precision_report import PrecisionRequest, investigate
    from .run_cli import _inputs_named_on_failure, _prepare, _writing
    if (args.backend or "").lower() in ("", "none"):
        args.backend = None   # the whole model as one group
    prepared = _prepare(args)
    graph, model, feeds, notes = prepared.graph, prepared.model, prepared.feeds, prepared.notes
    chosen: list[str] = []   # what the selection assumed: said with the report
    request = PrecisionRequest(target=args.target, atol=args.atol, rtol=args.rtol,
                               max_runs=args.max_runs, selection=selection_from_args(args, graph, chosen),
                               scope=args.scope, analyse=args.analyse)
    with tqdm(desc="precision", unit="run", file=sys.stderr, disable=None, leave=False) as bar:
        def progress(event: dict[str, Any]) -> None:
            bar.set_description(f"precision: {event['stage']}, {event.get('pins', 0)} pinned")
            bar.n = int(event.get("run") or 0)
            bar.refresh()
        with _inputs_named_on_failure(prepared):   # what was guessed, and sizes that run
            report = investigate(graph, feeds, request, progress, device=args.device)
    report["notes"] = notes + chosen + report["notes"]
    report["model"] = args.model
    if args.export_onnx:
        from .precision_export import marked_model
        marked = marked_model(graph, model, report["pins"], args.target)
        _writing("--export-onnx", args.export_onnx, lambda: _save(marked, args.export_onnx))
        report["exported"] = args.export_onnx
    if args.json:
        print(json.dumps(report, default=str))
        return 0
    print(_text(report))
    return 0


def _save(model: Any, path: str) -> None:
    with open(path, "wb") as f:
        f.write(model.SerializeToString())


def _text(report: dict[str, Any]) -> str:
    lines = [f"{report['model']}: {report['target']} ({report['candidates']} nodes reduced), "
             f"tolerance atol {report['tolerance']['atol']:g} rtol {report['tolerance']['rtol']:g}",
             report["summary"]]
    for note in report["notes"]:
        lines.append(f"note: {note}")
    if report["pins"]:
        lines.append("pins (error with only that node reduced, everything else FP32):")
        for name in report["pins"]:
            alone = report["alone"].get(name)
            err = "n/a" if alone is None else ("inf/NaN" if alone["max_abs"] is None else f"{alone['max_abs']:.3g}")
            lines.append(f"  {name}: max abs error alone {err}")
        v = report["verified"]
        lines.append(f"verified with exactly these pins: {'within' if v['match'] else 'NOT within'} "
                     f"tolerance, max abs error {v['max_abs']}")
        lines.append(f"trtexec:    {report['trtexec']}")
        lines.append(f"polygraphy: {report['polygraphy']}")
    if report["suspects"]:
        lines.append("usual suspects:")
        lines += [f"  {s['node']} ({s['op']}): {s['why']}" for s in report["suspects"][:20]]
    trouble = [r for r in report["nodes"] if r["overflow"] or r["underflow"]]
    if trouble:
        lines.append("overflow / underflow (elements to inf / flushed to 0):")
        lines += [f"  {r['node']} ({r['op']}): {r['overflow']} / {r['underflow']} of {r['elements']}"
                  for r in trouble[:20]]
    return "\n".join(lines)
