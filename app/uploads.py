"""Uploads: streamed to a temp file in the instance folder, parsed from the file, never followed
out of it.

- ``request_class(tmp_dir)``: multipart file parts go to an unnamed temp file under the instance
  folder (werkzeug's default keeps up to 500 KiB in memory and the rest in the system temp dir).
- ``load_upload(path, max_bytes, label)``: the stored file is parsed from a read-only memory map
  (no second copy of the file in the Python heap); a model using external data anywhere
  (initializers, ``Constant`` values and other tensor attributes, If/Loop/Scan bodies, local
  functions: ``partition.external_data.check_model`` with no folder) is refused: a single uploaded
  file has no folder of its own, so ``location`` could only point at the server's files. It is not
  loaded through ``load_model(path)``, whose folder rule would let it name another upload.
"""

from __future__ import annotations

import math
import mmap
import os
import tempfile
from typing import IO

import onnx
from flask import Request

from partition import external_data
from partition.errors import ModelError, ModelTooLargeError
from partition.ir import Graph
from partition.local_functions import expanded_size


def request_class(tmp_dir: str) -> type[Request]:
    class UploadRequest(Request):
        def _get_file_stream(self, total_content_length: int | None, content_type: str | None,
                             filename: str | None = None, content_length: int | None = None) -> IO[bytes]:
            os.makedirs(tmp_dir, exist_ok=True)
            return tempfile.TemporaryFile("wb+", dir=tmp_dir, prefix="upload-")
    return UploadRequest


def load_upload(path: str, max_bytes: int, label: str) -> Graph:
    """The stored upload at ``path`` as a ``Graph``; external data refused."""
    from partition.onnx_io import from_model_proto
    size = os.path.getsize(path)
    if size > max_bytes:
        raise ModelTooLargeError(f"{label}: {size} bytes is over the limit of {max_bytes}")
    if size == 0:
        raise ModelError(f"{label}: the file is empty; expected an ONNX model")
    model = onnx.ModelProto()
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        view = memoryview(mm)
        try:
            model.ParseFromString(view)
        except Exception:  # noqa: BLE001 - protobuf's errors differ by implementation
            raise ModelError(f"{label}: not a valid ONNX model (protobuf parse failed); "
                             "is the file truncated or not ONNX?") from None
        finally:
            view.release()
    if not model.HasField("graph") or (not model.graph.node and not model.graph.output):
        raise ModelError(f"{label}: the file parsed but holds no ONNX graph; is it an ONNX model?")
    # The rules of partition/external_data.py: a file with no folder of its own follows none.
    external_data.check_model(model, None, label)
    model = _infer_shapes_lean(model)
    return from_model_proto(model, base_dir=None, infer_shapes=False, label=label)


#: Initializers with more elements are set aside during shape inference (shape tensors are tiny).
_LEAN_ELEMENTS = 1 << 16


def _infer_shapes_lean(model: onnx.ModelProto) -> onnx.ModelProto:
    """``onnx.shape_inference`` without copies of the weights: inference runs on a skeleton whose
    big initializers keep their dims and type but not their bytes (shape tensors are tiny and stay
    whole), and what it finds (value_info, refined outputs, annotated bodies) is moved back.
    A 300 MiB upload: +0.6 GiB peak in all (the file's pages and the parsed model) instead of +1.5 GiB."""
    if model.functions and not expanded_size(model):  # onnx would expand every call path of the functions
        return model
    skeleton = onnx.ModelProto()
    skeleton.ir_version = model.ir_version
    skeleton.opset_import.extend(model.opset_import)
    skeleton.functions.extend(model.functions)
    g, sg = model.graph, skeleton.graph
    sg.name = g.name
    for field_name in ("node", "input", "output", "value_info", "sparse_initializer"):
        getattr(sg, field_name).extend(getattr(g, field_name))
    for t in g.initializer:
        if math.prod(t.dims) > _LEAN_ELEMENTS:   # not ByteSize(): upb serializes to answer it
            sg.initializer.add(name=t.name, data_type=t.data_type, dims=t.dims)
        else:
            sg.initializer.append(t)
    try:
        inferred = onnx.shape_inference.infer_shapes(skeleton, strict_mode=False)
    except Exception:  # noqa: BLE001 - inference is best effort, as in partition.onnx_io
        return model
    del skeleton
    for field_name in ("node", "output", "value_info"):
        target = getattr(g, field_name)
        del target[:]
        target.extend(getattr(inferred.graph, field_name))
    return model
