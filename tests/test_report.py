"""partition.report: describe (sizes, boundary bytes, summary), export_subgraphs; partition.tensorrt.node_report: groups_report."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from partition import Graph, Node, load_model, partition
from partition.errors import LensError
from partition.report import describe, export_subgraphs
from partition.tensorrt.node_report import groups_report


F = TensorProto.FLOAT


def weighted_model() -> Graph:
    """x[2,3] -> MatMul(W) -> Relu -> Add(B) -> Mul -> y, with Relu -> NonZero -> Cast -> ReduceSum -> Mul."""
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4), "W")
    b = numpy_helper.from_array(np.ones(4, np.float32), "B")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["mm"], name="mm"),
             helper.make_node("Relu", ["mm"], ["r"], name="relu"),
             helper.make_node("NonZero", ["r"], ["nz"], name="nonzero"),
             helper.make_node("Cast", ["nz"], ["nzf"], name="cast", to=F),
             helper.make_node("ReduceSum", ["nzf"], ["s"], name="rsum", keepdims=0),
             helper.make_node("Add", ["r", "B"], ["a"], name="add"),
             helper.make_node("Mul", ["a", "s"], ["y"], name="mul")]
    graph = helper.make_graph(nodes, "w", [helper.make_tensor_value_info("x", F, [2, 3])],
                              [helper.make_tensor_value_info("y", F, [2, 4])], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return load_model(model.SerializeToString())


def test_describe_adds_sizes_boundary_bytes_and_summary():
    result = partition(weighted_model(), "tensorrt")
    data = describe(result)
    json.dumps(data)  # serialisable
    first = data["subgraphs"][0]
    assert first["nodes"] == ["mm", "relu", "add"]
    assert first["node_count"] == 3 and first["compute_nodes"] == 3
    assert first["weights"] == ["W", "B"]
    # in: x [2,3] f32 = 24 B; out: r [2,4] = 32 B, a [2,4] = 32 B; weights are not boundary traffic.
    assert first["boundary_bytes"] == 24 + 32 + 32 and first["boundary_unknown"] == []
    summary = data["summary"]
    assert summary["nodes"] == 7 and summary["partitions"] == len(result.subgraphs)
    assert summary["nodes_covered"] == 7 - len(result.excluded)
    assert summary["unsupported"][0]["op_type"] == "NonZero"
    assert summary["unsupported"][0]["reasons"] == {"NonZero: output shape depends on input values": 1}
    assert summary["unsupported_nodes"] == 1


def test_describe_unknown_shapes_are_listed_not_guessed():
    g = Graph("g", [Node("a", "Relu", ("x",), ("t",)), Node("b", "Relu", ("t",), ("y",))], ["x"], ["y"],
              opset={"": 17})
    data = describe(partition(g, "tensorrt"))
    assert data["subgraphs"][0]["boundary_bytes"] == 0
    assert data["subgraphs"][0]["boundary_unknown"] == ["x", "y"]


def test_describe_is_generic_over_backends():
    g = weighted_model()
    data = describe(partition(g, "default", ops=["MatMul", "Relu"]))
    assert data["subgraphs"][0]["node_count"] == 2
    assert data["summary"]["partitions"] == 1
    assert data["summary"]["left_out_by_op"]["NonZero"] == 1


def test_export_subgraphs_run_in_onnxruntime(tmp_path):
    graph = weighted_model()
    result = partition(graph, "tensorrt")
    paths = export_subgraphs(result, tmp_path / "out")
    assert [p.name for p in paths] == [f"tensorrt_{s.id}.onnx" for s in result.subgraphs]
    model = onnx.load(str(paths[0]))
    onnx.checker.check_model(model)
    assert model.ir_version == 8
    assert {i.name for i in model.graph.initializer} == {"W", "B"}
    assert [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] == [17]
    sess = ort.InferenceSession(str(paths[0]), providers=["CPUExecutionProvider"])
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    outs = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"x": x})))
    expected_r = np.maximum(x @ np.arange(12, dtype=np.float32).reshape(3, 4), 0)
    np.testing.assert_allclose(outs["r"], expected_r)
    np.testing.assert_allclose(outs["a"], expected_r + 1)


def test_export_sample_models_run(tmp_path):
    from sample_models.generate import build_all
    for name, proto in build_all().items():
        result = partition(load_model(proto.SerializeToString()), "tensorrt", min_size=1)
        for path in export_subgraphs(result, tmp_path / name):
            sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            feeds = {}
            for i in sess.get_inputs():
                shape = [d if isinstance(d, int) else 2 for d in i.shape]
                dtype = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(bool)": np.bool_}[i.type]
                feeds[i.name] = np.ones(shape, dtype)
            assert sess.run(None, feeds)


def test_groups_report_for_incompatible_and_compatible_nodes():
    from sample_models.generate import build_all
    graph = load_model(build_all()["trt_cycle.onnx"].SerializeToString())
    rep = groups_report(graph, "D")
    assert rep["compatible"] is False and rep["reason"].startswith("Det: not supported")
    assert rep["ancestors"] == ["A"] and rep["descendants"] == ["C"]
    json.dumps(rep)
    rep_a = groups_report(graph, "A", min_size=3)
    assert rep_a["compatible"] is True and rep_a["incompatible_descendants"] == ["D"]
    with pytest.raises(LensError, match="no node named"):
        groups_report(graph, "nope")


def test_groups_report_respects_data_dependent_option():
    graph = weighted_model()
    assert groups_report(graph, "nonzero")["compatible"] is False
    assert groups_report(graph, "nonzero", exclude_data_dependent=False)["compatible"] is True
