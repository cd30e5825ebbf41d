"""``partition.onnx_io.attribute_default``: the value ONNX's schema gives an attribute a node
leaves out, read from onnx's own operator schemas (what a rule condition compares)."""

from __future__ import annotations

import pytest

from partition.onnx_io import attribute_default


@pytest.mark.parametrize("op, domain, opset, name, expected", [
    ("Conv", "", 17, "group", (True, 1)),
    ("Conv", "ai.onnx", 11, "auto_pad", (True, "NOTSET")),   # a string, decoded
    ("Gemm", "", 13, "transB", (True, 0)),
    ("Pad", "", 17, "mode", (True, "constant")),
    ("Conv", "", 17, "kernel_shape", (False, None)),     # optional, no default in the schema
    ("Conv", "", 17, "no_such_attribute", (False, None)),
    ("NoSuchOp", "", 17, "group", (False, None)),
    ("TreeEnsembleClassifier", "ai.onnx.ml", 3, "post_transform", (True, "NONE")),
])
def test_the_schema_default_or_none(op, domain, opset, name, expected):
    imports = {"" if domain == "ai.onnx" else domain: opset}   # a graph's opset imports
    assert attribute_default(op, domain, imports, name) == expected


def test_the_default_follows_the_models_opset():
    # LeakyRelu's alpha is 0.01 at every opset; Softmax's axis was 1 before opset 13 and -1 after
    assert attribute_default("Softmax", "", {"": 11}, "axis") == (True, 1)
    assert attribute_default("Softmax", "", {"": 17}, "axis") == (True, -1)
    found, alpha = attribute_default("LeakyRelu", "", {"": 16}, "alpha")
    assert found and alpha == pytest.approx(0.01)
