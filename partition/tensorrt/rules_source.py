"""Checks the parser makes in code on shapes and weight values (not lists a table can hold as data).

Each takes the op's table row, which names the check and cites the parser line
(``release:file:line`` per table); a row without the key skips the check. A
check runs only where the shapes or values it needs are known (static shapes,
initializers or Constants), as the parser itself can only check what it knows
at import time.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..ir import Node
from .rules_constants import Scope



def source_checks(scope: Scope, row: Mapping[str, Any], node: Node) -> tuple[str, str] | None:
    for key, check in _CHECKS:
        if key in row:
            verdict = check(scope, row, node)
            if verdict:
                return verdict
    return None


def _shape(scope: Scope, node: Node, index: int) -> tuple[Any, ...] | None:
    if index >= len(node.inputs) or not node.inputs[index]:
        return None
    return scope.shape(node.inputs[index])


def _static(shape: Any) -> bool:
    return shape is not None and all(isinstance(d, int) for d in shape)


def _value(scope: Scope, node: Node, index: int) -> np.ndarray | None:
    if index >= len(node.inputs) or not node.inputs[index]:
        return None
    value = scope.weights_value(node.inputs[index])
    return None if value is None or value is False else np.asarray(value)


def _pool_spatial(scope: Scope, row: Mapping[str, Any], node: Node) -> tuple[str, str] | None:
    """poolingHelper: kernel_shape has 2 or 3 entries, or 1 on a rank-3 input (expanded to 2-D)."""
    kernel = node.attrs.get("kernel_shape")
    if kernel is None:
        return None
    spatial = len(kernel)
    shape = _shape(scope, node, 0)
    if spatial in (2, 3) or (spatial == 1 and (shape is None or len(shape) == 3)):
        return None
    return (f"{node.op_type}: {spatial} spatial dimensions (kernel_shape {list(kernel)}); TensorRT pools over 2 or "
            "3 (or 1 on a rank-3 input)", row["pool_spatial"])


def _deconv_pre_padding(scope: Scope, row: Mapping[str, Any], node: Node) -> tuple[str, str] | None:
    """ConvTranspose with output_shape (auto_pad NOTSET): the derived pre-padding must not be negative."""
    attrs = node.attrs
    auto_pad = attrs.get("auto_pad", "NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    if "output_shape" not in attrs or auto_pad != "NOTSET":
        return None
    shape, weights = _shape(scope, node, 0), _shape(scope, node, 1)
    if not _static(shape) or len(shape) not in (4, 5):
        return None
    spatial = len(shape) - 2
    kernel = list(attrs.get("kernel_shape") or (weights[2:] if _static(weights) else ()))
    output = list(attrs["output_shape"])
    if len(kernel) != spatial or len(output) < spatial:
        return None
    strides = list(attrs.get("strides") or [1] * spatial)
    dilations = list(attrs.get("dilations") or [1] * spatial)
    out_pad = list(attrs.get("output_padding") or [0] * spatial)
    offset = len(output) - spatial
    for i in range(spatial):
        total = strides[i] * (shape[2 + i] - 1) + out_pad[i] + (kernel[i] - 1) * dilations[i] + 1 - output[offset + i]
        begin = int(total / 2)  # C++ integer division truncates toward zero
        if begin < 0:
            return (f"ConvTranspose: output_shape {output} needs pre-padding {begin} on spatial axis {i}; TensorRT "
                    "does not support negative pre-padding (give pads/output_padding instead)",
                    row["deconv_pre_padding"])
    return None


def _resize_scales(scope: Scope, row: Mapping[str, Any], node: Node) -> tuple[str, str] | None:
    """Constant scales: linear resizes only the innermost 3 axes, cubic the innermost 2; a non-iota
    ``axes`` attribute works only with constant scales."""
    spec = row["resize_scales"]
    opset = scope.opset or 99
    if node.op_type == "Resize":
        if len(node.inputs) > 3 and node.inputs[3]:
            return None  # sizes given: the scales path is not taken
        index = 2 if opset >= 11 else 1
    else:
        index = 1
    if index >= len(node.inputs) or not node.inputs[index]:
        return None
    mode = node.attrs.get("mode", "nearest")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    mode = "linear" if mode == "bilinear" else mode
    scales = _value(scope, node, index)
    shape = _shape(scope, node, 0)
    axes = list(node.attrs.get("axes") or ())
    rank = len(shape) if shape is not None else None
    if scales is None:
        if scope.weights_value(node.inputs[index]) is False and axes and rank is not None and \
                [a % rank for a in axes] != list(range(rank)):
            return (f"Resize: axes {axes} with scales computed at run time; TensorRT takes axes only with constant "
                    "scales or when they list every axis in order", spec["axes_cite"])
        return None
    values = [float(v) for v in scales.reshape(-1)]
    if axes and rank is not None and len(axes) == len(values):
        full = [1.0] * rank
        for axis, value in zip(axes, values):
            full[axis % rank] = value
        values = full
    inner = spec.get(mode)
    if inner is None or len(values) <= inner:
        return None
    if any(v != 1.0 for v in values[:len(values) - inner]):
        return (f"{node.op_type} mode={mode} with scales {values}: TensorRT resizes only the innermost {inner} axes "
                f"in {mode} mode (the others must have scale 1)", spec[f"{mode}_cite"])
    return None


def _static_without_axes(scope: Scope, row: Mapping[str, Any], node: Node) -> tuple[str, str] | None:
    """Squeeze without axes squeezes the 1s of the shape, which must therefore be static."""
    has_axes = (len(node.inputs) > 1 and node.inputs[1]) if (scope.opset or 99) >= 13 else "axes" in node.attrs
    shape = _shape(scope, node, 0)
    if has_axes or shape is None or _static(shape):
        return None
    return (f"{node.op_type}: no axes given and input 0 has the dynamic shape {list(shape)}; TensorRT cannot infer "
            "which axes to squeeze (give the axes)", row["static_without_axes"])


def _qdq_axis(scope: Scope, row: Mapping[str, Any], node: Node) -> tuple[str, str] | None:
    """A per-axis scale (1-D, several values) must match the data's ``axis``; without the attribute the
    parser takes axis 0, not ONNX's default 1."""
    scale, data = _shape(scope, node, 1), _shape(scope, node, 0)
    if not _static(scale) or len(scale) != 1 or scale[0] == 1 or data is None or not data:
        return None
    given = "axis" in node.attrs
    axis = int(node.attrs["axis"]) % len(data) if given else 0
    channels = data[axis]
    if not isinstance(channels, int) or channels == scale[0]:
        return None
    why = f"axis {axis}" if given else "axis 0 (the parser's default when the attribute is absent; ONNX's is 1)"
    return (f"{node.op_type}: {scale[0]} scales but {channels} channels on {why}; set axis explicitly to the "
            "channel axis", row["qdq_axis"])


_CHECKS = (("pool_spatial", _pool_spatial), ("deconv_pre_padding", _deconv_pre_padding),
           ("resize_scales", _resize_scales), ("static_without_axes", _static_without_axes),
           ("qdq_axis", _qdq_axis))
