"""Value helpers and run records shared by the executor and the subgraph operators.

They live here, below both, so ``engine/executor.py`` and
``engine/subgraph_ops.py`` import them without importing each other (the
executor binds subgraph operators; the operators only need these helpers).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


def to_numpy(value: Any) -> np.ndarray:
    """A host copy of a numpy or cupy array; of a sequence (a list), element by element; of a
    map (a dict: ZipMap's elements), value by value; an absent optional (None) stays None."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, list):
        return [to_numpy(v) for v in value]  # type: ignore[return-value]
    if isinstance(value, dict):   # (its own .get is not cupy's: onnxruntime's logreg_iris crashed here)
        return {k: to_numpy(v) for k, v in value.items()}  # type: ignore[return-value]
    if value is None:
        return None  # type: ignore[return-value]
    get = getattr(value, "get", None)  # cupy.ndarray.get() copies to the host
    return np.asarray(get() if callable(get) else value)


def map_keys(m: Any) -> list:
    """A map's keys in their order (ONNX gives a map one key type, an integer or a string): the
    order its values are compared, printed and saved in."""
    return sorted(m)


def nbytes(value: Any) -> int:
    return int(getattr(value, "nbytes", 0) or 0)


def shape_of(value: Any) -> tuple[int, ...] | None:
    shape = getattr(value, "shape", None)
    return None if shape is None else tuple(int(d) for d in shape)


@dataclass
class SubgraphRecord:
    """How one subgraph node ran: the executor that *actually* ran it, and why."""

    node: str
    subgraph_id: Any
    property: str
    requested: str
    executor: str
    reason: str
    seconds: float = 0.0
    peak_bytes: int = 0
    boundary_bytes: int = 0
    weights_rebuilt: bool = False
    device_seconds: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data = {"node": self.node, "subgraph_id": self.subgraph_id, "property": self.property,
                "requested": self.requested, "executor": self.executor, "reason": self.reason,
                "seconds": self.seconds, "peak_bytes": self.peak_bytes,
                "boundary_bytes": self.boundary_bytes, "weights_rebuilt": self.weights_rebuilt,
                "device_seconds": self.device_seconds}
        data.update(self.extra)
        return data
