"""BLAS threads, and the split of one large kernel over the cores (numpy only).

OpenBLAS starts as many threads as there are cores for every matmul, and its
spare threads *spin* between calls. With the threaded engine running one matmul
per CPU worker that is workers x cores spinning threads on cores CPUs: on a busy
2-core machine a 1x1 conv measured 16 ms instead of 0.16 ms (load 4). Giving
BLAS every core when a run executes as one function was tried too: ResNet-18
went from 81 to 355 ms and the LSTM tagger from 8.9 to 16 ms (`bench/run.py
--blas-threads 2`), onnxruntime's spinning threads and OpenBLAS's fighting for
the two CPUs, and small matmuls gaining nothing from a second thread.

So BLAS gets ONE thread (``apply``), and the parallelism inside one large Conv
or MatMul comes from ``run_split``: the kernel cuts its GEMM into slices (output
rows or channels) that the calling thread and ``cores - 1`` helper threads take
from a shared counter. Between jobs a helper spins for ``SPIN_SECONDS`` (2 ms,
in compiled code without the GIL), then blocks; each slice
calls single-threaded BLAS (which releases the GIL), and the caller never waits
for a helper that has not started a slice, so a busy helper costs nothing. The
rule against oversubscription: threads computing large kernels (callers inside
``LargeKernel`` plus helpers inside a slice) never exceed the cores; a helper
takes a slice only below that, so when the engine runs two branches' convs on
two workers of a 2-core machine, each runs on its own core and the helpers wait.

Where the compiled module is built (``engine/kernels/native.py``), the large 2-D
convs, Linear GEMMs, MaxPools and LSTM directions of float32 run on its C thread
pool instead of ``run_split`` (its slices need no GIL); ``LargeKernel`` still
decides how many ways each may use, so the two never oversubscribe the cores
together. ``run_split`` remains for the rest (other dtypes and ranks, batched
matmuls) and for a build without a C compiler.

A process that shares the machine with others (the web app's local Dask workers)
is told its share of the cores in ``SGLENS_CPU_SHARE`` and splits over that many.

The BLAS limit is process-wide (BLAS thread pools belong to the process), set
once per distinct value through ``threadpoolctl``; a user who set
``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS`` or ``MKL_NUM_THREADS`` keeps their
setting, and splitting is then off (their BLAS may already use every core).
"""

from __future__ import annotations

import os
import queue
import threading
import time
from typing import Any, Callable

import numpy as np
from threadpoolctl import ThreadpoolController

_USER_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
_lock = threading.Lock()
_applied: int | None = None
_controller: ThreadpoolController | None = None

#: Multiply-adds below which a kernel runs on its own thread. Waking a helper
#: costs tens of microseconds: the transformer's 8.4M-MAC projections (~120 us)
#: ran split at 0.8-0.95x of serial, its 33.5M-MAC FFN matmuls at 1.4-1.6x.
SPLIT_MIN_MACS = 16_000_000


def auto_threads(cpu_workers: int) -> int:
    """BLAS threads when the caller does not say: one (parallelism is ``run_split``'s)."""
    del cpu_workers  # kept for callers: the answer no longer depends on it
    return 1


def apply(threads: int | None, cpu_workers: int) -> int | None:
    """Set the process's BLAS threads: ``None`` = auto (1, unless the environment
    says), ``0`` = leave BLAS alone, ``n`` = n threads. Splitting large kernels
    over the cores is on exactly when BLAS runs one thread. Returns what was set."""
    global _applied, _controller, _split_on
    user_set = any(os.environ.get(v) for v in _USER_VARS)
    if threads == 0 or (threads is None and user_set and not os.environ.get(SHARE_VAR)):
        _split_on = False
        return None
    n = auto_threads(cpu_workers) if threads is None else int(threads)
    with _lock:
        if _applied != n:
            if _controller is None:
                _controller = ThreadpoolController()  # ~1 ms: scans the loaded libraries
            _controller.limit(limits=n, user_api="blas")
            _applied = n
    _split_on = n == 1 and _CORES > 1
    return n


def set_split(on: bool) -> bool:
    """Turn splitting of large kernels on or off for the process (``apply`` sets it
    again); returns the previous setting. ``bench/run.py --cpu`` measures our engine
    on one thread with it off, beside onnxruntime on one thread."""
    global _split_on
    previous, _split_on = _split_on, bool(on) and _CORES > 1
    return previous


# ------------------------------------------------------ intra-op splitting --
#: The cores this process may compute on, when several processes share a machine:
#: the web app's local Dask workers get ``cores // workers`` each. Dask's nanny also
#: sets ``OMP_NUM_THREADS=1`` etc. in its workers, which alone would turn splitting
#: off ("the user's BLAS setting"); with this variable set, the process splits its
#: large kernels over its share. Measured before: a browser run of ResNet-18 on the
#: one local worker ran every conv on one core.
SHARE_VAR = "SGLENS_CPU_SHARE"


def _cpu_share() -> int:
    cores = os.cpu_count() or 1
    try:
        share = int(os.environ.get(SHARE_VAR, "0"))
    except ValueError:
        share = 0
    return min(share, cores) if share > 0 else cores


_CORES = _cpu_share()
_split_on = False        # set by apply(): only with single-threaded BLAS
_running = 0             # threads computing a large kernel (guarded by _split_lock)
_split_lock = threading.Lock()
_jobs: "queue.SimpleQueue[_Job]" = queue.SimpleQueue()
_helpers: list[threading.Thread] = []


#: Splitting pays only if the helpers really run beside the caller. On a machine
#: whose cores other processes hold, a helper's slice waits for a time slice and
#: the caller waits for it: a 3 ms conv took 6.6 ms split (2 cores, 0% idle).
#: So each split job measures its parallelism (CPU seconds of its slices over
#: its wall time); when the running average falls below ``_MIN_GAIN`` large
#: kernels run serially for ``_BACKOFF`` seconds, then splitting is tried again
#: (load comes and goes; onnxruntime's pool alone spins ~30 ms after each run).
#: The back-off is long (``_BACKOFF``) only while the load average says the cores
#: are taken; otherwise a bad average is a virtual machine's hiccup (a vCPU
#: descheduled for a millisecond) and splitting resumes after ``_BACKOFF_IDLE``:
#: measured on an idle 2-vCPU machine, one warm LSTM job at a gain of 0.55 backed
#: off 0.1 s, ~35 runs of the BiLSTM tagger at 2.9 instead of 1.8 ms.
_MIN_GAIN = 1.25
_BACKOFF = 0.1
_BACKOFF_IDLE = 0.01
_MIN_JUDGED = 2e-4  # seconds: only jobs at least this long count towards the average
_gain = 2.0
_skip_until = 0.0
#: Counters for benchmarks (``split_stats``): large kernels run split / serially,
#: back-offs started.
_stats = {"split": 0, "serial": 0, "backoffs": 0}


def split_stats(reset: bool = False) -> dict[str, int]:
    """How many large kernels ran split, how many serially (alone but not split:
    backing off, or no core free), how many back-offs started; ``reset`` zeroes them."""
    with _split_lock:
        out = dict(_stats)
        if reset:
            for key in _stats:
                _stats[key] = 0
    return out


class _Job:
    """``fn(0) .. fn(n - 1)``: each slice run once, by whichever thread takes it."""

    __slots__ = ("fn", "n", "next", "pending", "error", "done", "cpu", "refused")

    def __init__(self, fn: Callable[[int], Any], n: int) -> None:
        self.fn, self.n, self.next, self.pending = fn, n, 0, n
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.cpu = 0.0
        self.refused = False  # a helper stood back: our own kernels held the cores

    def take(self, helper: bool) -> None:
        global _running
        while True:
            with _split_lock:
                i = self.next
                if i >= self.n:
                    return
                if helper and _running >= _CORES:
                    self.refused = True
                    return  # the cores are taken (another large kernel): the caller finishes
                self.next = i + 1
                _running += helper
            t0 = time.thread_time()
            try:
                self.fn(i)
            except BaseException as exc:  # noqa: BLE001 -- re-raised on the caller's thread
                if self.error is None:
                    self.error = exc
            spent = time.thread_time() - t0
            with _split_lock:
                _running -= helper
                self.cpu += spent
                self.pending -= 1
                last = self.pending == 0
            if last:
                self.done.set()


def _forget_helpers() -> None:
    """In a forked child the helper threads do not exist: start afresh, with an
    empty queue (jobs left in the old one would hold their arrays forever)."""
    global _jobs, _running
    _jobs = queue.SimpleQueue()
    _helpers.clear()
    _running = 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_helpers)


#: How long a helper spins for the next job before it blocks (``_helper_loop``).
SPIN_SECONDS = 0.002
#: Jobs posted so far, as an array the compiled spin reads without the GIL.
_posted = np.zeros(1, dtype=np.int64)
#: Helpers spinning right now (changed with the GIL held): a job posted while none
#: is spinning wakes a blocked helper, whose late start says nothing of the load.
_spinning = [0]


def _helper_loop() -> None:
    """Take jobs; between them spin up to ``SPIN_SECONDS`` (the GIL released, in
    compiled code) before blocking. Measured on this project's 2-vCPU machine: a
    helper that blocked was woken on a halted vCPU and started its slice 0.5-2 ms
    late, often after the caller had done both halves; the large kernels of one run
    come tens of microseconds apart, so a spinning helper is there for the next.
    Without the compiled module a helper blocks at once, as before."""
    from . import native  # here, not at import: native is loaded lazily
    jobs = _jobs
    while True:
        seen = int(_posted[0])
        try:
            job = jobs.get_nowait()
        except queue.Empty:
            _spinning[0] += 1
            try:
                posted = native.spin_wait(_posted, seen, SPIN_SECONDS)
            finally:
                _spinning[0] -= 1
            if posted:
                continue  # a job was posted: take it
            job = jobs.get()
        job.take(helper=True)


def _start_helpers(n: int) -> None:
    with _split_lock:
        while len(_helpers) < n:
            t = threading.Thread(target=_helper_loop, name=f"sglens-split-{len(_helpers)}",
                                 daemon=True)
            _helpers.append(t)
            t.start()


class LargeKernel:
    """``with LargeKernel(macs) as ways:`` counts the calling thread as computing
    a large kernel while inside; ``ways`` (1 = serial) is how many threads the
    kernel should cut its work for: the cores, when splitting is on, the work is
    at least ``SPLIT_MIN_MACS`` and a core is free."""

    __slots__ = ("macs", "ways")

    def __init__(self, macs: int) -> None:
        self.macs = macs
        self.ways = 1

    def __enter__(self) -> int:
        global _running
        with _split_lock:
            _running += 1
            if _split_on and self.macs >= SPLIT_MIN_MACS:
                if _running >= _CORES or (_skip_until and time.perf_counter() < _skip_until):
                    _stats["serial"] += 1
                else:
                    self.ways = _CORES
                    _stats["split"] += 1
        return self.ways

    def __exit__(self, *exc: object) -> None:
        global _running
        with _split_lock:
            _running -= 1


def run_split(fn: Callable[[int], Any], n: int, ways: int) -> None:
    """Run ``fn(i)`` for every ``i < n`` on this thread and up to ``ways - 1`` helpers;
    returns when all are done; the first exception of a slice is raised here."""
    if ways <= 1 or n <= 1:
        for i in range(n):
            fn(i)
        return
    _start_helpers(_CORES - 1)
    warm = _spinning[0] > 0
    job = _Job(fn, n)
    t0 = time.perf_counter()
    for _ in range(min(ways, n) - 1):
        _jobs.put(job)
    _posted[0] += 1  # after the puts: a spinning helper that sees it finds the job
    job.take(helper=False)
    job.done.wait()
    wall = time.perf_counter() - t0
    # A short job's wake-up noise says nothing about the load, nor does a job whose
    # helper stood back for another of our kernels (the engine's other worker).
    # Nor does a job that had to wake a blocked helper: after an idle spell (a pause,
    # or a back-off) its helper starts late on a halted vCPU, which judged that way
    # kept splitting backed off run after run (measured: gains of 0.27 right after
    # each back-off ended, on an idle 2-core machine).
    if warm and wall >= _MIN_JUDGED and not job.refused:
        _record_gain(job.cpu / wall)
    if job.error is not None:
        raise job.error


def _record_gain(gain: float) -> None:
    """Fold one job's parallelism into the running average; back off below the bar."""
    global _gain, _skip_until
    with _split_lock:
        _gain = 0.75 * _gain + 0.25 * gain
        if _gain < _MIN_GAIN:
            loaded = os.getloadavg()[0] >= _CORES if hasattr(os, "getloadavg") else True
            _skip_until = time.perf_counter() + (_BACKOFF if loaded else _BACKOFF_IDLE)
            _stats["backoffs"] += 1
            _gain = 1.6  # the next attempt starts afresh: three bad jobs back off again
