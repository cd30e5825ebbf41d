"""A few ai.onnx.ml ops: Binarizer, ArrayFeatureExtractor, Scaler, ZipMap, LabelEncoder,
TreeEnsemble.

Binarizer, ArrayFeatureExtractor and Scaler are plain ``xp`` code. ZipMap makes ONNX's
sequence of maps (a list of dicts, as onnxruntime hands it out) on the host: skl2onnx ends
every classifier with one, and Scaler starts most pipelines (each was an onnxruntime
session of its own, ~20-40 us a run, on skl2onnx's models). LabelEncoder maps keys to values
through a python dict: it runs on the host (a documented round trip through
``registry.to_host``) and moves numeric results back to ``xp``; string results stay on the
host as all ONNX strings do.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .registry import register, to_host

ML = "ai.onnx.ml"


@register("Binarizer", domain=ML)
def binarizer(xp: Any, x: Any, *, threshold: float = 0.0) -> Any:
    return (x > threshold).astype(x.dtype)


@register("ArrayFeatureExtractor", domain=ML)
def array_feature_extractor(xp: Any, x: Any, indices: Any) -> Any:
    idx = indices.reshape(-1)
    if x.ndim == 1:
        return xp.take(x, idx).reshape(1, -1)
    return xp.take(x, idx, axis=-1)


#: id(attribute list) -> (the list, its float32 array): a node's attributes are the same
#: objects on every call, so each is converted once (the entry holds the list: its id is not
#: reused while cached); at most _ARRAYS_MAX entries, then start over.
_ARRAYS: dict[int, tuple[Any, np.ndarray]] = {}
_ARRAYS_MAX = 64


def _float32s(values: Any, default: float) -> np.ndarray:
    """An attribute's floats as a flat float32 array, converted once per attribute object."""
    hit = _ARRAYS.get(id(values))
    if hit is not None and hit[0] is values:
        return hit[1]
    array = np.asarray(values if values is not None else [default], np.float32).reshape(-1)
    if len(_ARRAYS) >= _ARRAYS_MAX:
        _ARRAYS.clear()
    _ARRAYS[id(values)] = (values, array)
    return array


@register("Scaler", domain=ML)
def scaler(xp: Any, x: Any, *, offset: Any = None, scale: Any = None) -> Any:
    """``(x - offset) * scale`` along the last axis (one value, or one per feature), in float32:
    ONNX's Scaler always outputs float."""
    c = x.shape[-1] if x.ndim else 1
    off, mul = _float32s(offset, 0.0), _float32s(scale, 1.0)
    if off.size not in (1, c) or mul.size not in (1, c):
        name, v = ("offset", off) if off.size not in (1, c) else ("scale", mul)
        raise ValueError(f"Scaler's {name} has {v.size} values; the input has {c} features (give 1 or {c})")
    if xp is np:
        y = np.subtract(x, off, dtype=np.float32)
        y *= mul
        return y
    y = xp.asarray(x, dtype=np.float32) - xp.asarray(off)
    y *= xp.asarray(mul)
    return y


@register("ZipMap", domain=ML)
def zip_map(xp: Any, x: Any, *, classlabels_int64s: Any = None, classlabels_strings: Any = None) -> Any:
    """One ``{label: probability}`` dict per row of ``x`` ([N, C] or [C]): a list, ONNX's
    sequence of maps, on the host; each map's keys in order, as onnxruntime's (a sorted map)."""
    if (classlabels_int64s is None) == (classlabels_strings is None):
        raise ValueError("ZipMap needs exactly one of classlabels_int64s and classlabels_strings")
    labels = [int(v) for v in classlabels_int64s] if classlabels_int64s is not None else \
        [v.decode() if isinstance(v, bytes) else str(v) for v in classlabels_strings]
    host = to_host(xp, x)
    if host.ndim not in (1, 2) or host.shape[-1] != len(labels):
        raise ValueError(f"ZipMap takes [N, {len(labels)}] or [{len(labels)}] (one column a label); "
                         f"got shape {list(host.shape)}")
    rows = host.reshape(-1, len(labels))
    keys = sorted(labels)
    if keys != labels:   # columns in label order (skl2onnx writes them sorted already)
        rows = rows[:, sorted(range(len(labels)), key=labels.__getitem__)]
    return [dict(zip(keys, row)) for row in rows.tolist()]


def _pick(attrs: dict[str, Any], stem: str) -> Any:
    """keys_* / values_*: whichever of the typed attributes is given, as a flat list."""
    for suffix in ("strings", "int64s", "floats", "tensor"):
        value = attrs.get(f"{stem}_{suffix}")
        if value is not None:
            return list(np.asarray(value, dtype=object if suffix == "strings" else None).reshape(-1)), suffix
    raise ValueError(f"LabelEncoder needs one of the {stem}_* attributes")


@register("LabelEncoder", domain=ML)
def label_encoder(xp: Any, x: Any, **attrs: Any) -> Any:
    keys, _ = _pick(attrs, "keys")
    values, kind = _pick(attrs, "values")
    if len(keys) != len(values):
        raise ValueError(f"LabelEncoder has {len(keys)} keys but {len(values)} values")
    out_dtype = {"strings": np.dtype(object), "int64s": np.dtype(np.int64), "floats": np.dtype(np.float32),
                 "tensor": np.asarray(attrs.get("values_tensor")).dtype}[kind]
    default = _default(attrs, kind, out_dtype)
    host = to_host(xp, x) if x.dtype != object else np.asarray(x)
    table = {_key(k): v for k, v in zip(keys, values)}
    out = np.array([table.get(_key(v), default) for v in host.reshape(-1)], dtype=out_dtype).reshape(host.shape)
    return out if out_dtype == object else xp.asarray(out)


def _key(v: Any) -> Any:
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, (np.floating, float)) and np.isnan(v):
        return "nan"  # NaN keys match NaN inputs, as in ONNX's reference
    return v.item() if isinstance(v, np.generic) else v


def _default(attrs: dict[str, Any], kind: str, dtype: np.dtype) -> Any:
    if kind == "tensor" and attrs.get("default_tensor") is not None:
        return np.asarray(attrs["default_tensor"]).reshape(-1)[0]
    if kind == "strings":
        return attrs.get("default_string", "_Unused")
    if kind == "int64s" or dtype.kind in "iu":
        return attrs.get("default_int64", -1)
    return attrs.get("default_float", -0.0)


_COMPARE = {0: np.less_equal, 1: np.less, 2: np.greater_equal, 3: np.greater, 4: np.equal, 5: np.not_equal}


def _member_sets(modes: np.ndarray, members: Any) -> dict[int, set[float]]:
    """Node index -> its set, for BRANCH_MEMBER nodes; sets are NaN-separated in order."""
    sets: dict[int, set[float]] = {}
    flat = [] if members is None else list(np.asarray(members, dtype=np.float64).reshape(-1))
    groups, current = [], []
    for v in flat:
        if np.isnan(v):
            groups.append(set(current))
            current = []
        else:
            current.append(v)
    if current:
        groups.append(set(current))
    for node, group in zip([i for i, m in enumerate(modes) if m == 6], groups):
        sets[node] = group
    return sets


def _leaf_of(row: np.ndarray, root: int, a: dict[str, Any], sets: dict[int, set[float]]) -> int:
    node = root
    for _ in range(len(a["modes"]) + 1):  # a walk longer than the node count means a cycle
        value, mode = float(row[a["features"][node]]), int(a["modes"][node])
        if np.isnan(value):
            go_true = bool(a["missing"][node]) if a["missing"] is not None else False
        elif mode == 6:
            go_true = value in sets.get(node, set())
        else:
            go_true = bool(_COMPARE[mode](value, a["splits"][node]))
        nxt, leaf = (a["true_ids"][node], a["true_leaf"][node]) if go_true else (a["false_ids"][node],
                                                                               a["false_leaf"][node])
        if leaf:
            return int(nxt)
        node = int(nxt)
    raise ValueError("TreeEnsemble: a tree walk did not reach a leaf (the trees have a cycle)")


@register("TreeEnsemble", domain=ML, since=5)
def tree_ensemble(xp: Any, x: Any, *, tree_roots: list[int], nodes_modes: Any, nodes_featureids: list[int],
                  nodes_splits: Any, nodes_truenodeids: list[int], nodes_trueleafs: list[int],
                  nodes_falsenodeids: list[int], nodes_falseleafs: list[int], leaf_targetids: list[int],
                  leaf_weights: Any, n_targets: int | None = None, aggregate_function: int = 1,
                  post_transform: int = 0, membership_values: Any = None,
                  nodes_missing_value_tracks_true: list[int] | None = None, nodes_hitrates: Any = None) -> Any:
    """Tree walks are data-dependent branching: host code (documented round trip), result to ``xp``."""
    if post_transform != 0:
        raise ValueError(f"TreeEnsemble post_transform {post_transform} is not implemented (only NONE)")
    host = to_host(xp, x).astype(np.float64)
    modes = np.asarray(nodes_modes).reshape(-1)
    a = {"modes": modes, "features": nodes_featureids, "splits": np.asarray(nodes_splits, np.float64).reshape(-1),
         "true_ids": nodes_truenodeids, "true_leaf": nodes_trueleafs, "false_ids": nodes_falsenodeids,
         "false_leaf": nodes_falseleafs, "missing": nodes_missing_value_tracks_true}
    sets = _member_sets(modes, membership_values)
    weights = np.asarray(leaf_weights).reshape(-1)
    targets = n_targets or (max(leaf_targetids) + 1)
    # A target no tree reaches keeps the reduction's identity (the largest / lowest finite
    # value of X's type for MIN / MAX); AVERAGE divides by the number of trees, as ONNX does.
    big = float(np.finfo(np.dtype(x.dtype)).max)
    start = {0: 0.0, 1: 0.0, 2: big, 3: -big}[aggregate_function]
    out = np.full((host.shape[0], targets), start, dtype=np.float64)
    for r, row in enumerate(host.reshape(host.shape[0], -1)):
        for root in tree_roots:
            leaf = _leaf_of(row, root, a, sets)
            t, w = leaf_targetids[leaf], float(weights[leaf])
            if aggregate_function == 0:
                out[r, t] += w / len(tree_roots)
            elif aggregate_function == 1:
                out[r, t] += w
            else:
                out[r, t] = min(out[r, t], w) if aggregate_function == 2 else max(out[r, t], w)
    return xp.asarray(out.astype(np.dtype(x.dtype)))
