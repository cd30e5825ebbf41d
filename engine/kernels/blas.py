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
  the web app's local Dask workers) less the cores other processes keep busy
  (``free_cores``: the machine's busy time less this process's, over one window), at
  least one.
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


#: A window longer than this says little of the machine now: the load average decides.
_RECENT_S = 60.0


def machine_busy_seconds() -> float | None:
    """CPU seconds the machine's cores have been busy since boot, over all processes
    (``/proc/stat``'s first line less idle and iowait; steal counts as busy: the hypervisor
    gave the core to someone else), or None where there is no ``/proc/stat``."""
    try:
        with open("/proc/stat", "rb") as f:
            ticks = [int(t) for t in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    if len(ticks) < 8:
        return None
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


#: When ``_rates`` last looked: (monotonic seconds, this process's CPU seconds, the
#: machine's busy seconds or None), and the rates it found then: (this process's cores,
#: other processes' cores or None).
_sample: list = [time.monotonic(), time.process_time(), machine_busy_seconds(), 1.0, None]


def _rates() -> tuple[float, float | None]:
    """The cores this process, and the machine's other processes, kept busy since the last
    look (at least half a second before; else the rates found then). The others' are the
    machine's busy time less this process's over the same window; None off Linux or when
    the window is older than ``_RECENT_S``."""
    now, cpu = time.monotonic(), time.process_time()
    with _lock:
        then, cpu_then, busy_then, own, others = _sample
        span = now - then
        if span >= 0.5:   # (/proc/stat read only for a window that counts)
            busy = machine_busy_seconds()
            own = (cpu - cpu_then) / span
            others = None if busy is None or busy_then is None or span > _RECENT_S else \
                max(0.0, (busy - busy_then) - (cpu - cpu_then)) / span
            _sample[:] = [now, cpu, busy, own, others]
    return own, others


def free_cores() -> int:
    """This process's cores less what other processes keep busy, at least 1.

    What others keep busy is measured, where Linux says it, over the same window as this
    process's own CPU time: the machine's busy time less this process's (its BLAS threads
    and an onnxruntime pool beside it are its own). The load average less this process's
    rate, used before (and still off Linux, or after a long idle), compared a one-minute
    average with a rate over the last window: right after this process's own busy
    stretch the average still held it, so a benchmark gave BLAS one thread of an idle
    2-core machine at random -- ResNet-18 ran 56 ms, its CPU time 55 (one thread), where
    38.7 with two (``bench/real_engine.py``, the whole benchmark against that model alone)."""
    share = cpu_share()
    own, others = _rates()
    if others is None:
        try:
            load = os.getloadavg()[0]
        except (AttributeError, OSError):  # pragma: no cover -- not Unix
            return share
        others = max(0.0, load - max(1.0, own))
    idle = (os.cpu_count() or share) - others
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
