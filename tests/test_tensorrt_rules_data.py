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

RELEASES = ["8.5", "8.6", "10.0", "10.1"]
CITE = re.compile(r"^(docs/operators\.md|onnxOpImporters\.cpp|onnxOpCheckers\.cpp|ModelImporter\.cpp|importerUtils\.cpp|"
                  r"WeightsContext\.cpp|ShapeTensor\.cpp|OnnxAttrs\.cpp|builtin_op_importers\.cpp|onnx2trt_utils\.cpp)"
                  r":[1-9]\d*$")
PLUGIN_CITE = re.compile(r"^NVIDIA/TensorRT@release/(8\.[56]|10\.\d+):plugin/README\.md:[1-9]\d*$")
TYPE_KEYS = {"types", "allowed_types"}
ROOT_DIR = Path(__file__).resolve().parents[1]


def _beside_checkout(*parts: str) -> Path:
    """``parts`` under the nearest folder above the checkout that has them (shared/ sits beside the main
    checkout, a few levels up from a worktree); the last candidate when none has."""
    candidates = [parent.joinpath(*parts) for parent in ROOT_DIR.parents]
    return next((c for c in candidates if c.exists()), candidates[0])


REFERENCE = Path(os.environ.get("SGLENS_TRT_REFERENCE", str(_beside_checkout("shared", "reference"))))
FOLDERS = {"8.5": "onnx-tensorrt-8.5-GA", "8.6": "onnx-tensorrt-8.6-GA", "10.0": "onnx-tensorrt-10.0-GA",
           "10.1": "onnx-tensorrt"}
REF = REFERENCE / FOLDERS["10.1"]
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
    assert available_versions() == RELEASES
    assert newest_version() == "10.1"
    for version in available_versions():
        raw = json.loads((DATA_DIR / f"tensorrt_{version}.json").read_text())
        assert raw["tensorrt_rules"] == version and "base" not in raw  # every release is a whole table
        assert raw["release"]["tag"] == f"release/{version}-GA" and len(raw["release"]["commit"]) == 40
        assert raw["release"]["layout"] == ("8.x" if version.startswith("8.") else "10.x")
    assert load_table() is load_table("10.1")
    assert load_table("10.1")["not_in_source"] == []


@pytest.mark.parametrize("version", RELEASES)
def test_every_row_cites_its_source_and_names_real_types(version):
    table = load_table(version)
    assert len(table["ops"]) >= 190
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
        assert PLUGIN_CITE.match(plugin["cite"]) and plugin["versions"], plugin
    names = {p["name"] for p in table["bundled_plugins"]}
    assert {"EfficientNMS_TRT", "ROIAlign_TRT"} <= names
    assert set(table["types"]["known"]) <= ONNX_TYPES


def test_rows_the_issue_names():
    ops = load_table("10.1")["ops"]
    for op in ("CastLike", "DeformConv", "ImageScaler", "ParametricSoftplus", "ScaledTanh"):
        assert ops[op]["supported"], op
    for op in ("BlackmanWindow", "HannWindow", "HammingWindow"):
        assert not ops[op]["supported"], op
    assert ops["RoiAlign"]["data_dependent_shape"] and ops["NonZero"]["data_dependent_shape"]
    assert "cubic" in ops["Resize"]["attrs"][0]["allowed"]


def test_what_the_8x_tables_carry_from_their_source():
    for version in ("8.5", "8.6"):
        table = load_table(version)
        assert table["types"]["cast_down"] == {"DOUBLE": "FLOAT", "INT64": "INT32"}
        assert "BFLOAT16" not in table["types"]["known"] and "local_functions" not in table["dispatch"]
        for op in ("Gelu", "CastLike", "DeformConv"):
            assert op not in table["ops"] or not table["ops"][op]["supported"], (version, op)
        assert not table["ops"]["Hardmax"]["supported"]
        assert "reduction" in {a["name"] for a in table["ops"]["ScatterND"]["ignored_attrs"]}
    assert load_table("8.6")["ops"]["QuantizeLinear"]["min_inputs"] == 3
    assert {"1", "2"} <= set(load_table("8.6")["ops"]["InstanceNormalization"]["inputs"])
    for op in ("LayerNormalization", "GroupNormalization", "IsInf"):
        assert op not in load_table("8.5")["ops"] or not load_table("8.5")["ops"][op]["supported"], op
        assert load_table("8.6")["ops"][op]["supported"], op
    assert not load_table("10.0")["ops"]["DeformConv"]["supported"] and load_table("10.1")["ops"]["DeformConv"]["supported"]


needs_ref = pytest.mark.skipif(not all((REFERENCE / f).exists() for f in FOLDERS.values()),
                               reason="onnx-tensorrt sources not here")


def _reader(version: str):
    files: dict[str, list[str]] = {}
    doc = REFERENCE / FOLDERS[version] / f"operators_{version}.md"
    doc = doc if doc.exists() else REFERENCE / FOLDERS[version] / "operators.md"

    def line(cite: str) -> str | None:
        """The cited line; None when the cited file is not in this machine's reference folder (the
        10.1 RNN activations cite OnnxAttrs.cpp, which an older copy of shared/reference lacks)."""
        name, number = cite.rsplit(":", 1)
        if name not in files:
            path = doc if name == "docs/operators.md" else REFERENCE / FOLDERS[version] / name
            files[name] = path.read_text().split("\n") if path.exists() else None
        return None if files[name] is None else files[name][int(number) - 1]
    line.missing = lambda: sorted(k for k, v in files.items() if v is None)  # type: ignore[attr-defined]
    return line


@needs_ref
@pytest.mark.parametrize("version", RELEASES)
def test_citations_point_at_the_cited_check(version):
    """Every citation of every release is re-read in that release's source."""
    line = _reader(version)
    table = load_table(version)
    importers = ("onnxOpImporters.cpp", "builtin_op_importers.cpp")
    for op, row in table["ops"].items():
        for k, cite in enumerate(_cites(row)):
            text = line(cite)
            if text is None:
                continue
            assert text.strip(), (version, op, cite)
            if cite.startswith("docs/operators.md") and cite in row["cite"]:
                assert text.startswith(f"| {op} "), (version, op, cite, text)
            elif k == 1 and cite.split(":")[0] in importers and row["cite"][0].startswith("docs/"):
                assert f"DEFINE_BUILTIN_OP_IMPORTER({op})" in text, (version, op, cite, text)
    for cite in _cites({k: v for k, v in table.items() if k not in ("ops", "bundled_plugins")}):
        text = line(cite)
        assert text is None or text.strip(), (version, cite)
    if line.missing():
        pytest.skip(f"every other citation checked; these cited files are not in {REFERENCE}: {line.missing()}")


@needs_ref
@pytest.mark.parametrize("version", RELEASES)
def test_every_documented_op_and_every_importer_has_a_row(version):
    ops = load_table(version)["ops"]
    line = _reader(version)
    folder = REFERENCE / FOLDERS[version]
    doc_path = folder / f"operators_{version}.md"
    doc = (doc_path if doc_path.exists() else folder / "operators.md").read_text().split("\n")
    names = [row.split("|")[1].strip() for row in doc if row.startswith("| ") and row.split("|")[2].strip() in ("Y", "N")]
    source = folder / ("onnxOpImporters.cpp" if version.startswith("10.") else "builtin_op_importers.cpp")
    importers = re.findall(r"DEFINE_BUILTIN_OP_IMPORTER\((\w+)\)", source.read_text())
    internal = ("FallbackPluginImporter", "LocalFunctionImporter", "op")  # "op": the macro's own definition
    assert [op for op in names + importers if op not in ops and op not in internal] == []
    for op in names:
        documented_y = any(row.startswith(f"| {op} ") and "| Y" in row for row in doc)
        assert ops[op]["supported"] == documented_y or not ops[op]["supported"], (version, op)
    assert line  # the reader resolves this release's files


MIRROR = Path(os.environ.get("SGLENS_TENSORRT_MIRROR", str(_beside_checkout(".mirror", "NVIDIA+TensorRT", "repo"))))


@needs_ref
def test_refusal_and_weights_citations_name_the_right_kind_of_check():
    for version in RELEASES:
        line = _reader(version)
        for op, row in load_table(version)["ops"].items():
            for index, spec in row.get("refuses", {}).items():
                if spec["cite"].split(":")[0] in ("onnxOpImporters.cpp", "builtin_op_importers.cpp"):
                    assert "notInvalidType" in line(spec["cite"]), (version, op, index, spec)
            for index, spec in row.get("inputs", {}).items():
                if spec.get("kind") == "weights":
                    text = line(spec["cite"])
                    assert re.search(r"is_weights|initializer|allValuesKnown|constant tensor|dynamic axes", text), \
                        (version, op, index, text)
            for spec in row.get("attrs", ()):
                if spec["cite"].startswith("onnxOpCheckers.cpp"):
                    text = line(spec["cite"])
                    assert "STATIC_CHECK" in text or '"' in text, (version, op, spec["name"], text)


@needs_ref
@pytest.mark.skipif(not MIRROR.exists(), reason="no NVIDIA/TensorRT git mirror here")
@pytest.mark.skipif(not (REF / "OnnxAttrs.cpp").exists(), reason="OnnxAttrs.cpp (10.1) not in the reference folder")
def test_generator_reproduces_the_committed_tables():
    import importlib.util
    spec = importlib.util.spec_from_file_location("build_tables", ROOT_DIR / "scripts" / "build_tensorrt_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for release, table in module.build_all(REFERENCE, MIRROR).items():
        assert table == json.loads((DATA_DIR / f"tensorrt_{release}.json").read_text()), release
