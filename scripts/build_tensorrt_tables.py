"""Regenerate ``tensorrt_<release>.json`` from onnx-tensorrt's own source (run by hand, not at import).

    python scripts/build_tensorrt_tables.py REFERENCE_ROOT [NVIDIA_TENSORRT_MIRROR [DLA_SW_MIRROR]]

``REFERENCE_ROOT`` holds one folder of onnx-tensorrt parser source per release
(``shared/reference`` beside the checkout: ``onnx-tensorrt-8.5-GA``, ``-8.6-GA``, ``-10.0-GA`` and
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

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the two helper modules beside this script
from tensorrt_checks import overlay  # noqa: E402
from tensorrt_source import Src, base_row  # noqa: E402

HERE = Path(__file__).resolve().parent.parent / "partition" / "data"


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
    "resize_modes": ("IResizeLayer", ["If executing this layer on DLA, the following combinations of parameters"]),
    "elementwise_ops": ("IElementWiseLayer", ["DLA supports only kSUM, kPROD, kMAX, kMIN, and kSUB"]),
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


#: NVIDIA/Deep-Learning-Accelerator-SW: its operator matrix for Orin DLA, one commit per TensorRT release.
#: 1da860c ("Update to JetPack 5.1.1") states "TensorRT 8.5 supports ..." and lists TensorRT 8.5.2/8.5.10;
#: ea61780 ("JetPack 6.0") lists TensorRT 8.6.2 .. 8.6.12 and marks rows "Native (as of TensorRT 8.6.12)",
#: which count from 10.0 on, not for the 8.6 GA parser (partition/tensorrt/dla.py). No later commit exists:
#: the matrix was not updated for 10.x, and DLA support in TensorRT paused after 10.7.
DLA_SW_COMMITS = {"8.5": "1da860ccb9b93f31a15a0325ff78b3938eccd5f9", "8.6": "ea61780e417c6e29380760cca651e4cb2b8b55cb"}
MATRIX_OF_RELEASE = {"8.5": "8.5", "8.6": "8.6", "10.0": "8.6", "10.1": "8.6"}


def orin_matrix(dla_sw: Path, commit: str) -> dict[str, dict[str, str]]:
    """op -> {"support": the matrix's "Orin DLA support through TensorRT" cell, "cite"} (first row per op)."""
    text = subprocess.run(["git", "-C", str(dla_sw), "show", f"{commit}:operators/README.md"],
                          capture_output=True, text=True, check=True).stdout.split("\n")
    return parse_orin_matrix(text, commit)


def parse_orin_matrix(text: list[str], commit: str) -> dict[str, dict[str, str]]:
    """The matrix rows of operators/README.md's lines ``text`` (tests feed it excerpts, line numbers kept)."""
    out: dict[str, dict[str, str]] = {}
    header = next(i for i, line in enumerate(text) if "Orin DLA support through TensorRT" in line)
    for i in range(header + 2, len(text)):
        cells = [c.strip() for c in text[i].split("|")]
        if len(cells) < 3 or not re.fullmatch(r"[A-Z]\w*", cells[1]):
            continue
        support = re.sub(r"\[See RFE\]\([^)]*\)", "None (request for enhancement)", cells[2])
        out.setdefault(cells[1], {"support": support, "cite": f"NVIDIA/Deep-Learning-Accelerator-SW@"
                                                             f"{commit[:7]}:operators/README.md:{i + 1}"})
    return out


def dla_cites(text: list[str], release: str) -> dict[str, str]:
    """Each DLA rule's line in the release's NvInfer.h lines ``text`` (tests feed it excerpts)."""
    found: dict[str, str] = {}
    for rule, (cls, phrases) in DLA_PHRASES.items():
        lo, hi = _class_span(text, cls)
        hit = next((i for phrase in phrases for i in range(lo, hi) if phrase in text[i]), None)
        if hit is not None:
            found[rule] = f"NVIDIA/TensorRT@release/{release}:include/NvInfer.h:{hit + 1}"
    return found


def build_dla(mirror: Path, dla_sw: Path | None = None) -> dict[str, Any]:
    """Per release, each DLA rule's line in NVIDIA/TensorRT's include/NvInfer.h (``release/<X.Y>``)."""
    releases: dict[str, dict[str, str]] = {}
    for release in RELEASES:
        text = subprocess.run(["git", "-C", str(mirror), "show", f"release/{release}:include/NvInfer.h"],
                              capture_output=True, text=True, check=True).stdout.split("\n")
        releases[release] = dla_cites(text, release)
    return {"comment": "DLA rules: each cites the 'on DLA' note of NVIDIA/TensorRT's include/NvInfer.h on the "
                       "release branch; general limits cite TensorRT's 'DLA Supported Layers and Restrictions' page. "
                       "Generated by scripts/build_tensorrt_tables.py.",
            "doc": DLA_DOC, "general_cite": DLA_DOC + "#general-restrictions",
            "layers_cite": DLA_DOC + "#layer-support-and-restrictions", "releases": releases,
            "orin_matrices": {key: orin_matrix(dla_sw, commit) for key, commit in DLA_SW_COMMITS.items()}
            if dla_sw is not None else {}, "matrix_of_release": MATRIX_OF_RELEASE}


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
