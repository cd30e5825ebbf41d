"""Run jobs: the comparison of ``engine/compare.py`` with live progress and cancel.

One run is ``execute_run``: partition (progress per node), then ``engine.compare.compare``
(onnxruntime reference vs our engine unpartitioned vs the partitioned graph), then one
profiled run of the partitioned graph for the engine timeline and the Chrome trace. It
reports through two callbacks (``report(stage, progress, message)`` and ``check()``, which
raises ``Cancelled``), so the same function runs in two places:

- ``JobManager`` (this module): a thread pool inside the web process. The library default
  of ``create_app`` (tests, embedding), where nothing else is started.
- ``app.dask_runs.DaskJobManager``: a Dask ``distributed`` cluster of worker processes,
  what ``sglens serve`` uses (a ``LocalCluster`` by default, or ``--scheduler``).

Both write every run to the store (``store.RunStore``) when it is submitted and when it
ends (done, failed, cancelled), so runs are listed and comparable after a restart.
"""

from __future__ import annotations

import secrets
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from partition.errors import LensError

from .errors import ApiError
from .run_spec import RunSpec, make_spec
from .run_states import FINAL, RunState, can_move, lost_with_server

#: Seed and default dimension of the random inputs of every run (stored with the run).
INPUTS = {"seed": 0, "default_dim": 1}


class Cancelled(Exception):
    pass


def seconds_text(seconds: float) -> str:
    return f"{int(seconds)} s" if float(seconds).is_integer() else f"{seconds:g} s"


class TimeLimitExceeded(LensError):
    """The run passed its wall-clock limit (``--run-time-limit``)."""

    def __init__(self, limit: float, how: str = "the run stopped at its next check between stages") -> None:
        super().__init__(f"exceeded the time limit of {seconds_text(limit)} (sglens serve --run-time-limit): "
                         f"{how}. Run a smaller input, or raise the limit")


def runs_available() -> str | None:
    """None when the run layer is importable, else the reason."""
    try:
        import engine.compare  # noqa: F401
        import engine.measure  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - another engineer's module, maybe not there yet
        return f"runs not available yet: the engine's compare module does not import ({exc})"
    return None


class Job:
    """A run this server process submitted: its live state (the store has the durable copy)."""

    def __init__(self, jid: str, meta: dict[str, Any]) -> None:
        self.id = jid
        self.meta = meta
        self.status = "queued"
        self.stage = "queued"
        self.progress = 0.0
        self.message = "waiting for a worker"
        self.error: str | None = None
        self.worker: str | None = None
        self.cancel_event = threading.Event()
        self.created = time.time()
        self.handle: Any = None          # the runner's handle (a Dask future)
        self.attempts = 0                # submissions (a run whose worker died before it started goes again)
        self.resubmit: Any = None        # what a new submission needs
        self.saved_at = 0.0              # last progress write to the store
        self.finishing = False           # set once, by whoever records the end first
        self.time_limit: float | None = None   # seconds from its start on a worker (RunSpec.time_limit)

    def check(self) -> None:
        if self.cancel_event.is_set():
            raise Cancelled()

    def start(self) -> bool:
        """queued -> running (False when the run has moved on already, e.g. cancelled)."""
        if self.finishing or not can_move(self.status, RunState.RUNNING):
            return False
        self.status = RunState.RUNNING.value
        return True

    def to_json(self) -> dict[str, Any]:
        return {**self.meta, "id": self.id, "status": self.status, "stage": self.stage,
                "progress": round(self.progress, 3), "message": self.message, "error": self.error,
                "worker": self.worker}


class BaseJobs:
    """What every runner shares: request checks, the in-memory table, the store rows, cancel."""

    def __init__(self, lens: Any) -> None:
        self.lens = lens
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()

    def submit(self, entry: Any, backend: str, options: dict[str, Any], properties: list | None,
               device: str, executor: str, repeat: int, run_inputs: Any = None, rule: Any = None) -> Job:
        """Record a new run and hand its ``RunSpec`` to the runner. ``properties`` is accepted for
        callers that built them already, but never travels: the running side rebuilds them from the
        backend name and options (or ``rule``, the rule JSON, for ``backend == "rule"``)."""
        why = runs_available()
        if why:
            raise ApiError(why, 503)
        from engine.subgraph_ops import EXECUTORS
        if device not in ("cpu", "gpu"):
            raise ApiError("device must be 'cpu' or 'gpu'")
        if executor not in EXECUTORS:
            raise ApiError(f"executor must be one of {', '.join(EXECUTORS)}")
        self.lens.models.check_room(0)    # a full store takes no more runs (507)
        jid = secrets.token_hex(8)
        spec = make_spec(self.lens.registry, id=jid, label=entry.name, backend=backend, options=options,
                         rule=rule, device=device, executor=executor, repeat=repeat, run_inputs=run_inputs,
                         memory_limit=_run_limit(self.lens), time_limit=_time_limit(self.lens),
                         kernels=self.lens.run_kernels)
        meta = {"model_id": entry.id, "model_name": entry.name, "backend": backend,
                "options": dict(options), "device": device, "executor": executor,
                "created": time.time(), "repeat": repeat,
                "inputs": run_inputs.to_json() if run_inputs is not None else dict(INPUTS)}
        job = Job(jid, meta)
        job.time_limit = spec.time_limit
        self.lens.runs.create({**meta, "id": jid, "status": "queued", "message": job.message})
        with self._lock:
            self._jobs[jid] = job
            # Keep the in-memory table bounded: finished jobs live on in the store.
            done = [j for j in self._jobs.values() if j.status in FINAL]
            for old in sorted(done, key=lambda j: j.created)[:-200]:
                self._jobs.pop(old.id, None)
        try:
            self._start(job, entry, spec)
        except Exception as exc:  # noqa: BLE001 - the row must not stay "queued" for ever (issue 20)
            traceback.print_exc()
            reason = f"could not hand the run to a worker: {type(exc).__name__}: {exc}"
            self.finish(job, "failed", reason)
            raise ApiError(f"{reason}; the run is recorded as failed", 500) from None
        return job

    def _start(self, job: Job, entry: Any, spec: RunSpec) -> None:
        raise NotImplementedError

    def active(self) -> list[Job]:
        with self._lock:
            return list(self._jobs.values())

    def get(self, jid: str) -> Job | None:
        with self._lock:
            return self._jobs.get(jid)

    def cancel(self, jid: str) -> Job:
        job = self.get(jid)
        if job is None:
            stored = self.lens.runs.get(jid)
            if stored is not None and stored["status"] not in FINAL:
                return self._cancel_foreign(stored)   # started by another server process
            raise ApiError(f"no running job '{jid}'", 404)
        job.cancel_event.set()
        if job.status == "queued":
            job.message = "cancelling"
        self._cancel(job)
        return job

    def _cancel(self, job: Job) -> None:
        """Runner-specific part of a cancel (the cooperative flag is set already)."""

    def _cancel_foreign(self, stored: dict[str, Any]) -> Job:
        """Cancel a run another server process sharing the store submitted."""
        raise ApiError(f"run '{stored['id']}' was started by another server process; with in-process "
                       "runs only that process can cancel it", 409)

    def cancel_model(self, model_id: str) -> None:
        """A deleted model's queued runs are cancelled (running ones finish: their bytes are in hand)."""
        for job in self.active():
            if job.meta["model_id"] == model_id and job.status == "queued":
                self.cancel(job.id)

    def finish(self, job: Job, status: str, error: str | None = None,
               result: dict[str, Any] | None = None, trace: Any = None) -> None:
        """Record the end of a run, in memory and in the store (once)."""
        with self._lock:
            if job.finishing or not can_move(job.status, status):
                return      # ended already (the first end wins), or a move the state table forbids
            job.finishing = True
        if status == "done":
            job.stage, job.progress, job.message = "done", 1.0, "finished"
        elif status == "cancelled":
            job.message = "cancelled by the user"
        else:
            job.message = error or status
        meta = {**job.meta, "id": job.id, "status": status, "error": error, "finished": time.time(),
                "stage": job.stage, "progress": job.progress, "message": job.message}
        try:
            self.lens.runs.save(meta, result, trace)
        except Exception:  # noqa: BLE001 - the server goes on; the run stays visible in memory
            traceback.print_exc()
        # Only now: a reader that sees the final status in memory finds it in the store too.
        job.status, job.error = status, error

    def close(self) -> None:
        """Stop taking runs and release workers (idempotent)."""

    def _end_in_flight(self) -> None:
        """At shutdown: a running run is interrupted, a queued one never started (``run_states``)."""
        for job in self.active():
            if job.status not in FINAL:
                status, error, _ = lost_with_server(job.status)
                self.finish(job, status, error)

    def describe(self) -> str:
        return "in threads of the server process"


class JobManager(BaseJobs):
    """Runs in a thread pool inside the web process (the library default; tests)."""

    def __init__(self, lens: Any, workers: int = 2) -> None:
        super().__init__(lens)
        self._pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="sglens-run")

    def _start(self, job: Job, entry: Any, spec: RunSpec) -> None:
        self._pool.submit(self._execute, job, entry, spec)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._end_in_flight()

    def _execute(self, job: Job, entry: Any, spec: RunSpec) -> None:
        try:
            job.check()
            if not job.start():
                return
            self.lens.runs.update(job.id, status="running", stage="partition", message="started")
            result, trace = self._work(job, entry, spec)
        except Cancelled:
            self.finish(job, "cancelled")
        except LensError as exc:
            self.finish(job, "failed", str(exc))
        except Exception as exc:  # noqa: BLE001 - a run that fails is reported, the server goes on
            traceback.print_exc()
            self.finish(job, "failed", f"{type(exc).__name__}: {exc}")
        else:
            self.finish(job, "done", None, result, trace)

    def _stage(self, job: Job, stage: str, progress: float, message: str) -> None:
        job.check()
        job.stage, job.progress, job.message = stage, progress, message

    def _work(self, job: Job, entry: Any, spec: RunSpec) -> tuple[dict[str, Any], dict[str, Any]]:
        return execute_run(spec, entry.graph, entry.model_bytes,
                           lambda s, p, m: self._stage(job, s, p, m), job.check, self.lens.registry)


# ------------------------------------------------------------- one run --
def _run_limit(lens: Any) -> int | None:
    """The engine's run memory budget (``--run-memory-limit``) when the app has one."""
    limit = getattr(lens, "run_memory_limit", None)
    return int(limit) if limit else None


def _time_limit(lens: Any) -> float | None:
    """Seconds of wall clock a run may take (``--run-time-limit``) when the app has one."""
    limit = getattr(lens, "run_time_limit", None)
    return float(limit) if limit else None


Report = Callable[[str, float, str], None]


def _with_deadline(limit: float | None, report: Report,
                   check: Callable[[], None]) -> tuple[Report, Callable[[], None]]:
    """``report`` and ``check`` that also end the run once it has taken ``limit`` seconds. They run
    between nodes of the partitioning and between stages; a call that never returns (a hung kernel,
    an endless Loop inside onnxruntime) is the runner's to stop (``app.dask_runs``: the worker is
    restarted)."""
    if not limit:
        return report, check
    deadline = time.monotonic() + limit

    def checked() -> None:
        check()
        if time.monotonic() > deadline:
            raise TimeLimitExceeded(limit)

    def reported(stage: str, progress: float, message: str) -> None:
        checked()
        report(stage, progress, message)
    return reported, checked


def execute_run(spec: RunSpec, graph: Any, model_bytes: Callable[[], bytes], report: Report,
                check: Callable[[], None], registry: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """One run: partition, compare, a profiled run; ``report`` gives progress, ``check`` may cancel.
    The properties are built here from the spec's selection with ``registry`` (this side's)."""
    from engine.compare import compare
    from engine.executor import Executor
    from engine.measure import chrome_trace, measure, timeline_json
    from engine.profiling import Profiler
    from partition.onnx_io import parse_model_bytes
    from partition.runner import PartitionRun

    from .serialize import result_json
    backend, executor, device, repeat = spec.backend, spec.executor, spec.device, spec.repeat
    kernels, label, limit = spec.kernels, spec.label, spec.memory_limit
    report, check = _with_deadline(spec.time_limit, report, check)
    report("partition", 0.02, f"partitioning with {backend}")

    def progress(done: int, total: int) -> None:
        check()
        report("partition", 0.02 + 0.18 * (done / max(1, total)),
               f"partitioning with {backend}: {done}/{total} nodes")
    part = PartitionRun(graph, backend, trace=False, properties=spec.properties(registry), progress=progress).run()
    report("compare", 0.2, "onnxruntime reference, our engine, the partitioned graph")
    notes: list[str] = []
    from .run_inputs import default_inputs
    inputs = spec.run_inputs or default_inputs(graph)
    feeds = inputs.feeds(graph)   # engine.input_spec.materialize: same specs, same arrays
    model = parse_model_bytes(model_bytes(), label)
    stages = {"onnxruntime": (0.25, "onnxruntime on the whole model (the reference)"),
              "engine": (0.4, "our engine, unpartitioned"),
              "partitioned": (0.6, f"the partitioned graph, subgraphs on {executor}")}

    def compare_progress(stage: str) -> None:
        at, message = stages.get(stage, (0.2, stage))
        report("compare", at, message)  # also where a cancel takes effect
    if limit:   # --run-memory-limit: refuse before anything big is allocated (app/limits.py)
        from .limits import check_run_budget
        check_run_budget(graph, feeds, limit)
    c = compare(graph, model, feeds, partitioned=part, executor=executor, device=device, repeat=repeat,
                label=label, kernels=kernels, progress=compare_progress, tolerance=inputs.tolerance)
    report("timeline", 0.8, "a profiled run of the partitioned graph for the timeline")
    profiler = Profiler()
    with Executor(part.graph, device=device, executor=executor, hooks=profiler, kernels=kernels) as ex:
        m = measure(ex, feeds, repeat=1, warmup=1, profiler=profiler, label=label)
    timeline = timeline_json(m.timeline)
    # Per-node time of the unpartitioned graph on our engine: the graph view's "time" colouring.
    with Executor(graph, device=device, executor="engine", kernels=kernels) as ex:
        node_seconds = measure(ex, feeds, repeat=max(1, min(repeat, 3)), warmup=1).node_seconds
    report("report", 0.95, "writing the report")
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
        "inputs": {**inputs.to_json(),
                   "arrays": {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in feeds.items()}},
    }
    return data, chrome_trace(m.timeline, label)


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
