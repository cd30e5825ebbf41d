"""The per-op checks of the rule tables, each proven by a phrase of the release's source.

Written against the 10.1 source; a phrase an older release lacks gives None and the check
is left out there (``_prune``, listed in the table's ``not_in_source``). Used by
``build_tensorrt_tables.py``; no project code imports it.
"""

from __future__ import annotations

import re
from typing import Any

from tensorrt_source import UNARY_DEFAULT, Src, first_found

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
    # 8.6: "... 3 inputs for the INT8 QuantizeLinear/DequantizeLinear operator"; 8.5: "... 3 inputs for the
    # DequantizeLinear operator", in the helper both ops share (so QuantizeLinear needs it too)
    three = (src.find("onnxOpImporters.cpp", "requires 3 inputs for the INT8 QuantizeLinear/DequantizeLinear", qdq)
             or src.find("onnxOpImporters.cpp", "requires 3 inputs for the DequantizeLinear operator", qdq)) \
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
    for op, checks in _qdq_8x(src, qdq).items():
        o[op].update(checks)
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


def _qdq_8x(src: Src, helper: tuple[int, int] | None) -> dict[str, dict[str, Any]]:
    """The 8.x QuantDequantLinearHelper's value checks, in its own words (10.1's phrases differ, so
    ``_qdq`` finds none of them here): a constant scale has coefficients, all positive; a constant zero
    point is all zeros; DequantizeLinear refuses UINT8 data; 8.6's QuantizeLinear a UINT8 zero point."""
    def at(phrase: str) -> str | None:
        return src.find("onnxOpImporters.cpp", phrase, helper) if helper else None
    scale = {"kind": "any", "what": "scale", "positive": True, "cite": at("Cannot have scale with no coefficients"),
             "value_cite": at("Scale coefficients must all be positive")}
    symmetric = at("only supports symmetric quantization")
    zero = {"kind": "any", "what": "zero point", "all_zero": True, "cite": symmetric, "value_cite": symmetric}
    def uint8(index: int) -> dict[str, Any]:
        return {"types": ["UINT8"], "cite": at(f'CHECK(notInvalidType(inputs.at({index}), {{"UINT8"}}))')}
    return {"QuantizeLinear": {"inputs": {"1": scale, "2": zero}, "refuses": {"2": uint8(2)}},
            "DequantizeLinear": {"inputs": {"1": scale, "2": zero}, "refuses": {"0": uint8(0)}}}


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
