"""One run of a model, the same everywhere: ``run(spec, graph, model, properties) -> RunReport``.

The web's job managers (``app/jobs.py`` in threads, ``app/dask_runs.py`` on Dask workers)
call it with a ``RunSpec`` frozen at submission; the web process only validates. A run:

1. partitions ``graph`` **once**, with the properties the caller built from the spec's
   selection (progress per node);
2. with ``host_runtime == "onnxruntime"``, contracts the nodes outside the subgraphs into
   ``host`` regions run by onnxruntime (``engine/host_regions.py``): the partitioned graph
   timed the way it deploys;
3. runs ``engine.compare.compare`` once: onnxruntime on the whole model (the reference), our
   engine unpartitioned, and the partitioned graph, each ``warmup`` + ``repeat`` times. That
   one set of measured executions also gives the per-node times of both graphs (the executor
   records them in every run) and the dependency timeline of the partitioned graph's last
   repeat (a ``NodeTimeline`` handed to that executor as ``node_times``, never a global); the
   boundary values come from its first, unmeasured warm-up run.

``progress(stage, fraction, message)`` reports and ``check()`` may raise to cancel; both are
called between nodes of the partitioning and between the runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from partition.ir import Graph
from partition.registry import Selection
from partition.report import result_json
from partition.runner import PartitionRun
from partition.trace import PartitionResult

from .compare import Comparison, compare
from .host_regions import HOST_PROPERTY, HOST_RUNTIMES, host_regions, left_on_engine
from .measure import NodeTimeline, chrome_trace, timeline_json
from .options import DEVICES
from .profiling import FnRecord
from .run_errors import InputsRefused, KernelFailure, RunError, SizesFound
from .subgraph_ops import EXECUTORS

Progress = Callable[[str, float, str], None]


@dataclass(frozen=True)
class RunSpec:
    """One run as plain, picklable data, validated once where it is made (``__post_init__``).

    ``selection`` is the backend and its options as the submitting side's registry validated
    them (for the web's rule backend: ``Selection("rule", {"rule": JSON})``); the running side
    builds the properties from it. ``run_inputs`` is anything with ``feeds(graph)``,
    ``tolerance`` and ``to_json()`` (``app.run_inputs.RunInputs``)."""

    id: str
    label: str
    selection: Selection | None
    device: str = "cpu"
    subgraph_runtime: str = "auto"
    host_runtime: str = "ours"
    repeat: int = 3
    warmup: int = 1
    run_inputs: Any = None
    memory_limit: int | None = None   # bytes: refused before anything runs when estimated above it
    memory_hint: str | None = None    # how the caller's user raises that limit
    time_limit: float | None = None   # seconds of wall clock (the caller's runner enforces it)
    kernels: Any = None               # a kernel finder (tests); None = the engine's registry
    engine_name: str | None = None    # the dependency engine (threaded, naive); None = the default

    def __post_init__(self) -> None:
        if self.device not in DEVICES:
            raise RunError(f"device {self.device!r}: choose one of {', '.join(DEVICES)}")
        if self.subgraph_runtime not in EXECUTORS:
            raise RunError(f"subgraph_runtime {self.subgraph_runtime!r}: choose one of {', '.join(EXECUTORS)}")
        if self.host_runtime not in HOST_RUNTIMES:
            raise RunError(f"host_runtime {self.host_runtime!r}: choose one of {', '.join(HOST_RUNTIMES)} "
                           "(what runs the nodes outside the subgraphs)")
        if not isinstance(self.repeat, int) or self.repeat < 1:
            raise RunError(f"repeat {self.repeat!r}: needs a whole number of at least 1")
        if not isinstance(self.warmup, int) or self.warmup < 0:
            raise RunError(f"warmup {self.warmup!r}: needs a whole number, 0 or more")

    @property
    def backend(self) -> str | None:
        return None if self.selection is None else self.selection.backend

    def runtimes(self) -> dict[str, str]:
        """What runs each part: the subgraphs and the rest (the run card and history say it)."""
        return {"subgraphs": self.subgraph_runtime, "host": self.host_runtime}


@dataclass
class RunReport:
    """What one run found: the comparison, the partition, per-node times and the timeline."""

    spec: RunSpec
    comparison: Comparison
    partition: PartitionResult | None
    timeline: list[FnRecord]
    node_seconds: dict[str, float]            # the partitioned graph (or the model), median per node
    original_node_seconds: dict[str, float]   # the unpartitioned model on our engine: "time" colouring
    subgraph_times: list[dict[str, Any]]
    memory: dict[str, Any]
    inputs: dict[str, Any]
    host: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"comparison": self.comparison.to_json(),
                "notes": self.notes + list(self.comparison.notes),
                "partition": result_json(self.partition) if self.partition is not None else None,
                "runtimes": {**self.spec.runtimes(), **self.host},
                "timeline": timeline_json(self.timeline), "memory": self.memory,
                "subgraph_times": self.subgraph_times, "node_seconds": self.node_seconds,
                "original_node_seconds": self.original_node_seconds, "inputs": self.inputs}

    def chrome_trace(self) -> dict[str, Any]:
        return chrome_trace(self.timeline, self.spec.label)

    def text(self) -> str:
        """The comparison as ``sglens compare`` prints it, with what ran each part."""
        host = self.spec.host_runtime
        line = f"runtimes: subgraphs on {self.spec.subgraph_runtime}, the rest on {_host_label(host)}"
        if self.host:
            line += (f" ({self.host['host_regions']} region(s), {self.host['host_nodes']} node(s)"
                     + (f"; on our engine: {', '.join(self.host['host_on_engine'])}" if self.host["host_on_engine"] else "")
                     + ")")
        if self.spec.selection is None:   # nothing partitioned: no subgraphs, no "rest of the graph"
            return self.comparison.text()
        return self.comparison.text() + "\n" + line


@dataclass(frozen=True)
class FixedInputs:
    """``RunSpec.run_inputs`` for arrays already in hand (the CLI): the feeds as they are."""

    arrays: Mapping[str, Any]
    tolerance: Any   # a Tolerance, or None: the model's default (``compare`` decides)

    def feeds(self, graph: Graph) -> dict[str, Any]:
        return dict(self.arrays)

    def to_json(self) -> dict[str, Any]:
        return {"tolerance": None if self.tolerance is None else self.tolerance.to_json()}


def run(spec: RunSpec, graph: Graph, model: Any, properties: list | None, *,
        progress: Progress | None = None, check: Callable[[], None] | None = None) -> RunReport:
    """One run (see the module docstring); ``properties`` None runs the model unpartitioned."""
    report: Progress = progress or (lambda stage, at, message: None)
    check = check or (lambda: None)
    part = _partition(spec, graph, properties, report, check)
    inputs = spec.run_inputs
    if inputs is None:
        raise RunError(f"run {spec.id}: the spec has no inputs (RunSpec.run_inputs); give the arrays or their specs")
    feeds = inputs.feeds(graph)
    run_graph, host = part.graph if part is not None else None, {}
    if part is not None and spec.host_runtime == "onnxruntime":
        report("partition", 0.2, "grouping the nodes outside the subgraphs for onnxruntime")
        run_graph, host = _host_graph(part.graph)
    stages = {"onnxruntime": (0.25, "onnxruntime on the whole model (the reference)"),
              "engine": (0.4, "our engine, unpartitioned"),
              "partitioned": (0.6, f"the partitioned graph: subgraphs on {spec.subgraph_runtime}, "
                                   f"the rest on {_host_label(spec.host_runtime)}"),
              "diagnosis": (0.8, "locating the first node out of tolerance")}

    def stage(name: str) -> None:
        at, message = stages.get(name, (0.2, name))
        report("compare", at, message)  # also where a cancel takes effect
    timeline = NodeTimeline()
    try:
        c = compare(graph, model, feeds, partitioned=part, partitioned_graph=run_graph,
                    executor=spec.subgraph_runtime, device=spec.device, repeat=spec.repeat, warmup=spec.warmup,
                    label=spec.label, kernels=spec.kernels, progress=stage, tolerance=inputs.tolerance,
                    engine_name=spec.engine_name,
                    memory_limit=spec.memory_limit, memory_hint=spec.memory_hint, timeline=timeline,
                    runtime_by_property=((HOST_PROPERTY, "onnxruntime"),) if host else ())
    except (KernelFailure, InputsRefused) as exc:
        raise _with_sizes_found(exc, graph, model, inputs, report, check, spec.memory_limit) from None
    report("report", 0.95, "writing the report")
    measured = c.measurements.get("partitioned") or c.measurements["engine"]
    shown = run_graph if run_graph is not None else graph
    records = timeline.timeline()
    return RunReport(
        spec=spec, comparison=c, partition=part, timeline=records,
        node_seconds=measured.node_seconds, original_node_seconds=c.measurements["engine"].node_seconds,
        subgraph_times=[{"node": s["node"], "id": s.get("subgraph_id"), "property": s.get("property"),
                         "executor": s.get("executor"), "seconds": s.get("seconds"),
                         "peak_bytes": s.get("peak_bytes")} for s in measured.subgraphs],
        memory=memory_series(shown, timeline_json(records), feeds),
        inputs={**inputs.to_json(),
                "arrays": {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in feeds.items()}},
        host=host)


def _with_sizes_found(exc: RunError, graph: Graph, model: Any, inputs: Any, report: Progress,
                      check: Callable[[], None], memory_limit: int | None) -> RunError:
    """``exc`` saying which sizes of the symbolic axes onnxruntime runs (``size_probe``), where
    the inputs were made from specs (the web's form) and some axis was left to a guess."""
    from .size_probe import guessed_axes, probe_sizes
    specs = getattr(inputs, "specs", None)
    axes = guessed_axes(graph, specs) if specs else []
    if not axes:
        return exc
    report("compare", 0.9, "the run failed: trying other sizes of the symbolic axes on onnxruntime")
    probe = probe_sizes(model, graph, specs, axes, files=getattr(inputs, "files", None),
                        known_refused=isinstance(exc, InputsRefused), memory_limit=memory_limit, check=check)
    if probe is None:
        return exc
    said = f"{str(exc).rstrip('.')}. {probe.sentence()}."
    if not probe.shapes:
        return RunError(said)
    return SizesFound(said, {"inputs": {k: list(v) for k, v in probe.shapes.items()}})


def _partition(spec: RunSpec, graph: Graph, properties: list | None, report: Progress,
               check: Callable[[], None]) -> PartitionResult | None:
    """The one partitioning of the run (progress per node; ``check`` between nodes)."""
    if properties is None:
        return None
    report("partition", 0.02, f"partitioning with {spec.backend}")

    def progress(done: int, total: int) -> None:
        check()
        report("partition", 0.02 + 0.18 * (done / max(1, total)),
               f"partitioning with {spec.backend}: {done}/{total} nodes")
    return PartitionRun(graph, spec.backend or "default", trace=False, properties=properties,
                        progress=progress).run()


def _host_graph(partitioned: Graph) -> tuple[Graph, dict[str, Any]]:
    """The partitioned graph with its host part in onnxruntime regions, and what the report says."""
    regions = host_regions(partitioned)
    stay = left_on_engine(regions.graph)
    return regions.graph, {"host_regions": len(regions.subgraphs),
                           "host_nodes": sum(len(s.nodes) for s in regions.subgraphs),
                           "host_on_engine": [f"{n.name} ({n.domain}.{n.op_type})" for n in stay]}


def _host_label(host_runtime: str) -> str:
    return "our engine" if host_runtime == "ours" else "onnxruntime"


def memory_series(graph: Graph, timeline: list[dict[str, Any]], feeds: Mapping[str, Any]) -> dict[str, Any]:
    """Live activation bytes over the timeline: a node's outputs live from its end to the end of
    their last reader (sizes from shapes), the inputs from the start; the peak marked."""
    ends: dict[str, float] = {}
    for rec in timeline:
        ends[rec["name"]] = rec["start_us"] + rec["dur_us"]
    by_name = graph.node_by_name
    sizes: dict[str, int] = {}
    born: dict[str, float] = {}
    died: dict[str, float] = {}
    for name, v in feeds.items():
        sizes[name] = int(getattr(v, "nbytes", 0))
        born[name] = 0.0
    for name, end in ends.items():
        node = by_name.get(name)
        if node is None:
            continue
        for t in node.outputs:
            if t:
                sizes[t] = graph.info(t).nbytes or 0
                born[t] = end
        for t in graph.reads(node):
            if t in born:
                died[t] = max(died.get(t, 0.0), end)
    last = max(ends.values(), default=0.0)
    changes: dict[float, int] = {}
    for t, b in born.items():
        changes[b] = changes.get(b, 0) + sizes[t]
        d = max(b, died.get(t, last) if t not in graph.outputs else last)
        changes[d] = changes.get(d, 0) - sizes[t]
    live, times, values = 0, [], []
    for t in sorted(changes):
        live += changes[t]
        times.append(round(t, 3))
        values.append(max(0, live))
    peak = max(values, default=0)
    at = times[values.index(peak)] if values else 0.0
    return {"t_us": times, "bytes": values, "peak_bytes": peak, "peak_t_us": at,
            "note": "live activations estimated from tensor shapes and the timeline of one run"}
