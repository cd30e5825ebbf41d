"""The answer of a precision search in the forms people use it in.

- ``trtexec_flags(pins, target)``: ``--fp16 --precisionConstraints=obey
  --layerPrecisions=a:fp32,b:fp32 --layerOutputTypes=a:fp32,b:fp32``. TensorRT's ONNX
  parser names a node's layer after the node, so the node names are the layer names
  (a layer TensorRT fuses away takes the name of the fusion: its constraint is then
  reported as unused by trtexec's log). Output types are pinned too: an FP32 layer whose
  output is stored in FP16 overflows at the reformat, exactly what the pin avoids.
- ``polygraphy_flags(pins, target)``: the same for ``polygraphy run/convert``.
- ``mark_pins(model, pins, target)``: a copy of the ONNX model whose pinned nodes carry
  the attribute ``sglens_precision = "fp32"`` and whose ``metadata_props`` hold the list
  (``sglens.precision.fp32_nodes``, JSON). Checkers that validate attributes against the
  op schema (``onnx.checker``, onnxruntime) refuse the extra attribute: the marked model
  is for tools that read it (and for people), the metadata list survives everywhere.
- ``with_explicit_casts(model, reduced, target)``: the model with ``Cast`` to FP16/BF16
  and back around every float input and output of the ``reduced`` nodes (an inference
  BatchNormalization becomes Mul and Add by its FP32-folded scale and shift, each rounded,
  as TensorRT's parser builds it). onnxruntime then
  computes every node in FP32 and the rounding is explicit, so its FP16 Pow or
  ReduceMean cannot hide an overflow; this is the independent reference the emulation
  is tested against (``tests/test_precision.py``).
"""

from __future__ import annotations

import json
import shlex
from typing import Any, Callable, Iterable, Sequence

import onnx
from onnx import TensorProto, helper, shape_inference

from .precision import PrecisionError

MARKER = "sglens_precision"
METADATA_KEY = "sglens.precision.fp32_nodes"
_TRT_FLAG = {"fp16": "--fp16", "bf16": "--bf16", "int8": "--int8"}
_CAST_TO = {"fp16": TensorProto.FLOAT16, "bf16": TensorProto.BFLOAT16}


def trtexec_flags(pins: Sequence[str], target: str) -> str:
    """The trtexec arguments that build ``target`` with ``pins`` kept in FP32 (shell-quoted)."""
    flags = [_TRT_FLAG[target]]
    if pins:
        spec = ",".join(f"{_trt_name(p)}:fp32" for p in pins)
        flags += ["--precisionConstraints=obey", f"--layerPrecisions={spec}",
                  f"--layerOutputTypes={spec}"]
    return " ".join(shlex.quote(f) for f in flags)


def polygraphy_flags(pins: Sequence[str], target: str) -> str:
    """The polygraphy (run / convert) arguments for the same engine (shell-quoted)."""
    flags = [_TRT_FLAG[target]]
    if pins:
        flags += ["--precision-constraints", "obey", "--layer-precisions",
                  *(f"{_trt_name(p)}:float32" for p in pins)]
    return " ".join(shlex.quote(f) for f in flags)


def _trt_name(name: str) -> str:
    """trtexec splits its spec at ',' and the last ':'; a name holding a ',' cannot be given."""
    if "," in name:
        raise PrecisionError(f"node '{name}' has a ',' in its name, which trtexec's --layerPrecisions "
                             "cannot express; rename the node (or use the marked ONNX model)")
    return name


def mark_pins(model: onnx.ModelProto, pins: Iterable[str], target: str) -> onnx.ModelProto:
    """A copy of ``model`` with the pinned nodes marked (see the module docstring)."""
    pins = list(pins)
    marked = onnx.ModelProto()
    marked.CopyFrom(model)
    wanted = set(pins)
    found = set()
    for node in marked.graph.node:
        if node.name in wanted:
            node.attribute.append(helper.make_attribute(MARKER, "fp32"))
            found.add(node.name)
    missing = [p for p in pins if p not in found]
    if missing:
        raise PrecisionError(f"pinned node(s) {missing[:5]} are not top-level nodes of the model")
    for prop in list(marked.metadata_props):
        if prop.key == METADATA_KEY:
            marked.metadata_props.remove(prop)
    marked.metadata_props.add(key=METADATA_KEY, value=json.dumps({"target": target, "fp32": pins}))
    return marked


def pinned_nodes(model: onnx.ModelProto) -> list[str]:
    """The names of the nodes ``mark_pins`` marked (read back from the attribute)."""
    return [n.name for n in model.graph.node if any(a.name == MARKER for a in n.attribute)]


def with_explicit_casts(model: onnx.ModelProto, reduced: Iterable[str], target: str) -> onnx.ModelProto:
    """``model`` with explicit FP16/BF16 rounding (Cast there and back) around ``reduced`` nodes."""
    if target not in _CAST_TO:
        raise PrecisionError(f"explicit casts exist for fp16 and bf16, not {target!r}")
    inferred = shape_inference.infer_shapes(model)
    floats = {v.name for v in (*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output)
              if v.type.tensor_type.elem_type == TensorProto.FLOAT}
    floats |= {t.name for t in model.graph.initializer if t.data_type == TensorProto.FLOAT}
    out = onnx.ModelProto()
    out.CopyFrom(model)
    wanted, nodes, count = set(reduced), [], 0

    def round_trip(src: str, dst: str) -> None:
        nonlocal count
        count += 1
        low = f"{dst}__sglens_low{count}"
        nodes.append(helper.make_node("Cast", [src], [low], to=_CAST_TO[target], name=f"sglens_cast{count}a"))
        nodes.append(helper.make_node("Cast", [low], [dst], to=TensorProto.FLOAT, name=f"sglens_cast{count}b"))

    weights = {t.name: t for t in out.graph.initializer}
    ranks = {v.name: len(v.type.tensor_type.shape.dim) for v in
             (*inferred.graph.value_info, *inferred.graph.input) if v.type.tensor_type.HasField("shape")}
    for node in out.graph.node:
        if node.name not in wanted:
            nodes.append(node)
            continue
        if _is_folded_batchnorm(node, weights):
            _folded_batchnorm_nodes(node, weights, ranks, out, nodes, round_trip)
            continue
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        for i, t in enumerate(copy.input):
            if t and t in floats:
                rounded = f"{t}__sglens_in{count + 1}"
                round_trip(t, rounded)
                copy.input[i] = rounded
        renamed = []
        for i, t in enumerate(copy.output):
            if t and t in floats:
                copy.output[i] = f"{t}__sglens_raw"
                renamed.append(t)
        nodes.append(copy)
        for t in renamed:
            round_trip(f"{t}__sglens_raw", t)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out


def marked_model(graph: Any, model_bytes: Callable[[], bytes] | onnx.ModelProto | None,
                 pins: Sequence[str], target: str) -> onnx.ModelProto:
    """``mark_pins`` on the model as stored when its node names are the graph's (they are
    unless the file left nodes unnamed), else on the graph written back to ONNX."""
    from partition.onnx_io import to_model_proto
    model = model_bytes() if callable(model_bytes) else model_bytes
    if isinstance(model, (bytes, bytearray)):
        model = onnx.load_model_from_string(bytes(model))
    if model is None or not set(pins) <= {n.name for n in model.graph.node}:
        model = to_model_proto(graph)
    return mark_pins(model, pins, target)


def _is_folded_batchnorm(node: onnx.NodeProto, weights: dict) -> bool:
    training = any(a.name == "training_mode" and a.i for a in node.attribute)
    return node.op_type == "BatchNormalization" and len(node.input) == 5 and len(node.output) == 1 \
        and not training and all(t in weights for t in node.input[1:])


def _folded_batchnorm_nodes(node: onnx.NodeProto, weights: dict, ranks: dict, out: onnx.ModelProto,
                            nodes: list, round_trip: Callable[[str, str], None]) -> None:
    """A reduced BatchNormalization as TensorRT's parser builds it: scale and shift folded in
    FP32 (numpy here), each rounded by a Cast pair, then Mul and Add on the rounded input."""
    import numpy as np
    from onnx import numpy_helper
    eps = next((a.f for a in node.attribute if a.name == "epsilon"), 1e-5)
    gamma, beta, mean, var = (numpy_helper.to_array(weights[t]).astype(np.float32) for t in node.input[1:])
    scale = (gamma / np.sqrt(var + np.float32(eps))).astype(np.float32)
    shift = (beta - mean * scale).astype(np.float32)
    shape = (-1,) + (1,) * (ranks.get(node.input[0], 4) - 2)
    base = f"{node.output[0]}__sglens_bn"
    out.graph.initializer.extend([numpy_helper.from_array(scale.reshape(shape), f"{base}_scale"),
                                  numpy_helper.from_array(shift.reshape(shape), f"{base}_shift")])
    for part in ("in", "scale", "shift"):
        round_trip(node.input[0] if part == "in" else f"{base}_{part}", f"{base}_{part}_low")
    nodes.append(helper.make_node("Mul", [f"{base}_in_low", f"{base}_scale_low"], [f"{base}_mul"],
                                  name=f"{node.name}__sglens_mul"))
    nodes.append(helper.make_node("Add", [f"{base}_mul", f"{base}_shift_low"], [f"{base}_raw"],
                                  name=f"{node.name}__sglens_add"))
    round_trip(f"{base}_raw", node.output[0])
