"""ONNX element-type codes as numpy dtypes, for Cast and the typed constant ops."""

from __future__ import annotations

from typing import Any

import numpy as np

_CODES: dict[int, Any] = {
    1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32,
    7: np.int64, 8: np.str_, 9: np.bool_, 10: np.float16, 11: np.float64, 12: np.uint32,
    13: np.uint64, 14: np.complex64, 15: np.complex128,
}

try:  # bfloat16 / float8 / int4 live in ml_dtypes, which onnx itself depends on.
    import ml_dtypes

    _CODES.update({16: ml_dtypes.bfloat16, 17: ml_dtypes.float8_e4m3fn, 18: ml_dtypes.float8_e4m3fnuz,
                   19: ml_dtypes.float8_e5m2, 20: ml_dtypes.float8_e5m2fnuz, 21: ml_dtypes.uint4,
                   22: ml_dtypes.int4})
    for _code, _name in ((23, "float4_e2m1fn"), (24, "float8_e8m0fnu"), (25, "uint2"), (26, "int2")):
        if hasattr(ml_dtypes, _name):
            _CODES[_code] = getattr(ml_dtypes, _name)
except ImportError:  # pragma: no cover - onnx always brings it
    pass


def np_dtype(code: int) -> np.dtype:
    """The numpy dtype of an ONNX TensorProto.DataType code."""
    try:
        return np.dtype(_CODES[int(code)])
    except KeyError:
        raise ValueError(f"ONNX element type {code} has no numpy equivalent here") from None
