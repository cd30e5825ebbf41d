"""Model IR: import, naming, validation errors, external data, export round trips."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from partition import GraphCycleError, ModelError, ModelTooLargeError, load_model, to_model_proto
from tests.conftest import make_model

F = TensorProto.FLOAT


def vi(name: str, shape=(2, 3)):
    return helper.make_tensor_value_info(name, F, list(shape) if shape is not None else None)


def test_names_shapes_and_derived_maps() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["b"], name="dup"),
             helper.make_node("Sigmoid", ["a"], ["c"], name="dup"), helper.make_node("Add", ["b", "c"], ["y"], name="add")]
    g = load_model(make_model(nodes, [vi("x", ["N", 3])], [vi("y", None)]).SerializeToString())
    assert [n.name for n in g.nodes] == ["Relu_0", "Relu_1", "Sigmoid_2", "add"]
    assert g.info("b").shape == ("N", 3) and g.info("b").dtype == "FLOAT"
    assert g.producer("a").name == "Relu_0"
    assert [n.name for n in g.consumers("a")] == ["Relu_1", "Sigmoid_2"]
    assert [n.name for n in g.input_nodes(g.node_by_name["add"])] == ["Relu_1", "Sigmoid_2"]


def test_unsorted_nodes_are_sorted_stably() -> None:
    nodes = [helper.make_node("Relu", ["a"], ["y"], name="second"), helper.make_node("Exp", ["x"], ["a"], name="first")]
    g = load_model(make_model(nodes, [vi("x")], [vi("y")]).SerializeToString())
    assert [n.name for n in g.nodes] == ["first", "second"]


@pytest.mark.parametrize("nodes,error,needle", [
    ([helper.make_node("Relu", ["y"], ["a"], name="p"), helper.make_node("Relu", ["a"], ["y"], name="q")],
     GraphCycleError, "cycle"),
    ([helper.make_node("Relu", ["x"], ["y"], name="p"), helper.make_node("Exp", ["x"], ["y"], name="q")],
     ModelError, "produced by two nodes, 'p' and 'q'"),
    ([helper.make_node("Add", ["x", "ghost"], ["y"], name="p")], ModelError, "'p' (Add) reads tensor 'ghost'"),
])
def test_malformed_graphs_name_the_problem(nodes, error, needle) -> None:
    with pytest.raises(error) as info:
        load_model(make_model(nodes, [vi("x")], [vi("y")]).SerializeToString())
    assert needle in str(info.value)


def test_not_onnx_truncated_empty_and_too_large(tmp_path) -> None:
    good = make_model([helper.make_node("Relu", ["x"], ["y"])], [vi("x")], [vi("y")]).SerializeToString()
    for data in (b"", b"\x0a\xff\xff\xff\xff", good[: len(good) // 2], b"PK\x03\x04 not a model"):
        with pytest.raises(ModelError):
            load_model(data)
    path = tmp_path / "m.onnx"
    path.write_bytes(good)
    with pytest.raises(ModelTooLargeError, match="over the limit"):
        load_model(path, max_bytes=10)
    with pytest.raises(ModelError, match="no such model file"):
        load_model(tmp_path / "missing.onnx")


def _external_model(location: str) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
    w.data_location = TensorProto.EXTERNAL
    w.ClearField("raw_data")
    for key, value in (("location", location), ("offset", "0"), ("length", "24")):
        w.external_data.add(key=key, value=value)
    return make_model([helper.make_node("Add", ["x", "w"], ["y"])], [vi("x")], [vi("y")], [w])


def test_external_data_inside_folder_loads_lazily(tmp_path) -> None:
    (tmp_path / "w.bin").write_bytes(np.full((2, 3), 2.0, np.float32).tobytes())
    (tmp_path / "m.onnx").write_bytes(_external_model("w.bin").SerializeToString())
    g = load_model(tmp_path / "m.onnx")
    assert not g.initializers["w"].loaded
    np.testing.assert_array_equal(g.initializers["w"].value, np.full((2, 3), 2.0, np.float32))


@pytest.mark.parametrize("location", ["../secret.bin", "/etc/passwd", "sub/../../secret.bin"])
def test_external_data_outside_folder_is_refused(tmp_path, location) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (tmp_path / "secret.bin").write_bytes(b"\0" * 24)
    (folder / "m.onnx").write_bytes(_external_model(location).SerializeToString())
    with pytest.raises(ModelError, match="outside the model's folder"):
        load_model(folder / "m.onnx")


def test_export_keeps_io_order_and_runs(rng) -> None:
    nodes = [helper.make_node("Sub", ["b", "a"], ["y2"], name="s"), helper.make_node("Mul", ["a", "b"], ["y1"], name="m")]
    model = make_model(nodes, [vi("b"), vi("a")], [vi("y2"), vi("y1")])
    g = load_model(model.SerializeToString())
    out = to_model_proto(g)
    onnx.checker.check_model(out, full_check=True)
    assert out.ir_version <= 8 and all(o.version <= 17 for o in out.opset_import if o.domain == "")
    assert [i.name for i in out.graph.input] == ["b", "a"] and [o.name for o in out.graph.output] == ["y2", "y1"]
    feeds = {"a": rng.standard_normal((2, 3)).astype(np.float32), "b": rng.standard_normal((2, 3)).astype(np.float32)}
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    got = ort.InferenceSession(out.SerializeToString()).run(None, feeds)
    for w, g_ in zip(want, got):
        np.testing.assert_allclose(g_, w, rtol=1e-6)


def test_partitioned_export_reimports_subgraph_nodes(rng) -> None:
    from partition import partition
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r"), helper.make_node("Sin", ["a"], ["b"], name="s"),
             helper.make_node("Exp", ["b"], ["y"], name="e")]
    model = make_model(nodes, [vi("x")], [vi("y")])
    result = partition(load_model(model.SerializeToString()), "default", ops=["Relu", "Exp"])
    again = load_model(to_model_proto(result.graph).SerializeToString())
    subs = [n for n in again.nodes if n.is_subgraph]
    assert [[m.name for m in s.body.nodes] for s in subs] == [["r"], ["e"]]
    feeds = {"x": rng.standard_normal((2, 3)).astype(np.float32)}
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    got = ort.InferenceSession(to_model_proto(again).SerializeToString()).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-6)
