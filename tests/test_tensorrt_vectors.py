"""The TensorRT tables against small vectors of their sources, so the citation checks run in CI too.

CI has neither ``shared/reference`` nor the NVIDIA git mirrors; ``tests/data/tensorrt_vectors.json``
(``scripts/tensorrt_vectors.py``) holds facts about every cited line and short excerpts. In CI:
every citation of every committed table has its vector and the vector says what the citation claims;
the generator's own readers (``parse_orin_matrix``, ``dla_cites``, the 8.x Q/DQ checks) find in the
excerpts what the committed tables hold. Where the sources are present (the development machine),
the vectors are regenerated from them and must be equal: a vector cannot drift from its source.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "partition" / "data"
VECTORS = json.loads((ROOT / "tests" / "data" / "tensorrt_vectors.json").read_text())
RELEASES = ("8.5", "8.6", "10.0", "10.1")


def _module(name: str):
    sys.path.insert(0, str(ROOT / "scripts"))
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


vectors_mod = _module("tensorrt_vectors")
tables_mod = _module("build_tensorrt_tables")


def _table(release: str):
    return json.loads((DATA / f"tensorrt_{release}.json").read_text())


@pytest.mark.parametrize("release", RELEASES)
def test_every_parser_citation_has_a_vector_that_says_what_it_claims(release):
    table, seen = _table(release), VECTORS["parser"][release]
    fact = lambda cite: vectors_mod.parse_facts(seen[cite])  # noqa: E731
    importers = ("onnxOpImporters.cpp", "builtin_op_importers.cpp")
    for op, row in table["ops"].items():
        for k, cite in enumerate(vectors_mod.cites(row)):
            assert cite in seen, (release, op, cite, "no vector: regenerate with scripts/tensorrt_vectors.py")
            assert not fact(cite).get("blank"), (release, op, cite)
            if cite.startswith("docs/operators.md") and cite in row["cite"]:
                assert fact(cite).get("doc") == op, (release, op, cite)
            elif k == 1 and cite.split(":")[0] in importers and row["cite"][0].startswith("docs/"):
                assert fact(cite).get("importer") == op, (release, op, cite)
        for index, spec in row.get("refuses", {}).items():
            if spec["cite"].split(":")[0] in importers:
                assert fact(spec["cite"]).get("refusal"), (release, op, index, spec)
        for index, spec in row.get("inputs", {}).items():
            if spec.get("kind") == "weights":
                assert fact(spec["cite"]).get("weights"), (release, op, index, spec)
    for cite in vectors_mod.cites({k: v for k, v in table.items() if k not in ("ops", "bundled_plugins")}):
        assert cite in seen and not fact(cite).get("blank"), (release, cite)


def test_the_dla_citations_and_matrix_rows_are_in_the_excerpts():
    from test_tensorrt_dla import LIMITS
    table = json.loads((DATA / "tensorrt_dla.json").read_text())
    for release, rules in table["releases"].items():
        lines = vectors_mod.lines_of(VECTORS["nvinfer"][release])
        assert set(rules) == set(LIMITS), release
        for rule, cite in rules.items():
            n = int(cite.rsplit(":", 1)[1])
            assert LIMITS[rule] in lines[n - 1] + lines[n], (release, rule, cite)
    for key, matrix in table["orin_matrices"].items():
        for op, entry in matrix.items():
            commit, n = entry["cite"].split("@")[1].split(":")[0], int(entry["cite"].rsplit(":", 1)[1])
            row = [c.strip() for c in VECTORS["matrix"][commit][str(n)].split("|")]
            assert row[1] == op and (row[2] == entry["support"] or "RFE" in row[2]), (key, op, row)


def test_the_generator_reads_the_excerpts_as_the_committed_tables_say():
    table = json.loads((DATA / "tensorrt_dla.json").read_text())
    for release, rules in table["releases"].items():
        assert tables_mod.dla_cites(vectors_mod.lines_of(VECTORS["nvinfer"][release]), release) == rules, release
    for key, matrix in table["orin_matrices"].items():
        commit = tables_mod.DLA_SW_COMMITS[key]
        assert tables_mod.parse_orin_matrix(vectors_mod.lines_of(VECTORS["matrix"][commit[:7]]), commit) == matrix


@pytest.mark.parametrize("release", ("8.5", "8.6"))
def test_the_8x_qdq_checks_are_read_from_the_helper_excerpt(release, tmp_path):
    (tmp_path / "builtin_op_importers.cpp").write_text("\n".join(vectors_mod.lines_of(VECTORS["qdq_8x"][release])))
    (tmp_path / "operators.md").write_text("")
    checks_mod = _module("tensorrt_checks")
    src = _module("tensorrt_source").Src(tmp_path, release)
    found = checks_mod._release_8x(src)
    for op in ("QuantizeLinear", "DequantizeLinear"):
        row = _table(release)["ops"][op]
        assert found[op]["min_inputs_cite"] == row["min_inputs_cite"], (release, op)
        assert found[op]["inputs"] == row["inputs"], (release, op)
        expected_refuses = {k: v for k, v in found[op]["refuses"].items() if v["cite"] is not None}
        assert {k: v for k, v in row.get("refuses", {}).items() if k in expected_refuses} == expected_refuses
        assert set(row.get("refuses", {})) == set(expected_refuses), (release, op)


def _beside_checkout(*parts: str) -> Path:
    candidates = [parent.joinpath(*parts) for parent in ROOT.parents]
    return next((c for c in candidates if c.exists()), candidates[0])


REFERENCE = Path(os.environ.get("SGLENS_TRT_REFERENCE", str(_beside_checkout("shared", "reference"))))
MIRROR = Path(os.environ.get("SGLENS_TENSORRT_MIRROR", str(_beside_checkout(".mirror", "NVIDIA+TensorRT", "repo"))))
DLA_SW = _beside_checkout(".mirror", "NVIDIA+Deep-Learning-Accelerator-SW", "repo")


@pytest.mark.skipif(not (REFERENCE.exists() and MIRROR.exists() and DLA_SW.exists()),
                    reason="the sources are not here (CI): the vectors stand in for them above")
def test_the_vectors_are_what_the_sources_say():
    fresh = vectors_mod.build(REFERENCE, MIRROR, DLA_SW)
    for part in ("nvinfer", "matrix", "qdq_8x"):
        assert fresh[part] == VECTORS[part], part
    for release, rows in VECTORS["parser"].items():
        # a file this machine's reference copy lacks (10.1's OnnxAttrs.cpp in an older copy) is not compared
        assert {c: f for c, f in fresh["parser"][release].items()} == \
            {c: f for c, f in rows.items() if c in fresh["parser"][release]}, release
        assert len(fresh["parser"][release]) >= len(rows) - 5, release
