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

from .registry import register, to_host


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


def _gram_table(pool: list[Any], counts: list[int], lo: int, hi: int) -> tuple[dict, set]:
    """The pool's n-grams within [lo, hi] as gram -> id (ids count every pool gram, from 1),
    and the set of their prefixes (a walk stops as soon as it leaves them)."""
    grams: dict[tuple, int] = {}
    prefixes: set[tuple] = set()
    next_id = 1
    for size, start in enumerate(counts, start=1):
        end = counts[size] if size < len(counts) else len(pool)
        for at in range(start, end, size):
            gram = tuple(pool[at:at + size])
            if lo <= size <= hi:
                grams[gram] = next_id
                prefixes.update(gram[:k] for k in range(1, size + 1))
            next_id += 1
    return grams, prefixes


@register("TfIdfVectorizer", since=9)
def tfidf_vectorizer(xp: Any, x: Any, *, max_gram_length: int, max_skip_count: int, min_gram_length: int,
                     mode: str, ngram_counts: list[int], ngram_indexes: list[int],
                     pool_int64s: list[int] | None = None, pool_strings: list[str] | None = None,
                     weights: list[float] | None = None) -> Any:
    """Counts of the pool's n-grams (with up to ``max_skip_count`` skipped items between
    neighbours) in each row, weighted TF / IDF / TFIDF. Host code: n-gram matching is a
    dictionary walk, and string input lives on the host anyway."""
    host = _strings(x) if pool_strings is not None else to_host(xp, x)
    pool = list(pool_strings) if pool_strings is not None else [int(v) for v in pool_int64s or []]
    grams, prefixes = _gram_table(pool, list(ngram_counts), min_gram_length, max_gram_length)
    rows = host.reshape(1, -1) if host.ndim < 2 else host
    size = max(ngram_indexes) + 1
    freq = np.zeros((rows.shape[0], size), dtype=np.float32)
    for r, row in enumerate(rows):
        items = [v if pool_strings is not None else int(v) for v in row]
        _count_row(items, grams, prefixes, ngram_indexes, freq[r], min_gram_length, max_gram_length,
                   max_skip_count)
    w = np.asarray(weights, dtype=np.float32) if weights else None
    if mode == "IDF":
        freq = np.where(freq > 0, w if w is not None else 1.0, 0.0).astype(np.float32)
    elif mode == "TFIDF" and w is not None:
        freq = freq * w
    out = freq if host.ndim == 2 else freq[0]
    return xp.asarray(out)


def _count_row(items: list[Any], grams: dict, prefixes: set, indexes: list[int], freq: np.ndarray,
               lo: int, hi: int, max_skip: int) -> None:
    first = lo
    for skip in range(1, max_skip + 2):
        for start in range(len(items)):
            if start + skip * (first - 1) >= len(items):
                break
            gram: tuple = ()
            for at in range(start, len(items), skip):
                if len(gram) >= hi:
                    break
                gram = gram + (items[at],)
                if gram not in prefixes:
                    break
                if len(gram) >= first and gram in grams:
                    freq[indexes[grams[gram] - 1]] += 1
        if first == 1:  # unigrams do not depend on the skip: count them once
            first = 2
            if first > hi:
                break
