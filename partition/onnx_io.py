"""ONNX import and export: the only module that touches ONNX protobufs.

Import: ``load_model(path_or_bytes) -> Graph``. Shapes come from ONNX shape
inference (symbolic dims kept as strings; for a large model it runs in a
forked child beside the node import, ``partition/onnx_inference.py``);
weights are read lazily; external data is followed only inside the model's
own folder (rules and reader in ``partition/external_data.py``); a model
given as bytes never follows it.

Export: ``to_model_proto(graph)`` writes opset <= the graph's own and IR 8, so
onnxruntime and TensorRT read it. A subgraph node becomes a node of domain
``sglens`` calling a model-local function that holds its body, so the file opens
in Netron and runs again in onnxruntime; graph inputs and outputs keep their
names and order (apache/mxnet#14727 lost them).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import helper, numpy_helper

from . import external_data
from .dtypes import ONNX_TYPE_CODES, ONNX_TYPE_NAMES
from .errors import LensError, ModelError, ModelTooLargeError
from .gcpause import paused_gc
from .import_limits import ImportLimits, check_import, check_wire_counts
from .ir import SUBGRAPH_DOMAIN, SUBGRAPH_OP, Dim, Graph, Initializer, Node, TensorInfo
from .local_functions import FUNCTION_KEY, LocalFunctions, expanded_size, instantiate
from .onnx_inference import InferenceChild, infer_in_process

EXPORT_IR_VERSION = 8
#: Shape inference is skipped above this size: it copies the whole model.
_INFER_LIMIT = 1 << 30


# ------------------------------------------------------------------ import --
def load_model(source: str | os.PathLike | bytes, *, max_bytes: int | None = None,
               infer_shapes: bool = True, data_root: str | os.PathLike | None = None,
               limits: ImportLimits | None = None) -> Graph:
    """Read an ONNX model from a path or from bytes into a ``Graph``.

    External data is read only from inside one folder: ``data_root`` when
    given (a bundle upload names its own folder), else the model file's own
    folder (symlinks resolved); a model given as bytes without ``data_root``
    never follows external data. ``limits``: objects and bytes once read, checked before
    anything is imported or read (``partition/import_limits.py``).
    """
    data, base_dir, label = _read_source(source, max_bytes)
    if data_root is not None:
        base_dir = Path(data_root).resolve()
    check_wire_counts(data, limits, label)   # before parsing makes the objects
    model = _parse(data, label)
    return from_model_proto(model, base_dir=base_dir, infer_shapes=infer_shapes, label=label, limits=limits)


def read_model_proto(source: str | os.PathLike | bytes, *, max_bytes: int | None = None,
                     data_root: str | os.PathLike | None = None,
                     limits: ImportLimits | None = None) -> onnx.ModelProto:
    """The model as a proto with its external data (checked by the same rules) inline.

    For onnxruntime, which would otherwise resolve external data of a model
    given as bytes against the current directory.
    """
    data, base_dir, label = _read_source(source, max_bytes)
    if data_root is not None:
        base_dir = Path(data_root).resolve()
    model = _parse(data, label)
    external_data.check_model(model, base_dir, label)   # the folder rules before any size is asked
    check_import(model, limits, base_dir, label)       # what inlining would read, before it does
    return external_data.inline_all(model, base_dir, label)


def _read_source(source: str | os.PathLike | bytes,
                 max_bytes: int | None) -> tuple[bytes, Path | None, str]:
    """(bytes, the model's folder or None, a label for messages)."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        data, base_dir, label = bytes(source), None, "upload"
    else:
        path = Path(source)
        if path.is_dir():
            raise ModelError(f"{path}: is a directory; expected an ONNX model file")
        if not path.is_file():
            raise ModelError(f"{path}: no such model file")
        size = path.stat().st_size
        if max_bytes is not None and size > max_bytes:
            raise ModelTooLargeError(f"{path.name}: {size} bytes is over the limit of {max_bytes}")
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ModelError(f"{path}: cannot read the model ({exc.strerror})") from None
        base_dir, label = path.resolve().parent, path.name
    if max_bytes is not None and len(data) > max_bytes:
        raise ModelTooLargeError(f"{label}: {len(data)} bytes is over the limit of {max_bytes}")
    return data, base_dir, label


def parse_model_bytes(data: bytes, label: str = "model") -> onnx.ModelProto:
    """A model from bytes alone: it has no folder, so external data is refused."""
    model = _parse(data, label)
    external_data.check_model(model, None, label)
    return model


def _parse(data: bytes, label: str = "model") -> onnx.ModelProto:
    if not data:
        raise ModelError(f"{label}: the file is empty; expected an ONNX model")
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise ModelError(f"{label}: not a valid ONNX model (protobuf parse failed: {exc}); "
                         "is the file truncated or not ONNX?") from None
    if not model.HasField("graph") or (not model.graph.node and not model.graph.output):
        raise ModelError(f"{label}: the file parsed but holds no ONNX graph; is it an ONNX model?")
    return model


def from_model_proto(model: onnx.ModelProto, *, base_dir: Path | None = None,
                     infer_shapes: bool = True, label: str = "model",
                     limits: ImportLimits | None = None) -> Graph:
    """The graph of ``model``; external data only from ``base_dir`` (None: refused)."""
    has_external = external_data.check_model(model, base_dir, label)
    check_import(model, limits, base_dir, label)   # before attribute tensors are read
    if has_external:
        assert base_dir is not None  # check_model refuses external data without a folder
        copy = onnx.ModelProto()
        copy.CopyFrom(model)  # attribute tensors are inlined below; the caller's proto stays
        external_data.inline_attributes(copy, base_dir, label)
        model = copy
    # (ONNX's inference expands every function call anew: skipped when that explodes)
    infer = infer_shapes and model.ByteSize() < _INFER_LIMIT and bool(not model.functions or expanded_size(model))
    beside = InferenceChild.start(model) if infer else None
    if infer and beside is None:
        model = infer_in_process(model)  # in this process: a small model, a threaded server, not Linux
    opset = {imp.domain or "": imp.version for imp in model.opset_import}
    functions = LocalFunctions(model.functions)
    meta = {p.key: p.value for p in model.metadata_props}
    # One Graph, validated once (building it and then replacing opset/metadata validated twice).
    with paused_gc():  # ~100k small acyclic objects per 100k nodes: see partition/gcpause.py
        if beside is None:
            return _import_graph(model.graph, base_dir, functions, opset, is_body=False, label=label,
                                 metadata=meta)
        try:
            return _import_beside_inference(model, beside, base_dir, functions, opset, label, meta)
        finally:
            beside.close()


def _import_beside_inference(model: onnx.ModelProto, beside: InferenceChild, base_dir: Path | None,
                             functions: Mapping, opset: Mapping[str, int], label: str,
                             meta: Mapping[str, str]) -> Graph:
    """The nodes and their checks while the child infers; then the types from the inferred model.

    Inference also types the tensors inside control-flow bodies: a model with a
    body (or a function call) is imported from the inferred model, after waiting.
    """
    g = model.graph
    nodes = _import_nodes(g.node, base_dir, functions, opset, label, plain_only=True)
    if nodes is None:
        inferred = beside.wait() or model
        return _import_graph(inferred.graph, base_dir, functions, opset, is_body=False, label=label,
                             metadata=meta)
    inits = {t.name: _lazy_initializer(t, base_dir, label) for t in g.initializer}
    inputs = [vi.name for vi in g.input if vi.name not in inits]
    graph = Graph(g.name or "main", nodes, inputs, [vi.name for vi in g.output], None, inits, opset,
                  metadata=meta)
    typed = (beside.wait() or model).graph
    # Built here and seen by no one yet: the types come last, from the inferred model.
    graph.tensors.update(_tensor_types(typed))
    return graph


def _import_graph(g: onnx.GraphProto, base_dir: Path | None, functions: Mapping,
                  opset: Mapping[str, int], *, is_body: bool, label: str,
                  metadata: Mapping[str, str] | None = None) -> Graph:
    tensors = _tensor_types(g)
    inits = {t.name: _lazy_initializer(t, base_dir, label) for t in g.initializer}
    nodes = _import_nodes(g.node, base_dir, functions, opset, label)
    assert nodes is not None
    inputs = [vi.name for vi in g.input if vi.name not in inits]
    return Graph(g.name or "main", nodes, inputs, [vi.name for vi in g.output], tensors,
                 inits, opset, is_body=is_body, metadata=metadata)


def _tensor_types(g: onnx.GraphProto) -> dict[str, TensorInfo]:
    """Tensor name -> TensorInfo for the graph's inputs, value_info and outputs."""
    tensors: dict[str, TensorInfo] = {}
    shapes: dict[tuple[Dim, ...], tuple[Dim, ...]] = {}
    # Most tensors of a model share a few types: decode each distinct TypeProto once
    # (keyed by its bytes; equal types written differently only cost a second decode).
    types: dict[bytes, TensorInfo] = {}
    trusted = TensorInfo.trusted
    for vi in (*g.input, *g.value_info, *g.output):
        key = vi.type.SerializeToString()
        known = types.get(key)
        if known is None:
            known = types[key] = _tensor_info(vi, shapes)
        name = vi.name
        tensors[name] = trusted(name, known.dtype, known.shape)
    return tensors


def _import_nodes(protos: Any, base_dir: Path | None, functions: Mapping, opset: Mapping[str, int],
                  label: str, *, plain_only: bool = False) -> list[Node] | None:
    """The nodes; with ``plain_only``, None at the first with a body (a graph attribute, a function call)."""
    names = [p.name for p in protos]
    unique = set(names)
    if len(unique) != len(names) or "" in unique:  # unnamed or twice-named nodes get fresh names
        names = _unique_names(protos, names)
    nodes: list[Node] = []
    append = nodes.append
    trusted = Node.trusted
    for proto, name in zip(protos, names):
        domain = proto.domain
        if proto.attribute or domain == SUBGRAPH_DOMAIN or \
                (functions and (domain, proto.op_type) in functions):  # a model-local function call
            if plain_only and (domain == SUBGRAPH_DOMAIN or (functions and (domain, proto.op_type) in functions)
                               or any(a.type in _BODY_TYPES for a in proto.attribute)):
                return None
            append(_import_node(proto, name, base_dir, functions, opset, label))
        else:  # most nodes: no attributes, nothing to decode
            append(trusted(name, proto.op_type, tuple(proto.input), tuple(proto.output), domain, {}, {}))
    return nodes


_BODY_TYPES = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)


def _unique_names(protos: Any, given: list[str]) -> list[str]:
    """``given``, with a fresh name for each node whose name is empty or not unique."""
    counts: dict[str, int] = {}
    for name in given:
        counts[name] = counts.get(name, 0) + 1
    taken = {n for n in given if n and counts[n] == 1}
    return [name if name and counts[name] == 1 else _fresh_name(proto, index, taken)
            for index, (proto, name) in enumerate(zip(protos, given))]


def _fresh_name(proto: onnx.NodeProto, index: int, taken: set[str]) -> str:
    """``<op_type>_<index>``, with a suffix in the rare case that is taken too."""
    name, k = f"{proto.op_type}_{index}", 1
    while name in taken:
        name, k = f"{proto.op_type}_{index}_{k}", k + 1
    taken.add(name)
    return name


def _import_node(proto: onnx.NodeProto, name: str, base_dir: Path | None, functions: Mapping,
                 opset: Mapping[str, int], label: str) -> Node:
    attrs: dict[str, Any] = {}
    bodies: dict[str, Graph] = {}
    for a in proto.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            bodies[a.name] = _import_graph(a.g, base_dir, functions, opset, is_body=True, label=label)
        elif a.type == onnx.AttributeProto.GRAPHS:
            raise ModelError(f"node '{name}' ({proto.op_type}) has a list-of-graphs attribute "
                             f"'{a.name}', which is not supported")
        else:
            attrs[a.name] = _attr_value(a)
    if functions and (proto.domain, proto.op_type) in functions:
        return _call_node(proto, name, attrs, bodies, base_dir, functions, opset, label)
    return Node.trusted(name, proto.op_type, tuple(proto.input), tuple(proto.output), proto.domain,
                        attrs, bodies)


def _import_function(f: onnx.FunctionProto, base_dir: Path | None, functions: Mapping,
                     opset: Mapping[str, int], label: str) -> Graph:
    nodes = _import_nodes(f.node, base_dir, functions, opset, label)
    assert nodes is not None
    return Graph(f.name, nodes, list(f.input), list(f.output), {}, {}, opset, is_body=True)


def _call_node(proto: onnx.NodeProto, name: str, attrs: dict[str, Any], bodies: dict[str, Graph],
               base_dir: Path | None, functions: Mapping, opset: Mapping[str, int], label: str) -> Node:
    """A call of a model-local function, its body instantiated (``partition/local_functions.py``)."""
    def import_body(f: onnx.FunctionProto) -> Graph:
        own = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in f.opset_import}
        body = _import_function(f, base_dir, functions, {**opset, **own}, label)
        if body.free_tensors:  # a function sees only its inputs (ONNX); a leak would wire outer tensors
            raise ModelError(f"model-local function '{f.name}' reads '{body.free_tensors[0]}', which is not "
                             "one of its inputs; fix the function")
        return body

    body = instantiate(proto, functions, import_body) if isinstance(functions, LocalFunctions) else \
        import_body(functions[(proto.domain, proto.op_type)])
    if proto.domain == SUBGRAPH_DOMAIN:  # our own subgraph node, exported by an earlier run
        attrs = {"property": attrs.get("property", proto.op_type), "subgraph_id": attrs.get("subgraph_id", 0)}
        return Node(name, SUBGRAPH_OP, tuple(proto.input), tuple(proto.output), SUBGRAPH_DOMAIN,
                    attrs, {"body": body})
    return Node(name, proto.op_type, tuple(proto.input), tuple(proto.output), proto.domain, attrs,
                {**bodies, FUNCTION_KEY: body})


def _attr_value(a: onnx.AttributeProto) -> Any:
    value = helper.get_attribute_value(a)
    if a.type == onnx.AttributeProto.STRING:
        return value.decode("utf-8", errors="replace")
    if a.type == onnx.AttributeProto.STRINGS:
        return [v.decode("utf-8", errors="replace") for v in value]
    if a.type == onnx.AttributeProto.TENSOR:
        return numpy_helper.to_array(value)
    if a.type == onnx.AttributeProto.TENSORS:
        return [numpy_helper.to_array(v) for v in value]
    if a.type in (onnx.AttributeProto.INTS, onnx.AttributeProto.FLOATS):
        return list(value)
    return value


@functools.lru_cache(maxsize=1024)
def _schema_defaults(op_type: str, domain: str, opset: int | None) -> dict[str, Any]:
    """Cached and shared: read it, hand out copies (``_fresh``)."""
    try:
        schema = onnx.defs.get_schema(op_type, opset if opset is not None else onnx.defs.onnx_opset_version(),
                                      domain)
    except onnx.defs.SchemaError:  # a custom op, or an op newer than the model's opset
        return {}
    return {name: _attr_value(a.default_value) for name, a in sorted(schema.attributes.items())
            if a.default_value.type != onnx.AttributeProto.UNDEFINED}


def _schema_of(op_type: str, domain: str, opsets: Mapping[str, int]) -> dict[str, Any]:
    domain = "" if domain in ("", "ai.onnx") else domain
    version = opsets.get(domain, opsets.get("ai.onnx") if domain == "" else None)
    return _schema_defaults(op_type, domain, version)


def _fresh(value: Any) -> Any:
    return list(value) if isinstance(value, list) else value.copy() if isinstance(value, np.ndarray) else value


def attribute_defaults(op_type: str, domain: str, opsets: Mapping[str, int]) -> dict[str, Any]:
    """The values ONNX's schema gives the attributes of ``op_type`` in ``domain``, at the version
    ``opsets`` (a graph's opset imports; none for the domain: the newest) imports, that a node
    may leave out -- a Conv without ``group`` has group 1 -- by name. The attributes without a
    default (required ones, ``kernel_shape``) and unknown ops give none. Fresh copies: a list
    default is the caller's to keep."""
    return {name: _fresh(v) for name, v in _schema_of(op_type, domain, opsets).items()}


def attribute_default(op_type: str, domain: str, opsets: Mapping[str, int], name: str) -> tuple[bool, Any]:
    """``(True, value)``: attribute ``name``'s schema default (as ``attribute_defaults``);
    ``(False, None)`` when the schema gives none. Copies that one value only: a rule asks on
    every selector call of the partitioning."""
    found = _schema_of(op_type, domain, opsets)
    return (True, _fresh(found[name])) if name in found else (False, None)


def _tensor_info(vi: onnx.ValueInfoProto, shapes: dict[tuple[Dim, ...], tuple[Dim, ...]] | None = None) -> TensorInfo:
    """The type of ``vi``; ``shapes`` interns equal shape tuples (most tensors of a model share a few)."""
    t = vi.type
    if not t.HasField("tensor_type"):
        return TensorInfo(vi.name)
    tt = t.tensor_type
    dtype = ONNX_TYPE_NAMES.get(tt.elem_type) if tt.elem_type else None
    shape: tuple[Dim, ...] | None = None
    if tt.HasField("shape"):
        shape = tuple([_dim(d) for d in tt.shape.dim])
        if shapes is not None:
            shape = shapes.setdefault(shape, shape)
    return TensorInfo.trusted(vi.name, dtype, shape)


def _dim(d: Any) -> Dim:
    """One dim: its value, its symbol, or None (unknown).

    A negative dim_value (Paddle writes -1) means "unknown", as onnxruntime reads it.
    A positive value needs no oneof test (the common case: one field read per dim).
    """
    v = d.dim_value
    if v > 0:
        return v
    if v < 0:
        return None
    if d.WhichOneof("value") == "dim_value":
        return 0
    return d.dim_param or None


def _lazy_initializer(t: onnx.TensorProto, base_dir: Path | None, label: str) -> Initializer:
    dtype = ONNX_TYPE_NAMES.get(t.data_type)
    shape = tuple(int(d) for d in t.dims)
    if external_data.uses_external(t):
        if base_dir is None:
            raise external_data.upload_error(external_data.location_of(t))
        root = base_dir

        def load() -> np.ndarray:
            copy = onnx.TensorProto()
            copy.CopyFrom(t)
            external_data.inline(copy, root, label)  # checked again at read time
            return numpy_helper.to_array(copy)
        return Initializer(t.name, dtype, shape, load)
    return Initializer(t.name, dtype, shape, lambda: numpy_helper.to_array(t))


# ------------------------------------------------------------------ export --
def to_model_proto(graph: Graph, *, producer: str = "subgraph-lens") -> onnx.ModelProto:
    """The graph as an ONNX model (IR 8); subgraph nodes become local functions."""
    functions = _FunctionSink()
    gproto = _export_graph(graph, functions, graph.opset)
    opset = dict(graph.opset) or {"": 17}
    for f in functions:
        opset.setdefault(f.domain, 1)
    model = helper.make_model(gproto, opset_imports=[helper.make_opsetid(d, v) for d, v in opset.items()],
                              producer_name=producer, functions=functions)
    model.ir_version = EXPORT_IR_VERSION
    for key, value in graph.metadata.items():
        model.metadata_props.add(key=key, value=value)
    if any(graph.info(t).shape is None for t in (*graph.inputs, *graph.outputs)):
        # ONNX's checker wants a shape on every graph input and output.
        model = _best_effort_infer(model)
    return model


def _best_effort_infer(model: onnx.ModelProto) -> onnx.ModelProto:
    if model.ByteSize() >= _INFER_LIMIT or (model.functions and not expanded_size(model)):
        return model
    try:
        return onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # noqa: BLE001 - the model is valid without the extra shapes
        return model


#: Weights above this total go to a data file beside the export (protobuf stops at 2 GiB).
EXTERNAL_EXPORT_BYTES = 1_800_000_000


def save_model(graph: Graph, path: str | os.PathLike, *,
               external_above: int = EXTERNAL_EXPORT_BYTES) -> None:
    """Write the graph as ONNX to ``path``; a path that cannot be written is a one-line error.

    When its weights pass ``external_above`` bytes they go to ``<name>.data`` in
    the same folder (a relative location, so the export loads again under the
    folder rule of ``partition/external_data.py``).
    """
    model = to_model_proto(graph)
    weights = sum(len(t.raw_data) for t in model.graph.initializer)
    try:
        if weights > external_above:
            stale = Path(path).with_name(Path(path).name + ".data")
            if stale.is_file() or stale.is_symlink():
                stale.unlink()  # onnx appends to an existing data file
            onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                            location=Path(path).name + ".data", size_threshold=0)
        else:
            onnx.save_model(model, str(path))
    except OSError as exc:
        raise LensError(f"cannot write the model to '{path}' ({exc.strerror or exc})") from None


def standalone_model(body: Graph, weights: Mapping[str, Initializer], opset: Mapping[str, int],
                     name: str = "subgraph") -> onnx.ModelProto:
    """A subgraph body as a model of its own: inputs that are weights become initializers."""
    inits = {n: w for n, w in weights.items() if n in body.inputs}
    inputs = [t for t in body.inputs if t not in inits]
    graph = Graph(name, body.nodes, inputs, body.outputs, body.tensors, inits, opset)
    return to_model_proto(graph)


def _export_graph(graph: Graph, functions: list[onnx.FunctionProto], opset: Mapping[str, int]) -> onnx.GraphProto:
    nodes = [_export_node(n, functions, opset) for n in graph.nodes]
    inputs = [_value_info(graph.info(t)) for t in graph.inputs]
    outputs = [_value_info(graph.info(t)) for t in graph.outputs]
    io = set(graph.inputs) | set(graph.outputs)
    value_info = [_value_info(i) for name, i in graph.tensors.items()
                  if name not in io and name not in graph.initializers and i.dtype]
    inits = [_tensor_proto(w) for w in graph.initializers.values()]
    return helper.make_graph(nodes, graph.name, inputs, outputs, inits, value_info=value_info)


def _export_node(node: Node, functions: list[onnx.FunctionProto], opset: Mapping[str, int]) -> onnx.NodeProto:
    if node.is_subgraph:
        fname = f"{node.attrs.get('property', 'subgraph')}_{node.attrs.get('subgraph_id', len(functions))}"
        fname = "".join(c if c.isalnum() or c == "_" else "_" for c in fname)
        body = node.body
        fnodes = [_export_node(n, functions, opset) for n in body.nodes]
        f_opset = [helper.make_opsetid(d, v) for d, v in (dict(opset) or {"": 17}).items()]
        functions.append(helper.make_function(SUBGRAPH_DOMAIN, fname, list(body.inputs),
                                              list(body.outputs), fnodes, f_opset))
        return helper.make_node(fname, list(node.inputs), list(node.outputs), name=node.name,
                                domain=SUBGRAPH_DOMAIN)
    op_type = node.op_type
    if FUNCTION_KEY in node.subgraphs:
        op_type = _export_functions(node, functions, opset)
    proto = helper.make_node(op_type, list(node.inputs), list(node.outputs), name=node.name,
                             domain=node.domain or None)
    for key, value in node.attrs.items():
        proto.attribute.append(_make_attr(key, value))
    for key, body in node.subgraphs.items():
        if key != FUNCTION_KEY:
            proto.attribute.append(helper.make_attribute(key, _export_graph(body, functions, opset)))
    return proto


class _FunctionSink(list):
    """The exported model's functions, and the name each call body got (``id(body) -> name``)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: dict[int, str] = {}
        self.taken: set[tuple[str, str]] = set()


def _export_functions(call: Node, sink: list, opset: Mapping[str, int]) -> str:
    """Write the body of a model-local function call (and its callees, first) as functions;
    the function's name for this call.

    Bodies are already instantiated (attribute references bound), so a function
    called with different attribute values is written once per instance, the
    second as ``<name>_2``; the attributes stay on the call (declared, unused).
    Iterative: callees are written before callers, so no recursion on nesting depth.
    """
    if not isinstance(sink, _FunctionSink):
        raise LensError("internal: function calls need a _FunctionSink")  # pragma: no cover
    order: list[Node] = []
    stack: list[tuple[Node, bool]] = [(call, False)]
    seen: set[int] = set()
    while stack:
        node, done = stack.pop()
        body = node.subgraphs[FUNCTION_KEY]
        if done:
            order.append(node)
            continue
        if id(body) in sink.names or id(body) in seen:
            continue
        seen.add(id(body))
        stack.append((node, True))
        stack.extend((n, False) for n in reversed(_calls_within(body)))
    for node in order:
        body = node.subgraphs[FUNCTION_KEY]
        name, k = node.op_type, 1
        while (node.domain, name) in sink.taken:
            k += 1
            name = f"{node.op_type}_{k}"
        sink.taken.add((node.domain, name))
        fnodes = [_export_node(n, sink, opset) for n in body.nodes]
        f_opset = [helper.make_opsetid(d, v) for d, v in (dict(body.opset) or dict(opset) or {"": 17}).items()]
        sink.append(helper.make_function(node.domain, name, list(body.inputs), list(body.outputs), fnodes,
                                         f_opset, attributes=sorted(node.attrs)))
        sink.names[id(body)] = name
    return sink.names[id(call.subgraphs[FUNCTION_KEY])]


def _calls_within(body: Graph) -> list[Node]:
    """Function calls in ``body``, control-flow bodies included (iteratively)."""
    found, stack = [], [body]
    while stack:
        g = stack.pop()
        for n in g.nodes:
            if FUNCTION_KEY in n.subgraphs:
                found.append(n)
            stack.extend(b for k, b in n.subgraphs.items() if k != FUNCTION_KEY)
    return found


def _make_attr(key: str, value: Any) -> onnx.AttributeProto:
    if isinstance(value, np.ndarray):
        return helper.make_attribute(key, numpy_helper.from_array(value))
    if isinstance(value, list) and value and isinstance(value[0], np.ndarray):
        return helper.make_attribute(key, [numpy_helper.from_array(v) for v in value])
    if isinstance(value, (list, tuple)) and not value:
        # An empty list has no type of its own; ints is ONNX's usual choice.
        return helper.make_attribute(key, [], attr_type=onnx.AttributeProto.INTS)
    return helper.make_attribute(key, value)


def _value_info(info: TensorInfo) -> onnx.ValueInfoProto:
    if info.dtype is None or info.dtype not in ONNX_TYPE_CODES:
        return helper.make_empty_tensor_value_info(info.name) if info.dtype is None else \
            helper.make_tensor_value_info(info.name, onnx.TensorProto.UNDEFINED, None)
    shape = None if info.shape is None else [d if d is not None else None for d in info.shape]
    return helper.make_tensor_value_info(info.name, ONNX_TYPE_CODES[info.dtype], shape)


def _tensor_proto(w: Initializer) -> onnx.TensorProto:
    proto = numpy_helper.from_array(np.asarray(w.value), w.name)
    if w.dtype in ONNX_TYPE_CODES and proto.data_type != ONNX_TYPE_CODES[w.dtype]:
        # bfloat16 and friends arrive as raw integers from numpy_helper; keep the declared type.
        proto.data_type = ONNX_TYPE_CODES[w.dtype]
    return proto
