"""Objects and bytes once read are counted on the proto, before any weight is read (issue 21)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from partition.errors import ModelError
from partition.import_limits import ImportLimits, check_import, count_objects, materialised_bytes
from partition.onnx_io import load_model, read_model_proto

from conftest import make_model


def _aliased(folder, aliases: int, n: int = 1024):
    """``aliases`` float initializers of ``n`` elements, all reading the first 4n bytes of w.bin."""
    (folder / "w.bin").write_bytes(np.arange(n, dtype=np.float32).tobytes())
    inits = []
    for i in range(aliases):
        t = onnx.TensorProto(name=f"w{i}", data_type=TensorProto.FLOAT, dims=[n])
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", "w.bin"), ("offset", "0"), ("length", str(4 * n))):
            t.external_data.add(key=k, value=v)
        inits.append(t)
    nodes, prev = [], "x"
    for i in range(aliases):
        out = "y" if i == aliases - 1 else f"t{i}"
        nodes.append(helper.make_node("Add", [prev, f"w{i}"], [out], name=f"add{i}"))
        prev = out
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])], inits)
    path = folder / "m.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def test_aliases_are_counted_each_time_they_are_read(tmp_path):
    path = _aliased(tmp_path, 8)
    model = onnx.load_model(str(path), load_external_data=False)
    total, loc, count, nbytes = materialised_bytes(model, tmp_path, "m.onnx")
    assert (total, loc, count, nbytes) == (8 * 4096, "w.bin", 8, 8 * 4096)
    limits = ImportLimits(tensor_bytes=8 * 4096 - 1)
    with pytest.raises(ModelError, match=r"hold 32768 bytes once read.*8 tensors read 32768 bytes of 'w.bin'"):
        load_model(path, limits=limits)
    with pytest.raises(ModelError, match="once read"):
        read_model_proto(path, limits=limits)
    g = load_model(path, limits=ImportLimits(tensor_bytes=8 * 4096))       # at the limit: fine
    assert np.array_equal(g.initializers["w7"].value, np.arange(1024, dtype=np.float32))


def test_varint_packed_integers_count_as_read():
    """An int64 tensor stored as one-byte varints is 8 bytes per element once read."""
    t = helper.make_tensor("c", TensorProto.INT64, [4096], np.zeros(4096, np.int64))
    assert t.ByteSize() < 4200
    node = helper.make_node("Constant", [], ["y"], name="k", value=t)
    model = make_model([node], [], [helper.make_tensor_value_info("y", TensorProto.INT64, [4096])])
    assert materialised_bytes(model, None, "m")[0] == 8 * 4096
    with pytest.raises(ModelError, match="32768 bytes once read"):
        check_import(model, ImportLimits(tensor_bytes=10_000), None, "m")


def test_objects_are_counted_in_bodies_too():
    inner = helper.make_graph([helper.make_node("Relu", ["a"], ["b"], name=f"r{i}", alpha=1.0) for i in range(3)],
                              "body", [], [helper.make_tensor_value_info("b", TensorProto.FLOAT, [1])],
                              [numpy_helper.from_array(np.zeros(1, np.float32), "a")])
    node = helper.make_node("If", ["c"], ["y"], name="if", then_branch=inner, else_branch=inner)
    model = make_model([node], [helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    counts = count_objects(model)
    assert (counts.nodes, counts.initializers, counts.attributes) == (7, 2, 8)
    with pytest.raises(ModelError, match=r"has 7 nodes, more than this server imports \(6\).*--max-nodes"):
        check_import(model, ImportLimits(nodes=6), None, "m")
    with pytest.raises(ModelError, match=r"has 2 initializers.*--max-initializers"):
        check_import(model, ImportLimits(initializers=1), None, "m")
    with pytest.raises(ModelError, match=r"has 8 attributes.*--max-attributes"):
        check_import(model, ImportLimits(attributes=7), None, "m")


def test_nodes_and_initializers_are_counted_on_the_wire_before_parsing():
    from partition.import_limits import check_wire_counts
    inits = [numpy_helper.from_array(np.array(float(i), np.float32), f"c{i}") for i in range(50)]
    node = helper.make_node("Sum", [t.name for t in inits], ["y"], name="sum")
    data = make_model([node], [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])], inits).SerializeToString()
    check_wire_counts(data, ImportLimits(initializers=50, nodes=1), "m")
    with pytest.raises(ModelError, match=r"has 50 initializers, more than this server imports \(49\)"):
        check_wire_counts(data, ImportLimits(initializers=49), "m")
    with pytest.raises(ModelError, match="has 50 initializers"):
        load_model(data, limits=ImportLimits(initializers=49))
    check_wire_counts(b"\xff" * 20, ImportLimits(initializers=1), "m")


def test_negative_dims_cannot_hide_bytes_and_bad_locations_are_text(tmp_path):
    big = helper.make_tensor("big", TensorProto.INT64, [4096], np.zeros(4096, np.int64))
    neg = onnx.TensorProto(name="neg", data_type=TensorProto.FLOAT, dims=[-(1 << 40)])
    model = make_model([helper.make_node("Add", ["big", "neg"], ["y"], name="a")], [],
                       [helper.make_tensor_value_info("y", TensorProto.INT64, [4096])], [big, neg])
    assert materialised_bytes(model, None, "m")[0] == 8 * 4096
    # a location that is not UTF-8 is refused with a message, not a TypeError
    t = onnx.TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[1])
    t.data_location = TensorProto.EXTERNAL
    t.external_data.add(key="location", value="LOC")
    m = make_model([helper.make_node("Relu", ["w"], ["y"], name="r")], [],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])], [t])
    data = m.SerializeToString().replace(b"LOC", b"L\xffC")
    with pytest.raises(ModelError, match="external data"):
        load_model(data)
    (tmp_path / "m.onnx").write_bytes(data)
    with pytest.raises(ModelError, match="external data"):
        load_model(tmp_path / "m.onnx", limits=ImportLimits(tensor_bytes=1 << 20))
