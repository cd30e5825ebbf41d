"""Measurements of a run: time per node and per subgraph, peak memory, the engine timeline.

``measure(executor, feeds, repeat=N, warmup=1)`` runs the executor ``warmup``
times unmeasured, then ``repeat`` times, and keeps the **median** of each
node's and each subgraph's wall time (CUDA events on GPU: the executor records
them around every kernel), the largest peak memory seen (bytes of live tensors
on CPU; on GPU also cupy's memory-pool ``used_bytes`` high-water mark), and the
engine's timeline of the last repeat, taken from a ``Profiler`` given to the
engine as its hooks (never a global).

``Measurement.to_json()`` is the report; ``chrome_trace()`` is Chrome trace
JSON (one lane per engine worker; load it in https://ui.perfetto.dev or
chrome://tracing).
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from .context import Context, FnProperty
from .executor import Executor, RunResult
from .plan import CALIBRATION_RUNS
from .profiling import FnRecord, Profiler


@dataclass
class Measurement:
    """Medians over ``repeat`` runs after ``warmup``; see the module docstring."""

    label: str
    device: str
    repeat: int
    warmup: int
    seconds: float                                  # median wall time of a whole run
    all_seconds: list[float]
    node_seconds: dict[str, float]                  # median per node
    subgraphs: list[dict[str, Any]]                 # per subgraph: executor, reason, median time, peak
    peak_bytes: int                                 # live activations (inputs + intermediates)
    weight_bytes: int
    pool_peak_bytes: int | None = None              # GPU: cupy memory pool high-water mark
    timeline: list[FnRecord] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)   # every tensor of a run before the warm-up (first_keeps)
    cuda_graph: dict[str, Any] | None = None        # GPU: the run as CUDA Graph replays (gpu_graphs.py)
    settling: int = 0   # of the warm-ups, those past the ones asked for: the executor still tried modes

    def to_json(self, timeline: bool = True) -> dict[str, Any]:
        data: dict[str, Any] = {
            "label": self.label, "device": self.device, "repeat": self.repeat, "warmup": self.warmup,
            "seconds": self.seconds, "all_seconds": self.all_seconds,
            "peak_bytes": self.peak_bytes, "weight_bytes": self.weight_bytes,
            "pool_peak_bytes": self.pool_peak_bytes,
            "node_seconds": self.node_seconds, "subgraphs": self.subgraphs,
            "cuda_graph": self.cuda_graph,
        }
        if timeline:
            data["timeline"] = timeline_json(self.timeline)
        return data

    def chrome_trace(self) -> dict[str, Any]:
        return chrome_trace(self.timeline, self.label)


def measure(executor: Executor, feeds: Mapping[str, Any], *, repeat: int = 5, warmup: int = 1,
            profiler: Profiler | NodeTimeline | None = None, label: str = "run",
            first_keeps: bool = False, cuda_graph: bool = True) -> Measurement:
    """Run ``warmup`` + ``repeat`` times; medians of the repeats. With any warm-up, the warm-up
    goes on while ``executor.calibrating``; ``Measurement.warmup`` says how many ran.
    ``first_keeps`` (with a warm-up): one warm-up more, first, keeps every tensor
    (``Measurement.values``); the ``warmup`` others take the measured runs' path.

    On a GPU (``cuda_graph``) the run is then also measured as CUDA Graph replays
    (``gpu_graphs.measure_replays``): the eager runs give the per-node and per-subgraph
    times (a replay has none), the replays what a run costs without the host launching
    each kernel, and the report says what was captured or why not.

    ``profiler`` gives the timeline of the last repeat: the hooks object the executor's engine
    was made with (``Executor(..., hooks=profiler)``: one record per engine function), or a
    ``NodeTimeline`` given as ``Executor(..., node_times=timeline)`` (one record per node, under
    the plan the executor really runs). Without it there is no timeline.
    """
    if repeat < 1:
        from .run_errors import RunError
        raise RunError(f"--repeat {repeat}: needs at least 1")
    kept: dict[str, Any] = {}
    warm, most = 0, max(0, warmup) + (2 * CALIBRATION_RUNS if warmup > 0 else 0)
    # Past ``warmup`` while the executor still tries parallel against serial runs (at most
    # as many as it tries): a median over trial runs, the first of each also generating
    # code, was 2x the steady time on Llama and CLIP in `sglens compare`. ``warmup=0``
    # asks for the cold runs, and gets them.
    extra = int(first_keeps and warmup > 0)
    if extra:
        # Every tensor, for the boundaries to judge: one warm-up more, before the others. A run
        # that keeps them takes the step loop, not the generated code the measured runs take, so
        # as the only warm-up it left the code generation (and the first plans) to the first
        # measured run: 28 ms against 12.5 on PP-LCNet, 213 ms in a web run of 3.
        kept = executor.run(feeds, keep_intermediates=True).values
        warm = 1
    while warm < warmup + extra or (warm < most + extra and executor.calibrating):
        executor.run(feeds)
        warm += 1
    results: list[RunResult] = []
    walls: list[float] = []
    for i in range(repeat):
        if profiler is not None and i == repeat - 1:
            profiler.reset()  # the timeline shows one run: the last
        t0 = time.perf_counter()
        results.append(executor.run(feeds))
        walls.append(time.perf_counter() - t0)
    last = results[-1]
    graph = None
    if cuda_graph and executor.device == "gpu":
        from .gpu_graphs import measure_replays  # noqa: PLC0415 - GPU runs only
        graph = measure_replays(executor, feeds, repeat, last.outputs)
    return Measurement(
        label=label, device=executor.device, repeat=repeat, warmup=warm,
        settling=max(0, warm - warmup - extra),
        seconds=statistics.median(walls), all_seconds=walls,
        node_seconds=_median_per_key([r.node_seconds for r in results]),
        subgraphs=_subgraph_summary(results),
        peak_bytes=max(r.peak_bytes for r in results), weight_bytes=last.weight_bytes,
        pool_peak_bytes=max((r.pool_peak_bytes or 0) for r in results) or None,
        timeline=profiler.timeline() if profiler is not None else [],
        outputs=last.outputs, values=kept, cuda_graph=graph)


class NodeTimeline:
    """``ExecOptions.node_times``: the host start and end of every top-level node of a run, as
    ``FnRecord``s (what ``timeline_json`` and ``chrome_trace`` draw). Unlike a ``Profiler`` it
    needs no change of plan, so the measured runs themselves give the dependency timeline."""

    def __init__(self, ctx: Context | None = None) -> None:
        self._ctx = ctx or Context.cpu(0)
        self._lock = threading.Lock()
        self.records: list[FnRecord] = []

    def __call__(self, name: str, start: float, end: float) -> None:
        rec = FnRecord(name, self._ctx, FnProperty.NORMAL, 0, worker=threading.current_thread().name,
                       start_ns=int(start * 1e9), end_ns=int(end * 1e9))
        with self._lock:
            self.records.append(rec)

    def reset(self) -> None:
        with self._lock:
            self.records = []

    def timeline(self) -> list[FnRecord]:
        with self._lock:
            return sorted(self.records, key=lambda r: r.start_ns)


def _median_per_key(maps: list[Mapping[str, float]]) -> dict[str, float]:
    keys: dict[str, None] = {}
    for m in maps:
        keys.update(dict.fromkeys(m))
    return {k: statistics.median([m[k] for m in maps if k in m]) for k in keys}


def _subgraph_summary(results: list[RunResult]) -> list[dict[str, Any]]:
    """One entry per subgraph node: the last run's record with median times."""
    by_node: dict[str, list] = {}
    for r in results:
        for rec in r.subgraphs:
            by_node.setdefault(rec.node, []).append(rec)
    summary = []
    for node, recs in by_node.items():
        data = recs[-1].to_json()
        data["seconds"] = statistics.median(r.seconds for r in recs)
        dev = [r.device_seconds for r in recs if r.device_seconds is not None]
        data["device_seconds"] = statistics.median(dev) if dev else None
        data["peak_bytes"] = max(r.peak_bytes for r in recs)
        data["calls"] = len(recs)
        data["executors"] = sorted({r.executor for r in recs})  # more than one: it changed
        data["weights_rebuilt"] = any(r.weights_rebuilt for r in recs)
        summary.append(data)
    return summary


# ------------------------------------------------------------ timelines --
def timeline_json(records: list[FnRecord]) -> list[dict[str, Any]]:
    t0 = min((r.start_ns or r.end_ns for r in records), default=0)
    out = []
    for r in records:
        start = r.start_ns or r.end_ns
        dev = r.device_ms() if r.start_event is not None else None
        out.append({"name": r.name, "ctx": str(r.ctx), "worker": r.worker, "stream": r.stream,
                    "start_us": (start - t0) / 1e3, "dur_us": max(0, r.end_ns - start) / 1e3,
                    "device_ms": dev, "error": repr(r.error) if r.error else None,
                    "skipped": r.skipped})
    return out


def chrome_trace(records: list[FnRecord], label: str = "run") -> dict[str, Any]:
    """Chrome trace event format: complete events ("ph": "X"), microseconds."""
    t0 = min((r.start_ns or r.end_ns for r in records), default=0)
    events: list[dict[str, Any]] = [{"name": "process_name", "ph": "M", "pid": 1,
                                     "args": {"name": f"sglens {label}"}}]
    tids: dict[str, int] = {}
    for r in records:
        worker = r.worker or "skipped"
        if worker not in tids:
            tids[worker] = len(tids) + 1
            events.append({"name": "thread_name", "ph": "M", "pid": 1, "tid": tids[worker],
                           "args": {"name": worker}})
        start = r.start_ns or r.end_ns
        events.append({"name": r.name, "cat": str(r.ctx), "ph": "X", "pid": 1, "tid": tids[worker],
                       "ts": (start - t0) / 1e3, "dur": max(0, r.end_ns - start) / 1e3,
                       "args": {"error": repr(r.error) if r.error else None, "skipped": r.skipped,
                                "stream": r.stream}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_json(path: str, data: Any) -> None:
    with open(path, "w") as f:
        json.dump(data, f, indent=1, default=str)
