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
from typing import IO, Any

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
        from partition.import_limits import check_wire_counts

        from .limits import import_limits
        check_wire_counts(mm, import_limits(max_bytes), label)   # before parsing makes the objects
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
    # Objects and bytes once read, counted before inference or import make them (issue 21).
    from partition.import_limits import check_import

    from .limits import import_limits
    check_import(model, import_limits(max_bytes), None, label)
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


# ------------------------------------------------------------------ bundles --
# A model with external data arrives as a bundle: several files in one upload (the .onnx and its
# data files) or one .zip/.tar of the model's folder. Each bundle is unpacked into its own folder
# ``<instance>/bundles/<random id>/`` (partition/bundle.py: safe names, byte and file budgets) and
# loaded with that folder as the only place external data may come from.

def bundle_dir(instance: str, mid: str) -> str:
    return os.path.join(instance, "bundles", mid)


def is_bundle_upload(files: list) -> bool:
    """Several files, or one archive: a bundle; one plain file: the single-file path."""
    from partition.bundle import is_archive
    return len(files) > 1 or (len(files) == 1 and is_archive(files[0].filename or ""))


def store_bundle(store: Any, instance: str, files: list, max_bytes: int) -> Any:
    """Unpack the uploaded bundle, load it, register it in ``store``; nothing left behind on error."""
    import secrets
    import shutil
    from pathlib import Path

    from partition.bundle import extract_archive, is_archive, stage_files
    mid = secrets.token_hex(8)
    folder = Path(bundle_dir(instance, mid))
    store.check_room(0)   # a full store refuses before unpacking (507)
    try:
        if len(files) == 1 and is_archive(files[0].filename or ""):
            arch_dir = folder.parent / f".{mid}-archive"
            arch_dir.mkdir(parents=True, exist_ok=True)
            # our own name: extract_archive tells zip from tar by it (tarfile finds the compression)
            archive = arch_dir / ("bundle.zip" if files[0].filename.lower().endswith(".zip") else "bundle.tar")
            try:
                with open(archive, "wb") as out:
                    shutil.copyfileobj(files[0].stream, out, 1 << 20)
                if archive.stat().st_size > max_bytes:
                    raise ModelTooLargeError(f"the archive is over the upload limit of {max_bytes} bytes")
                model_path = extract_archive(archive, folder, max_bytes)
            finally:
                shutil.rmtree(arch_dir, ignore_errors=True)
        else:
            model_path = stage_files([(f.filename or "file", f.stream) for f in files], folder, max_bytes)
        store.check_room(0)   # --store-limit counts the unpacked files (now on disk) too
        return register_model_file(store, model_path, model_path.parent, label=model_path.name,
                                   max_bytes=max_bytes, mid=mid, bundle=str(folder))
    except Exception:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def register_model_file(store: Any, model_path: str | os.PathLike, data_root: str | os.PathLike, *, label: str,
                        max_bytes: int | None, mid: str, bundle: str, source: str = "upload") -> Any:
    """Load ``model_path`` (external data only from ``data_root``, the model's own folder inside the
    bundle folder ``bundle`` = ``<instance>/bundles/<mid>``) and record it in the model store, which
    keeps it across restarts. The entry's ``model_bytes()`` is the model with its external data
    inline (read by our checked reader), which is what onnxruntime and the run workers are given."""
    from pathlib import Path

    from partition.onnx_io import load_model

    from .limits import import_limits
    path = Path(model_path)
    # tensors once read (aliases each time), objects: counted before any is read (issue 21)
    graph = load_model(path, max_bytes=max_bytes, data_root=Path(data_root), limits=import_limits(max_bytes))
    return store.add_bundle(mid, label, str(path), graph, source)


def preload_model(store: Any, instance: str, path: str, max_bytes: int) -> Any:
    """``sglens serve --model PATH``: a .onnx file, a model folder or a .zip/.tar bundle, loaded at
    start. The user named the path on the command line, so its own folder may hold external data.
    The model and the data files it names are copied (an archive unpacked) into
    ``<instance>/bundles/<id>/`` and stored like an uploaded bundle, so it stays listed, with its
    runs, after a restart; the same content named again at a later start reuses that entry."""
    import secrets
    import shutil
    from pathlib import Path

    from partition.bundle import is_archive, open_model_path
    mid = secrets.token_hex(8)
    folder = Path(bundle_dir(instance, mid))
    try:
        if is_archive(str(path)):
            model, _ = open_model_path(path, max_bytes, unpack_to=folder)
        else:
            source_model, root = open_model_path(path, max_bytes)
            model = _copy_with_data(source_model, root, folder, max_bytes)
        known = store.find_bundle("preload", model.name, folder_digest(folder)[1])
        if known is not None:
            shutil.rmtree(folder, ignore_errors=True)
            return store.get(known)
        return register_model_file(store, model, model.parent, label=model.name, max_bytes=max_bytes, mid=mid,
                                   bundle=str(folder), source="preload")
    except Exception:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def _copy_with_data(model: Any, root: Any, folder: Any, max_bytes: int) -> Any:
    """Copy ``model`` and the external-data files it names (found inside ``root`` by the checked
    resolver) into ``folder``; the data keep their place relative to the copied model."""
    import shutil

    if model.is_dir():
        raise ModelError(f"{model}: is a directory; expected an ONNX model file")
    if not model.is_file():
        raise ModelError(f"{model}: no such model file")
    size = model.stat().st_size
    if size > max_bytes:
        raise ModelTooLargeError(f"{model.name}: {size} bytes is over the limit of {max_bytes}")
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(model.read_bytes())   # its external data is located below, not read
    except Exception:  # noqa: BLE001 - protobuf's errors differ by implementation
        raise ModelError(f"{model}: not a valid ONNX model (protobuf parse failed)") from None
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / model.name
    shutil.copyfile(model, target)
    for tensor, _where, _attr in external_data.iter_tensors(proto):
        if external_data.uses_external(tensor):
            source = external_data.resolve_location(tensor, root, model.name)
            dest = folder / external_data.location_of(tensor)
            if not dest.exists():
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, dest)
    return target


def folder_digest(folder: str | os.PathLike) -> tuple[int, str]:
    """(bytes, SHA-256) of a folder's regular files, their relative paths and contents in sorted order."""
    import hashlib
    from pathlib import Path
    root = Path(folder)
    digest = hashlib.sha256()
    size = 0
    for p in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        digest.update(p.relative_to(root).as_posix().encode() + b"\0")
        with open(p, "rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
                size += len(chunk)
    return size, digest.hexdigest()
