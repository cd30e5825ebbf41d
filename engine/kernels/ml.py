"""A few ai.onnx.ml ops: Binarizer, ArrayFeatureExtractor, LabelEncoder.

Binarizer and ArrayFeatureExtractor are plain ``xp`` code. LabelEncoder maps keys to values
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
