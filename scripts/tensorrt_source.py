"""onnx-tensorrt source of one release, read by phrase: file layouts, helper refusals, base rows.

Used by ``build_tensorrt_tables.py`` (see its docstring); no project code imports it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

DOC_TYPES = {"FP32": "FLOAT", "FP16": "FLOAT16", "BF16": "BFLOAT16", "INT32": "INT32", "INT64": "INT64",
             "INF64": "INT64", "BOOL": "BOOL", "UINT8": "UINT8", "INT8": "INT8", "FP8": "FLOAT8E4M3FN",
             "INT4": "INT4"}
# importerUtils.cpp (8.x: onnx2trt_utils.cpp) helpers: the types each refuses, and the phrase of its check.
# Each is a list of (types, phrase) alternatives, one per wording across releases; the first found wins.
UNARY_DEFAULT = [(["BOOL", "INT32", "INT64", "UINT8"], "By default TRT does not support BOOL, INT32, INT64, and UINT8"),
                 # 8.x and 10.0: INT64 is not in the list (8.x carries INT64 as INT32 anyway)
                 (["BOOL", "INT32", "UINT8"], "By default TRT does not support BOOL, INT32, UINT8 types")]
UNARY_ABS_SIGN = [(["BOOL", "UINT8"], "ABS and SIGN supports everything except BOOL and UINT8")]
UNARY_ABS = UNARY_ABS_SIGN + [(["BOOL", "UINT8"], ("case nvinfer1::UnaryOperation::kABS:", "validUnaryType = "))]
# Neg: the check after the INT32 work-around, not the kNEG label of the op-name table above it
UNARY_NEG = [(["BOOL", "UINT8"], ("WAR: NEG can work with INT32", "validUnaryType = "))]
NOT_BOOL = ["FLOAT", "FLOAT16", "BFLOAT16", "INT32", "INT64", "UINT8", "INT8"]
UNARY_NOT = [(NOT_BOOL, "TRT only supports BOOL types for the NOT")]
ACTIVATION = [(["INT32", "BOOL", "UINT8"], 'notInvalidType(inputs.at(0), {"INT32", "BOOL", "UINT8"}')]
REDUCE = [(["BOOL", "UINT8"], "TensorRT does not support reduction on Bool or UINT8 tensors.")]
ARGMINMAX = [(["UINT8"], "NodeImportResult argMinMaxHelper(")]
SCATTER = [(["UINT8"], "NodeImportResult addScatterLayer(")]
EW_BOOL_ONLY = [(NOT_BOOL, "These operations only support boolean inputs")]
EW_NO_BOOL = [(["BOOL"], "These operations do not support boolean types")]
EW_POW = [(["BOOL", "INT32", "INT64"], "Pow does not support bool or integer types"),
          (["BOOL", "INT32"], "Pow does not support bool or INT32 types")]


def first_found(src: "Src", name: str, alternatives: list) -> tuple[list[str], str] | None:
    for types, phrase in alternatives:
        cite = src.find_after(name, *phrase) if isinstance(phrase, tuple) else src.find(name, phrase)
        if cite is not None:
            return list(types), cite
    return None


#: the 10.x file each check is written against -> that file in the 8.x layout (None: no such file there)
LAYOUT_8 = {"onnxOpImporters.cpp": "builtin_op_importers.cpp", "importerUtils.cpp": "onnx2trt_utils.cpp",
            # 8.x has no checkers: the same checks are ASSERTs in the importers
            "onnxOpCheckers.cpp": "builtin_op_importers.cpp", "WeightsContext.cpp": "onnx2trt_utils.cpp"}
FILES = ("onnxOpImporters.cpp", "onnxOpCheckers.cpp", "ModelImporter.cpp", "importerUtils.cpp", "WeightsContext.cpp",
         "ShapeTensor.cpp", "OnnxAttrs.cpp")


class Src:
    """One release's source files, with phrase -> 'file:line' lookups (None where the phrase is not there).

    Checks are written against the 10.x file names; in an 8.x tree (``builtin_op_importers.cpp``,
    ``onnx2trt_utils.cpp``, no checkers file) the same lookups read the file that holds that code
    there, and a citation names the file it was found in.
    """

    def __init__(self, ref: Path, release: str) -> None:
        self.ref, self.release = ref, release
        self.layout = "10.x" if (ref / "onnxOpImporters.cpp").exists() else "8.x"
        self.alias = {name: name for name in FILES}
        if self.layout == "8.x":
            self.alias.update(LAYOUT_8)
        self.lines: dict[str, list[str]] = {}
        for name in set(self.alias.values()) - {None}:
            path = ref / name
            if path.exists():
                self.lines[name] = path.read_text().split("\n")
        doc = ref / f"operators_{release}.md"
        self.lines["docs/operators.md"] = (doc if doc.exists() else ref / "operators.md").read_text().split("\n")
        self.alias["docs/operators.md"] = "docs/operators.md"
        self.importers = self._ranges("onnxOpImporters.cpp", r"DEFINE_BUILTIN_OP_IMPORTER\((\w+)\)")
        self.checkers = self._ranges("onnxOpCheckers.cpp", r"DEFINE_OP_(?:EMPTY_)?CHECKER\((\w+)\)") \
            if self.layout == "10.x" else {}
        self.doc = self._doc_rows()

    def file(self, name: str) -> str | None:
        """The file of this release that holds what ``name`` holds in 10.x (None: not in this release)."""
        actual = self.alias.get(name, name)
        return actual if actual in self.lines else None

    def _ranges(self, name: str, pattern: str) -> dict[str, tuple[int, int]]:
        """op -> (first, last line) of its definition: up to the closing brace in column 0, so a
        helper defined between two importers (the Q/DQ helper after DepthToSpace) is no one's."""
        if self.file(name) is None:
            return {}
        lines = self.lines[self.file(name)]
        starts = [(m.group(1), i + 1) for i, line in enumerate(lines) if (m := re.match(pattern, line))]
        out = {}
        for k, (op, start) in enumerate(starts):
            limit = starts[k + 1][1] - 1 if k + 1 < len(starts) else len(lines)
            end = next((i + 1 for i in range(start, limit) if lines[i].startswith("}")), limit)
            out[op] = (start, end)
        return out

    def function(self, name: str, signature: str) -> tuple[int, int] | None:
        """(first, last line) of the free function whose definition line starts with ``signature``."""
        if self.file(name) is None:
            return None
        lines = self.lines[self.file(name)]
        start = next((i for i, line in enumerate(lines) if line.startswith(signature)), None)
        if start is None:
            return None
        end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("}"))
        return start + 1, end + 1

    def find_after(self, name: str, anchor: str, phrase: str) -> str | None:
        """The first ``phrase`` after the line holding ``anchor`` (a case label, a comment)."""
        at = self.find(name, anchor)
        if at is None:
            return None
        return self.find(name, phrase, (int(at.rsplit(":", 1)[1]), len(self.lines[self.file(name)])))

    def _doc_rows(self) -> dict[str, dict[str, Any]]:
        rows = {}
        for i, line in enumerate(self.lines["docs/operators.md"]):
            cells = [c.strip() for c in line.split("|")]
            if len(cells) >= 3 and line.startswith("| ") and cells[2] in ("Y", "N"):
                types = [DOC_TYPES[t.strip()] for t in (cells[3] if len(cells) > 3 else "").replace(" BOOL", ", BOOL")
                         .split(",") if t.strip() in DOC_TYPES]
                rows[cells[1]] = {"line": i + 1, "supported": cells[2] == "Y", "types": list(dict.fromkeys(types)),
                                  "restrictions": cells[4] if len(cells) > 4 else ""}
        return rows

    def find(self, name: str, phrase: str | None, within: tuple[int, int] | None = None) -> str | None:
        """'file:line' of the first line holding ``phrase`` (None: not in this release)."""
        actual = self.file(name)
        if actual is None or phrase is None:
            return None
        if within is None and name == "onnxOpCheckers.cpp" and self.layout == "8.x":
            # 8.x: a checker's check is an ASSERT in the importer or in the helper it calls
            return self.find("onnxOpImporters.cpp", phrase) or self.find("importerUtils.cpp", phrase)
        lines = self.lines[actual]
        lo, hi = within or (1, len(lines))
        for i in range(lo - 1, hi):
            if phrase in lines[i]:
                return f"{actual}:{i + 1}"
        return None

    def imp(self, op: str, phrase: str | None = None) -> str | None:
        if op not in self.importers:
            return None
        start, end = self.importers[op]
        return f"{self.file('onnxOpImporters.cpp')}:{start}" if phrase is None else \
            self.find("onnxOpImporters.cpp", phrase, (start, end))

    def chk(self, op: str, phrase: str | None = None) -> str | None:
        if self.layout == "8.x":  # the check sits in the op's importer
            return self.imp(op, phrase) if phrase is not None else None
        if op not in self.checkers:
            return None
        start, end = self.checkers[op]
        return f"onnxOpCheckers.cpp:{start}" if phrase is None else self.find("onnxOpCheckers.cpp", phrase,
                                                                              (start, end))

    def docrow(self, op: str) -> str | None:
        return f"docs/operators.md:{self.doc[op]['line']}" if op in self.doc else None

    def refuses_checker(self, op: str) -> bool:
        if op not in self.checkers:
            return False
        start, end = self.checkers[op]
        body = "\n".join(self.lines["onnxOpCheckers.cpp"][start - 1:end])
        return "STATIC_CHECK(false," in body


def helper_refusal(src: Src, op: str) -> tuple[list[str], str] | None:
    """The types refused by the importerUtils helper this op's importer returns through."""
    start, end = src.importers[op]
    body = "\n".join(src.lines[src.file("onnxOpImporters.cpp")][start - 1:min(end, start + 12)])
    u = "importerUtils.cpp"
    # only a unary applied to the node's own input 0 (10.0's IsNaN applies NOT to an Equal's BOOL result)
    if re.search(r"unaryHelper\([^;]*inputs(\.at\(0\)|\[0\])", body) and body.count("return ") <= 2:
        if "kSIGN" in body and first_found(src, u, UNARY_ABS_SIGN) is None:
            kind = UNARY_DEFAULT  # before 10.1, Sign had no case of its own: the default list applies
        else:
            kind = UNARY_ABS if ("kABS" in body or "kSIGN" in body) else UNARY_NEG if "kNEG" in body else \
                UNARY_NOT if "kNOT" in body else UNARY_DEFAULT
        return first_found(src, u, kind)
    for key, kind in (("activationHelper(", ACTIVATION), ("argMinMaxHelper(", ARGMINMAX),
                      ("addScatterLayer(", SCATTER)):
        if key in body:
            return first_found(src, u, kind)
    if "reduceTensor(" in body:
        return first_found(src, u, REDUCE)
    if "elementwiseHelper(" in body:
        kind = EW_BOOL_ONLY if re.search(r"k(AND|OR|XOR)\)", body) else EW_POW if "kPOW" in body else \
            None if "kEQUAL" in body else EW_NO_BOOL
        return first_found(src, u, kind) if kind else None
    return None


def importer_refusals(src: Src, op: str) -> dict[int, tuple[list[str], str]]:
    """notInvalidType(inputs.at(i), {...}) calls inside the op's own importer."""
    start, end = src.importers[op]
    out: dict[int, tuple[list[str], str]] = {}
    for i in range(start - 1, end):
        m = re.search(r'notInvalidType\(inputs\.at\((\d)\), \{([^}]*)\}', src.lines[src.file("onnxOpImporters.cpp")][i])
        if m and int(m.group(1)) not in out:
            out[int(m.group(1))] = ([t.strip().strip('"') for t in m.group(2).split(",")],
                                    f"{src.file('onnxOpImporters.cpp')}:{i + 1}")
    return out


ELEMENTWISE = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Equal", "Greater", "Less",
               "GreaterOrEqual", "LessOrEqual", "And", "Or", "Xor", "Mod", "PRelu"}


def base_row(src: Src, op: str) -> dict[str, Any]:
    doc = src.doc.get(op)
    cite: list[str] = []
    row: dict[str, Any] = {}
    if doc:
        cite.append(src.docrow(op))
        row["supported"] = doc["supported"]
    if op in src.importers:
        cite.append(src.imp(op))
    if src.refuses_checker(op):
        row["supported"] = False
        cite.insert(0, src.chk(op, "STATIC_CHECK(false,"))
    elif not doc:
        row["supported"] = op in src.importers
    row["cite"] = cite
    if not row["supported"]:
        return row
    types = list(doc["types"]) if doc and doc["types"] else None
    refused: dict[str, dict[str, Any]] = {}
    if op in src.importers:
        helper = helper_refusal(src, op)
        if helper:
            refused["0"] = {"types": helper[0], "cite": helper[1]}
        for index, (bad, where) in importer_refusals(src, op).items():
            refused[str(index)] = {"types": sorted(set(bad) | set(refused.get(str(index), {}).get("types", []))),
                                   "cite": where}
    if types is not None:
        row["types"] = [t for t in types if t not in refused.get("0", {}).get("types", [])]
    if refused:
        row["refuses"] = refused
    if op in ELEMENTWISE:
        row["all_inputs"] = True
    return row
