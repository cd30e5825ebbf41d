"""Background run jobs: the comparison of ``engine/compare.py`` with live progress and cancel.

A job runs in a worker thread: partition (progress per node), then
``engine.compare.compare`` (onnxruntime reference vs our engine unpartitioned
vs the partitioned graph), then one profiled run of the partitioned graph for
the engine timeline and the Chrome trace. Cancel is cooperative: it stops the
partitioning at once and otherwise between stages. The finished, failed or
cancelled run is written to SQLite (``store.RunStore``), so any two runs can
be compared later, after a restart too.
"""

from __future__ import annotations

import secrets
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from partition.errors import LensError

from .errors import ApiError


class Cancelled(Exception):
    pass


def runs_available() -> str | None:
    """None when the run layer is importable, else the reason."""
    try:
        import engine.compare  # noqa: F401
        import engine.measure  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - another engineer's module, maybe not there yet
        return f"runs not available yet: the engine's compare module does not import ({exc})"
    return None


class Job:
    def __init__(self, jid: str, meta: dict[str, Any]) -> None:
        self.id = jid
        self.meta = meta
        self.status = "queued"
        self.stage = "queued"
        self.progress = 0.0
        self.message = "waiting for a worker"
        self.error: str | None = None
        self.cancel_event = threading.Event()
        self.created = time.time()

    def check(self) -> None:
        if self.cancel_event.is_set():
            raise Cancelled()

    def to_json(self) -> dict[str, Any]:
        return {**self.meta, "id": self.id, "status": self.status, "stage": self.stage,
                "progress": round(self.progress, 3), "message": self.message, "error": self.error}


class JobManager:
    def __init__(self, lens: Any, workers: int = 2) -> None:
        self.lens = lens
        self._pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="sglens-run")
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()

    def submit(self, entry: Any, backend: str, options: dict[str, Any], properties: list | None,
               device: str, executor: str, repeat: int, run_inputs: Any = None) -> Job:
        why = runs_available()
        if why:
            raise ApiError(why, 503)
        from engine.subgraph_ops import EXECUTORS
        if device not in ("cpu", "gpu"):
            raise ApiError("device must be 'cpu' or 'gpu'")
        if executor not in EXECUTORS:
            raise ApiError(f"executor must be one of {', '.join(EXECUTORS)}")
        jid = secrets.token_hex(8)
        meta = {"model_id": entry.id, "model_name": entry.name, "backend": backend,
                "options": {k: v for k, v in options.items()}, "device": device, "executor": executor,
                "created": time.time()}
        job = Job(jid, meta)
        job.run_inputs = run_inputs  # app.run_inputs.RunInputs: specs, uploaded arrays, tolerance
        with self._lock:
            self._jobs[jid] = job
            # Keep the in-memory table bounded: finished jobs live on in SQLite.
            done = [j for j in self._jobs.values() if j.status in ("done", "failed", "cancelled")]
            for old in sorted(done, key=lambda j: j.created)[:-200]:
                self._jobs.pop(old.id, None)
        self._pool.submit(self._execute, job, entry, backend, options, properties, device, executor, repeat)
        return job

    def active(self) -> list[Job]:
        with self._lock:
            return list(self._jobs.values())

    def get(self, jid: str) -> Job | None:
        with self._lock:
            return self._jobs.get(jid)

    def cancel(self, jid: str) -> Job:
        job = self.get(jid)
        if job is None:
            raise ApiError(f"no running job '{jid}'", 404)
        job.cancel_event.set()
        if job.status == "queued":
            job.message = "cancelling"
        return job

    # ------------------------------------------------------------------ work --
    def _execute(self, job: Job, entry: Any, backend: str, options: dict[str, Any], properties: list | None,
                 device: str, executor: str, repeat: int) -> None:
        result = trace = None
        try:
            job.check()
            job.status = "running"
            result, trace = self._work(job, entry, backend, options, properties, device, executor, repeat)
            job.status, job.stage, job.progress, job.message = "done", "done", 1.0, "finished"
        except Cancelled:
            job.status, job.message = "cancelled", "cancelled by the user"
        except LensError as exc:
            job.status, job.error, job.message = "failed", str(exc), str(exc)
        except Exception as exc:  # noqa: BLE001 - a run that fails is reported, the server goes on
            job.status = "failed"
            job.error = job.message = f"{type(exc).__name__}: {exc}"
            traceback.print_exc()
        meta = {**job.meta, "id": job.id, "status": job.status, "error": job.error, "finished": time.time()}
        try:
            self.lens.runs.save(meta, result, trace)
        except Exception:  # noqa: BLE001
            traceback.print_exc()

    def _stage(self, job: Job, stage: str, progress: float, message: str) -> None:
        job.check()
        job.stage, job.progress, job.message = stage, progress, message

    def _work(self, job: Job, entry: Any, backend: str, options: dict[str, Any], properties: list | None,
              device: str, executor: str, repeat: int) -> tuple[dict[str, Any], dict[str, Any]]:
        from engine.compare import compare
        from engine.executor import Executor
        from engine.measure import chrome_trace, measure, timeline_json
        from engine.profiling import Profiler
        from partition.onnx_io import parse_model_bytes
        from partition.runner import PartitionRun

        from .serialize import result_json
        graph = entry.graph
        self._stage(job, "partition", 0.02, f"partitioning with {backend}")

        def progress(done: int, total: int) -> None:
            job.check()
            job.progress = 0.02 + 0.18 * (done / max(1, total))
        part = PartitionRun(graph, backend, trace=False, properties=properties, progress=progress, **options).run()
        self._stage(job, "compare", 0.2, "onnxruntime reference, our engine, the partitioned graph")
        notes: list[str] = []
        from .run_inputs import default_inputs
        inputs = getattr(job, "run_inputs", None) or default_inputs(graph)
        feeds = inputs.feeds(graph)   # engine.input_spec.materialize: same specs, same arrays
        if self.lens.run_memory_limit:  # --run-memory-limit: refuse before anything big is allocated
            from .limits import check_run_budget
            check_run_budget(graph, feeds, self.lens.run_memory_limit)
        model = parse_model_bytes(entry.model_bytes(), entry.name)
        stages = {"onnxruntime": (0.25, "onnxruntime on the whole model (the reference)"),
                  "engine": (0.4, "our engine, unpartitioned"),
                  "partitioned": (0.6, f"the partitioned graph, subgraphs on {executor}")}

        def compare_progress(stage: str) -> None:
            at, message = stages.get(stage, (0.2, stage))
            self._stage(job, "compare", at, message)  # also where a cancel takes effect
        c = compare(graph, model, feeds, partitioned=part, executor=executor, device=device,
                    repeat=repeat, label=entry.name, kernels=self.lens.run_kernels,
                    progress=compare_progress, tolerance=inputs.tolerance)
        self._stage(job, "timeline", 0.8, "a profiled run of the partitioned graph for the timeline")
        profiler = Profiler()
        with Executor(part.graph, device=device, executor=executor, hooks=profiler,
                      kernels=self.lens.run_kernels) as ex:
            m = measure(ex, feeds, repeat=1, warmup=1, profiler=profiler, label=entry.name)
        timeline = timeline_json(m.timeline)
        # Per-node time of the unpartitioned graph on our engine: the graph view's "time" colouring.
        with Executor(graph, device=device, executor="engine", kernels=self.lens.run_kernels) as ex:
            node_seconds = measure(ex, feeds, repeat=max(1, min(repeat, 3)), warmup=1).node_seconds
        self._stage(job, "report", 0.95, "writing the report")
        data = {
            "comparison": c.to_json(),
            "notes": notes + list(c.notes),
            "partition": result_json(part),
            "timeline": timeline,
            "memory": memory_series(part.graph, timeline, feeds),
            "subgraph_times": [{"node": s["node"], "id": s.get("subgraph_id"), "property": s.get("property"),
                                "executor": s.get("executor"), "seconds": s.get("seconds"),
                                "peak_bytes": s.get("peak_bytes")} for s in m.subgraphs],
            "node_seconds": m.node_seconds,
            "original_node_seconds": node_seconds,
            "inputs": {**inputs.to_json(), "arrays": {k: {"shape": list(v.shape), "dtype": str(v.dtype)}
                                                      for k, v in feeds.items()}},
        }
        return data, chrome_trace(m.timeline, entry.name)


def memory_series(graph: Any, timeline: list[dict[str, Any]], feeds: Any) -> dict[str, Any]:
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
