"""How two tensors are judged equal: elementwise tolerance, as Polygraphy does.

A value matches when every element satisfies ``|ours - ref| <= atol + rtol * |ref|``
(numpy's ``allclose`` rule, and Polygraphy's ``--atol/--rtol``). An earlier version
judged by ``max|ours - ref| / max|ref|`` over the whole tensor; that looked honest
but said "outputs differ" for an output whose largest value was 1e-9 and whose
error was 2e-9, because the ratio of two tiny numbers is large. The elementwise
rule with an absolute floor does not have that failure.

Alongside the verdict we report what a person needs to judge it themselves:
max absolute error, max elementwise relative error (it may be huge near zero:
that is why it is reported, not used), mean absolute error and the cosine
similarity of the two tensors flattened.

Integers and booleans match only exactly. NaN matches NaN in the same place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

#: Defaults: float32 arithmetic in a different order (our kernels vs onnxruntime's)
#: differs by a few ulps per op and accumulates over deep models; 1e-3 relative with
#: a 1e-4 absolute floor keeps that noise a match while a real bug (a wrong constant,
#: a transposed weight) is orders of magnitude above it.
DEFAULT_ATOL = 1e-4
DEFAULT_RTOL = 1e-3
_TINY = 1e-30


@dataclass(frozen=True)
class Tolerance:
    atol: float = DEFAULT_ATOL
    rtol: float = DEFAULT_RTOL

    def __post_init__(self) -> None:
        for name in ("atol", "rtol"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and np.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")

    def to_json(self) -> dict[str, float]:
        return {"atol": float(self.atol), "rtol": float(self.rtol)}

    def describe(self) -> str:
        return f"|ours - ref| <= {self.atol:g} + {self.rtol:g} * |ref| for every element"


def compare_arrays(a: np.ndarray, b: np.ndarray, tol: Tolerance = Tolerance()) -> dict[str, Any]:
    """Metrics and verdict of ``a`` (ours) against ``b`` (the reference), both numpy arrays."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return {"shape": list(a.shape), "ref_shape": list(b.shape), "max_abs": None, "max_rel": None,
                "mean_abs": None, "cosine": None, "mismatched": None, "match": False,
                "note": "shapes differ"}
    if a.size == 0:
        return {"shape": list(a.shape), "max_abs": 0.0, "max_rel": 0.0, "mean_abs": 0.0,
                "cosine": 1.0, "mismatched": 0, "match": True}
    exact = a.dtype.kind in "biu" and b.dtype.kind in "biu"
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    both_nan = np.isnan(a64) & np.isnan(b64)
    same_inf = np.isinf(a64) & (a64 == b64)
    diff = np.where(both_nan | same_inf, 0.0, np.abs(a64 - b64))
    diff = np.where(np.isnan(diff), np.inf, diff)  # NaN on one side only is a full mismatch
    bound = 0.0 if exact else tol.atol + tol.rtol * np.where(np.isfinite(b64), np.abs(b64), 0.0)
    bad = diff > bound
    rel = diff / np.maximum(np.abs(np.where(np.isfinite(b64), b64, 0.0)), _TINY)
    rel = np.where(diff == 0.0, 0.0, rel)
    return {"shape": list(a.shape), "max_abs": float(diff.max()), "max_rel": float(rel.max()),
            "mean_abs": float(diff.mean()), "cosine": _cosine(a64, b64),
            "mismatched": int(bad.sum()), "match": not bool(bad.any())}


def _cosine(a: np.ndarray, b: np.ndarray) -> float | None:
    """Cosine similarity of the flattened tensors (1.0 when both are all zeros)."""
    finite = np.isfinite(a) & np.isfinite(b)
    if not finite.any():
        return None
    x, y = a[finite].ravel(), b[finite].ravel()
    nx, ny = float(np.linalg.norm(x)), float(np.linalg.norm(y))
    if nx == 0.0 and ny == 0.0:
        return 1.0
    if nx == 0.0 or ny == 0.0:
        return 0.0
    return float(np.dot(x, y) / (nx * ny))
