"""The per-release TensorRT rule tables (``partition/data/tensorrt_<release>.json``) and their one loader.

A table describes one onnx-tensorrt release, generated from that release's own
parser source (``scripts/build_tensorrt_tables.py``, both file layouts: 8.x
``builtin_op_importers.cpp`` and 10.x ``onnxOpImporters.cpp``); every op row cites
the parser source or the ``docs/operators.md`` row it comes from, as ``file:line``
of the release the table names.
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
        return json.load(f)


def release_differences(version: str | None = None) -> dict[str, Any]:
    """What changes from the release before ``version`` (None: the newest) to it: op verdicts and
    checks, for the UI and ``sglens`` to show next to the release."""
    version = resolve_version(version)
    versions = available_versions()
    index = versions.index(version)
    if index == 0:
        return {"release": version, "previous": None, "added": [], "removed": [], "now_supported": [],
                "no_longer_supported": [], "changed": []}
    before, after = _load(versions[index - 1])["ops"], _load(version)["ops"]

    def checks(row: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in row.items() if not k.endswith("cite") and k != "cite"}
    common = sorted(set(before) & set(after))
    return {
        "release": version, "previous": versions[index - 1],
        "added": sorted(set(after) - set(before)), "removed": sorted(set(before) - set(after)),
        "now_supported": [op for op in common if after[op].get("supported") and not before[op].get("supported")],
        "no_longer_supported": [op for op in common if before[op].get("supported") and not after[op].get("supported")],
        "changed": [op for op in common if after[op].get("supported") and before[op].get("supported")
                    and checks(after[op]) != checks(before[op])],
    }
