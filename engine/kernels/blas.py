"""Who computes on the cores: BLAS's own threads, and nothing else of ours that persists.

The parallelism inside one kernel is the process's BLAS (numpy's OpenBLAS): MatMul,
Gemm and every Conv's GEMM (after ``_native_conv.c``'s im2col) are one numpy call
that BLAS spreads over its threads. The compiled kernels run on their caller's
thread (a bidirectional recurrence walks its directions one after the other:
two threads measured no faster, ``docs/kernels.md``). There is no pool of ours and no spinning between kernels: before, two
hand-written pools (Python helpers here, C threads in ``_native_pool.c``) spun
beside BLAS, which was clamped to one thread; ``docs/kernels.md`` has the figures.

How many threads BLAS gets is ``apply``'s one decision, taken when an ``Executor``
is built, and only from what the machine says:

- ``None`` (the default): the cores nobody else is using -- this process's cores
  (its share of the machine, ``SGLENS_CPU_SHARE``, when several processes share it:
  the web app's local Dask workers) less the load other processes put on the machine
  (the load average less this process's own part, ``free_cores``), at least one.
  A BLAS call waits for its slowest thread, and on a machine loaded past its cores
  a thread that lost its core holds up the whole call: MobileNetV2 on a 2-core
  machine at load 14 ran 1912 ms with BLAS on both cores and 370 ms on one
  (onnxruntime 115-150 ms; ``bench/cores.py``). On an idle machine this is every
  core, BLAS's own default, so nothing changes for the process's other numpy callers.
  A user's ``OMP_NUM_THREADS`` / ``OPENBLAS_NUM_THREADS`` / ``MKL_NUM_THREADS`` is
  kept (Dask's nanny's ``1`` is not a user's: its workers have a share);
- ``0``: leave BLAS alone;
- ``n``: BLAS gets ``n`` threads.

BLAS thread pools belong to the process (``threadpoolctl`` sets them), so the number
holds for every numpy caller in it until the next ``apply`` that changes it.
"""

from __future__ import annotations

import os
import threading
import time

from threadpoolctl import ThreadpoolController

#: The cores a process may compute on when several share a machine: the web app's
#: local Dask workers get ``cores // workers`` each (``app/dask_runs.py``).
SHARE_VAR = "SGLENS_CPU_SHARE"

_lock = threading.Lock()
_applied: int | None = None
_controller: ThreadpoolController | None = None


def cpu_share() -> int:
    """The cores this process computes on: its share when it has one, else all it may use."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover -- not Linux
        cores = os.cpu_count() or 1
    try:
        share = int(os.environ.get(SHARE_VAR, "0"))
    except ValueError:
        share = 0
    return min(share, cores) if share > 0 else cores


_USER_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


#: (monotonic seconds, this process's CPU seconds) when ``own_cpu_rate`` last looked,
#: and the rate it found then.
_own_sample: list[float] = [time.monotonic(), time.process_time(), 1.0]


def own_cpu_rate() -> float:
    """The cores this process kept busy since ``free_cores`` last looked (at least half a
    second before; else the rate found then): its own share of the load average."""
    now, cpu = time.monotonic(), time.process_time()
    with _lock:
        then, cpu_then, rate = _own_sample
        if now - then >= 0.5:
            rate = (cpu - cpu_then) / (now - then)
            _own_sample[:] = [now, cpu, rate]
    return rate


def free_cores() -> int:
    """This process's cores less what other processes' threads want of them: the load
    average less this process's own part of it (at least the caller's running thread;
    more when its own BLAS threads or an onnxruntime pool beside it kept cores busy --
    counting those as others' once made a busy benchmark or server shrink BLAS to one
    thread by its own load: Whisper 900 ms instead of 620), at least 1."""
    share = cpu_share()
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # pragma: no cover -- not Unix
        return share
    machine = os.cpu_count() or share
    others = max(0.0, load - max(1.0, own_cpu_rate()))
    idle = machine - others
    return max(1, min(share, round(idle)))  # a core mostly free is worth a thread


def apply(threads: int | None, cpu_workers: int = 1) -> int | None:
    """Set the process's BLAS threads as the module docstring says; returns the number
    set, or None when BLAS was left as it is."""
    del cpu_workers  # BLAS's threads serve every engine worker's calls alike
    if threads == 0:
        return None
    if threads is None:
        if any(os.environ.get(v) for v in _USER_VARS) and not os.environ.get(SHARE_VAR):
            return None  # the user's setting
        threads = free_cores()
    n = max(1, int(threads))
    global _applied, _controller
    with _lock:
        if _applied != n:
            if _controller is None:
                _controller = ThreadpoolController()  # ~1 ms: scans the loaded libraries
            _controller.limit(limits=n, user_api="blas")
            _applied = n
    return n
