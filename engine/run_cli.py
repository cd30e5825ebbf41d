"""``sglens run`` and ``sglens compare``: parsers and commands (wired by ``sglens/cli.py`` via ``register``).

    sglens run MODEL [--backend NAME] [--ops ...] [--plugin F]... [--device cpu|gpu]
               [--subgraph-runtime auto|engine|onnxruntime|tensorrt] [--host-runtime ours|onnxruntime]
               [--inputs IN.npz]
               [--save-outputs OUT.npz] [--repeat N] [--dim NAME=VALUE]... [--json]
               [--report OUT.json] [--trace OUT.json]
    sglens compare MODEL [--backend NAME] [--ops ...] [--plugin F]... [--device ...]
               [--subgraph-runtime ...] [--host-runtime ...] [--inputs IN.npz] [--dim NAME=VALUE]...
               [--repeat N] [--json]

``compare`` is ``engine.run.run``, the pipeline of a web run: partition once, one set of
measured executions.

Without ``--backend`` (or a backend option such as ``--ops``), ``run`` runs the model
unpartitioned on our engine and ``compare`` compares that run with onnxruntime.
Errors are ``LensError``: the CLI prints one line and exits 2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from dataclasses import dataclass, field, replace
from typing import Any, Iterator

from partition.runner import partition
from partition.selection import add_selection_options, selection_from_args

from . import gpu_plan
from .input_spec import FILLS
from .ort_fallback import LABEL as FALLBACK_LABEL
from .ort_fallback import OrtFallback
from .run_errors import InputError, InputsRefused, KernelFailure, RunError
from .host_regions import HOST_PROPERTY, HOST_RUNTIMES, host_regions
from .subgraph_ops import EXECUTORS
from .tolerance import DEFAULT_ATOL, DEFAULT_RTOL, FLOAT16_ATOL, FLOAT16_RTOL


#: ``--time-limit`` default, seconds (docs/running.md says why an hour here and ten minutes in ``serve``).
CLI_TIME_LIMIT = 3600


def _start_time_limit(args: argparse.Namespace, command: str) -> None:
    """A watchdog thread: past ``--time-limit`` it prints one line and ends the process (exit 2).
    A thread, not a signal, because an endless call inside onnxruntime's or our kernels' C code
    never returns to the Python code a signal handler would run in."""
    import math
    import os
    import threading
    limit = args.time_limit
    if not (limit >= 0 and math.isfinite(limit)):
        raise InputError(f"--time-limit {limit}: give a number of seconds (0 = no limit)")
    if not limit:
        return

    def expire() -> None:
        shown = f"{int(limit)} s" if float(limit).is_integer() else f"{limit:g} s"
        print(f"sglens {command}: exceeded the time limit of {shown} (--time-limit); stopped. Use a smaller "
              "input or raise --time-limit", file=sys.stderr, flush=True)
        os._exit(2)
    timer = threading.Timer(limit, expire)
    timer.daemon = True
    timer.start()


def register(subparsers: Any) -> None:
    """Add ``run`` and ``compare`` to the ``sglens`` subparsers."""
    add_run_parser(subparsers)
    add_compare_parser(subparsers)


def add_input_options(p: argparse.ArgumentParser, inputs_help: str = "input arrays keyed by graph input name") -> None:
    """The flags that choose a run's inputs (``_prepare`` reads them): run, compare and precision."""
    p.add_argument("--inputs", metavar="IN.npz", help=inputs_help)
    p.add_argument("--dim", action="append", default=[], metavar="NAME=VALUE",
                   help="size of a symbolic input dim for random inputs (repeatable)")
    p.add_argument("--shape", action="append", default=[], metavar="INPUT=DIMS",
                   help="shape of one input for generated values, e.g. images=1x3x640x640 (repeatable); "
                        "symbolic dims not given take a size from their name (batch 1, sequence 128, "
                        "height/width 224) and a note says so")
    p.add_argument("--fill", choices=FILLS[:3], default="random",
                   help="generated values: seeded uniform random (default), zeros or ones")
    p.add_argument("--const", action="append", default=[], metavar="INPUT=VALUE",
                   help="feed every element of one input this value, e.g. sr=16000 (repeatable)")
    p.add_argument("--range", metavar="LOW,HIGH", default=None,
                   help="range of random values (default -1,1 for floats, 0,4 for integers)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")


def _common(p: argparse.ArgumentParser, backend_default: str | None) -> None:
    add_selection_options(p, backend_default)
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    # --executor is the older spelling (docs/architecture.md: "executor" is the Executor class only)
    p.add_argument("--subgraph-runtime", "--executor", dest="subgraph_runtime", choices=EXECUTORS, default="auto",
                   help="what runs subgraph nodes (default auto: tensorrt on gpu if installed, "
                        "else onnxruntime, else engine; the report says which ran)")
    p.add_argument("--host-runtime", choices=HOST_RUNTIMES, default="ours",
                   help="what runs the nodes outside the subgraphs of a partitioned graph: ours (our engine, "
                        "the default, with its dependency timeline) or onnxruntime (timed as a deployment "
                        "runs it: ONNX Runtime with the TensorRT EP runs the rest on its CPU/CUDA EP)")
    add_input_options(p)
    p.add_argument("--engine", choices=("threaded", "naive"), default=None,
                   help="dependency engine (default: $SGLENS_ENGINE or threaded)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--time-limit", type=float, default=CLI_TIME_LIMIT, metavar="SECONDS",
                   help=f"stop with exit 2 when the command has run this long (default {CLI_TIME_LIMIT}, an "
                        "hour: an unattended script never hangs on a model that loops for ever; 0 = no limit)")
    p.add_argument("--memory-limit", metavar="SIZE", default=None,
                   help="refuse the run before it starts when its tensors are estimated to need "
                        "more than SIZE (e.g. 512M, 2G); default: a quarter of the machine's memory, "
                        "as sglens serve")


def add_run_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("run", help="run a model (optionally partitioned) on our engine",
                              description="Run MODEL on the dependency engine; with --backend, "
                                          "partition it first and run subgraphs with --subgraph-runtime.")
    _common(p, None)
    p.add_argument("--save-outputs", metavar="OUT.npz", help="write every graph output under its name")
    p.add_argument("--repeat", type=int, default=1, help="measured runs after one warm-up (default 1)")
    p.add_argument("--workers", type=int, default=None, help="engine CPU workers (default: CPU count)")
    p.add_argument("--report", metavar="OUT.json", help="write the measurement report as JSON")
    p.add_argument("--trace", metavar="OUT.json", help="write the engine timeline as Chrome trace JSON "
                                                       "(open in https://ui.perfetto.dev)")
    p.set_defaults(func=cmd_run)
    return p


def add_compare_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("compare", help="compare onnxruntime, our engine and the partitioned graph",
                              description="onnxruntime on the whole model is the reference; per graph "
                                          "output and per subgraph boundary tensor, the max absolute "
                                          "and relative error of our runs; timings side by side.")
    _common(p, None)
    p.add_argument("--repeat", type=int, default=3, help="measured runs per side (default 3)")
    p.add_argument("--warmup", type=int, default=1, help="unmeasured runs before them (default 1)")
    p.add_argument("--atol", type=float, default=None,
                   help=f"absolute tolerance: match when |ours-ref| <= atol + rtol*|ref| (default {DEFAULT_ATOL:g}; "
                   f"{FLOAT16_ATOL:g} for a model computing in float16)")
    p.add_argument("--rtol", type=float, default=None,
                   help=f"relative tolerance (default {DEFAULT_RTOL:g}; {FLOAT16_RTOL:g} for a float16 model)")
    p.set_defaults(func=cmd_compare)
    return p


# ------------------------------------------------------------------ shared --
@dataclass
class Prepared:
    """A command's model and inputs, and what was guessed of them (for a failure to say)."""

    graph: Any
    model: Any
    feeds: dict[str, Any]
    notes: list[str]                 # what was assumed, said after a run
    specs: list[Any] = field(default_factory=list)      # empty: the inputs came from a file
    guessed: list[Any] = field(default_factory=list)    # GuessedAxis: sizes no option set
    memory_limit: int | None = None  # the run's budget: sizes tried after a failure keep to it


def _prepare(args: argparse.Namespace) -> Prepared:
    """The graph, model proto, feeds and notes of the parsed arguments."""
    from partition.onnx_io import load_model, read_model_proto

    from .budget import CLI_HINT, check_memory_budget, parse_size
    from .input_spec import (check_specs, check_with_inference, materialize, parse_constant, parse_shape,
                             specs_from_options)
    from .inputs import input_file_shapes, load_inputs, parse_dims
    from .size_probe import guessed_axes
    dims = parse_dims(args.dim)
    limit = parse_size(args.memory_limit) if args.memory_limit is not None else default_memory_limit()
    from partition.bundle import open_model_path
    path, root = open_model_path(args.model, 1 << 40)   # a .onnx, a model folder or a .zip/.tar bundle
    graph = load_model(path, data_root=root)
    # onnxruntime gets the model with its external data inline, read by our checked reader
    # from the model's folder (from bytes it would resolve them against the cwd).
    model = read_model_proto(path, data_root=root)
    notes: list[str] = []
    if args.inputs:
        if limit is not None:  # sized from the headers first: a small .npz can expand a lot
            check_memory_budget(graph, input_file_shapes(args.inputs, graph), limit, hint=CLI_HINT)
        feeds = load_inputs(args.inputs, graph)
        check_memory_budget(graph, feeds, limit, hint=CLI_HINT)
        return Prepared(graph, model, feeds, notes)
    shapes = dict(parse_shape(t) for t in args.shape)
    specs = specs_from_options(graph, dims=dims, shapes=shapes,
                               fill=args.fill, value_range=_parse_range(args.range), seed=args.seed,
                               constants=dict(parse_constant(t) for t in args.const), notes=notes)
    check_specs(graph, specs, {})
    # The budget is checked on the shapes, before the values are made.
    check_memory_budget(graph, {s.name: tuple(s.shape) for s in specs}, limit, hint=CLI_HINT)
    prepared = Prepared(graph, model, materialize(graph, specs), notes, specs,
                        guessed_axes(graph, specs, set_inputs=list(shapes), set_dims=list(dims)), limit)
    with _inputs_named_on_failure(prepared, refused=(InputError,)):
        check_with_inference(model, prepared.feeds)   # ONNX shape inference refuses the sizes
    return prepared


@contextlib.contextmanager
def _inputs_named_on_failure(prepared: Prepared,
                             refused: tuple[type, ...] = (KernelFailure, InputsRefused)) -> Iterator[None]:
    """A run that fails on inputs the user did not give says what was assumed of them (the notes
    of ``_prepare``, printed only after a run): silero-VAD's STFT conv needs more samples, and
    the error alone ("the padded input has only 192") did not say that 192 was our guess. Where
    sizes were guessed, it also says which sizes onnxruntime runs (``size_probe``). ``refused``:
    the errors that mean the inputs were refused (by default a failing node, or onnxruntime's
    refusal of the reference run)."""
    given = list(prepared.notes)
    try:
        yield
    except refused as exc:
        if not given:
            raise
        found = ""
        if prepared.guessed:
            from .size_probe import probe_sizes
            probe = probe_sizes(prepared.model, prepared.graph, prepared.specs, prepared.guessed,
                                known_refused=not isinstance(exc, KernelFailure),
                                memory_limit=prepared.memory_limit)
            found = f" {probe.sentence(flags=True)}." if probe else ""
        raise RunError(f"{str(exc).rstrip('.')}. The inputs were not all given: {'; '.join(given)}.{found}") from None


def default_memory_limit() -> int | None:
    """A quarter of the machine's memory (the default of ``sglens serve --run-memory-limit``)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4
    except (ValueError, OSError, AttributeError):
        return None


def _parse_range(text: str | None) -> tuple[float, float] | None:
    if text is None:
        return None
    try:
        low, high = (float(v) for v in text.split(","))
    except ValueError:
        raise InputError(f"--range {text!r}: expected LOW,HIGH, e.g. --range 0,1") from None
    return low, high


def _partition(graph, args: argparse.Namespace, notes: list[str]):
    """The partition the flags ask for, or None without ``--backend`` (an option without one is an
    error); what it assumed goes into ``notes``."""
    selection = selection_from_args(args, graph, notes)
    return partition(graph, selection) if selection is not None else None


def _mib(n: int | None) -> str:
    return "n/a" if n is None else f"{n / 2**20:.3f} MiB"


# --------------------------------------------------------------------- run --
def cmd_run(args: argparse.Namespace) -> int:
    from .executor import Executor
    from .inputs import save_outputs
    from .measure import NodeTimeline, measure, write_json
    from .run_errors import RunError
    if args.repeat < 1:
        raise RunError(f"--repeat {args.repeat}: needs at least 1")
    if args.workers is not None and args.workers < 1:
        raise RunError(f"--workers {args.workers}: needs at least 1 (or leave it out for the CPU count)")
    _start_time_limit(args, "run")
    prepared = _prepare(args)
    graph, feeds, notes = prepared.graph, prepared.feeds, prepared.notes
    chosen: list[str] = []   # what the selection assumed: said after the run, with the inputs' notes
    result = _partition(graph, args, chosen)
    by_property: tuple[tuple[str, str], ...] = ()
    if result is not None:
        graph = result.graph
        if args.host_runtime == "onnxruntime":   # the rest in onnxruntime regions (engine/host_regions.py)
            graph, by_property = host_regions(graph).graph, ((HOST_PROPERTY, "onnxruntime"),)
    # per-node times of the measured runs themselves, under the plan that really runs (a Profiler
    # as the engine's hooks would switch the plan to one engine function per node)
    profiler = NodeTimeline()
    fallback = OrtFallback()  # nodes without a kernel of ours run on onnxruntime, one by one, and are listed
    fallback.check(graph)
    with Executor(graph, device=args.device, subgraph_runtime=args.subgraph_runtime, engine_name=args.engine,
                  workers=args.workers, node_times=profiler, kernels=fallback,
                  runtime_by_property=by_property) as ex, _inputs_named_on_failure(prepared):
        m = measure(ex, feeds, repeat=args.repeat, warmup=1, profiler=profiler,
                    label=f"{args.model}")
        notes.extend(gpu_plan.device_read_notes(ex))  # GPU: the syncs the plan could not avoid
    notes.extend(chosen)
    if fallback.nodes:
        notes.append(f"{len(fallback.nodes)} node(s) without a kernel of ours ran on {FALLBACK_LABEL}: "
                     + ", ".join(f"{n} ({op})" for n, op in list(fallback.nodes.items())[:20]))
    outputs = {k: _host(v) for k, v in m.outputs.items()}
    if args.save_outputs:
        _writing("--save-outputs", args.save_outputs, lambda: save_outputs(args.save_outputs, outputs))
    if args.report:
        _writing("--report", args.report,
                 lambda: write_json(args.report, _report(args, m, result, outputs, notes)))
    if args.trace:
        _writing("--trace", args.trace, lambda: write_json(args.trace, m.chrome_trace()))
    if args.json:
        print(json.dumps(_report(args, m, result, outputs, notes, timeline=False), default=str))
        return 0
    for n in notes:
        print(f"note: {n}", file=sys.stderr)
    print(_run_text(args, m, result, outputs))
    return 0


def _writing(flag: str, path: str, write: Any) -> None:
    """Run ``write``; a file that cannot be written is one line naming the flag."""
    from .run_errors import RunError
    try:
        write()
    except OSError as exc:
        raise RunError(f"{flag} {path}: cannot write it ({exc.strerror or exc})") from None


def _host(v: Any):
    from .executor import to_numpy
    return to_numpy(v)


def _report(args, m, result, outputs, notes, timeline: bool = True) -> dict[str, Any]:
    data = {"model": args.model, "backend": args.backend, "subgraph_runtime": args.subgraph_runtime,
            "executor": args.subgraph_runtime, "host_runtime": args.host_runtime,
            "device": args.device, "notes": notes,
            "outputs": {k: _output_json(v) for k, v in outputs.items()},
            "measurement": m.to_json(timeline=timeline)}
    if result is not None:
        data["partition"] = {"subgraphs": len(result.subgraphs),
                             "nodes_in_subgraphs": sum(len(s.nodes) for s in result.subgraphs),
                             "nodes": len(result.original.nodes)}
    return data


def _output_json(v: Any) -> dict[str, Any]:
    """An output's shape and dtype; a sequence's per element (ONNX's sequence type); None: absent."""
    if v is None:
        return {"absent": True}
    if isinstance(v, list):
        return {"sequence": [_output_json(e) for e in v]}
    if isinstance(v, dict):   # a map (ZipMap's elements): its keys, as JSON writes them
        return {"map": {str(k): _output_json(_as_array(e)) for k, e in v.items()}}
    return {"shape": list(v.shape), "dtype": str(v.dtype)}


def _as_array(value: Any) -> Any:
    import numpy as np  # noqa: PLC0415 - the CLI module imports numpy only when a command needs it
    return np.asarray(value)


def _output_text(v: Any) -> str:
    """One output in a line: shape, dtype and value range; a sequence by its elements' shapes."""
    if v is None:
        return "absent (an optional without a value)"
    if isinstance(v, list):
        if v and isinstance(v[0], dict):
            from .values import map_keys
            keys = map_keys(v[0])
            return (f"sequence of {len(v)} map(s), keys {keys[:8]}{' ...' if len(keys) > 8 else ''}"
                    f" (ZipMap's form)")
        shown = ", ".join(f"{list(e.shape)} {e.dtype}" for e in v[:4])
        return f"sequence of {len(v)} tensor(s): {shown}{' ...' if len(v) > 4 else ''}"
    stats = ""
    if v.size and v.dtype.kind in "fiub":
        f = v.astype("float64")
        stats = f"  min {f.min():.4g}  max {f.max():.4g}  mean {f.mean():.4g}"
    return f"{list(v.shape)} {v.dtype}{stats}"


def _cuda_graph_line(m) -> str:
    """What the run costs as CUDA Graph replays, or why it was not captured."""
    g = m.cuda_graph
    if g.get("seconds") is not None:
        same = "match" if g.get("matches_eager") else "DIFFER from"
        return (f"CUDA graph replay: {g['seconds'] * 1e3:.3f} ms a run (eager {m.seconds * 1e3:.3f} ms); "
                f"its outputs {same} the eager run's")
    why = (g.get("capture_failed") or [""])[0] or next(
        (f"node '{e['node']}' {e['why']}" for e in g.get("eager_because", [])), "?")
    return f"CUDA graph: not captured, the run is eager only ({why})"


def _run_text(args, m, result, outputs) -> str:
    lines = [f"{args.model}: {'unpartitioned' if result is None else f'backend {args.backend}, {len(result.subgraphs)} subgraph(s)'}"
             f" on {args.device}; median of {m.repeat} run(s): {m.seconds * 1e3:.3f} ms; "
             f"peak live tensors {_mib(m.peak_bytes)} (+ weights {_mib(m.weight_bytes)})"
             + (f"; cupy pool peak {_mib(m.pool_peak_bytes)}" if m.pool_peak_bytes else "")]
    if m.cuda_graph is not None:
        lines.append(_cuda_graph_line(m))
    lines.append("outputs:")
    for k, v in outputs.items():
        lines.append(f"  {k}: {_output_text(v)}")
    if m.subgraphs:
        lines.append("subgraphs:")
        for s in m.subgraphs:
            lines.append(f"  {s['node']} [{s['property']}] ran on {s['executor']} ({s['reason']}): "
                         f"{s['seconds'] * 1e3:.3f} ms, peak {_mib(s['peak_bytes'])}")
    slow = sorted(m.node_seconds.items(), key=lambda kv: -kv[1])[:5]
    if slow:
        lines.append("slowest nodes (median): " + ", ".join(f"{n} {s * 1e3:.3f} ms" for n, s in slow))
    return "\n".join(lines)


# ----------------------------------------------------------------- compare --
def cmd_compare(args: argparse.Namespace) -> int:
    from partition.registry import current_registry

    from .float16 import computes_in_float16
    from .run import FixedInputs, RunSpec, run
    from .tolerance import Tolerance, default_tolerance
    given = {k: v for k, v in (("atol", args.atol), ("rtol", args.rtol)) if v is not None}
    try:
        Tolerance(**given)   # a bad value is refused before the model loads
    except ValueError as exc:
        raise InputError(f"--atol/--rtol: {exc}") from None
    if args.warmup < 0:
        raise InputError(f"--warmup {args.warmup}: must be 0 or more")
    if args.repeat < 1:
        raise InputError(f"--repeat {args.repeat}: needs at least 1")
    _start_time_limit(args, "compare")
    prepared = _prepare(args)
    graph, model, feeds, notes = prepared.graph, prepared.model, prepared.feeds, prepared.notes
    # neither given: the model's default, which compare decides and says; one given: the other
    # is the model's default (float16's for a model computing in float16)
    tolerance = replace(default_tolerance(computes_in_float16(graph)), **given) if given else None
    chosen: list[str] = []   # what the selection assumed: said after the run
    selection = selection_from_args(args, graph, chosen)
    spec = RunSpec(id="cli", label=args.model, selection=selection, device=args.device,
                   subgraph_runtime=args.subgraph_runtime, host_runtime=args.host_runtime,
                   repeat=args.repeat, warmup=args.warmup, run_inputs=FixedInputs(feeds, tolerance),
                   engine_name=args.engine)
    properties = current_registry().build(selection) if selection is not None else None
    from tqdm import tqdm
    with tqdm(total=1.0, desc="compare", file=sys.stderr, disable=None, leave=False,
              bar_format="{desc} {percentage:3.0f}%") as bar:
        def progress(stage: str, at: float, message: str) -> None:
            bar.set_description(f"compare: {message}")
            bar.update(max(0.0, at - bar.n))
        with _inputs_named_on_failure(prepared):
            report = run(spec, graph, model, properties, progress=progress)
    c = report.comparison
    c.notes = notes + chosen + c.notes
    if args.json:
        print(json.dumps({**c.to_json(), "runtimes": report.to_json()["runtimes"]}, default=str))
    else:
        print(report.text())
    return 0
