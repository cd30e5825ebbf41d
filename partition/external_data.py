"""The rules for ONNX external data: which files a model may make us read.

An ONNX tensor can keep its bytes in another file (``data_location = EXTERNAL``
with a ``location`` entry). Followed blindly, that reads any file the process
can open, relative to the *current directory*: an uploaded model could read
the server's own files back through its weights or a ``Constant`` value. So:

- a model that has no folder (bytes: an upload, an in-memory proto) never
  follows external data; ``check_model`` refuses it, naming the file it asked
  for and saying how to upload it properly;
- a model with a folder (a path, or a caller's ``data_root``) reads external
  data only from files inside that folder after symlinks are resolved;
  absolute locations, ``..`` components and symlinks leading out are refused;
- every tensor counts: initializers, sparse initializers, tensor and sparse
  tensor attributes (a ``Constant``'s ``value`` too), at every nesting level
  (If/Loop/Scan bodies, graph attributes, model-local functions, training
  info);
- no message quotes a file's size or any of its bytes (a refusal must not
  become an oracle for a file's contents).

The data is read by our own code (``read_external``), never by onnx's helpers
with a base directory, so there is one place where the rules hold.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Iterator

import onnx

from .errors import ModelError

#: Longest location string quoted in a message; the rest is cut (it is model data).
_SHOWN = 120


def shown(location: str) -> str:
    """A location as quoted in messages: printable and bounded."""
    text = location.encode("unicode_escape", errors="replace").decode("ascii", errors="replace")
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "..."


def uses_external(t: onnx.TensorProto) -> bool:
    return t.data_location == onnx.TensorProto.EXTERNAL or len(t.external_data) > 0


def location_of(t: onnx.TensorProto) -> str:
    for entry in t.external_data:
        if entry.key == "location":
            value = entry.value
            # protobuf hands back a string that is not UTF-8 as bytes: shown, and refused, as text
            return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    return ""


def upload_error(location: str) -> ModelError:
    return ModelError(f"model uses external data file '{shown(location)}'; "
                      "upload the model together with its data files")


# ------------------------------------------------------------------ walking --
def _attribute_tensors(a: onnx.AttributeProto, where: str) -> Iterator[tuple[onnx.TensorProto, str, bool]]:
    here = f"{where} attribute '{a.name}'"
    if a.HasField("t"):
        yield a.t, here, True
    for t in a.tensors:
        yield t, here, True
    for sp in ([a.sparse_tensor] if a.HasField("sparse_tensor") else []) + list(a.sparse_tensors):
        yield sp.values, here, True
        yield sp.indices, here, True


def iter_tensors(model: onnx.ModelProto) -> Iterator[tuple[onnx.TensorProto, str, bool]]:
    """Every TensorProto of the model: ``(tensor, where, is_attribute)``.

    Iterative (a stack of graphs), so a deeply nested model cannot exhaust the
    Python stack.
    """
    graphs: list[tuple[onnx.GraphProto, str]] = [(model.graph, "graph")]
    for i, info in enumerate(model.training_info):
        graphs.append((info.initialization, f"training_info[{i}].initialization"))
        graphs.append((info.algorithm, f"training_info[{i}].algorithm"))
    node_lists: list[tuple[object, str]] = []
    for f in model.functions:
        node_lists.append((f.node, f"function '{f.name}'"))
        for a in f.attribute_proto:
            yield from _attribute_tensors(a, f"function '{f.name}'")
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                graphs.append((g, f"function '{f.name}' attribute '{a.name}'"))
    while graphs or node_lists:
        if graphs:
            g, where = graphs.pop()
            for t in g.initializer:
                yield t, f"{where} initializer", False
            for sp in g.sparse_initializer:
                yield sp.values, f"{where} sparse initializer", False
                yield sp.indices, f"{where} sparse initializer", False
            node_lists.append((g.node, where))
            continue
        nodes, where = node_lists.pop()
        for n in nodes:  # type: ignore[attr-defined]
            attributes = n.attribute
            if not attributes:  # most nodes of a large model: no place for a tensor, no label to build
                continue
            at = f"{where} node '{n.name or n.op_type}'"
            for a in attributes:
                yield from _attribute_tensors(a, at)
                if a.HasField("g"):
                    graphs.append((a.g, f"{at} attribute '{a.name}'"))
                for g in a.graphs:
                    graphs.append((g, f"{at} attribute '{a.name}'"))


# --------------------------------------------------------------- resolving --
def resolve_location(t: onnx.TensorProto, root: Path, label: str) -> Path:
    """The file holding ``t``'s data, which must lie inside ``root`` (symlinks resolved)."""
    location = location_of(t)
    name = shown(t.name) or "(unnamed)"
    bad = _bad_location(location)
    if bad:
        raise ModelError(f"{label}: tensor '{name}' points to external data '{shown(location)}' outside "
                         f"the model's folder ({bad}); external data must be a relative path inside "
                         "the model's folder")
    real_root = root.resolve()
    target = (real_root / location).resolve()
    if not target.is_relative_to(real_root):
        raise ModelError(f"{label}: tensor '{name}' points to external data '{shown(location)}' outside "
                         "the model's folder (through a symlink); refusing to read it")
    if not target.is_file():
        raise ModelError(f"{label}: tensor '{name}' needs external data file '{shown(location)}', "
                         "which is missing (or not a regular file) in the model's folder")
    return target


def _bad_location(location: str) -> str:
    if not location:
        return "no location given"
    if "\x00" in location:
        return "not a valid path"
    if os.path.isabs(location) or PureWindowsPath(location).drive or location.startswith(("/", "\\")):
        return "an absolute path"
    parts = set(PurePosixPath(location.replace("\\", "/")).parts)
    if ".." in parts:
        return "a path going up with '..'"
    return ""


def _int_entry(t: onnx.TensorProto, key: str, label: str) -> int | None:
    for entry in t.external_data:
        if entry.key == key:
            try:
                value = int(entry.value)
            except ValueError:
                value = -1
            if value < 0:
                raise ModelError(f"{label}: tensor '{shown(t.name)}' has a bad external data {key}; "
                                 "expected a non-negative integer")
            return value
    return None


def read_external(t: onnx.TensorProto, root: Path, label: str) -> bytes:
    """The bytes of ``t`` from its external file, checked against ``root`` at read time too."""
    target = resolve_location(t, root, label)
    offset = _int_entry(t, "offset", label) or 0
    length = _int_entry(t, "length", label)
    with open(target, "rb") as f:
        _still_inside(f.fileno(), root, t, label)
        info = os.fstat(f.fileno())
        size = info.st_size
        if not stat.S_ISREG(info.st_mode) or offset > size or \
                (length is not None and offset + length > size):
            # No sizes in the message: they would tell an uploader about the file.
            raise ModelError(f"{label}: tensor '{shown(t.name)}' asks for bytes beyond the end of its "
                             f"external data file '{shown(location_of(t))}'; is the data file complete?")
        f.seek(offset)
        return f.read() if length is None else f.read(length)


def _still_inside(fd: int, root: Path, t: onnx.TensorProto, label: str) -> None:
    """The file actually opened lies in ``root`` (a folder swapped for a symlink after the
    check would otherwise win the race); Linux tells through /proc, elsewhere this is skipped."""
    try:
        opened = Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        return
    if not opened.is_relative_to(root.resolve()):
        raise ModelError(f"{label}: tensor '{shown(t.name)}' points to external data "
                         f"'{shown(location_of(t))}' outside the model's folder (through a symlink); "
                         "refusing to read it")


def inline(t: onnx.TensorProto, root: Path, label: str) -> None:
    """Load ``t``'s external data into the proto itself (it no longer points anywhere)."""
    t.raw_data = read_external(t, root, label)
    t.data_location = onnx.TensorProto.DEFAULT
    del t.external_data[:]


# ---------------------------------------------------------------- checking --
def check_model(model: onnx.ModelProto, root: Path | None, label: str) -> bool:
    """Refuse external data the rules do not allow; True when the model has any.

    ``root`` None: the model has no folder, any external data is refused.
    """
    found = False
    for t, _where, _attr in iter_tensors(model):
        if not uses_external(t):
            continue
        found = True
        if root is None:
            raise upload_error(location_of(t))
        resolve_location(t, root, label)
    return found


def inline_attributes(model: onnx.ModelProto, root: Path, label: str) -> None:
    """Attribute tensors (a Constant's value, ...) with external data get their bytes inline.

    Attributes are read eagerly on import, so this is where their data is read,
    by the same checked reader as the weights (which stay lazy).
    """
    for t, _where, is_attr in iter_tensors(model):
        if is_attr and uses_external(t):
            inline(t, root, label)


def inline_all(model: onnx.ModelProto, root: Path | None, label: str) -> onnx.ModelProto:
    """A copy of ``model`` with every external tensor inline (for onnxruntime from bytes)."""
    if not check_model(model, root, label):
        return model
    assert root is not None  # check_model refused otherwise
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for t, _where, _attr in iter_tensors(copy):
        if uses_external(t):
            inline(t, root, label)
    return copy
