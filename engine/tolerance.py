"""How two tensors are judged equal: elementwise tolerance, as Polygraphy does.

A value matches when every element satisfies ``|ours - ref| <= atol + rtol * |ref|``
(numpy's ``allclose`` rule, and Polygraphy's ``--atol/--rtol``). An earlier version
judged by ``max|ours - ref| / max|ref|`` over the whole tensor; that looked honest
but said "outputs differ" for an output whose largest value was 1e-9 and whose
error was 2e-9, because the ratio of two tiny numbers is large. The elementwise
rule with an absolute floor does not have that failure.

Alongside the verdict we report what a person needs to judge it themselves:
max absolute error, max elementwise relative error, mean absolute error and the
cosine similarity of the two tensors flattened. The relative error is taken only
over elements whose reference is well above the absolute floor (``|ref| >
REL_FLOOR_FACTOR * atol``): next to zero the ratio is a quotient of two rounding
errors (a 1e-9 error on a 1e-32 reference reads 1e+23) and says nothing.

A match is only as strong as the reference is large: where most of the reference
is at or below ``atol``, almost any answer near zero passes. ``ref_below_atol``
(the fraction of such elements) and ``weak`` (that fraction is at least
``WEAK_FRACTION``) say so, so the verdict can warn instead of claiming a match
that proves little.

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
#: Defaults for a model that computes in float16 (``engine/float16.py``): 11 significant bits,
#: and two correct runs round at different places -- onnxruntime's CPU provider runs some ops
#: in float16 and the others in float32, we run all in float32 between the model's casts. On
#: float16 conversions of BERT, ViT and ResNet-18 our difference from onnxruntime was the size
#: of onnxruntime's own float16-vs-float32 difference (2.9e-3 to 7.3e-3): a float32 model's
#: bounds called every one of them different.
FLOAT16_ATOL = 1e-3
FLOAT16_RTOL = 1e-2
#: The relative error is reported over elements with |ref| above this many atol: there the
#: absolute floor is at most a tenth of the bound, so the ratio measures the error, not the floor.
REL_FLOOR_FACTOR = 10.0
#: A match is "weak" when at least this fraction of the reference is at or below atol. A
#: ReLU output is often half zeros, so the bar is high: 90% means the check saw little signal.
WEAK_FRACTION = 0.9


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


#: A difference at most this fraction of a tensor's largest value is float32 rounding (amplified
#: where values cancel: a conv's terms of +-90 summing to near zero differ by 2e-4 between two
#: correct summation orders, out of tolerance there).
ROUNDING_SCALE = 1e-5


def within_rounding(e: dict[str, Any], dtype: Any = None) -> bool:
    """Whether a ``compare_arrays`` result matches, or differs by rounding only: float32's
    (``ROUNDING_SCALE`` of the largest value), or for a ``dtype`` narrower than float32 (a float16
    model's tensors, which onnxruntime computes in float16 where we compute in float32) two units
    of its last place of the largest value (float16: 2e-3; its convs and BatchNormalizations
    differ by 3e-4 to 7e-4 of their largest value between two correct runs, PP-OCR converted)."""
    scale = ROUNDING_SCALE
    if dtype is not None and np.dtype(dtype).kind == "f" and np.dtype(dtype).itemsize < 4:
        scale = max(scale, 2 * float(np.finfo(dtype).eps))
    return e["match"] or (e.get("max_abs") is not None and
                          e["max_abs"] <= scale * float(e.get("ref_max_abs") or 0.0))


def default_tolerance(float16: bool) -> Tolerance:
    """The match rule when the user sets none: float32's, or float16's for a model computing in it."""
    return Tolerance(FLOAT16_ATOL, FLOAT16_RTOL) if float16 else Tolerance()


def compare_arrays(a: np.ndarray, b: np.ndarray, tol: Tolerance = Tolerance()) -> dict[str, Any]:
    """Metrics and verdict of ``a`` (ours) against ``b`` (the reference), both numpy arrays."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return {"shape": list(a.shape), "ref_shape": list(b.shape), "max_abs": None, "max_rel": None,
                "mean_abs": None, "cosine": None, "mismatched": None, "match": False,
                "note": "shapes differ"}
    if a.size == 0:
        return {"shape": list(a.shape), "max_abs": 0.0, "max_rel": 0.0, "mean_abs": 0.0,
                "cosine": 1.0, "mismatched": 0, "match": True, "ref_below_atol": 0.0, "weak": False}
    if a.dtype.kind in "USO" or b.dtype.kind in "USO":   # strings (a label, a token): equal or not
        same = np.asarray(a == b, dtype=bool)
        mismatched = int(same.size - np.count_nonzero(same))
        return {"shape": list(a.shape), "max_abs": None, "max_rel": None, "mean_abs": None,
                "cosine": None, "mismatched": mismatched, "match": mismatched == 0,
                "note": "strings: compared for equality"}
    exact = a.dtype.kind in "biu" and b.dtype.kind in "biu"
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    both_nan = np.isnan(a64) & np.isnan(b64)
    same_inf = np.isinf(a64) & (a64 == b64)
    diff = np.where(both_nan | same_inf, 0.0, np.abs(a64 - b64))
    diff = np.where(np.isnan(diff), np.inf, diff)  # NaN on one side only is a full mismatch
    magnitude = np.where(np.isfinite(b64), np.abs(b64), 0.0)
    bound = 0.0 if exact else tol.atol + tol.rtol * magnitude
    bad = diff > bound
    out = {"shape": list(a.shape), "max_abs": float(diff.max()), "mean_abs": float(diff.mean()),
           "cosine": _cosine(a64, b64), "mismatched": int(bad.sum()), "match": not bool(bad.any()),
           "ref_max_abs": float(magnitude.max())}
    return out | _relative(diff, magnitude, 0.0 if exact else tol.atol)


def _relative(diff: np.ndarray, magnitude: np.ndarray, atol: float) -> dict[str, Any]:
    """Max relative error over the elements where it means something, and how much of the
    reference is at or below ``atol`` (the part a match checks only loosely)."""
    significant = magnitude > REL_FLOOR_FACTOR * atol if atol > 0 else magnitude > _TINY
    below = float(np.mean(magnitude <= atol)) if atol > 0 else 0.0
    out: dict[str, Any] = {"ref_below_atol": below, "weak": below >= WEAK_FRACTION,
                           "rel_elements": int(significant.sum())}
    if not significant.any():
        out["max_rel"] = None
        out["rel_note"] = (f"no element has |ref| > {REL_FLOOR_FACTOR * atol:g} ({REL_FLOOR_FACTOR:g}·atol): "
                           "a relative error would divide by near-zero values")
        return out
    rel = np.where(diff[significant] == 0.0, 0.0, diff[significant] / magnitude[significant])
    out["max_rel"] = float(rel.max())
    if significant.sum() < magnitude.size:
        out["rel_note"] = (f"max rel over the {int(significant.sum())} of {magnitude.size} elements with "
                           f"|ref| > {REL_FLOOR_FACTOR * atol:g}; near zero the ratio means nothing")
    return out


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
