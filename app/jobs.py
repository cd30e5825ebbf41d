"""Run jobs: submit, cancel and store runs of ``engine.run.run``, with live progress.

The app only submits, cancels and stores: one run is ``engine.run.run`` (partition once,
then one set of measured executions: onnxruntime as the reference, our engine unpartitioned,
the partitioned graph; per-node times and the timeline come from those same runs), called
by ``execute_run`` with this side's registry and the run's time limit. It reports through
two callbacks (``report(stage, progress, message)`` and ``check()``, which raises
``Cancelled``), so the same function runs in two places:

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
from partition.registry import Selection

from .errors import ApiError
from .run_spec import RunSpec, make_spec, properties
from .run_states import FINAL, RunState, can_move, lost_with_server



class Cancelled(Exception):
    pass


def seconds_text(seconds: float) -> str:
    return f"{int(seconds)} s" if float(seconds).is_integer() else f"{seconds:g} s"


class TimeLimitExceeded(LensError):
    """The run passed its wall-clock limit (``--run-time-limit``)."""

    def __init__(self, limit: float, how: str = "the run stopped at its next check between stages") -> None:
        super().__init__(f"exceeded the time limit of {seconds_text(limit)} (sglens serve --run-time-limit): "
                         f"{how}. Run a smaller input, or raise the limit")


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

    def submit(self, entry: Any, selection: Selection, *, device: str = "cpu", subgraph_runtime: str = "auto",
               host_runtime: str = "ours", repeat: int = 1, run_inputs: Any = None) -> Job:
        """Record a new run and hand its ``RunSpec`` to the runner. ``selection`` was validated at
        the edge (``app.api.selection``); the running side builds the properties from it and
        partitions, once (``engine.run.run``)."""
        self.lens.models.check_room(0)    # a full store takes no more runs (507)
        jid = secrets.token_hex(8)
        if run_inputs is None:
            from .run_inputs import default_inputs
            run_inputs = default_inputs(entry.graph)
        spec = make_spec(selection, id=jid, label=entry.name, device=device, subgraph_runtime=subgraph_runtime,
                         host_runtime=host_runtime, repeat=repeat, run_inputs=run_inputs,
                         memory_limit=_run_limit(self.lens), time_limit=_time_limit(self.lens),
                         kernels=self.lens.run_kernels)
        # the store's column for the subgraph runtime keeps its first name, "executor"
        meta = {"model_id": entry.id, "model_name": entry.name, "backend": selection.backend,
                "options": _as_asked(self.lens.registry, selection), "device": device, "executor": subgraph_runtime,
                "host_runtime": host_runtime, "created": time.time(), "repeat": repeat,
                "inputs": run_inputs.to_json()}
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
               result: dict[str, Any] | None = None, trace: Any = None, hint: Any = None) -> None:
        """Record the end of a run, in memory and in the store (once). ``hint``: what a failed
        run suggests doing (``SizesFound.hint``: sizes onnxruntime runs), shown with its error."""
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
        if hint:
            job.meta["hint"] = hint
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
            self.finish(job, "failed", str(exc), hint=getattr(exc, "hint", None))
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
def _as_asked(registry: Any, selection: Selection) -> dict[str, Any]:
    """The options a history row shows and a repeat sends again: those that differ from the
    backend's defaults (the selection holds every default filled in)."""
    try:
        defaults = {o.name: o.default for o in registry.schema(selection.backend)}
    except LensError:   # the rule "backend": its one option is the rule
        defaults = {}
    return {k: v for k, v in selection.values().items() if k not in defaults or v != defaults[k]}


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
    """One run, as both job managers run it: ``engine.run.run`` (which partitions once and
    measures once) with this side's ``registry`` building the properties, the run's time limit
    on ``report``/``check``; returns the stored result JSON and the Chrome trace."""
    from engine.run import run
    from partition.onnx_io import parse_model_bytes
    report, check = _with_deadline(spec.time_limit, report, check)
    props = properties(spec.selection, registry) if spec.selection is not None else None
    model = parse_model_bytes(model_bytes(), spec.label)
    done = run(spec, graph, model, props, progress=report, check=check)
    return done.to_json(), done.chrome_trace()
