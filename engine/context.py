"""Where a function runs (``Context``) and what it gets at run time (``RunContext``).

As in the dependency-engine design: ``Context`` is chosen at push time (device type and id);
``RunContext`` is decided by the engine when the function runs (the stream).
"""

from __future__ import annotations

import enum
from typing import Any

from . import gpu


class FnProperty(enum.IntEnum):
    """The dependency-engine design's ``FnProperty``: chooses the worker pool a function runs on."""

    NORMAL = 0
    COPY_FROM_GPU = 1       # GPU copy pool (own stream), so copies overlap compute
    COPY_TO_GPU = 2
    CPU_PRIORITIZED = 3     # its own CPU pool: never queued behind NORMAL work
    ASYNC = 4               # runs like NORMAL; marks a function meant for push_async
    DELETE_VAR = 5          # runs even when its variable holds an error (cleanup)
    GPU_PRIORITIZED = 6     # its own GPU pool per device
    NO_SKIP = 7             # runs even when an input holds an error


class Context:
    """A device: ``Context.cpu(i)`` or ``Context.gpu(i)``. Immutable, hashable."""

    __slots__ = ("device_type", "device_id")
    device_type: str
    device_id: int

    def __init__(self, device_type: str, device_id: int = 0) -> None:
        if device_type not in ("cpu", "gpu"):
            raise ValueError(f"Context device_type must be 'cpu' or 'gpu', not {device_type!r}")
        object.__setattr__(self, "device_type", device_type)
        object.__setattr__(self, "device_id", int(device_id))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Context is immutable")

    @classmethod
    def cpu(cls, device_id: int = 0) -> "Context":
        return cls("cpu", device_id)

    @classmethod
    def gpu(cls, device_id: int = 0) -> "Context":
        """GPU ``device_id``; raises NoGPUError where cupy or the device is missing."""
        gpu.require_gpu(device_id)
        return cls("gpu", device_id)

    @property
    def is_gpu(self) -> bool:
        return self.device_type == "gpu"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Context) and other.device_type == self.device_type
                and other.device_id == self.device_id)

    def __hash__(self) -> int:
        return hash((self.device_type, self.device_id))

    def __repr__(self) -> str:
        return f"{self.device_type}({self.device_id})"


class RunContext:
    """What a running function receives: its ``ctx`` and its ``stream``.

    ``stream`` is the worker's ``cupy.cuda.Stream`` on GPU (already current while
    the function runs), ``None`` on CPU.
    """

    __slots__ = ("ctx", "stream", "last_event")

    def __init__(self, ctx: Context, stream: Any = None) -> None:
        self.ctx = ctx
        self.stream = stream
        self.last_event: Any = None   # GPU: the end event of the last node timed in this function

    def __repr__(self) -> str:
        return f"RunContext(ctx={self.ctx!r}, stream={self.stream!r})"
