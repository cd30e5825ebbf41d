"""Peak resident memory of this process during a block of work.

Our executor counts the bytes of live tensors it holds; onnxruntime keeps its own
arenas that we cannot see, so "peak bytes" of a partitioned run whose subgraphs
ran in onnxruntime looked ten times smaller than it was. To compare runs fairly
every run is also measured the same way, from outside: the process's resident-set
high-water mark (``VmHWM`` in ``/proc/self/status``), reset before the run by
writing ``5`` to ``/proc/self/clear_refs`` (Linux >= 4.0). What it includes is
everything the process touched during the run: our tensors, onnxruntime's arenas,
Python objects, weights loaded for the run. Work done by other threads of the same
process at the same time counts too, which is why runs execute one at a time in
their own worker process (see docs/running.md).

Where the reset is not possible the figure is the process's high-water mark since
it started, and ``resettable`` says so.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass
from typing import Any

_STATUS = "/proc/self/status"
_CLEAR_REFS = "/proc/self/clear_refs"


def _status_kib(field: str) -> int | None:
    try:
        with open(_STATUS) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_high_water_mark() -> bool:
    try:
        with open(_CLEAR_REFS, "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


@dataclass
class PeakRSS:
    """``with PeakRSS() as m: work()`` then ``m.peak_bytes`` / ``m.added_bytes``."""

    start_bytes: int = 0
    peak_bytes: int = 0
    resettable: bool = False

    @property
    def added_bytes(self) -> int:
        """How far the peak rose above the resident size at the start."""
        return max(0, self.peak_bytes - self.start_bytes)

    def __enter__(self) -> "PeakRSS":
        self.resettable = _reset_high_water_mark()
        self.start_bytes = (_status_kib("VmRSS") or 0) * 1024
        return self

    def __exit__(self, *exc: Any) -> None:
        hwm = _status_kib("VmHWM")
        if hwm is None:  # not Linux: ru_maxrss is KiB on Linux, bytes on macOS; never reset
            self.resettable = False
            hwm = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        self.peak_bytes = hwm * 1024

    def to_json(self) -> dict[str, Any]:
        return {"rss_peak_bytes": self.peak_bytes, "rss_added_bytes": self.added_bytes,
                "rss_resettable": self.resettable}
