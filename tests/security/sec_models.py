"""Hostile ONNX models for the attack tests (opset 17, IR 8, as onnxruntime here needs)."""

from __future__ import annotations

import random

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

PAYLOAD = "<img src=x onerror=window.__pwned=1>"


def model(nodes, inputs, outputs, inits=(), name="g", opsets=(("", 17),), **kw) -> onnx.ModelProto:
    g = helper.make_graph(list(nodes), name, list(inputs), list(outputs), list(inits), **kw)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    m.ir_version = 8
    return m


def external(tensor: onnx.TensorProto, location: str, length: int = 16) -> onnx.TensorProto:
    """``tensor`` turned into an external-data reference to ``location`` (no bytes of its own)."""
    tensor.ClearField("raw_data")
    tensor.ClearField("float_data")
    tensor.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", "0"), ("length", str(length))):
        e = tensor.external_data.add()
        e.key, e.value = k, v
    return tensor


def external_initializer(location: str) -> bytes:
    w = external(numpy_helper.from_array(np.zeros(4, np.float32), "w"), location)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    return model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [x], [y], [w]).SerializeToString()


def external_constant(location: str) -> bytes:
    """The issue's attack: a Constant node's ``value`` attribute reads the server's file."""
    t = external(numpy_helper.from_array(np.zeros(4, np.uint8), "c"), location)
    y = helper.make_tensor_value_info("y", TensorProto.UINT8, [4])
    return model([helper.make_node("Constant", [], ["y"], name="leak", value=t)], [], [y]).SerializeToString()


def external_in_if_body(location: str) -> bytes:
    """The same, two levels down: a Constant inside an If's then-branch."""
    t = external(numpy_helper.from_array(np.zeros(4, np.uint8), "c"), location)
    out = helper.make_tensor_value_info("c", TensorProto.UINT8, [4])
    then_g = helper.make_graph([helper.make_node("Constant", [], ["c"], name="leak", value=t)], "then", [], [out])
    else_g = helper.make_graph([helper.make_node("Constant", [], ["c"], name="zero",
                                                 value=numpy_helper.from_array(np.zeros(4, np.uint8)))],
                               "else", [], [out])
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
    y = helper.make_tensor_value_info("y", TensorProto.UINT8, [4])
    node = helper.make_node("If", ["cond"], ["y"], name="branch", then_branch=then_g, else_branch=else_g)
    return model([node], [cond], [y]).SerializeToString()


def memory_bomb() -> bytes:
    """133 bytes that ask for a 10000 x 10000 float tensor (400 MB) when run."""
    shape = numpy_helper.from_array(np.array([10000, 10000], np.int64), "shape")
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [10000, 10000])
    return model([helper.make_node("ConstantOfShape", ["shape"], ["y"], name="bomb")], [], [y],
                 [shape]).SerializeToString()


def chain_without_scopes(n: int) -> bytes:
    """``n`` Relu nodes in a chain, flat names (no ``/`` scopes)."""
    nodes = [helper.make_node("Relu", [f"t{i}" if i else "x"], [f"t{i + 1}"], name=f"n{i}") for i in range(n)]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info(f"t{n}", TensorProto.FLOAT, [2])
    return model(nodes, [x], [y]).SerializeToString()


def random_dag(n: int, seed: int = 0) -> bytes:
    """``n`` Add nodes, each reading two random earlier tensors: graphviz cannot lay it out flat in time."""
    rng = random.Random(seed)
    tensors = ["x"]
    nodes = []
    for i in range(n):
        a, b = rng.choice(tensors[-50:]), rng.choice(tensors)
        nodes.append(helper.make_node("Add", [a, b], [f"t{i}"], name=f"a{i}"))
        tensors.append(f"t{i}")
    consumed = {i for nd in nodes for i in nd.input}
    outs = [t for t in tensors[1:] if t not in consumed]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    return model(nodes, [x], [helper.make_tensor_value_info(t, TensorProto.FLOAT, [2]) for t in outs]).SerializeToString()


def wide_node(k: int) -> bytes:
    """One Concat node with ``k`` graph inputs."""
    ins = [helper.make_tensor_value_info(f"i{j}", TensorProto.FLOAT, [1]) for j in range(k)]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [k])
    return model([helper.make_node("Concat", [f"i{j}" for j in range(k)], ["y"], name="wide", axis=0)], ins, [y]).SerializeToString()


def injection_model() -> bytes:
    """Every string field of a model carries the payload: graph, node and tensor names, an op type in a
    custom domain, symbolic dims, doc strings, metadata, attribute strings."""
    p = PAYLOAD
    x = helper.make_tensor_value_info(f"x{p}", TensorProto.FLOAT, [f"batch{p}", 4])
    x.doc_string = f"doc{p}"
    mid = f"mid{p}"
    y = helper.make_tensor_value_info(f"y{p}", TensorProto.FLOAT, [f"batch{p}", 4])
    relu = helper.make_node("Relu", [x.name], [mid], name=f"scope{p}/relu{p}", doc_string=f"doc{p}")
    custom = helper.make_node(f"Op{p}", [mid], [y.name], name=f"custom{p}", domain=f"dom{p}",
                              label=f"attr{p}", labels=[f"a{p}", f"b{p}"])
    m = model([relu, custom], [x], [y], name=f"graph{p}", opsets=(("", 17), (f"dom{p}", 1)), doc_string=f"doc{p}")
    m.doc_string = f"doc{p}"
    m.producer_name = f"producer{p}"
    helper.set_model_props(m, {f"key{p}": f"value{p}"})
    return m.SerializeToString()


def big_weights(mib: int) -> bytes:
    """An Add with a ``mib`` MiB float initializer."""
    n = mib * (1 << 20) // 4
    w = numpy_helper.from_array(np.random.default_rng(0).random(n, dtype=np.float32), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])
    return model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [x], [y], [w]).SerializeToString()


# ---------------------------------------------------------- issue 21: size bombs --
def _tiny_model() -> bytes:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    return model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [x], [y]).SerializeToString()


def _bz2_zeros(n_mib: int) -> bytes:
    """``n_mib`` MiB of zeros as bzip2: one 16 MiB stream repeated (bzip2 readers take
    concatenated streams), so a GiB costs milliseconds to make and ~200 bytes per 16 MiB."""
    import bz2
    assert n_mib % 16 == 0
    one = bz2.compress(bytes(16 << 20), 9)
    return one * (n_mib // 16)


def tar_header_bomb(kind: str, claim_mib: int) -> bytes:
    """A bzip2 ``.tar`` whose first member is a GNU long-name (``kind="gnu"``) or pax (``"pax"``)
    header that claims ``claim_mib`` MiB (all zeros, so it compresses to almost nothing),
    then a tiny real model. tarfile reads such a header into memory whole."""
    import bz2
    import tarfile
    head = tarfile.TarInfo("././@LongLink" if kind == "gnu" else "././@PaxHeader")
    head.type = tarfile.GNUTYPE_LONGNAME if kind == "gnu" else tarfile.XHDTYPE
    head.size = claim_mib << 20
    data = _tiny_model()
    member = tarfile.TarInfo("model.onnx")
    member.size = len(data)
    body = member.tobuf(tarfile.USTAR_FORMAT) + data + bytes(-len(data) % 512) + bytes(1024)
    return (bz2.compress(head.tobuf(tarfile.GNU_FORMAT)) + _bz2_zeros(claim_mib) + bz2.compress(body))


def alias_bundle(aliases: int, mib: int) -> bytes:
    """A zip bundle whose model has ``aliases`` initializers of ``mib`` MiB each, every one pointing
    at the same ``mib`` MiB of ``w.bin`` (zeros): a few KiB sent, ``aliases * mib`` MiB when read."""
    import io
    import zipfile
    n = (mib << 20) // 4
    inits = [external(numpy_helper.from_array(np.zeros(1, np.float32), f"w{i}"), "w.bin", length=mib << 20)
             for i in range(aliases)]
    for t in inits:
        t.dims[:] = [n]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])
    nodes, prev = [], "x"
    for i in range(aliases):
        out = "y" if i == aliases - 1 else f"t{i}"
        nodes.append(helper.make_node("Add", [prev, f"w{i}"], [out], name=f"add{i}"))
        prev = out
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("model.onnx", model(nodes, [x], [y], inits).SerializeToString())
        zf.writestr("w.bin", bytes(mib << 20))
    return buf.getvalue()


def npz_bomb(mib: int, name: str = "x") -> bytes:
    """A compressed ``.npz`` holding ``mib`` MiB of float32 zeros under ``name`` (about 1 KB per MiB)."""
    import io
    import zipfile
    arr_header = io.BytesIO()
    n = (mib << 20) // 4
    np.lib.format.write_array_header_1_0(arr_header, {"descr": "<f4", "fortran_order": False, "shape": (n,)})
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        with zf.open(f"{name}.npy", "w", force_zip64=True) as f:
            f.write(arr_header.getvalue())
            zeros = bytes(1 << 20)
            for _ in range(mib):
                f.write(zeros)
    return buf.getvalue()


def tiny_weights(count: int) -> bytes:
    """``count`` scalar initializers summed by one Sum node: a few MB on disk, a Python object each."""
    inits = [numpy_helper.from_array(np.array(float(i), np.float32), f"c{i}") for i in range(count)]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [])
    return model([helper.make_node("Sum", [t.name for t in inits], ["y"], name="sum")], [], [y],
                 inits).SerializeToString()


def one_input_model(n: int) -> bytes:
    """y = Relu(x), x float32 [n]: a model whose run input the attack fills."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])
    return model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [x], [y]).SerializeToString()


def symbolic_input_model() -> bytes:
    """y = Relu(x), x float32 ["n"]: any length is a valid input."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])
    return model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [x], [y]).SerializeToString()
