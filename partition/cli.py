"""The ``sglens`` command line.

Every user error is one line on stderr and exit code 2, never a traceback
(set ``SGLENS_DEBUG=1`` to see one). ``sglens check`` exits 1 on a violation.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Any, Callable, Sequence

from .errors import LensError

EXIT_USAGE = 2


def add_selection_options(parser: argparse.ArgumentParser, backend_default: str | None = "default") -> None:
    """MODEL and the options that choose a partition (shared with ``run`` and ``compare``)."""
    parser.add_argument("model", help="path of an ONNX model")
    parser.add_argument("--backend", default=backend_default, help="registered backend name " + (
        "(default: run unpartitioned)" if backend_default is None else f"(default: {backend_default})"))
    parser.add_argument("--ops", default="", help="comma-separated op types for the default backend")
    parser.add_argument("--plugin", action="append", default=[], metavar="FILE.py",
                        help="Python file registering its own subgraph properties (repeatable)")
    parser.add_argument("--min-size", type=int, default=None, metavar="N",
                        help="tensorrt: smallest subgraph kept, in compute nodes (default 2)")
    parser.add_argument("--keep-data-dependent", action="store_true",
                        help="tensorrt: allow ops whose output shape depends on input values")


def backend_options(args: argparse.Namespace) -> dict[str, Any]:
    """Backend options from parsed selection arguments (used by run/compare too)."""
    from .plugins import load_plugin
    for plugin in args.plugin:
        load_plugin(plugin)
    options: dict[str, Any] = {}
    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    bad = [o for o in ops if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.:]*", o)]
    if bad:
        raise LensError(f"--ops: {bad} are not op type names; pass them comma-separated, e.g. --ops Conv,Relu")
    if ops:
        options["ops"] = ops
    if args.backend == "tensorrt":
        if args.min_size is not None:
            options["min_size"] = args.min_size
        if args.keep_data_dependent:
            options["exclude_data_dependent"] = False
    elif args.min_size is not None:
        options["min_size"] = args.min_size
    return options


def _load(path: str) -> Any:
    from .onnx_io import load_model
    with _Progress(f"loading {os.path.basename(path)}") as _:
        return load_model(path)


class _Progress:
    """A tqdm bar on stderr for long work; silent when stderr is not a terminal."""

    def __init__(self, label: str, total: int | None = None) -> None:
        from tqdm import tqdm
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
    from .runner import partition
    options = backend_options(args)
    graph = _load(args.model)
    with _Progress("partitioning") as bar:
        return partition(graph, args.backend, progress=bar.update, **options)


def result_json(result: Any) -> dict[str, Any]:
    """The JSON of a partition result, with the report's sizes and summary when available."""
    try:
        from .report import describe
    except ImportError:
        return result.to_json()
    return describe(result)


def cmd_partition(args: argparse.Namespace) -> int:
    result = _partition(args)
    if args.export:
        from .onnx_io import save_model
        save_model(result.graph, args.export)
    if args.export_dir:
        from .report import export_subgraphs
        export_subgraphs(result, args.export_dir)
    if args.json:
        print(json.dumps(result_json(result), indent=1))
    else:
        print(_table(result))
    return 0


def _table(result: Any) -> str:
    lines = [f"backend {result.backend}: {len(result.original.nodes)} nodes, "
             f"{len(result.subgraphs)} subgraphs, {len(result.excluded)} nodes left out, "
             f"{result.seconds * 1000:.1f} ms"]
    for sg in result.subgraphs:
        names = ", ".join(sg.nodes[:6]) + (f", ... ({len(sg.nodes)} nodes)" if len(sg.nodes) > 6 else "")
        lines.append(f"  subgraph {sg.id} [{sg.property}] {names}")
        lines.append(f"      inputs {', '.join(sg.inputs)}  ->  outputs {', '.join(sg.outputs)}")
    if result.excluded:
        lines.append("left out:")
        for name, reason in list(result.excluded.items())[:50]:
            lines.append(f"  {name}: {reason}")
        if len(result.excluded) > 50:
            lines.append(f"  ... and {len(result.excluded) - 50} more (use --json)")
    return "\n".join(lines)


def cmd_trace(args: argparse.Namespace) -> int:
    from .runner import PartitionRun
    options = backend_options(args)
    graph = _load(args.model)
    run = PartitionRun(graph, args.backend, trace=True, **options)
    out = sys.stdout
    for event in run.events():
        out.write(json.dumps(event.to_json(), default=str) + "\n")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from .check import check_partition
    from .errors import PartitionCheckError
    result = _partition(args)
    try:
        check_partition(result)
    except PartitionCheckError as exc:
        print(f"sglens check: violation: {exc}", file=sys.stderr)
        return 1
    print(f"ok: {len(result.subgraphs)} subgraphs are disjoint, connected and acyclic when contracted; "
          "graph inputs and outputs preserved")
    return 0


def cmd_groups(args: argparse.Namespace) -> int:
    from .report import groups_report
    options = backend_options(args)
    graph = _load(args.model)
    report = groups_report(graph, args.node, **options)
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        for key, value in report.items():
            shown = ", ".join(value) if isinstance(value, list) else value
            print(f"{key}: {shown}")
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors (exit 2), like every other user error."""

    def error(self, message: str) -> Any:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="sglens", description="Subgraph Lens: see how a model is partitioned")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("partition", help="partition a model and print the subgraphs")
    add_selection_options(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--export", metavar="OUT.onnx", help="write the partitioned model (subgraphs as functions)")
    p.add_argument("--export-dir", metavar="DIR", help="write each subgraph as a standalone ONNX model")
    p.set_defaults(func=cmd_partition)
    p = sub.add_parser("trace", help="print every partitioning event as one JSON object per line")
    add_selection_options(p)
    p.set_defaults(func=cmd_trace)
    p = sub.add_parser("check", help="check the partition's invariants (exit 1 on a violation)")
    add_selection_options(p)
    p.set_defaults(func=cmd_check)
    p = sub.add_parser("groups", help="a node's incompatibility groups (ancestors / descendants)")
    add_selection_options(p)
    p.add_argument("node", help="node name")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_groups, backend="tensorrt")
    _optional_commands(sub)
    return parser


def _optional_commands(sub: Any) -> None:
    """Commands whose modules live in engine/ and app/ (imported here, run lazily)."""
    for module, names in (("engine.run_cli", ("add_run_parser", "add_compare_parser")),
                          ("app.cli", ("add_serve_parser",))):
        try:
            mod = __import__(module, fromlist=list(names))
        except ImportError:
            continue
        for name in names:
            adder: Callable[[Any], Any] | None = getattr(mod, name, None)
            if adder is not None:
                adder(sub)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except LensError as exc:
        print(f"sglens: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("sglens: interrupted", file=sys.stderr)
        return 130
    except SystemExit as exc:  # only user code (a plugin's selector) exits inside a command
        print(f"sglens: error: plugin code called sys.exit({exc.code!r}); a plugin must not end the "
              "command", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        # The reader went away (`sglens trace ... | head`): not an error of ours.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:  # noqa: BLE001 - the promise is one line, never a traceback
        if os.environ.get("SGLENS_DEBUG"):
            raise
        print(f"sglens: error: {type(exc).__name__}: {exc} (set SGLENS_DEBUG=1 for a traceback)",
              file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
