"""Limits checked on a parsed ONNX proto before it is imported or its weights are read.

A model's file size says little about what importing it costs:

- **objects**: every node, initializer and attribute becomes Python objects (about 1.3 KiB
  each once imported); a 19 MB file of a million scalar initializers took 1.5 GiB. Nodes,
  initializers and attributes are counted over every graph (control-flow bodies and local
  functions included) and refused over ``ImportLimits``.
- **materialised bytes**: what the tensors hold once read — per tensor its declared
  size (dims x element size) or, for external data, the bytes it reads, whichever is larger,
  initializers and attribute tensors (a ``Constant``'s value) alike. Two tensors pointing at
  the same bytes of a data file are counted twice, because they are read twice: 64 aliases of
  4 MiB in a 5 KB bundle are 256 MiB once read. Integers stored as varints can also grow 8x
  when read.

Both are checked before anything is read (``check_import``), with a message naming what is
over and the setting that raises it.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any
from pathlib import Path

import onnx

from . import external_data
from .errors import ModelError

#: Defaults of ``sglens serve`` (``--max-nodes``, ``--max-initializers``, ``--max-attributes``).
MAX_NODES = 250_000
MAX_INITIALIZERS = 100_000
MAX_ATTRIBUTES = 1_000_000


@dataclass(frozen=True)
class ImportLimits:
    """What one model may hold; ``tensor_bytes`` None: no byte limit."""

    nodes: int = MAX_NODES
    initializers: int = MAX_INITIALIZERS
    attributes: int = MAX_ATTRIBUTES
    tensor_bytes: int | None = None
    #: How a refusal ends: the setting that raises the limit.
    hint: str = "raise the limit with sglens serve --{flag}"


@dataclass(frozen=True)
class ObjectCounts:
    nodes: int
    initializers: int
    attributes: int

    @property
    def total(self) -> int:
        return self.nodes + self.initializers + self.attributes


def count_objects(model: onnx.ModelProto) -> ObjectCounts:
    """Nodes, initializers (sparse too) and attributes over every graph of ``model``, iteratively."""
    nodes = inits = attrs = 0
    graphs: list[onnx.GraphProto] = [model.graph]
    graphs += [g for info in model.training_info for g in (info.initialization, info.algorithm)]
    node_lists: list = [f.node for f in model.functions]
    attrs += sum(len(f.attribute_proto) for f in model.functions)
    while graphs or node_lists:
        if graphs:
            g = graphs.pop()
            inits += len(g.initializer) + len(g.sparse_initializer)
            node_lists.append(g.node)
            continue
        for n in node_lists.pop():
            nodes += 1
            if not n.attribute:
                continue
            attrs += len(n.attribute)
            for a in n.attribute:
                if a.HasField("g"):
                    graphs.append(a.g)
                graphs.extend(a.graphs)
    return ObjectCounts(nodes, inits, attrs)


def _bad_text(value: object) -> bool:
    # protobuf hands back a proto2 string field that is not valid UTF-8 as bytes
    return isinstance(value, bytes)


def check_text(model: onnx.ModelProto, label: str) -> None:
    """Every name the import reads is text: a string field that is not valid UTF-8 (protobuf gives
    it back as bytes) is refused here, naming where, instead of failing later in a view."""
    def where_bad(g: onnx.GraphProto) -> str | None:
        if _bad_text(g.name):
            return "a graph name"
        for field_name in ("input", "output", "value_info"):
            for vi in getattr(g, field_name):
                if _bad_text(vi.name):
                    return f"a graph {field_name} name"
                dims = vi.type.tensor_type.shape.dim if vi.type.HasField("tensor_type") else ()
                if any(_bad_text(d.dim_param) for d in dims):
                    return f"a symbolic dimension of '{vi.name}'"
        if any(_bad_text(t.name) for t in g.initializer):
            return "an initializer name"
        return None

    bad = where_bad(model.graph)
    meta = [(p.key, p.value) for p in model.metadata_props]
    if bad is None and any(_bad_text(k) or _bad_text(v) for k, v in meta):
        bad = "a metadata entry"
    if bad is None and any(_bad_text(o.domain) for o in model.opset_import):
        bad = "an opset domain"
    graphs: list[onnx.GraphProto] = []
    node_lists: list = [model.graph.node, *(f.node for f in model.functions)]
    if bad is None and any(_bad_text(f.name) or _bad_text(f.domain) for f in model.functions):
        bad = "a function name"
    while bad is None and (graphs or node_lists):
        if graphs:
            g = graphs.pop()
            bad = where_bad(g)
            node_lists.append(g.node)
            continue
        for n in node_lists.pop():
            if _bad_text(n.name) or _bad_text(n.op_type) or _bad_text(n.domain):
                bad = "a node name, op type or domain"
            elif any(_bad_text(t) for t in n.input) or any(_bad_text(t) for t in n.output):
                bad = f"a tensor name of node '{n.name}'"
            for a in n.attribute:
                if _bad_text(a.name):
                    bad = f"an attribute name of node '{n.name}'"
                graphs.extend([a.g] if a.HasField("g") else [])
                graphs.extend(a.graphs)
            if bad:
                break
    if bad is not None:
        raise ModelError(f"{label}: {bad} is not valid UTF-8 text; is the file corrupted? "
                         "(ONNX strings must be UTF-8)")


def _element_size(t: onnx.TensorProto) -> int:
    if t.data_type == onnx.TensorProto.STRING:
        return 1
    try:
        return max(1, onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize)
    except (KeyError, TypeError, ValueError):
        return 8   # an unknown type: counted at the widest


def _external_bytes(t: onnx.TensorProto, root: Path, label: str) -> int:
    """The bytes reading ``t``'s external data reads (its ``length``, else the file's rest)."""
    for entry in t.external_data:
        if entry.key == "length":
            try:
                return max(0, int(entry.value))
            except ValueError:
                return 0   # the reader refuses it with its own message
    offset = 0
    for entry in t.external_data:
        if entry.key == "offset":
            try:
                offset = int(entry.value)
            except ValueError:
                offset = 0
    return max(0, os.path.getsize(external_data.resolve_location(t, root, label)) - offset)


def materialised_bytes(model: onnx.ModelProto, root: Path | None, label: str) -> tuple[int, str, int, int]:
    """(bytes every tensor holds once read, the data file read most, how many tensors read it,
    how many bytes they read from it)."""
    total = 0
    per_file: dict[str, tuple[int, int]] = {}
    for t, _where, _attr in external_data.iter_tensors(model):
        # negative dims are invalid (refused when read): counted as nothing, never as less than nothing
        size = max(0, math.prod(t.dims)) * _element_size(t) if t.dims else _element_size(t)
        if t.data_type == onnx.TensorProto.STRING:
            size = max(size, sum(len(s) for s in t.string_data))
        if external_data.uses_external(t) and root is not None:
            read = _external_bytes(t, root, label)
            size = max(size, read)
            loc = external_data.location_of(t)
            count, nbytes = per_file.get(loc, (0, 0))
            per_file[loc] = (count + 1, nbytes + read)
        total += size
    if not per_file:
        return total, "", 0, 0
    loc = max(per_file, key=lambda k: per_file[k][1])
    return total, loc, *per_file[loc]


def check_import(model: onnx.ModelProto, limits: ImportLimits | None, root: Path | None, label: str) -> ObjectCounts:
    """Refuse ``model`` when it holds more objects or tensor bytes than ``limits``, or names that
    are not text; its counts."""
    check_text(model, label)
    counts = count_objects(model)
    if limits is None:
        return counts
    for what, have, limit, flag in (("nodes", counts.nodes, limits.nodes, "max-nodes"),
                                    ("initializers", counts.initializers, limits.initializers, "max-initializers"),
                                    ("attributes", counts.attributes, limits.attributes, "max-attributes")):
        if have > limit:
            raise ModelError(f"{label}: the model has {have} {what}, more than this server imports "
                                     f"({limit}); {limits.hint.format(flag=flag)}")
    if limits.tensor_bytes is not None:
        total, loc, count, nbytes = materialised_bytes(model, root, label)
        if total > limits.tensor_bytes:
            most = (f"; {count} tensors read {nbytes} bytes of '{external_data.shown(loc)}' "
                    "(bytes that several tensors point at are read once for each)" if loc else "")
            raise ModelError(f"{label}: its tensors hold {total} bytes once read, over the limit of "
                                     f"{limits.tensor_bytes} bytes{most}; "
                                     f"{limits.hint.format(flag='max-upload')}")
    return counts


# ------------------------------------------------------- before parsing --
# ModelProto field 7 is the graph; GraphProto fields 1, 5 and 15 are nodes, initializers and
# sparse initializers (onnx.proto). Counting them on the wire costs nothing like parsing:
# a 28 MB file of a million scalar initializers took 240 MiB to parse before it could be refused.
_MODEL_GRAPH = 7
_GRAPH_NODE, _GRAPH_INITIALIZER, _GRAPH_SPARSE_INITIALIZER = 1, 5, 15


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _length_delimited(buf: memoryview, start: int, end: int):
    """(field number, start, end) of each length-delimited field in ``buf[start:end]``."""
    pos = start
    while pos < end:
        key, pos = _varint(buf, pos)
        wire = key & 7
        if wire == 0:
            _, pos = _varint(buf, pos)
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        elif wire == 2:
            size, pos = _varint(buf, pos)
            yield key >> 3, pos, pos + size
            pos += size
        else:
            raise ValueError("unsupported wire type")


def check_wire_counts(data: Any, limits: ImportLimits | None, label: str) -> None:
    """The main graph's nodes and initializers counted on the serialized model, before it is
    parsed; a file that is not valid protobuf is left to the parser to report."""
    if limits is None:
        return
    buf = memoryview(data).cast("B")
    nodes = inits = 0
    try:
        for field, start, end in _length_delimited(buf, 0, len(buf)):
            if field != _MODEL_GRAPH:
                continue
            for inner, _s, _e in _length_delimited(buf, start, min(end, len(buf))):
                nodes += inner == _GRAPH_NODE
                inits += inner in (_GRAPH_INITIALIZER, _GRAPH_SPARSE_INITIALIZER)
    except (ValueError, IndexError):
        return
    finally:
        buf.release()   # a view of the caller's mmap must not outlive this call
    for what, have, limit, flag in (("nodes", nodes, limits.nodes, "max-nodes"),
                                    ("initializers", inits, limits.initializers, "max-initializers")):
        if have > limit:
            raise ModelError(f"{label}: the model has {have} {what}, more than this server imports "
                             f"({limit}); {limits.hint.format(flag=flag)}")
