"""A QDQ model as onnxruntime's own quantizer writes it, partitioned for TensorRT: the nodes the
parser refuses say what to change in the quantizer, and the model quantized that way is taken
whole. Real onnxruntime.quantization output on a small CNN; the rules are TensorRT 10.1's."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from partition import load_model
from partition.runner import partition

ort_quant = pytest.importorskip("onnxruntime.quantization")


def _cnn(path, rng):
    w1 = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((4, 8, 1, 1)).astype(np.float32), "w2")
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["y"], name="conv2")]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 16, 16])], [w1, b1, w2])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


class _Calibration(ort_quant.CalibrationDataReader):
    def __init__(self, rng):
        self.batches = iter([{"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)} for _ in range(3)])

    def get_next(self):
        return next(self.batches, None)


def _quantized(tmp_path, rng, **extra):
    src, out = tmp_path / "cnn.onnx", tmp_path / f"cnn_qdq_{len(extra)}.onnx"
    _cnn(src, rng)
    ort_quant.quantize_static(str(src), str(out), _Calibration(rng), quant_format=ort_quant.QuantFormat.QDQ,
                              activation_type=ort_quant.QuantType.QInt8, weight_type=ort_quant.QuantType.QInt8,
                              extra_options=extra)
    model = onnx.load(out)
    model.ir_version = 8
    return load_model(model.SerializeToString())


def test_the_quantizers_defaults_are_refused_with_the_options_that_fix_them(tmp_path, rng):
    res = partition(_quantized(tmp_path, rng), "tensorrt")
    reasons = list(res.excluded.values())
    assert any("INT32 bias" in r and "'QuantizeBias': False" in r for r in reasons), reasons
    assert any("symmetric quantization" in r and "'ActivationSymmetric': True" in r for r in reasons), reasons


def test_quantized_as_the_hints_say_the_model_is_taken_whole(tmp_path, rng):
    g = _quantized(tmp_path, rng, ActivationSymmetric=True, WeightSymmetric=True, QuantizeBias=False)
    res = partition(g, "tensorrt")
    assert len(res.subgraphs) == 1 and not res.excluded and len(res.subgraphs[0].nodes) == len(g.nodes)
