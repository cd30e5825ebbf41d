"""The rule tables themselves: every row cites its source, every type name is an ONNX type, cites point at the check.

Where the upstream source is on this machine (``SGLENS_TRT_REF`` or
``../shared/reference/onnx-tensorrt`` beside the checkout), each 10.1 citation is re-read: a doc
citation must be that op's row, a first importer/checker citation that op's
definition, and every other citation an existing line.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Iterator

import pytest

from partition.dtypes import ONNX_TYPE_NAMES
from partition.tensorrt.table import DATA_DIR, available_versions, load_table, newest_version

CITE = re.compile(r"^(10\.0-GA:)?(docs/operators\.md|onnxOpImporters\.cpp|onnxOpCheckers\.cpp|ModelImporter\.cpp|"
                  r"importerUtils\.cpp|WeightsContext\.cpp|ShapeTensor\.cpp|OnnxAttrs\.cpp):[1-9]\d*$")
PLUGIN_CITE = re.compile(r"^NVIDIA/TensorRT@release/10\.\d+:plugin/README\.md:[1-9]\d*$")
TYPE_KEYS = {"types", "allowed_types"}
ROOT_DIR = Path(__file__).resolve().parents[1]
# shared/ sits beside the checkout, on developers' machines and in CI alike
REF = Path(os.environ.get("SGLENS_TRT_REF", str(ROOT_DIR.parent / "shared" / "reference" / "onnx-tensorrt")))
ONNX_TYPES = set(ONNX_TYPE_NAMES.values())


def _cites(obj: Any) -> Iterator[str]:
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key.endswith("cite") or key in ("symmetric_pads", "bidirectional_same"):
                yield from (value if isinstance(value, list) else [value])
            elif key == "requires_distinct":
                yield value[-1]
            else:
                yield from _cites(value)
    elif isinstance(obj, list):
        for item in obj:
            yield from _cites(item)


def _type_lists(row: dict[str, Any]) -> Iterator[list[str]]:
    if row.get("types") is not None:
        yield row["types"]
    for key in ("input_types", "output_types"):
        yield from row.get(key, {}).values()
    for spec in row.get("refuses", {}).values():
        yield spec["types"]
    for spec in row.get("attrs", ()):
        if spec.get("as") == "dtype":
            yield spec.get("allowed", []) + spec.get("forbidden", [])


def test_versions_and_default():
    assert available_versions() == ["10.0", "10.1"]
    assert newest_version() == "10.1"
    for version in available_versions():
        raw = json.loads((DATA_DIR / f"tensorrt_{version}.json").read_text())
        assert raw["tensorrt_rules"] == version
        assert raw["release"]["tag"] == f"release/{version}-GA" and len(raw["release"]["commit"]) == 40
    assert load_table() is load_table("10.1")
    assert load_table("10.0")["overlay_of"] == "10.1"


@pytest.mark.parametrize("version", ["10.0", "10.1"])
def test_every_row_cites_its_source_and_names_real_types(version):
    table = load_table(version)
    assert len(table["ops"]) >= 200
    for op, row in table["ops"].items():
        assert row.get("cite"), f"{op}: no citation"
        for cite in _cites(row):
            assert CITE.match(cite), f"{op}: bad citation {cite!r}"
        for types in _type_lists(row):
            assert set(types) <= ONNX_TYPES, f"{op}: unknown type in {types}"
        for spec in row.get("attrs", ()):
            assert ("{value}" in spec["message"] or spec.get("absent")) and spec.get("cite"), op
    for cite in _cites({k: v for k, v in table.items() if k not in ("ops", "bundled_plugins")}):
        assert CITE.match(cite), cite
    for plugin in table["bundled_plugins"]:
        assert PLUGIN_CITE.match(plugin["cite"]), plugin
    names = {p["name"] for p in table["bundled_plugins"]}
    assert {"EfficientNMS_TRT", "ROIAlign_TRT", "ModulatedDeformConv2d"} <= names
    assert set(table["types"]["known"]) <= ONNX_TYPES


def test_rows_the_issue_names():
    ops = load_table("10.1")["ops"]
    for op in ("CastLike", "DeformConv", "ImageScaler", "ParametricSoftplus", "ScaledTanh"):
        assert ops[op]["supported"], op
    for op in ("BlackmanWindow", "HannWindow", "HammingWindow"):
        assert not ops[op]["supported"], op
    assert ops["RoiAlign"]["data_dependent_shape"] and ops["NonZero"]["data_dependent_shape"]
    assert "cubic" in ops["Resize"]["attrs"][0]["allowed"]


needs_ref = pytest.mark.skipif(not (REF / "onnxOpImporters.cpp").exists(), reason="onnx-tensorrt source not here")


def _lines(name: str) -> list[str]:
    path = REF / ("operators_10.1.md" if name == "docs/operators.md" else name)
    return path.read_text().split("\n")


@needs_ref
def test_citations_point_at_the_cited_check():
    files: dict[str, list[str]] = {}
    for op, row in load_table("10.1")["ops"].items():
        for k, cite in enumerate(_cites(row)):
            name, line = cite.rsplit(":", 1)
            text = files.setdefault(name, _lines(name))[int(line) - 1]
            if name == "docs/operators.md" and cite in row["cite"]:
                assert text.startswith(f"| {op} "), (op, cite, text)
            elif k == 1 and name == "onnxOpImporters.cpp" and row["cite"][0].startswith("docs/"):
                assert f"DEFINE_BUILTIN_OP_IMPORTER({op})" in text, (op, cite, text)
            assert text.strip(), (op, cite)


@needs_ref
def test_every_documented_op_and_every_importer_has_a_row():
    ops = load_table("10.1")["ops"]
    doc = [line.split("|")[1].strip() for line in _lines("docs/operators.md")
           if line.startswith("| ") and line.split("|")[2].strip() in ("Y", "N")]
    importers = re.findall(r"DEFINE_BUILTIN_OP_IMPORTER\((\w+)\)", (REF / "onnxOpImporters.cpp").read_text())
    internal = ("FallbackPluginImporter", "LocalFunctionImporter", "op")  # "op": the macro's own definition
    missing = [op for op in doc + importers if op not in ops and op not in internal]
    assert missing == []
    for op in doc:
        documented_y = any(line.startswith(f"| {op} ") and "| Y" in line for line in _lines("docs/operators.md"))
        assert ops[op]["supported"] == documented_y or not ops[op]["supported"], op


MIRROR = Path(os.environ.get("SGLENS_TRT_MIRROR", str(ROOT_DIR.parent / ".mirror" / "onnx+onnx-tensorrt" / "repo")))


@pytest.mark.skipif(not MIRROR.exists(), reason="no onnx-tensorrt git mirror here")
def test_10_0_overlay_citations_point_at_the_10_0_source():
    import subprocess
    raw = json.loads((DATA_DIR / "tensorrt_10.0.json").read_text())
    for op, row in raw["ops"].items():
        for cite in _cites(row):
            assert cite.startswith("10.0-GA:"), (op, cite)
            name, line = cite[len("10.0-GA:"):].rsplit(":", 1)
            text = subprocess.run(["git", "-C", str(MIRROR), "show", f"10.0-GA:{name}"], capture_output=True,
                                  text=True, check=True).stdout.split("\n")[int(line) - 1]
            assert op in text or "STATIC_CHECK(false" in text or "kEQUAL" in text, (op, cite, text)


@needs_ref
def test_refusal_and_weights_citations_name_the_right_kind_of_check():
    files: dict[str, list[str]] = {}

    def line(cite: str) -> str:
        name, number = cite.rsplit(":", 1)
        return files.setdefault(name, _lines(name))[int(number) - 1]
    for op, row in load_table("10.1")["ops"].items():
        for index, spec in row.get("refuses", {}).items():
            if spec["cite"].startswith("onnxOpImporters.cpp"):
                assert "notInvalidType" in line(spec["cite"]), (op, index, spec)
        for index, spec in row.get("inputs", {}).items():
            if spec.get("kind") == "weights":
                text = line(spec["cite"])
                assert re.search(r"is_weights|initializer|allValuesKnown|constant tensor|dynamic axes", text), \
                    (op, index, text)
        for spec in row.get("attrs", ()):
            if spec["cite"].startswith("onnxOpCheckers.cpp"):
                text = line(spec["cite"])
                assert "STATIC_CHECK" in text or '"' in text, (op, spec["name"], text)


TRT_MIRROR = Path(os.environ.get("SGLENS_TENSORRT_MIRROR", str(ROOT_DIR.parent / ".mirror" / "NVIDIA+TensorRT" / "repo")))


@needs_ref
@pytest.mark.skipif(not TRT_MIRROR.exists(), reason="no NVIDIA/TensorRT git mirror here")
def test_generator_reproduces_the_committed_tables(tmp_path):
    import importlib.util
    import subprocess
    readme = tmp_path / "README.md"
    readme.write_text(subprocess.run(["git", "-C", str(TRT_MIRROR), "show", "release/10.1:plugin/README.md"],
                                     capture_output=True, text=True, check=True).stdout)
    spec = importlib.util.spec_from_file_location("build_tables", ROOT_DIR / "scripts" / "build_tensorrt_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    t101, t100 = module.build(REF, readme)
    assert t101 == json.loads((DATA_DIR / "tensorrt_10.1.json").read_text())
    assert t100 == json.loads((DATA_DIR / "tensorrt_10.0.json").read_text())
