"""Regenerate ``tensorrt_<release>.json`` from onnx-tensorrt's own source (run by hand, not at import).

    python scripts/build_tensorrt_tables.py REFERENCE_ROOT [NVIDIA_TENSORRT_MIRROR [DLA_SW_MIRROR]]

``REFERENCE_ROOT`` holds one folder of onnx-tensorrt parser source per release
(``/work/shared/reference``: ``onnx-tensorrt-8.5-GA``, ``-8.6-GA``, ``-10.0-GA`` and
``onnx-tensorrt`` for 10.1, at their tags; see ``RELEASES``). Both layouts are read:
8.x (``builtin_op_importers.cpp``, ``onnx2trt_utils.cpp``, checks as ASSERTs in the
importers) and 10.x (``onnxOpImporters.cpp``, ``onnxOpCheckers.cpp``, ``importerUtils.cpp``,
``WeightsContext.cpp``, ``OnnxAttrs.cpp``). Every citation is *found* by searching for the
check's own phrase (never typed as a number), so a row's ``file:line`` points at the check it
describes; a 10.1 check whose phrase is not in an older release is left out there and listed
in that table's ``not_in_source``. ``tests/test_tensorrt_rules_data.py`` re-reads every line.
``NVIDIA_TENSORRT_MIRROR`` (a git mirror of NVIDIA/TensorRT) gives each release's bundled
plugins (``release/<X.Y>:plugin/README.md``) and the DLA notes of ``include/NvInfer.h``
(``tensorrt_dla.json``); ``DLA_SW_MIRROR`` (NVIDIA/Deep-Learning-Accelerator-SW) its Orin DLA
operator matrix.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent / "partition" / "data"  
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


def _has_none(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, dict):
        return any(_has_none(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_none(v) for v in value)
    return False


def _group(key: str) -> str:
    """Keys that stand or fall together: a check, its citation, its message."""
    for suffix in ("_cite", "_message"):
        if key.endswith(suffix):
            key = key[:-len(suffix)]
    return {"rank_min": "rank", "cite_more": "types", "types_cite": "types", "value_cite": "inputs"}.get(key, key)


def _prune(op: str, extra: dict[str, Any], dropped: list[str]) -> dict[str, Any]:
    """``extra`` without the checks whose source line this release does not have (a lookup gave None)."""
    extra = dict(extra)
    for key in ("attrs", "inputs", "refuses"):
        if key not in extra:
            continue
        items = extra[key]
        if key == "attrs":
            dropped.extend(f"{op}.attrs.{spec['name']}" for spec in items if _has_none(spec))
            extra[key] = [spec for spec in items if not _has_none(spec)]
        else:
            dropped.extend(f"{op}.{key}.{k}" for k, spec in items.items() if _has_none(spec))
            extra[key] = {k: spec for k, spec in items.items() if not _has_none(spec)}
        if not extra[key]:
            del extra[key]
    bad = {_group(k) for k, v in extra.items() if _has_none(v) and not (k == "types" and v is None)}
    if bad:
        dropped.append(f"{op}: {', '.join(sorted(bad))}")
    return {k: v for k, v in extra.items() if _group(k) not in bad}


def _merge(*parts: dict[str, dict[str, Any]], dropped: list[str]) -> dict[str, dict[str, Any]]:
    """The parts' per-op checks, one dict per op. A check whose source line is not in this release
    is left out and listed in ``dropped``: it is not this release's code."""
    out: dict[str, dict[str, Any]] = {}
    for part in parts:
        for op, extra in part.items():
            extra = _prune(op, extra, dropped)
            if not extra:
                continue
            row = out.setdefault(op, {})
            for key, value in extra.items():
                row[key] = row.get(key, []) + value if key in ("cite_more", "attrs") else value
    return out


def overlay(src: Src, dropped: list[str]) -> dict[str, dict[str, Any]]:
    """Per-op restrictions beyond the generated type lists, each with the phrase that proves it."""
    parts = [_types(src), _weights_inputs(src), _other_inputs(src), _qdq(src), _attrs(src), _pool_rnn(src),
             _structure(src), _audit(src)]
    if src.layout == "8.x":
        parts.append(_release_8x(src))
    return _merge(*parts, dropped=dropped)


def _release_8x(src: Src) -> dict[str, dict[str, Any]]:
    """What the 8.x importers check that 10.x no longer does."""
    qdq = src.function("onnxOpImporters.cpp", "NodeImportResult QuantDequantLinearHelper(")
    three = src.find("onnxOpImporters.cpp", "requires 3 inputs for the INT8 QuantizeLinear/DequantizeLinear", qdq) \
        if qdq else None
    norm = src.function("importerUtils.cpp", "NodeImportResult instanceNormPluginHelper(")
    plugin = src.find("importerUtils.cpp", 'std::string const pluginName = "InstanceNormalization_TRT";', norm) \
        if norm else None

    def weights(what: str, phrase: str) -> dict[str, Any]:  # 8.5: in the importer; 8.6: in the plugin helper
        cite = src.imp("InstanceNormalization", phrase) or (src.find("importerUtils.cpp", phrase, norm) if norm else None)
        return {"kind": "weights", "what": what, "cite": cite}
    plugin = plugin or src.imp("InstanceNormalization", 'std::string const pluginName = "InstanceNormalization_TRT";')
    o: dict[str, dict[str, Any]] = {}
    for op in ("QuantizeLinear", "DequantizeLinear"):
        o[op] = {"min_inputs": 3, "min_inputs_cite": three or src.imp(op, f"requires 3 inputs for the {op} operator"),
                 "min_inputs_message": f"{op}: this TensorRT release needs the zero-point input (input 2) for INT8"}
    # attributes the 8.x importers never read: accepted, but TensorRT computes something else
    o["ScatterND"] = {"ignored_attrs": [{"name": "reduction", "cite": src.imp("ScatterND"),
                                         "note": "ScatterND reduction={value} is ignored by this release's importer: "
                                                 "TensorRT overwrites instead of reducing (wrong results)"}]}
    o["Shape"] = {"ignored_attrs": [{"name": n, "cite": src.imp("Shape"),
                                     "note": "Shape " + n + "={value} (opset 15) is ignored by this release's importer: "
                                             "TensorRT returns the whole shape"} for n in ("start", "end")]}
    o["InstanceNormalization"] = {
        "inputs": {"1": weights("scale", "The scale tensor is required to be an initializer."),
                   "2": weights("bias", "The bias tensor is required to be an initializer.")},
        "plugin_note": "imported through the InstanceNormalization_TRT plugin (version 1) unless the parser's "
                       "kNATIVE_INSTANCENORM flag is set; libnvinfer_plugin must be loaded",
        "cite_more": [plugin]}
    return o


def _types(src: Src) -> dict[str, dict[str, Any]]:
    I, U = src.imp, (lambda p: src.find("importerUtils.cpp", p))
    F = ["FLOAT", "FLOAT16", "BFLOAT16"]
    fp32_16 = {"GlobalLpPool": "(inputType == DataType::kFLOAT || inputType == DataType::kHALF)",
               "LpPool": "(dt == DataType::kFLOAT || dt == DataType::kHALF)",
               "LpNormalization": "(dt == DataType::kFLOAT || dt == DataType::kHALF)",
               "InstanceNormalization": "(inputDataType == DataType::kFLOAT || inputDataType == DataType::kHALF)",
               "Mish": "x->getType() == DataType::kFLOAT || x->getType() == DataType::kHALF"}
    o: dict[str, dict[str, Any]] = {op: {"types": ["FLOAT", "FLOAT16"], "cite_more": [I(op, phrase)]}
                                    for op, phrase in fp32_16.items()}
    o.update({
        "Cast": {"types": None},
        "ConstantOfShape": {"types": None},
        "Equal": {"types": F + ["INT32", "INT64", "BOOL"], "cite_more": [U("// Equal supports all types.")]},
        "ArgMax": {"output_types": {"0": ["INT32", "INT64"]}},
        "ArgMin": {"output_types": {"0": ["INT32", "INT64"]}},
        "Range": {"types": ["FLOAT", "INT32", "INT64"], "all_inputs": True,
                  "cite_more": [I("Range", "only supports int32, int64, and float input types for Range")]},
        "NonZero": {"data_dependent_shape": True, "output_types": {"0": ["INT64"]},
                    "types": F + ["INT32", "INT64", "INT8", "BOOL"],
                    "cite_more": [I("NonZero", "Only FLOAT32, FLOAT16, BFLOAT16, INT32, INT64, INT8 or BOOL")]},
        "NonMaxSuppression": {"data_dependent_shape": True, "input_types": {"2": ["INT32", "INT64"], "3": F, "4": F},
                              "output_types": {"0": ["INT32", "INT64"]}},
        "Shrink": {"types": ["FLOAT", "FLOAT16", "INT8", "INT32", "INT64"],
                   "cite_more": [I("Shrink", "Only FLOAT, HALF, INT8, INT32, and INT64 are supported in Shrink")]},
        "TopK": {"output_types": {"1": ["INT32", "INT64"]}},
        "If": {"control_flow": True}, "Loop": {"control_flow": True}, "Scan": {"control_flow": True},
    })
    return o


def _weights_inputs(src: Src) -> dict[str, dict[str, Any]]:
    """Inputs the importers read with ``is_weights()`` / ``assertIsWeights`` / ``allValuesKnown()``."""
    I = src.imp

    def w(what: str, cite: str, **more: Any) -> dict[str, Any]:
        return {"kind": "weights", "what": what, "cite": cite, **more}
    axes = w("axes", src.find("importerUtils.cpp", "Axis input must be an initializer!"))
    o: dict[str, dict[str, Any]] = {op: {"inputs": {"1": axes}} for op in (
        "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin",
        "ReduceProd", "ReduceSum", "ReduceSumSquare")}
    o.update({
        "CumSum": {"inputs": {"1": w("axis", I("CumSum", "Axis input for CumSum must be an initializer"))}},
        "Dropout": {"inputs": {
            "1": {"kind": "any", "cite": I("Dropout")},
            # an empty name in slot 2 still counts (node.input().size() == 3) and is no initializer
            "2": w("training_mode", I("Dropout", "only supports the training_mode input as an initializer"),
                   equals=0, value_cite=I("Dropout", "does not support the Dropout operator in training"),
                   empty_refused=True)}},
        "Squeeze": {"inputs": {"1": w("axes", I("Squeeze", "Squeeze axes input must be an initializer"))}},
        "Unsqueeze": {"inputs": {"1": w("axes", I("Unsqueeze", "should be a constant tensor"))}},
        "Pad": {"inputs": {"1": {"kind": "any", "what": "pads", "cite": I("Pad", "if (inputs.at(1).is_weights())")},
                           "2": {"kind": "any", "what": "constant_value",
                                 "cite": I("Pad", "if (inputs.at(2).is_weights())")},
                           "3": w("axes", I("Pad", "does not support dynamic axes for pad"))}},
        "Slice": {"inputs": {
            "1": {"kind": "any", "what": "starts",
                  "cite": I("Slice", "castHelper(ctx, &convertToTensor(inputs.at(1)")},
            "2": {"kind": "any", "what": "ends", "cite": I("Slice", "castHelper(ctx, &convertToTensor(inputs.at(2)")},
            "3": w("axes", I("Slice", "does not support dynamic axes"))}},
        "RandomUniformLike": {"inputs": {"0": {"kind": "not_weights",
                                               "cite": I("RandomUniformLike", "cannot be an initializer")}}},
        "RandomNormalLike": {"inputs": {"0": {"kind": "not_weights",
                                              "cite": I("RandomNormalLike", "cannot be an initializer")}}},
    })
    return o


def _other_inputs(src: Src) -> dict[str, dict[str, Any]]:
    """Inputs any tensor may feed, and shape-tensor inputs."""
    I, D = src.imp, src.docrow

    def any_(what: str, cite: str, **more: Any) -> dict[str, Any]:
        return {"kind": "any", "what": what, "cite": cite, **more}

    def shape(what: str, cite: str) -> dict[str, Any]:
        # Shape operands: the parser wraps any tensor in a shape tensor (ShapeTensor(convertToTensor(...))),
        # so a graph input is accepted; whether the build resolves it is a build-time question.
        return {"kind": "any", "what": what, "cite": cite}
    clip = I("Clip", "elementwiseClip |= inputs.at(i).is_tensor()")
    return {
        "CastLike": {"inputs": {"1": any_("target", I("CastLike", "convertToTensor(inputs.at(1)"))}},
        "Clip": {"inputs": {"1": any_("min", clip), "2": any_("max", clip)}},
        "Split": {"inputs": {"1": any_("split", I("Split", "if (inputs.at(1).is_weights())"))}},
        "Trilu": {"inputs": {"1": any_("k", I("Trilu"))}},
        "TopK": {"inputs": {"1": any_("K", I("TopK", "nvinfer1::ITensor* kPtr = &convertToTensor(inputs.at(1), ctx);"),
                                      less_than=3840, value_cite=D("TopK"))}},
        "Upsample": {"inputs": {"1": any_("scales", I("Upsample", "if (scales_input.is_weights())"))}},
        "Resize": {"inputs": {"1": any_("roi", I("Resize")),
                              "2": any_("scales", I("Resize", "if (scales.is_weights())")),
                              "3": shape("sizes", I("Resize", "if (inputs.at(3).is_weights())"))}},
        "OneHot": {"inputs": {"1": any_("depth", I("OneHot", "depth = castHelper(ctx, depth"))}},
        "Reshape": {"inputs": {"1": shape("shape", I("Reshape"))}},
        "Expand": {"inputs": {"1": shape("shape", I("Expand", "The shape tensor is required to be 1D"))}},
        "Tile": {"inputs": {"1": shape("repeats", I("Tile"))}},
        "ConstantOfShape": {"inputs": {"0": shape("shape", I("ConstantOfShape"))}},
    }


def _qdq(src: Src) -> dict[str, dict[str, Any]]:
    """QuantizeLinear/DequantizeLinear: their shared helper, QuantDequantLinearHelper."""
    helper = src.function("onnxOpImporters.cpp", "NodeImportResult QuantDequantLinearHelper(")

    def at(phrase: str) -> str:
        return src.find("onnxOpImporters.cpp", phrase, helper)
    quant, F = ["INT8", "FLOAT8E4M3FN", "INT4"], ["FLOAT", "FLOAT16", "BFLOAT16"]
    scale = {"kind": "any", "what": "scale", "static_shape": True, "positive": True,
             "cite": at("Dynamic shape for scale tensor is not supported"),
             "value_cite": at("Scale coefficients must all be positive")}
    symmetric = at("TensorRT only supports symmetric quantization")
    return {
        "QuantizeLinear": {
            # no zero point (ONNX: UINT8 output) or a UINT8 one (weights arrive as INT32): TensorRT makes INT8
            "types": F, "output_types": {"0": quant + ["UINT8"]}, "input_types": {"2": quant + ["INT32"]},
            "output_as": {"UINT8": "INT8"}, "output_as_cite": at("ONNX default is UINT8, TRT will default to INT8"),
            "qdq_axis": at("The number of scales is not equal to the number of output channels"),
            "refuses": {"2": {"types": ["UINT8"], "cite": at('CHECK_STATUS(notInvalidType(inputs.at(2), {"UINT8"}')}},
            "inputs": {"1": scale, "2": {"kind": "any", "what": "zero point", "all_zero": True,
                                         "cite": at('CHECK_STATUS(notInvalidType(inputs.at(2), {"UINT8"}'),
                                         "value_cite": symmetric}}},
        "DequantizeLinear": {
            "types": quant, "output_types": {"0": F}, "input_types": {"2": quant + ["INT32"]},
            "qdq_axis": at("The number of scales is not equal to the number of output channels"),
            "refuses": {"0": {"types": ["UINT8"], "cite": at('CHECK_STATUS(notInvalidType(inputs.at(0), {"UINT8"}')}},
            "inputs": {"1": scale, "2": {"kind": "any", "what": "zero point", "all_zero": True,
                                         "cite": at("zero_point. TensorRT will use"), "value_cite": symmetric}}},
    }


def _attr(name: str, message: str, cite: str, **spec: Any) -> dict[str, Any]:
    return {"name": name, **spec, "message": message, "cite": cite}


def _attrs(src: Src) -> dict[str, dict[str, Any]]:
    I, K = src.imp, src.chk
    quant = ["INT8", "FLOAT8E4M3FN", "INT4"]
    known = ["FLOAT", "DOUBLE", "INT8", "UINT8", "FLOAT16", "BFLOAT16", "BOOL", "INT32", "INT64", "FLOAT8E4M3FN",
             "INT4"]
    ctm = ["half_pixel", "pytorch_half_pixel", "tf_half_pixel_for_nn", "asymmetric", "align_corners"]
    return {
        "Cast": {"attrs": [
            _attr("to", "Cast to {value}: the parser has no TensorRT type for it",
                  K("Cast", "Unsupported data type for the Cast operator"), **{"as": "dtype"}, allowed=known),
            _attr("to", "Cast to {value}: {value} is a quantized type in TensorRT, reached only through "
                        "QuantizeLinear/DequantizeLinear, never by a cast",
                  I("Cast", "TRT will reject casts to FP8"), **{"as": "dtype"}, forbidden=quant)]},
        "Upsample": {"attrs": [_attr("mode", "Upsample mode={value}: only nearest, linear or bilinear",
                                     K("Upsample", "mode can only be nearest, linear, or bilinear"),
                                     allowed=["nearest", "linear", "bilinear"], default="nearest")]},
        "Resize": {"attrs": [
            _attr("mode", "Resize mode={value}: only nearest, linear and cubic", K("Resize", "Invalid Resize mode"),
                  allowed=["nearest", "linear", "cubic"], default="nearest"),
            _attr("coordinate_transformation_mode", "Resize coordinate_transformation_mode={value} not supported",
                  K("Resize", "TensorRT only supports half_pixel, pytorch_half_pixel"), min_opset=11, allowed=ctm,
                  default="half_pixel"),
            _attr("antialias", "Resize antialias={value}: antialiasing is not supported",
                  K("Resize", "STATIC_CHECK((antialias == 0)"), allowed=[0], default=0),
            _attr("keep_aspect_ratio_policy", "Resize keep_aspect_ratio_policy={value}: only stretch",
                  K("Resize", "Only `stretch` is supported"), allowed=["stretch"], default="stretch")]},
        "Dropout": {"attrs": [_attr("is_test", "Dropout is_test={value}: training mode is not supported",
                                    K("Dropout", "does not support the Droupout operator with training mode"),
                                    allowed=[1], default=1, max_opset=6)]},
        "ScatterND": {"attrs": [_attr("reduction", "ScatterND reduction={value}: not supported",
                                      I("ScatterND", "Attribute reduction is not supported"), absent=True)]},
        "BatchNormalization": {"attrs": [_attr(
            "training_mode", "BatchNormalization training_mode={value}: only inference (0)",
            K("BatchNormalization", "does not support training_mode == 1"), allowed=[0], default=0)]},
        "LpNormalization": {"attrs": [_attr("p", "LpNormalization p={value}: only 1 or 2",
                                            K("LpNormalization", "Only L1 and L2 normalization are supported"),
                                            allowed=[1, 2], default=2)]},
        "Gelu": {"attrs": [_attr("approximate", "Gelu approximate={value}: only none or tanh",
                                 I("Gelu", "Invalid value provided for the Gelu"), allowed=["none", "tanh"],
                                 default="none")]},
        "Constant": {"attrs": [_attr(n, f"Constant {n}: not supported", K("Constant", '!attrs.count("sparse_value")'),
                                     absent=True) for n in ("sparse_value", "value_string", "value_strings")]},
        "RoiAlign": {"attrs": [
            _attr("mode", "RoiAlign mode={value}: only avg or max", K("RoiAlign", "Mode must be avg or max"),
                  allowed=["avg", "max"], default="avg"),
            _attr("coordinate_transformation_mode", "RoiAlign coordinate_transformation_mode={value} not supported",
                  K("RoiAlign", "Coordinate transformation mode must be half_pixel"), min_opset=16,
                  allowed=["half_pixel", "output_half_pixel"], default="half_pixel")]},
    }


def _pool_rnn(src: Src) -> dict[str, dict[str, Any]]:
    K, D = src.chk, src.docrow
    dil = src.find("onnxOpCheckers.cpp", "does not support dilations other than 1")
    return {
        "MaxPool": {"max_outputs": 1, "max_outputs_message": "MaxPool: the Indices output is not supported",
                    "max_outputs_cite": K("MaxPool", "does not support the indices output in MaxPool"),
                    "attrs": [_attr("dilations", "MaxPool dilations={value}: only 1", dil, all_equal=1,
                                    min_opset=10)]},
        "AveragePool": {"attrs": [_attr("dilations", "AveragePool dilations={value}: only 1", dil, all_equal=1,
                                        min_opset=10)]},
        "LpPool": {"attrs": [_attr("p", "LpPool p={value}: only 1 or 2",
                                   K("LpPool", "Only L1 and L2 normalization are supported"), allowed=[1, 2],
                                   default=2),
                             _attr("dilations", "LpPool dilations={value}: only 1", D("LpPool"), all_equal=1)]},
        "LSTM": {"attrs": [
            _attr("input_forget", "LSTM input_forget={value}: coupled input/forget gates are not supported",
                  K("LSTM", "Coupled input/forget is unsupported"), allowed=[0], default=0),
            _attr("layout", "LSTM layout={value}: only 0 (documented; the parser does not check it and would read "
                            "the tensors as layout 0)", D("LSTM"), allowed=[0], default=0)],
            "bidirectional_same": K("LSTM", "std::equal(activations.begin()")},
        "GRU": {"bidirectional_same": K("GRU", "std::equal(activations.begin()")},
        "RNN": {"bidirectional_same": K("RNN", "std::equal(activations.begin()")},
    }


def _structure(src: Src) -> dict[str, dict[str, Any]]:
    I, K, D, U = src.imp, src.chk, src.docrow, (lambda p: src.find("importerUtils.cpp", p))
    return {
        "Resize": {"requires": [{
            "if": {"coordinate_transformation_mode": "tf_half_pixel_for_nn"}, "min_opset": 11,
            "then": {"nearest_mode": ["round_prefer_floor"]}, "default": {"nearest_mode": "round_prefer_floor"},
            "message": "Resize: tf_half_pixel_for_nn takes only nearest_mode=round_prefer_floor, not {value}",
            "cite": K("Resize", "only support round_prefer_floor nearest mode")}]},
        "ScatterElements": {"plugin_when": {"attr": "reduction", "not": "none", "plugin": "ScatterElements",
                                            "cite": I("ScatterElements", "return scatterPluginHelper(")}},
        "ReverseSequence": {"requires_distinct": ["batch_axis", 1, "time_axis", 0, K(
            "ReverseSequence", "batch_axis and time_axis cannot be the same")]},
        "RoiAlign": {"data_dependent_shape": True, "plugin": "ROIAlign_TRT",
                     "plugin_cite": I("RoiAlign", 'std::string const pluginName = "ROIAlign_TRT";'),
                     "input_types": {"1": ["FLOAT", "FLOAT16", "BFLOAT16"], "2": ["INT32", "INT64"]}},
        "InstanceNormalization": {"plugin_note": "may use the InstanceNormalization_TRT plugin",
                                  "cite_more": [U('std::string const pluginName = "InstanceNormalization_TRT";')]},
        "LayerNormalization": {"max_outputs": 1,
                               "max_outputs_message": "LayerNormalization: only the first output Y is supported",
                               "max_outputs_cite": D("LayerNormalization")},
        "EyeLike": {"rank": [2], "static_input": True, "rank_cite": I("EyeLike", "Only 2D tensors are supported. Input must be of rank 2"),
                    "static_cite": I("EyeLike", "Eyelike does not work for dynamically shaped tensors")},
        "GridSample": {"rank": [4], "rank_cite": D("GridSample")},
        "DeformConv": {"types": ["FLOAT", "FLOAT16"], "same_types": True, "rank": [3, 4],
                       "rank_cite": U("TensorRT only supports DeformConv on 3D, or 4D tensors"),
                       "same_types_cite": I("DeformConv", "Inputs must be either all FLOAT or all FLOAT16"),
                       "symmetric_pads": U("TensorRT only support the pads attribute of the DeformConv"),
                       "plugin_note": "imported through the ModulatedDeformConv2d plugin",
                       "cite_more": [U('std::string const pluginName = "ModulatedDeformConv2d";')]},
        "Mod": {"requires_int_when": {"attr": "fmod", "value": 0, "cite": I("Mod", "The fmod attribute is set to 0")}},
    }


def activation_names(src: Src) -> tuple[list[str], str]:
    """The RNN activation names OnnxAttrs maps to TensorRT (anything else throws), and that throw's line."""
    start, end = src.function("OnnxAttrs.cpp", "inline nvinfer1::ActivationType activationStringToEnum(")
    names = [m.group(1) for line in src.lines["OnnxAttrs.cpp"][start - 1:end]
             if (m := re.search(r'if \(type == "(\w+)"\)', line))]
    return names, src.find("OnnxAttrs.cpp", "Unknown activation type", (start, end))


def _audit(src: Src) -> dict[str, dict[str, Any]]:
    """Checks an audit against the 10.1 source found missing or wrong (see docs/tensorrt.md)."""
    I, K, U = src.imp, src.chk, (lambda p: src.find("importerUtils.cpp", p))
    F = ["FLOAT", "FLOAT16", "BFLOAT16"]
    m = lambda p: src.find("ModelImporter.cpp", p)  # noqa: E731
    pool = {"pool_spatial": U("(nbSpatialDims == 1 && needToExpandDims) || nbSpatialDims == 2 || nbSpatialDims == 3")}
    acts, act_cite = activation_names(src)
    rnn = {"attrs": [_attr("activations", "{op} activations={value}: TensorRT maps only " + ", ".join(acts),
                           act_cite, each_allowed=acts)]}
    extra_outputs = m("Node has more output tensors than TRT expected")
    o: dict[str, dict[str, Any]] = {
        "MaxPool": dict(pool), "AveragePool": dict(pool),
        "ConvTranspose": {"rank": [3, 4, 5], "rank_cite": I("ConvTranspose", "Deconvolution input must be at least 3D"),
                          "deconv_pre_padding": I("ConvTranspose", "does not support negative pre-padding")},
        "Resize": {"resize_scales": {
            "linear": 3, "linear_cite": I("Resize", "only supports linear resizing on the outermost 3"),
            "cubic": 2, "cubic_cite": I("Resize", "only supports cubic resizing on the outermost 2"),
            "axes_cite": I("Resize", "Currently, `axes` attribute is supported with `scales` tensor only")}},
        "Upsample": {"resize_scales": {
            "linear": 3, "linear_cite": I("Upsample", "only supports linear resizing on the outermost 3")}},
        "Squeeze": {"static_without_axes": I("Squeeze", "Cannot infer squeeze dimensions from a dynamic shape")},
        "Einsum": {"attrs": [_attr("equation", "Einsum equation={value}: only lower-case letters, ',', '->', '...' "
                                               "and spaces", K("Einsum", "Invalid character(s) in Einsum equation"),
                                   charset="abcdefghijklmnopqrstuvwxyz->., ")]},
        "LSTM": rnn, "GRU": rnn, "RNN": rnn,
        "GroupNormalization": {"rank_min": 3, "rank_cite": U("Input to normalization should be at least 3D")},
        "HardSwish": {"types": ["FLOAT", "FLOAT16"],
                      "cite_more": [I("HardSwish", "Only FLOAT, HALF or INT8 input is supported for the HardSwish")]},
        "Clip": {"types": F + ["INT32", "INT64"],
                 "cite_more": [I("Clip", "only supports floating-point, INT32, or INT64 inputs for Clip")]},
        # no type check in the importer: the code takes what the doc's list leaves out
        "CumSum": {"types": F + ["INT32", "INT64"]},
        "Scan": {"types": None},
        "Identity": {"types": F + ["INT32", "INT64", "BOOL", "UINT8"]},
        "Shape": {"types": F + ["INT32", "INT64", "BOOL", "UINT8"]},
        "If": {"constant_condition": I("If", "For constant conditions, parse only the selected subgraph")},
        "LayerNormalization": {"max_outputs_cite": extra_outputs},
        "BatchNormalization": {"max_outputs": 1, "max_outputs_cite": extra_outputs,
                               "max_outputs_message": "BatchNormalization: the training outputs (running mean and "
                                                      "variance) are not supported"},
    }
    for op, checker in (("RandomUniform", "randomUniform"), ("RandomUniformLike", "randomUniform"),
                        ("RandomNormal", "randomNormal"), ("RandomNormalLike", "randomNormal")):
        o[op] = {"attrs": [_attr("dtype", f"{op} dtype={{value}}: only FLOAT or FLOAT16",
                                 src.find("onnxOpCheckers.cpp", f"Unsupported data type in {checker}"),
                                 **{"as": "dtype"}, allowed=["FLOAT", "FLOAT16"])]}
    unary = first_found(src, "importerUtils.cpp", UNARY_DEFAULT)
    if unary is not None:
        integers = [t for t in unary[0] if t in ("INT32", "INT64")]
        for op in ("ReduceL2", "ReduceLogSum", "ReduceLogSumExp"):  # the trailing sqrt/log (exp first) is a unary
            o[op] = {"types": [t for t in F + ["INT32", "INT64"] if t not in integers],
                     "refuses": {"0": {"types": integers, "cite": unary[1]}}}
    return o


#: the releases we have the parser source of: folder under the reference root, tag, commit
RELEASES = {
    "8.5": ("onnx-tensorrt-8.5-GA", "release/8.5-GA", "3b008c466bcb7375aaf5cabf51b289fd34d40c44"),
    "8.6": ("onnx-tensorrt-8.6-GA", "release/8.6-GA", "6ba67d3428e05f690145373ca87fb8d32f98df45"),
    "10.0": ("onnx-tensorrt-10.0-GA", "release/10.0-GA", "eb43908b02a296ea0594432f06e9d3fac288d672"),
    "10.1": ("onnx-tensorrt", "release/10.1-GA", "96e781103cfc4adf4a6bb557e94bac8e693f6f4c"),
}
INTERNAL = ("FallbackPluginImporter", "LocalFunctionImporter")


def build(ref: Path, release: str, plugin_readme: str | None) -> dict[str, Any]:
    """The rule table of ``release`` from its source tree ``ref`` (either layout)."""
    src = Src(ref, release)
    # a name only a checker knows is a row when that checker refuses it (10.0's DeformConv); an empty
    # checker without an importer (TRT_RNNv2) leaves the node to the plugin lookup
    refused = {op for op in src.checkers if src.refuses_checker(op)}
    names = sorted(set(src.doc) | {op for op in (*src.importers, *refused) if op not in INTERNAL})
    ops = {op: base_row(src, op) for op in names}
    dropped: list[str] = []
    for op, extra in overlay(src, dropped).items():
        if op not in ops:
            dropped.append(f"{op}: no row (neither documented nor imported)")
            continue
        row = ops[op]
        if not row["supported"]:
            continue  # a refused op needs no further checks
        for key, value in extra.items():
            if key == "cite_more":
                row["cite"] = row["cite"] + value
                if extra.get("types") is not None:  # the type list comes from this code line
                    row["types_cite"] = value[0]
            elif key == "refuses":
                row.setdefault("refuses", {}).update(value)
            else:
                row[key] = value
        if row.get("types") is None:
            row.pop("types", None)
    _, tag, commit = RELEASES[release]
    table = header(src, release, tag, commit, plugin_readme)
    table["ops"] = ops
    table["not_in_source"] = dropped
    return table


def convert_dtype(src: Src) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """convertDtype's switch: the ONNX types it knows, those it casts down, and each case's citation."""
    trt_to_onnx = {"kFLOAT": "FLOAT", "kHALF": "FLOAT16", "kBF16": "BFLOAT16", "kINT8": "INT8", "kUINT8": "UINT8",
                   "kBOOL": "BOOL", "kINT32": "INT32", "kINT64": "INT64", "kFP8": "FLOAT8E4M3FN", "kINT4": "INT4"}
    span = src.function("importerUtils.cpp", "bool convertDtype(")
    name = src.file("importerUtils.cpp")
    known, cast, cites = [], {}, {}
    for i in range(span[0] - 1, span[1]):
        m = re.search(r"TensorProto::(\w+): \*trt_dtype = nvinfer1::DataType::(\w+)", src.lines[name][i])
        if m:
            onnx_type, trt_type = m.group(1), trt_to_onnx.get(m.group(2))
            onnx_type = {"FLOAT8E4M3FN": "FLOAT8E4M3FN"}.get(onnx_type, onnx_type)
            known.append(onnx_type)
            cites[onnx_type] = f"{name}:{i + 1}"
            if trt_type and trt_type != onnx_type:
                cast[onnx_type] = trt_type
    return known, cast, cites


def _plugins(readme: str | None, version: str) -> list[dict[str, Any]]:
    plugins: list[dict[str, Any]] = []
    for i, line in enumerate((readme or "").split("\n")):
        cells = [c.strip() for c in line.split("|")]
        if not (line.startswith("| [") and len(cells) > 3):
            continue
        versions = [v.strip() for v in cells[3].split(",") if v.strip()]
        known = next((p for p in plugins if p["name"] == cells[2]), None)
        if known is not None:  # one name on two rows (e.g. a deprecated and a dynamic creator)
            known["versions"] = list(dict.fromkeys(known["versions"] + versions))
            continue
        cite = f"NVIDIA/TensorRT@release/{version}:plugin/README.md:{i + 1}"
        plugins.append({"name": cells[2], "versions": versions, "cite": cite})
    return plugins


def _opset(src: Src) -> dict[str, Any]:
    doc = src.lines["docs/operators.md"]
    for i, line in enumerate(doc):
        m = re.search(r"inclusive range of opset (\d+) to opset (\d+)", line) or re.search(r"up to Opset (\d+)", line)
        if m:
            lo, hi = (int(m.group(1)), int(m.group(2))) if m.lastindex == 2 else (7, int(m.group(1)))
            return {"supported": [lo, hi], "supported_cite": f"docs/operators.md:{i + 1}"}
    raise LookupError("no opset range in operators.md")


def header(src: Src, version: str, tag: str, commit: str, plugin_readme: str | None) -> dict[str, Any]:
    m = lambda p: src.find("ModelImporter.cpp", p)  # noqa: E731
    d = lambda p: src.find("docs/operators.md", p)  # noqa: E731
    known, cast, type_cites = convert_dtype(src)
    weights_uint8 = src.find_after("WeightsContext.cpp", "Weights information is within the TensorProto",
                                   "onnxDtype = ::ONNX_NAMESPACE::TensorProto::INT32;") or \
        src.find("WeightsContext.cpp", "// Cast UINT8 weights to INT32.")
    io_only = m("TensorRT does not support UINT8 types for intermediate tensors")
    quantized = d("are treated as `Quantized Types`")
    types: dict[str, Any] = {
        "cast_down": cast, "cast_down_cite": [type_cites[t] for t in cast],
        # UINT8 weights (initializers, Constants) are imported as INT32, so UINT8 checks never see them
        "weights_cast": {"UINT8": "INT32"}, "weights_cast_cite": weights_uint8,
        "known": known, "known_cite": src.find("importerUtils.cpp", "bool convertDtype("),
        "io_only": ["UINT8"] if io_only else [], "io_only_cite": io_only,
        "io_only_doc": d("UINT8 is only supported as network input or output"),
        "quantized": ["INT8", "FLOAT8E4M3FN", "INT4"] if quantized else [], "quantized_cite": quantized}
    if "INT64" in cast:
        types["cast_down_note"] = ("INT64 weights and tensors are carried as INT32; weights outside the INT32 range "
                                   "are clamped (with a warning)")
        types["cast_down_note_cite"] = src.find("importerUtils.cpp", "int32_t* convertINT64(")
    dispatch = {"by_op_type": m("if (opImporters.count(nodeType))") or m("if (opImporters.count(node.op_type()))"),
                "local_functions": m("else if (ctx->localFunctions().count(nodeType))"),
                "plugin_fallback": m('importFunc = &opImporters.at("FallbackPluginImporter");'),
                "plugin_lookup": src.imp("FallbackPluginImporter", "Plugin not found, are the plugin name"),
                # the lookup key is (op_type, plugin_version attribute or "1", plugin_namespace or "")
                "plugin_version": src.imp("FallbackPluginImporter", '"plugin_version", "1"'),
                "plugin_namespace": src.imp("FallbackPluginImporter", '"plugin_namespace", ""')}
    return {
        "tensorrt_rules": version,
        "release": {"repo": "https://github.com/onnx/onnx-tensorrt", "tag": tag, "commit": commit,
                    "layout": src.layout},
        "comment": ("Generated by scripts/build_tensorrt_tables.py from onnx-tensorrt's parser source and "
                    "docs/operators.md of the release named here. Citations are file:line in that release "
                    "(docs/operators.md rows included; TRTRules.cite prefixes the release); plugin names cite "
                    "NVIDIA/TensorRT's plugin/README.md of the same release. Where operators.md and the parser "
                    "disagree, the parser decides. not_in_source lists the 10.1 checks whose code this release "
                    "does not have (not applied)."),
        "opset": {**_opset(src), "warn_below": 7,
                  "warn_below_cite": m("TensorRT supports ONNX graphs generated with at least opset 7")},
        "dispatch": {k: v for k, v in dispatch.items() if v is not None},
        "types": {k: v for k, v in types.items() if v is not None},
        "bundled_plugins": _plugins(plugin_readme, version),
        "plugin_cite": src.imp("FallbackPluginImporter"),
        "non_compute_ops": ["Constant", "Identity"],
    }


def plugin_readme(mirror: Path | None, version: str) -> str | None:
    """NVIDIA/TensorRT's plugin/README.md at ``release/<version>`` from a git mirror (None without one)."""
    if mirror is None:
        return None
    out = subprocess.run(["git", "-C", str(mirror), "show", f"release/{version}:plugin/README.md"],
                         capture_output=True, text=True, check=True)
    return out.stdout


def build_all(reference: Path, mirror: Path | None) -> dict[str, dict[str, Any]]:
    return {release: build(reference / folder, release, plugin_readme(mirror, release))
            for release, (folder, _, _) in RELEASES.items()}


def main(argv: list[str]) -> int:
    reference = Path(argv[1])
    mirror = Path(argv[2]) if len(argv) > 2 else None
    for path in HERE.glob("tensorrt_[0-9]*.json"):
        path.unlink()
    dla_sw = Path(argv[3]) if len(argv) > 3 else None
    if mirror is not None:
        (HERE / "tensorrt_dla.json").write_text(json.dumps(build_dla(mirror, dla_sw), indent=1) + "\n")
    for release, table in build_all(reference, mirror).items():
        path = HERE / f"tensorrt_{release}.json"
        path.write_text(json.dumps(table, indent=1, sort_keys=False) + "\n")
        print(path, len(table["ops"]), "rows;", len(table["not_in_source"]), "10.1 checks not in this release")
    return 0



# ------------------------------------------------------------------ DLA --
#: DLA rule -> (NvInfer.h class it is documented in, phrase alternatives across releases). The limits
#: themselves are in partition/tensorrt/dla.py; the test re-reads each cited line for them.
DLA_PHRASES = {
    "conv_maps": ("IConvolutionLayer", ["must be in the range [1,8192]", "must in the range [1,8192]"]),
    "conv_groups": ("IConvolutionLayer", ["the max number of groups is 8192"]),
    "conv_kernel": ("IConvolutionLayer", ["kernel size must be in the range [1,32]", "kernel size must be in the"]),
    "conv_stride": ("IConvolutionLayer", ["stride must be in the range [1,8]", "stride must be in the range"]),
    "conv_padding": ("IConvolutionLayer", ["padding must be in the range [0,31]", "padding must be in the range"]),
    "conv_dilation": ("IConvolutionLayer", ["both height and width must be in the range [1,32]"]),
    "deconv_maps": ("IDeconvolutionLayer", ["must be in the range [1,8192]", "must in the range [1,8192]"]),
    "deconv_groups": ("IDeconvolutionLayer", ["nbGroups must be one"]),
    "deconv_kernel": ("IDeconvolutionLayer", ["Kernel height and width must be in the range [1,32]",
                                              "kernel size must be in the range [1,32], or the"]),
    "deconv_stride": ("IDeconvolutionLayer", ["Stride height and width must be in the range [1,32]",
                                              "stride must be in the range [1,32]"]),
    "deconv_padding": ("IDeconvolutionLayer", ["padding must be 0"]),
    "pool_window": ("IPoolingLayer", ["window size must be in the range [1,8]", "window size must be in the"]),
    "pool_stride": ("IPoolingLayer", ["stride must be in the range [1,16]", "stride must be in the range"]),
    "pool_padding": ("IPoolingLayer", ["padding must be in the range [0,7]", "padding must be in the range"]),
    "lrn_window": ("ILRNLayer", ["[3, 5, 7, 9]"]),
    "activation": ("IActivationLayer", ["the valid activation types are kRELU, kSIGMOID, kTANH, and kCLIP"]),
    "concat_axis": ("IConcatenationLayer", ["the concatenation axis must be the third to last axis"]),
    "softmax_axis": ("ISoftMaxLayer", ["Axis must be one of the channel or spatial dimensions"]),
    "softmax_size": ("ISoftMaxLayer", ["the axis dimension is at most 1024"]),
    "unary": ("IUnaryLayer", ["only UnaryOperation::kABS is supported"]),
    "slice_strides": ("ISliceLayer", ["Strides are 1 for all dimensions"]),
    "slice_first": ("ISliceLayer", ["Slicing is not performed on the first dimension"]),
    "slice_rank": ("ISliceLayer", ["The input tensor has four dimensions"]),
    "prelu_slopes": ("IParametricReLULayer", ["the slopes input must be a build-time constant"]),
    "resize_scales": ("IResizeLayer", ["nbScales has to be exactly 4"]),
    "resize_range": ("IResizeLayer", ["[1, 32] for kNEAREST mode and [1, 4] for kLINEAR"]),
    "gpu_fallback": ("BuilderFlag", ["Enable layers marked to execute on GPU if layer cannot execute on DLA"]),
}
DLA_DOC = "https://docs.nvidia.com/deeplearning/tensorrt/latest/inference-library/dla-layer-restrictions.html"


def _class_span(lines: list[str], name: str) -> tuple[int, int]:
    """Lines of ``class <name>`` / ``enum class <name>`` up to the next class or enum."""
    head = next(i for i, line in enumerate(lines) if re.match(rf"(class|enum class) {name}\b", line))
    start = head
    while start > 0 and lines[start - 1].startswith("//!"):  # the class's own doc comment comes first
        start -= 1
    end = next((i for i in range(head + 1, len(lines)) if re.match(r"(class|enum class) \w", lines[i])), len(lines))
    return start, end


#: NVIDIA/Deep-Learning-Accelerator-SW: its operator matrix for Orin DLA (JetPack 6 / TensorRT 8.6 at this commit)
DLA_SW_COMMIT = "ea61780e417c6e29380760cca651e4cb2b8b55cb"


def orin_matrix(dla_sw: Path) -> dict[str, dict[str, str]]:
    """op -> {"support": the matrix's "Orin DLA support through TensorRT" cell, "cite"} (first row per op)."""
    text = subprocess.run(["git", "-C", str(dla_sw), "show", f"{DLA_SW_COMMIT}:operators/README.md"],
                          capture_output=True, text=True, check=True).stdout.split("\n")
    out: dict[str, dict[str, str]] = {}
    header = next(i for i, line in enumerate(text) if "Orin DLA support through TensorRT" in line)
    for i in range(header + 2, len(text)):
        cells = [c.strip() for c in text[i].split("|")]
        if len(cells) < 3 or not re.fullmatch(r"[A-Z]\w*", cells[1]):
            continue
        support = re.sub(r"\[See RFE\]\([^)]*\)", "None (request for enhancement)", cells[2])
        out.setdefault(cells[1], {"support": support, "cite": f"NVIDIA/Deep-Learning-Accelerator-SW@"
                                                             f"{DLA_SW_COMMIT[:7]}:operators/README.md:{i + 1}"})
    return out


def build_dla(mirror: Path, dla_sw: Path | None = None) -> dict[str, Any]:
    """Per release, each DLA rule's line in NVIDIA/TensorRT's include/NvInfer.h (``release/<X.Y>``)."""
    releases: dict[str, dict[str, str]] = {}
    for release in RELEASES:
        text = subprocess.run(["git", "-C", str(mirror), "show", f"release/{release}:include/NvInfer.h"],
                              capture_output=True, text=True, check=True).stdout.split("\n")
        found: dict[str, str] = {}
        for rule, (cls, phrases) in DLA_PHRASES.items():
            lo, hi = _class_span(text, cls)
            hit = next((i for phrase in phrases for i in range(lo, hi) if phrase in text[i]), None)
            if hit is not None:
                found[rule] = f"NVIDIA/TensorRT@release/{release}:include/NvInfer.h:{hit + 1}"
        releases[release] = found
    return {"comment": "DLA rules: each cites the 'on DLA' note of NVIDIA/TensorRT's include/NvInfer.h on the "
                       "release branch; general limits cite TensorRT's 'DLA Supported Layers and Restrictions' page. "
                       "Generated by scripts/build_tensorrt_tables.py.",
            "doc": DLA_DOC, "general_cite": DLA_DOC + "#general-restrictions",
            "layers_cite": DLA_DOC + "#layer-support-and-restrictions", "releases": releases,
            "orin_matrix": orin_matrix(dla_sw) if dla_sw is not None else {}}


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
