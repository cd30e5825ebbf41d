"""The per-release TensorRT rule tables (``partition/data/tensorrt_<release>.json``) and their one loader.

A table describes one onnx-tensorrt release; every op row cites the parser
source or the ``docs/operators.md`` row it comes from. A table may be an
overlay (``"base": "10.1"``): it then lists only the rows whose verdict differs
from its base, and the loader replaces those rows whole.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..errors import LensError

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
_NAME = re.compile(r"^tensorrt_(\d+(?:\.\d+)+)\.json$")


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def available_versions() -> list[str]:
    """The releases we have a table for, oldest first."""
    found = [m.group(1) for p in DATA_DIR.iterdir() if (m := _NAME.match(p.name))]
    return sorted(found, key=_key)


def newest_version() -> str:
    """The default ``--trt-version``: the newest release we have the parser source for."""
    versions = available_versions()
    if not versions:
        raise LensError(f"no TensorRT rule table in {DATA_DIR}")
    return versions[-1]


def table_path(version: str) -> Path:
    return DATA_DIR / f"tensorrt_{version}.json"


def resolve_version(version: str | None) -> str:
    """``version`` checked against the tables we have (None: the newest)."""
    if version is None or version == "":
        return newest_version()
    version = str(version).strip()
    if version not in available_versions():
        raise LensError(f"no TensorRT rule table for --trt-version {version!r}; "
                        f"tables: {', '.join(available_versions())}")
    return version


def load_table(version: str | None = None) -> dict[str, Any]:
    """The rule table of ``version`` (default the newest), overlays merged onto their base (cached)."""
    return _load(resolve_version(version))


@lru_cache(maxsize=8)
def _load(version: str) -> dict[str, Any]:
    with open(table_path(version), encoding="utf-8") as f:
        table = json.load(f)
    base_version = table.get("base")
    if not base_version:
        return table
    base = _load(resolve_version(base_version))
    merged = {k: v for k, v in base.items() if k != "ops"}
    merged.update({k: v for k, v in table.items() if k not in ("ops", "base")})
    merged["ops"] = {**base["ops"], **table["ops"]}
    merged["overlay_of"] = base_version
    return merged
