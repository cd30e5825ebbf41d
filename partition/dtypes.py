"""ONNX element types as plain names, without importing onnx.

The IR stores dtypes as ONNX's upper-case names ("FLOAT", "INT64", ...), the
words a person sees in Netron and in TensorRT's operator table.
"""

from __future__ import annotations

import numpy as np

#: ONNX TensorProto.DataType code -> name (onnx/onnx.proto, stable numbering).
ONNX_TYPE_NAMES: dict[int, str] = {
    1: "FLOAT", 2: "UINT8", 3: "INT8", 4: "UINT16", 5: "INT16", 6: "INT32",
    7: "INT64", 8: "STRING", 9: "BOOL", 10: "FLOAT16", 11: "DOUBLE",
    12: "UINT32", 13: "UINT64", 14: "COMPLEX64", 15: "COMPLEX128",
    16: "BFLOAT16", 17: "FLOAT8E4M3FN", 18: "FLOAT8E4M3FNUZ", 19: "FLOAT8E5M2",
    20: "FLOAT8E5M2FNUZ", 21: "UINT4", 22: "INT4", 23: "FLOAT4E2M1",
}
ONNX_TYPE_CODES: dict[str, int] = {v: k for k, v in ONNX_TYPE_NAMES.items()}

_NUMPY: dict[str, str] = {
    "FLOAT": "float32", "UINT8": "uint8", "INT8": "int8", "UINT16": "uint16",
    "INT16": "int16", "INT32": "int32", "INT64": "int64", "STRING": "object",
    "BOOL": "bool", "FLOAT16": "float16", "DOUBLE": "float64",
    "UINT32": "uint32", "UINT64": "uint64", "COMPLEX64": "complex64",
    "COMPLEX128": "complex128",
}

#: Bytes per element, for boundary-traffic estimates.
ITEM_SIZE: dict[str, int] = {
    "FLOAT": 4, "UINT8": 1, "INT8": 1, "UINT16": 2, "INT16": 2, "INT32": 4,
    "INT64": 8, "BOOL": 1, "FLOAT16": 2, "DOUBLE": 8, "UINT32": 4,
    "UINT64": 8, "COMPLEX64": 8, "COMPLEX128": 16, "BFLOAT16": 2,
}


def to_numpy(dtype: str) -> np.dtype:
    """The numpy dtype of an ONNX type name; raises KeyError for exotic types."""
    return np.dtype(_NUMPY[dtype])


def from_numpy(dtype: np.dtype) -> str:
    """The ONNX type name of a numpy dtype."""
    name = np.dtype(dtype).name
    for onnx_name, np_name in _NUMPY.items():
        if np_name == name:
            return onnx_name
    raise KeyError(f"numpy dtype {name} has no ONNX equivalent")
