"""String ops (StringConcat, StringSplit, StringNormalizer, RegexFullMatch) and the small
ai.onnx.ml helpers that work on them.

Strings never live on a GPU: ONNX string tensors are numpy object arrays on the host in
both the numpy and the cupy path (the interpreter and executor keep them there), so these
kernels use numpy directly and document it rather than pretending to be ``xp`` code.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

import numpy as np

from .registry import register


def _strings(x: Any) -> np.ndarray:
    # Object arrays of python str (bytes decoded): the representation ONNX's runtime uses.
    arr = np.asarray(x, dtype=object)
    return np.vectorize(lambda s: s.decode() if isinstance(s, bytes) else str(s), otypes=[object])(arr) \
        if arr.size else arr


@register("StringConcat", since=20)
def string_concat(xp: Any, x: Any, y: Any) -> np.ndarray:
    a, b = np.broadcast_arrays(_strings(x), _strings(y))
    out = np.empty(a.shape, dtype=object)
    for idx in np.ndindex(a.shape):
        out[idx] = a[idx] + b[idx]
    return out


@register("RegexFullMatch", since=20)
def regex_full_match(xp: Any, x: Any, *, pattern: str = "") -> np.ndarray:
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"RegexFullMatch: pattern {pattern!r} does not compile: {exc}") from None
    s = _strings(x)
    out = np.zeros(s.shape, dtype=np.bool_)
    for idx in np.ndindex(s.shape):
        out[idx] = compiled.fullmatch(s[idx]) is not None
    return out


@register("StringSplit", since=20)
def string_split(xp: Any, x: Any, *, delimiter: str | None = None, maxsplit: int | None = None) -> tuple:
    s = _strings(x)
    sep = delimiter or None  # "" means: split on runs of whitespace, as with no delimiter
    limit = -1 if maxsplit is None else int(maxsplit)
    parts = {idx: s[idx].split(sep, limit) for idx in np.ndindex(s.shape)}
    width = max((len(p) for p in parts.values()), default=0)
    out = np.full(s.shape + (width,), "", dtype=object)
    counts = np.zeros(s.shape, dtype=np.int64)
    for idx, p in parts.items():
        counts[idx] = len(p)
        out[idx][:len(p)] = p
    return out, counts


@register("StringNormalizer", since=10)
def string_normalizer(xp: Any, x: Any, *, case_change_action: str = "NONE", is_case_sensitive: int = 0,
                      locale: str = "", stopwords: list[str] | None = None) -> np.ndarray:
    s = _strings(x)
    if s.ndim not in (1, 2) or (s.ndim == 2 and s.shape[0] != 1):
        raise ValueError(f"StringNormalizer takes a [C] or [1, C] tensor, got shape {s.shape}")
    stops = set(stopwords or [])
    fold = (lambda w: w) if is_case_sensitive else (lambda w: w.lower())
    stops = {fold(w) for w in stops}
    change = {"LOWER": str.lower, "UPPER": str.upper}.get(case_change_action, lambda w: w)
    kept = [change(unicodedata.normalize("NFC", w)) for w in s.reshape(-1) if fold(w) not in stops]
    kept = kept or [""]
    out = np.array(kept, dtype=object)
    return out.reshape(1, -1) if s.ndim == 2 else out
