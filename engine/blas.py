"""BLAS threads per engine worker (``ExecOptions.blas_threads``).

OpenBLAS starts as many threads as there are cores for every matmul. With the
threaded engine running one matmul per CPU worker, that is workers x cores
threads on cores CPUs; OpenBLAS's threads spin while they wait, so on a busy
machine a 1x1 conv measured 16 ms instead of 0.16 ms (2 cores, load 4). As
MXNet does with OpenMP, each worker gets ``cores // workers`` BLAS threads
(at least 1). BLAS thread pools belong to the process, so the limit is set
for the process, once per distinct value, through ``threadpoolctl``; a user
who set ``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS`` or ``MKL_NUM_THREADS``
keeps their setting.

Tried and rejected (issue 13): every core for BLAS when a run executes as one
function (nothing runs beside it). On this 2-vCPU machine, shared and with
onnxruntime's spinning threads alternating with OpenBLAS's, ResNet-18 went
from 81 to 355 ms and the LSTM tagger from 8.9 to 16 ms (`bench/run.py
--blas-threads 2` against the default 1): OpenBLAS's threads busy-wait
between calls, and small matmuls gain nothing from a second thread.
"""

from __future__ import annotations

import os
import threading

from threadpoolctl import ThreadpoolController

_USER_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
_lock = threading.Lock()
_applied: int | None = None
_controller: ThreadpoolController | None = None


def auto_threads(cpu_workers: int) -> int:
    return max(1, (os.cpu_count() or 1) // max(1, cpu_workers))


def apply(threads: int | None, cpu_workers: int) -> int | None:
    """Set the process's BLAS threads: ``None`` = auto (unless the environment
    says), ``0`` = leave BLAS alone, ``n`` = n threads. Returns what was set."""
    global _applied, _controller
    if threads == 0 or (threads is None and any(os.environ.get(v) for v in _USER_VARS)):
        return None
    n = auto_threads(cpu_workers) if threads is None else int(threads)
    with _lock:
        if _applied != n:
            if _controller is None:
                _controller = ThreadpoolController()  # ~1 ms: scans the loaded libraries
            _controller.limit(limits=n, user_api="blas")
            _applied = n
    return n

