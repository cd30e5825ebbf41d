"""Small test vectors from the sources the TensorRT tables are generated from, for machines without them.

    python scripts/tensorrt_vectors.py REFERENCE_ROOT NVIDIA_TENSORRT_MIRROR DLA_SW_MIRROR

CI has neither ``shared/reference`` (onnx-tensorrt per release) nor the NVIDIA git mirrors, so the
tests that re-read every citation there skip. This script writes ``tests/data/tensorrt_vectors.json``:

- ``parser``: per release, every line the committed table cites, as facts about that line (a digest
  of its text, and whether it is blank, a docs/operators.md row of which op, an importer definition of
  which op, a ``notInvalidType`` refusal, a weights check) -- not the code itself;
- ``nvinfer``: per release, the NvInfer.h lines the DLA table cites (one-line doc notes), the line
  after each, every class head, and the doc-comment run from a cited note down to its class head:
  enough for ``dla_cites`` to find every DLA rule again;
- ``matrix``: per commit, the rows of the Orin operator matrix cut to their first two cells
  (op, support through TensorRT), line numbers kept;
- ``qdq_8x``: per 8.x release, the lines of QuantDequantLinearHelper the 8.x Q/DQ checks are found by
  (its signature, the phrases, its closing brace) and the Q/DQ importer heads.

``tests/test_tensorrt_vectors.py`` checks the committed tables against these in CI and, where the
sources are present, that these are what the sources say.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "tensorrt_vectors.json"
DATA = ROOT / "partition" / "data"
FOLDERS = {"8.5": "onnx-tensorrt-8.5-GA", "8.6": "onnx-tensorrt-8.6-GA", "10.0": "onnx-tensorrt-10.0-GA",
           "10.1": "onnx-tensorrt"}
WEIGHTS = re.compile(r"is_weights|initializer|allValuesKnown|constant tensor|dynamic axes")
#: the phrases the 8.x Q/DQ checks are found by (scripts/tensorrt_checks.py: _release_8x, _qdq_8x)
QDQ_PHRASES = ("requires 3 inputs for the", "Cannot have scale with no coefficients",
               "Scale coefficients must all be positive", "only supports symmetric quantization", 'CHECK(notInvalidType(inputs.at(2), {"UINT8"}))',
               'CHECK(notInvalidType(inputs.at(0), {"UINT8"}))')
QDQ_SIGNATURE = "NodeImportResult QuantDequantLinearHelper("


def cites(obj: Any) -> Iterator[str]:
    """Every citation in a table (the keys ending in ``cite`` and the two named ones), as the tests read them."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key.endswith("cite") or key in ("symmetric_pads", "bidirectional_same"):
                yield from (value if isinstance(value, list) else [value])
            elif key == "requires_distinct":
                yield value[-1]
            else:
                yield from cites(value)
    elif isinstance(obj, list):
        for item in obj:
            yield from cites(item)


def facts(text: str) -> str:
    """What the citation tests need to know about one cited line, without the line: a digest of its
    text, then ``blank``, ``doc=OP`` (an operators.md row), ``importer=OP``, ``refusal``
    (``notInvalidType``), ``weights`` (a weights/initializer check) where they hold."""
    out = [hashlib.sha256(text.strip().encode()).hexdigest()[:10]]
    if not text.strip():
        out.append("blank")
    cells = [c.strip() for c in text.split("|")]
    if text.startswith("| ") and len(cells) > 2:
        out.append(f"doc={cells[1]}")
    m = re.search(r"DEFINE_BUILTIN_OP_IMPORTER\((\w+)\)", text)
    if m:
        out.append(f"importer={m.group(1)}")
    if "notInvalidType" in text:
        out.append("refusal")
    if WEIGHTS.search(text):
        out.append("weights")
    return " ".join(out)


def parse_facts(value: str) -> dict[str, Any]:
    """``facts``' string as a dict: {"sha": ..., "blank": True, "doc": "Conv", ...}."""
    digest, *rest = value.split(" ")
    out: dict[str, Any] = {"sha": digest}
    for item in rest:
        key, _, op = item.partition("=")
        out[key] = op or True
    return out


def _read(reference: Path, release: str, name: str) -> list[str] | None:
    folder = reference / FOLDERS[release]
    if name == "docs/operators.md":
        path = folder / f"operators_{release}.md"
        path = path if path.exists() else folder / "operators.md"
    else:
        path = folder / name
    return path.read_text().split("\n") if path.exists() else None


def parser_vectors(reference: Path) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for release in FOLDERS:
        table = json.loads((DATA / f"tensorrt_{release}.json").read_text())
        wanted = set(cites(table["ops"])) | set(cites({k: v for k, v in table.items()
                                                         if k not in ("ops", "bundled_plugins")}))
        files: dict[str, list[str] | None] = {}
        rows: dict[str, Any] = {}
        for cite in sorted(wanted):
            name, number = cite.rsplit(":", 1)
            if name not in files:
                files[name] = _read(reference, release, name)
            if files[name] is not None:
                rows[cite] = facts(files[name][int(number) - 1])
        out[release] = rows
    return out


def _git(mirror: Path, rev: str, path: str) -> list[str]:
    return subprocess.run(["git", "-C", str(mirror), "show", f"{rev}:{path}"], capture_output=True, text=True,
                          check=True).stdout.split("\n")


def nvinfer_vectors(mirror: Path) -> dict[str, dict[str, str]]:
    table = json.loads((DATA / "tensorrt_dla.json").read_text())
    out: dict[str, dict[str, str]] = {}
    for release, rules in table["releases"].items():
        text = _git(mirror, f"release/{release}", "include/NvInfer.h")
        keep = {i for i, line in enumerate(text) if re.match(r"(class|enum class) \w", line)}
        for cite in rules.values():
            i = int(cite.rsplit(":", 1)[1]) - 1
            keep |= {i, i + 1}
            j = i   # a note in a class's doc comment: the comment run down to the class head
            while j + 1 < len(text) and text[j + 1].startswith("//!"):
                j += 1
            if j + 1 < len(text) and re.match(r"(class|enum class) \w", text[j + 1]):
                keep |= set(range(i, j + 1))
        out[release] = {"length": str(len(text)), **{str(i + 1): text[i] for i in sorted(keep)}}
    return out


def matrix_vectors(dla_sw: Path) -> dict[str, dict[str, str]]:
    table = json.loads((DATA / "tensorrt_dla.json").read_text())
    out: dict[str, dict[str, str]] = {}
    for matrix in table["orin_matrices"].values():
        commit = next(iter(matrix.values()))["cite"].split("@")[1].split(":")[0]
        full = next(c for c in _commits(dla_sw) if c.startswith(commit))
        text = _git(dla_sw, full, "operators/README.md")
        header = next(i for i, line in enumerate(text) if "Orin DLA support through TensorRT" in line)
        rows = {str(header + 1): "| Operator | Orin DLA support through TensorRT |"}
        for i in range(header + 2, len(text)):
            cells = [c.strip() for c in text[i].split("|")]
            if len(cells) >= 3 and re.fullmatch(r"[A-Z]\w*", cells[1]):
                rows[str(i + 1)] = f"| {cells[1]} | {cells[2]} |"
        out[commit] = {"length": str(len(text)), **rows}
    return out


def _commits(repo: Path) -> list[str]:
    return subprocess.run(["git", "-C", str(repo), "rev-list", "--all"], capture_output=True, text=True,
                          check=True).stdout.split()


def qdq_vectors(reference: Path) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for release in ("8.5", "8.6"):
        text = _read(reference, release, "builtin_op_importers.cpp")
        assert text is not None, release
        start = next(i for i, line in enumerate(text) if line.startswith(QDQ_SIGNATURE))
        end = next(i for i in range(start + 1, len(text)) if text[i].startswith("}"))
        keep = {start, end} | {i for i in range(start, end) if any(p in text[i] for p in QDQ_PHRASES)}
        keep |= {i for i, line in enumerate(text)
                 if re.match(r"DEFINE_BUILTIN_OP_IMPORTER\((QuantizeLinear|DequantizeLinear)\)", line)}
        out[release] = {"length": str(len(text)), **{str(i + 1): text[i] for i in sorted(keep)}}
    return out


def build(reference: Path, mirror: Path, dla_sw: Path) -> dict[str, Any]:
    return {"parser": parser_vectors(reference), "nvinfer": nvinfer_vectors(mirror),
            "matrix": matrix_vectors(dla_sw), "qdq_8x": qdq_vectors(reference)}


def lines_of(excerpt: dict[str, str]) -> list[str]:
    """An excerpt as the file's lines: the kept lines at their numbers, the others empty."""
    lines = [""] * int(excerpt["length"])
    for number, text in excerpt.items():
        if number != "length":
            lines[int(number) - 1] = text
    return lines


if __name__ == "__main__":
    vectors = build(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
    OUT.write_text(json.dumps(vectors, separators=(",", ":"), sort_keys=True) + "\n")
    print(OUT, OUT.stat().st_size, "bytes")
