"""The engine's only contact with CUDA: cupy, imported lazily.

Written against cupy's documented API (``cupy.cuda.Stream``, ``cupy.cuda.Event``,
``Stream.wait_event``, ``Event.record``, ``Event.synchronize``,
``cupy.cuda.get_elapsed_time``, ``cupy.cuda.runtime.getDeviceCount``).  Nothing
here runs on a machine without cupy: ``Context.gpu`` refuses first.

GPU completion follows the later MXNet design (apache/mxnet#18951): a GPU
function is *complete* for the engine as soon as its kernels are enqueued and an
event is recorded after them; a consumer on another stream makes its stream wait
on that event (no host sync), and a CPU consumer synchronises on the event.
"""

from __future__ import annotations

import importlib
import threading
from types import ModuleType
from typing import Any, Mapping

from .errors import NoGPUError

_lock = threading.Lock()
_cupy: ModuleType | None = None
_probed = False


def import_cupy() -> ModuleType | None:
    """cupy, or None where it is not installed (imported once, on first use)."""
    global _cupy, _probed
    with _lock:
        if not _probed:
            try:
                _cupy = importlib.import_module("cupy")
            except Exception:  # ImportError, or a cupy built for a missing CUDA
                _cupy = None
            _probed = True
    return _cupy


def device_count() -> int:
    """Number of visible CUDA devices; 0 without cupy or without a driver."""
    cp = import_cupy()
    if cp is None:
        return 0
    try:
        return int(cp.cuda.runtime.getDeviceCount())
    except Exception:  # no driver, no device: cupy raises CUDARuntimeError
        return 0


def require_gpu(device_id: int) -> ModuleType:
    """cupy, after checking that GPU ``device_id`` exists; NoGPUError if not."""
    cp = import_cupy()
    if cp is None:
        raise NoGPUError(
            f"Context.gpu({device_id}): cupy is not installed, so no GPU can be "
            "used; install cupy for your CUDA version or choose the device cpu (--device cpu)")
    n = device_count()
    if device_id >= n:
        raise NoGPUError(
            f"Context.gpu({device_id}): {n} CUDA device(s) found; use a device "
            "id below that, or choose the device cpu (--device cpu)")
    return cp


def new_stream(device_id: int) -> Any:
    """A fresh non-blocking stream on ``device_id``, made current's device."""
    cp = require_gpu(device_id)
    cp.cuda.Device(device_id).use()
    return cp.cuda.Stream(non_blocking=True)


def record_event(stream: Any, timing: bool = False) -> Any:
    """An event recorded on ``stream`` now (after what is enqueued so far)."""
    cp = import_cupy()
    assert cp is not None  # only reached on a GPU worker
    event = cp.cuda.Event(disable_timing=not timing)
    event.record(stream)
    return event


def elapsed_ms(start: Any, end: Any) -> float:
    """Device milliseconds between two timing events (waits for ``end`` unless it is done)."""
    cp = import_cupy()
    assert cp is not None
    if not getattr(end, "done", False):  # cupy's Event.done: a query, no wait
        end.synchronize()
    return float(cp.cuda.get_elapsed_time(start, end))


def elapsed_seconds(spans: Mapping[str, tuple[Any, Any]]) -> dict[str, float]:
    """Device seconds of each (start, end) event pair, read after a run. Resolved last
    recorded first: one wait for a stream's latest event completes every earlier one on
    it, so the host blocks once per stream, not once per node."""
    found = {name: elapsed_ms(a, b) / 1e3 for name, (a, b) in reversed(list(spans.items()))}
    return {name: found[name] for name in spans}
