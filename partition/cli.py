"""``sglens partition|trace|check|groups|gains``: parsers and commands (wired by ``sglens/cli.py``).

``register(subparsers)`` adds the four commands; the entry point, its
one-line errors (exit 2) and ``SGLENS_DEBUG`` live in ``sglens/cli.py``.
``sglens check`` exits 1 on a violation.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import orjson
from tqdm import tqdm

from .check import check_partition
from .errors import PartitionCheckError
from .gcpause import paused_gc
from .onnx_io import load_model, save_model
from .report import export_subgraphs, result_json
from .tensorrt.node_report import groups_report
from .runner import PartitionRun, partition
from .selection import add_selection_options, selection_from_args
from .tensorrt.real_trt import cli_check_parser


def _load(path: str) -> Any:
    from .bundle import open_model_path
    with _Progress(f"loading {os.path.basename(path)}") as _:
        model, root = open_model_path(path, 1 << 40)   # a .onnx, a model folder or a .zip/.tar bundle
        return load_model(model, data_root=root)


class _Progress:
    """A tqdm bar on stderr for long work; silent when stderr is not a terminal."""

    def __init__(self, label: str, total: int | None = None) -> None:
        # No monitor thread: the import forks its shape inference only in a one-thread
        # process (partition/onnx_inference.py), and these bars refresh themselves.
        tqdm.monitor_interval = 0
        self.bar = tqdm(total=total, desc=label, file=sys.stderr, disable=None, leave=False,
                        unit="node", mininterval=0.3)

    def update(self, done: int, total: int) -> None:
        self.bar.total = total
        self.bar.n = done
        self.bar.refresh()

    def __enter__(self) -> "_Progress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.bar.close()


def _partition(args: argparse.Namespace):
    graph = _load(args.model)
    selection = selection_from_args(args, graph)
    with _Progress("partitioning") as bar:
        return partition(graph, selection, progress=bar.update)


def cmd_partition(args: argparse.Namespace) -> int:
    # One command's objects (a 100k-node model is ~1M of them) are acyclic and freed by
    # reference counting when _cmd_partition returns, still inside the pause: the
    # collector would otherwise walk them all once when re-enabled (see partition/gcpause.py).
    # The sglens program does not wait for that: it ends in _done, inside the pause.
    with paused_gc():
        return _cmd_partition(args)


def _cmd_partition(args: argparse.Namespace) -> int:
    if getattr(args, "check_parser", False):
        graph = _load(args.model)
        return cli_check_parser(args, selection_from_args(args, graph), graph)
    result = _partition(args)
    if args.export:
        save_model(result.graph, args.export)
    if args.export_dir:
        export_subgraphs(result, args.export_dir)
    if args.json:
        _print_json(result_json(result))
    else:
        print(_table(result))
    return _done(args, 0)


def _done(args: argparse.Namespace, code: int) -> int:
    """``code``; when ``sglens`` runs as the program, the process ends here, before the
    command's objects are freed (``sglens.cli.exit_now``)."""
    exit_now = getattr(args, "exit_now", None)
    if exit_now is not None:
        exit_now(code)
    return code


def _print_json(data: Any) -> None:
    """Indented for a person at a terminal; compact otherwise (a pipe or a file).

    ``indent`` makes ``json`` use its pure-Python encoder: at 100k nodes (37 MB of
    output) that is ~1 s. The compact form is written by orjson (0.06 s against
    0.3 s for ``json``'s C encoder), the same JSON value; what orjson refuses (an
    integer over 64 bits, a non-string key from a plugin's data) goes through
    ``json`` as before. Non-ASCII names are written as UTF-8, not ``\\u`` escapes.
    """
    if sys.stdout.isatty():
        print(json.dumps(data, indent=1))
        return
    try:
        encoded = orjson.dumps(data, option=orjson.OPT_APPEND_NEWLINE)
    except orjson.JSONEncodeError:
        sys.stdout.write(json.dumps(data, separators=(",", ":")))
        sys.stdout.write("\n")
        return
    out = getattr(sys.stdout, "buffer", None)
    if out is None:  # a text-only stream (a test's StringIO)
        sys.stdout.write(encoded.decode("utf-8"))
        return
    sys.stdout.flush()  # what was printed before comes first
    out.write(encoded)
    out.flush()


def _boundary_text(tensors: list[str], weights: Any, most: int = 12) -> str:
    """Activations by name, weights (and constants) counted: T5's one subgraph listed its 68
    weights among 3 real inputs on one line. ``--json`` keeps every name."""
    acts = [t for t in tensors if t not in weights]
    text = ", ".join(acts[:most]) + (f", ... (+{len(acts) - most} more; --json lists them)" if len(acts) > most else "")
    n_weights = len(tensors) - len(acts)
    if n_weights:
        text += f"{' ' if text else ''}(+{n_weights} weight{'s' if n_weights != 1 else ''})"
    return text or "none"


def _table(result: Any) -> str:
    lines = [f"backend {result.backend}: {len(result.original.nodes)} nodes, "
             f"{len(result.subgraphs)} subgraphs, {len(result.excluded)} nodes left out, "
             f"{result.seconds * 1000:.1f} ms"]
    dla = result.summary.get("dla")
    if dla:  # the DLA target: loadables against the per-core limit, before anyone builds
        lines.append(f"DLA loadables: {dla['loadables']} (at most {dla['loadables_per_core']} per core); "
                     f"{dla['gpu_fallback_count']} node(s) fall back to the GPU")
    lines += [f"warning: {w}" for w in result.summary.get("tensorrt_warnings", ())]
    g = result.original   # weights: initializers, and constants' outputs (Paddle exports hold theirs in Constants)
    weights = set(g.initializers) | {t for n in g.nodes if g.is_constant(n) for t in n.outputs}
    for sg in result.subgraphs:
        names = ", ".join(sg.nodes[:6]) + (f", ... ({len(sg.nodes)} nodes)" if len(sg.nodes) > 6 else "")
        lines.append(f"  subgraph {sg.id} [{sg.property}] {names}")
        lines.append(f"      inputs {_boundary_text(sg.inputs, weights)}  ->  outputs {_boundary_text(sg.outputs, weights)}")
    if result.excluded:
        lines.append("left out:")
        for name, reason in list(result.excluded.items())[:50]:
            lines.append(f"  {name}: {reason}")
        if len(result.excluded) > 50:
            lines.append(f"  ... and {len(result.excluded) - 50} more (use --json)")
    return "\n".join(lines)


def cmd_trace(args: argparse.Namespace) -> int:
    graph = _load(args.model)
    selection = selection_from_args(args, graph)
    run = PartitionRun(graph, selection, trace=True)
    out = sys.stdout
    for event in run.events():
        out.write(json.dumps(event.to_json(), default=str) + "\n")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    with paused_gc():  # as cmd_partition
        return _cmd_check(args)


def _cmd_check(args: argparse.Namespace) -> int:
    result = _partition(args)
    try:
        check_partition(result)
    except PartitionCheckError as exc:
        print(f"sglens check: violation: {exc}", file=sys.stderr)
        return 1
    print(f"ok: {len(result.subgraphs)} subgraphs are disjoint, connected and acyclic when contracted; "
          "graph inputs and outputs preserved")
    return _done(args, 0)


def cmd_groups(args: argparse.Namespace) -> int:
    graph = _load(args.model)
    selection = selection_from_args(args, graph)
    report = groups_report(graph, args.node, selection)
    if args.json:
        _print_json(report)
    else:
        for key, value in report.items():
            shown = ", ".join(value) if isinstance(value, list) else value
            print(f"{key}: {shown}")
    return 0


def cmd_gains(args: argparse.Namespace) -> int:
    """``sglens gains MODEL [--backend tensorrt] [...]``: which op or node to support first."""
    from .errors import LensError
    from .tensorrt.gains import rank_gains
    if args.backend != "tensorrt":
        raise LensError("gains ranks what the tensorrt backend leaves out; add --backend tensorrt")
    selection = selection_from_args(args)
    graph = _load(args.model)
    with _Progress("trying each unsupported op") as bar:
        report = rank_gains(graph, selection, progress=bar.update)
    if args.json:
        _print_json(report)
        return 0
    base = report["base"]
    unknown = base.get("boundary_unknown") or 0   # symbolic-shape boundary tensors: no size, never 0 B
    print(f"target {report['target']}: {base['subgraphs']} subgraph(s), {base['covered']} node(s) covered, "
          f"{base['boundary_bytes']} boundary bytes"
          + (f" and {unknown} boundary tensor(s) of unknown size (symbolic shapes)" if unknown else ""))
    unit = "loadables" if report["target"] == "dla" else "subgraphs"
    for title, rows, label in (("op types", report["op_types"], "op_type"), ("nodes", report["nodes"], "node")):
        print(f"\n{title} (best first; --assume-supported to try one):")
        for row in rows:
            g = row["gain"]
            print(f"  {row[label]}: {unit} merged {g['subgraphs_merged']:+d}, nodes covered {g['nodes_covered']:+d}, "
                  f"boundary bytes saved {g['boundary_bytes_saved']:+d} -- {row['reason']}")
    return 0


def register(sub: Any) -> None:
    """Add ``partition``, ``trace``, ``check`` and ``groups`` to the ``sglens`` subparsers."""
    p = sub.add_parser("partition", help="partition a model and print the subgraphs")
    add_selection_options(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--export", metavar="OUT.onnx", help="write the partitioned model (subgraphs as functions)")
    p.add_argument("--export-dir", metavar="DIR", help="write each subgraph as a standalone ONNX model")
    p.add_argument("--check-parser", action="store_true",
                   help="tensorrt: list every node where our rules and the installed TensorRT parser disagree")
    p.set_defaults(func=cmd_partition)
    p = sub.add_parser("trace", help="print every partitioning event as one JSON object per line")
    add_selection_options(p)
    p.set_defaults(func=cmd_trace)
    p = sub.add_parser("check", help="check the partition's invariants (exit 1 on a violation)")
    add_selection_options(p)
    p.set_defaults(func=cmd_check)
    p = sub.add_parser("gains", help="tensorrt: rank the unsupported ops and nodes by what supporting them would gain")
    add_selection_options(p, backend_default="tensorrt")   # the only backend it ranks
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_gains)
    p = sub.add_parser("groups", help="a node's incompatibility groups (ancestors / descendants)")
    add_selection_options(p)
    p.add_argument("node", help="node name")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_groups, backend="tensorrt")

