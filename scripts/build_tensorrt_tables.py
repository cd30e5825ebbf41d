"""Regenerate ``tensorrt_<release>.json`` from onnx-tensorrt's own source (run by hand, not at import).

    python scripts/build_tensorrt_tables.py REF_DIR [TENSORRT_PLUGIN_README]

``REF_DIR`` holds the parser source of release 10.1-GA (``onnxOpImporters.cpp``,
``onnxOpCheckers.cpp``, ``ModelImporter.cpp``, ``importerUtils.cpp``, ...) and
``operators_10.1.md`` / ``operators_10.0.md`` (the project's copy lives in
``../shared/reference/onnx-tensorrt`` beside the checkout). Every citation is *found* in those files
by searching for a phrase (never typed as a number), so a row's ``file:line``
points at the check it describes; ``tests/test_tensorrt_rules_data.py`` re-reads
the lines where the source is present. The 10.0 file is an overlay: the rows
whose verdict differs from 10.1 (from ``git diff release/10.0-GA release/10.1-GA``
of the parser, and the two operators.md tables); its two source lines were read
on the 10.0-GA branch and are re-checked against a git mirror by the tests.
The plugin names come from NVIDIA/TensorRT's ``plugin/README.md`` at
``release/10.1`` (``git show release/10.1:plugin/README.md``).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent / "partition" / "data"  
DOC_TYPES = {"FP32": "FLOAT", "FP16": "FLOAT16", "BF16": "BFLOAT16", "INT32": "INT32", "INT64": "INT64",
             "INF64": "INT64", "BOOL": "BOOL", "UINT8": "UINT8", "INT8": "INT8", "FP8": "FLOAT8E4M3FN",
             "INT4": "INT4"}
# importerUtils.cpp helpers: the types each refuses, and the phrase of its check.
UNARY_DEFAULT = (["BOOL", "INT32", "INT64", "UINT8"], "By default TRT does not support BOOL, INT32, INT64, and UINT8")
UNARY_ABS = (["BOOL", "UINT8"], "ABS and SIGN supports everything except BOOL and UINT8")
# Neg: the check after the INT32 work-around, not the kNEG label of the op-name table above it
UNARY_NEG = (["BOOL", "UINT8"], ("WAR: NEG can work with INT32", "validUnaryType = "))
NOT_BOOL = ["FLOAT", "FLOAT16", "BFLOAT16", "INT32", "INT64", "UINT8", "INT8"]
UNARY_NOT = (NOT_BOOL, "TRT only supports BOOL types for the NOT")
ACTIVATION = (["INT32", "BOOL", "UINT8"], 'notInvalidType(inputs.at(0), {"INT32", "BOOL", "UINT8"}')
REDUCE = (["BOOL", "UINT8"], "TensorRT does not support reduction on Bool or UINT8 tensors.")
ARGMINMAX = (["UINT8"], "NodeImportResult argMinMaxHelper(")
SCATTER = (["UINT8"], "NodeImportResult addScatterLayer(")
EW_BOOL_ONLY = (NOT_BOOL, "These operations only support boolean inputs")
EW_NO_BOOL = (["BOOL"], "These operations do not support boolean types")
EW_POW = (["BOOL", "INT32", "INT64"], "Pow does not support bool or integer types")


class Src:
    """One release's source files, with phrase -> 'file:line' lookups."""

    def __init__(self, ref: Path, doc_name: str) -> None:
        self.ref = ref
        self.lines = {name: (ref / name).read_text().split("\n") for name in
                      ("onnxOpImporters.cpp", "onnxOpCheckers.cpp", "ModelImporter.cpp", "importerUtils.cpp",
                       "WeightsContext.cpp", "ShapeTensor.cpp", "OnnxAttrs.cpp")}
        self.lines["docs/operators.md"] = (ref / doc_name).read_text().split("\n")
        self.importers = self._ranges("onnxOpImporters.cpp", r"DEFINE_BUILTIN_OP_IMPORTER\((\w+)\)")
        self.checkers = self._ranges("onnxOpCheckers.cpp", r"DEFINE_OP_(?:EMPTY_)?CHECKER\((\w+)\)")
        self.doc = self._doc_rows()

    def _ranges(self, name: str, pattern: str) -> dict[str, tuple[int, int]]:
        """op -> (first, last line) of its definition: up to the closing brace in column 0, so a
        helper defined between two importers (the Q/DQ helper after DepthToSpace) is no one's."""
        lines = self.lines[name]
        starts = [(m.group(1), i + 1) for i, line in enumerate(lines) if (m := re.match(pattern, line))]
        out = {}
        for k, (op, start) in enumerate(starts):
            limit = starts[k + 1][1] - 1 if k + 1 < len(starts) else len(lines)
            end = next((i + 1 for i in range(start, limit) if lines[i].startswith("}")), limit)
            out[op] = (start, end)
        return out

    def function(self, name: str, signature: str) -> tuple[int, int]:
        """(first, last line) of the free function whose definition line contains ``signature``."""
        lines = self.lines[name]
        start = next(i for i, line in enumerate(lines) if line.startswith(signature))
        end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("}"))
        return start + 1, end + 1

    def find_after(self, name: str, anchor: str, phrase: str) -> str:
        """The first ``phrase`` after the line holding ``anchor`` (a case label, a comment)."""
        start = int(self.find(name, anchor).rsplit(":", 1)[1])
        return self.find(name, phrase, (start, len(self.lines[name])))

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

    def find(self, name: str, phrase: str, within: tuple[int, int] | None = None) -> str:
        lo, hi = within or (1, len(self.lines[name]))
        for i in range(lo - 1, hi):
            if phrase in self.lines[name][i]:
                return f"{name}:{i + 1}"
        raise LookupError(f"{phrase!r} not found in {name} {within}")

    def imp(self, op: str, phrase: str | None = None) -> str:
        start, end = self.importers[op]
        return f"onnxOpImporters.cpp:{start}" if phrase is None else self.find("onnxOpImporters.cpp", phrase,
                                                                               (start, end))

    def chk(self, op: str, phrase: str | None = None) -> str:
        start, end = self.checkers[op]
        return f"onnxOpCheckers.cpp:{start}" if phrase is None else self.find("onnxOpCheckers.cpp", phrase,
                                                                              (start, end))

    def docrow(self, op: str) -> str:
        return f"docs/operators.md:{self.doc[op]['line']}"

    def refuses_checker(self, op: str) -> bool:
        if op not in self.checkers:
            return False
        start, end = self.checkers[op]
        body = "\n".join(self.lines["onnxOpCheckers.cpp"][start - 1:end])
        return "STATIC_CHECK(false," in body


def helper_refusal(src: Src, op: str) -> tuple[list[str], str] | None:
    """The types refused by the importerUtils helper this op's importer returns through."""
    start, end = src.importers[op]
    body = "\n".join(src.lines["onnxOpImporters.cpp"][start - 1:min(end, start + 12)])
    u = "importerUtils.cpp"
    if "unaryHelper(" in body and body.count("return ") <= 2:
        kind = UNARY_ABS if ("kABS" in body or "kSIGN" in body) else UNARY_NEG if "kNEG" in body else \
            UNARY_NOT if "kNOT" in body else UNARY_DEFAULT
        phrase = kind[1]
        return kind[0], (src.find_after(u, *phrase) if isinstance(phrase, tuple) else src.find(u, phrase))
    for key, kind in (("activationHelper(", ACTIVATION), ("argMinMaxHelper(", ARGMINMAX),
                      ("addScatterLayer(", SCATTER)):
        if key in body:
            return kind[0], src.find(u, kind[1])
    if "reduceTensor(" in body:
        return REDUCE[0], src.find(u, REDUCE[1])
    if "elementwiseHelper(" in body:
        kind = EW_BOOL_ONLY if re.search(r"k(AND|OR|XOR)\)", body) else EW_POW if "kPOW" in body else \
            None if "kEQUAL" in body else EW_NO_BOOL
        return (kind[0], src.find(u, kind[1])) if kind else None
    return None


def importer_refusals(src: Src, op: str) -> dict[int, tuple[list[str], str]]:
    """notInvalidType(inputs.at(i), {...}) calls inside the op's own importer."""
    start, end = src.importers[op]
    out: dict[int, tuple[list[str], str]] = {}
    for i in range(start - 1, end):
        m = re.search(r'notInvalidType\(inputs\.at\((\d)\), \{([^}]*)\}', src.lines["onnxOpImporters.cpp"][i])
        if m and int(m.group(1)) not in out:
            out[int(m.group(1))] = ([t.strip().strip('"') for t in m.group(2).split(",")],
                                    f"onnxOpImporters.cpp:{i + 1}")
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


def _merge(*parts: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for part in parts:
        for op, extra in part.items():
            row = out.setdefault(op, {})
            for key, value in extra.items():
                row[key] = row.get(key, []) + value if key in ("cite_more", "attrs") else value
    return out


def overlay_10_1(src: Src) -> dict[str, dict[str, Any]]:
    """Per-op restrictions beyond the generated type lists, each with the phrase that proves it."""
    return _merge(_types(src), _weights_inputs(src), _other_inputs(src), _qdq(src), _attrs(src), _pool_rnn(src),
                  _structure(src), _audit(src))


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
    unary_default = U("By default TRT does not support BOOL, INT32, INT64, and UINT8")
    pool = {"pool_spatial": U("ASSERT_NODE(((nbSpatialDims == 1 && needToExpandDims) || nbSpatialDims == 2 || "
                              "nbSpatialDims == 3)")}
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
    for op in ("ReduceL2", "ReduceLogSum", "ReduceLogSumExp"):  # the trailing sqrt/log (exp first) is a unary
        o[op] = {"types": F, "refuses": {"0": {"types": ["INT32", "INT64"], "cite": unary_default}}}
    return o


def build(ref: Path, plugin_readme: Path | None) -> tuple[dict[str, Any], dict[str, Any]]:
    src = Src(ref, "operators_10.1.md")
    names = sorted(set(src.doc) | {op for op in src.importers if op not in (
        "FallbackPluginImporter", "LocalFunctionImporter")})
    ops = {op: base_row(src, op) for op in names}
    for op, extra in overlay_10_1(src).items():
        row = ops[op]
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
    table = header(src, "10.1", "release/10.1-GA", "96e781103cfc4adf4a6bb557e94bac8e693f6f4c", plugin_readme)
    table["ops"] = ops
    return table, build_10_0(src)


def header(src: Src, version: str, tag: str, commit: str, plugin_readme: Path | None) -> dict[str, Any]:
    u, m = (lambda p: src.find("importerUtils.cpp", p)), (lambda p: src.find("ModelImporter.cpp", p))
    d = lambda p: src.find("docs/operators.md", p)  # noqa: E731
    plugins = []
    if plugin_readme is not None:
        for i, line in enumerate(plugin_readme.read_text().split("\n")):
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
    return {
        "tensorrt_rules": version,
        "release": {"repo": "https://github.com/onnx/onnx-tensorrt", "tag": tag, "commit": commit},
        "comment": ("Generated by scripts/build_tensorrt_tables.py from onnx-tensorrt's parser source and "
                    "docs/operators.md of the release named here. Citations are file:line in that release "
                    "(docs/operators.md rows included); plugin names cite NVIDIA/TensorRT's plugin/README.md of the "
                    "same release. Where operators.md and the parser disagree, the parser decides."),
        "opset": {"supported": [9, 20], "supported_cite": d("supports operators in the inclusive range of opset 9"),
                  "warn_below": 7,
                  "warn_below_cite": m("TensorRT supports ONNX graphs generated with at least opset 7")},
        "dispatch": {"by_op_type": m("if (opImporters.count(nodeType))"),
                     "local_functions": m("else if (ctx->localFunctions().count(nodeType))"),
                     "plugin_fallback": m('importFunc = &opImporters.at("FallbackPluginImporter");'),
                     "plugin_lookup": src.imp("FallbackPluginImporter", "Plugin not found, are the plugin name"),
                     # the lookup key is (op_type, plugin_version attribute or "1", plugin_namespace or "")
                     "plugin_version": src.imp("FallbackPluginImporter", '"plugin_version", "1"'),
                     "plugin_namespace": src.imp("FallbackPluginImporter", '"plugin_namespace", ""')},
        "types": {"cast_down": {"DOUBLE": "FLOAT"},
                  "cast_down_cite": [u("case ::ONNX_NAMESPACE::TensorProto::DOUBLE: *trt_dtype = "),
                                     src.find("WeightsContext.cpp", "// Cast DOUBLE weights to FLOAT.")],
                  "known": ["FLOAT", "DOUBLE", "INT8", "UINT8", "FLOAT16", "BFLOAT16", "BOOL", "INT32", "INT64",
                            "FLOAT8E4M3FN", "INT4"],
                  # UINT8 weights (initializers, Constants) are imported as INT32, so UINT8 checks never see them
                  "weights_cast": {"UINT8": "INT32"},
                  "weights_cast_cite": src.find_after("WeightsContext.cpp", "Weights information is within the TensorProto",
                                                      "onnxDtype = ::ONNX_NAMESPACE::TensorProto::INT32;"),
                  "known_cite": u("bool convertDtype(int32_t onnx_dtype, nvinfer1::DataType* trt_dtype)"),
                  "io_only": ["UINT8"],
                  "io_only_cite": m("TensorRT does not support UINT8 types for intermediate tensors"),
                  "io_only_doc": d("UINT8 is only supported as network input or output"),
                  "quantized": ["INT8", "FLOAT8E4M3FN", "INT4"],
                  "quantized_cite": d("are treated as `Quantized Types`")},
        "bundled_plugins": plugins,
        "plugin_cite": src.imp("FallbackPluginImporter"),
        "non_compute_ops": ["Constant", "Identity"],
        "shape_ops": ["Shape", "Size", "Concat", "Gather", "Slice", "Squeeze", "Unsqueeze", "Cast", "Add", "Sub", "Mul",
                      "Div", "Max", "Min", "Reshape", "ReduceProd", "Range", "Equal", "Where", "Identity", "Neg", "Abs",
                      "ConstantOfShape", "Expand", "Flatten"],
        "shape_ops_cite": "ShapeTensor.cpp:49",
    }


def build_10_0(src10_1: Src) -> dict[str, Any]:
    """10.0-GA differences, from the 10.0 operators.md and `git diff release/10.0-GA release/10.1-GA`."""
    doc = Src.__new__(Src)
    doc.lines = {"docs/operators.md": (src10_1.ref / "operators_10.0.md").read_text().split("\n")}
    doc.doc = Src._doc_rows(doc)
    return {
        "tensorrt_rules": "10.0",
        "base": "10.1",
        "release": {"repo": "https://github.com/onnx/onnx-tensorrt", "tag": "release/10.0-GA",
                    "commit": "73f629e04a68765647010b98dd94257282d05d11"},
        "comment": ("Overlay on the 10.1 table: only the rows whose verdict differs in 10.0-GA. Citations name the "
                    "10.0-GA files (prefix 10.0-GA:)."),
        "bundled_plugins_from": "10.1",
        "ops": {
            "DeformConv": {"supported": False, "cite": ["10.0-GA:onnxOpCheckers.cpp:909"]},
            "IsNaN": {"supported": True, "types": ["FLOAT", "FLOAT16", "BFLOAT16", "INT32", "INT64"],
                      "cite": [f"10.0-GA:docs/operators.md:{doc.doc['IsNaN']['line']}",
                               "10.0-GA:onnxOpImporters.cpp:2716"]},
        },
    }


def main(argv: list[str]) -> int:
    ref = Path(argv[1])
    readme = Path(argv[2]) if len(argv) > 2 else None
    t101, t100 = build(ref, readme)
    for table in (t101, t100):
        path = HERE / f"tensorrt_{table['tensorrt_rules']}.json"
        path.write_text(json.dumps(table, indent=1, sort_keys=False) + "\n")
        print(path, len(table["ops"]), "rows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
