"""The networks of MXNet's tests/python/unittest/test_subgraph_op.py, rebuilt in ONNX.

Each network is partitioned with the op sets MXNet used; the partition must pass
check_partition, and the partitioned model (subgraphs exported as ONNX
functions) must compute what the original computes, checked by onnxruntime on
fresh random inputs.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from partition import check_partition, load_model, partition, to_model_proto
from tests.conftest import make_model

F = TensorProto.FLOAT


def vi(name: str, shape: list[int]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, F, shape)


def net1() -> onnx.ModelProto:
    # Two convolutions sharing a weight input that is also data of the second.
    rng = np.random.default_rng(1)
    w2 = numpy_helper.from_array(rng.standard_normal((1, 1, 1, 1)).astype(np.float32), "w2")
    nodes = [helper.make_node("Conv", ["data1", "data2"], ["conv1"], name="conv1", kernel_shape=[2, 2]),
             helper.make_node("Conv", ["data2", "w2"], ["conv2"], name="conv2", kernel_shape=[1, 1])]
    return make_model(nodes, [vi("data1", [2, 1, 10, 10]), vi("data2", [1, 1, 2, 2])],
                      [vi("conv1", [2, 1, 9, 9]), vi("conv2", [1, 1, 2, 2])], [w2])


def net2(bn: bool = False) -> onnx.ModelProto:
    # exp -> cos -> add, exp -> sin -> add: selecting {exp, sin, add} without cos is a cycle.
    nodes = [helper.make_node("Exp", ["data"], ["e"], name="exp"),
             helper.make_node("Cos", ["e"], ["c"], name="cos"),
             helper.make_node("Sin", ["e"], ["s"], name="sin"),
             helper.make_node("Add", ["c", "s"], ["ret"], name="plus")]
    inits = []
    out = "ret"
    if bn:  # network 3: two BatchNorms after it
        rng = np.random.default_rng(3)
        for k in (1, 2):
            names = [f"bn{k}_{p}" for p in ("scale", "bias", "mean", "var")]
            vals = [rng.uniform(0.5, 1.5, 3), rng.standard_normal(3), rng.standard_normal(3), rng.uniform(0.5, 2, 3)]
            inits += [numpy_helper.from_array(v.astype(np.float32), n) for n, v in zip(names, vals)]
            nodes.append(helper.make_node("BatchNormalization", [out, *names], [f"bn{k}"], name=f"bn{k}"))
            out = f"bn{k}"
    return make_model(nodes, [vi("data", [2, 3, 10, 10])], [vi(out, [2, 3, 10, 10])], inits)


def net4() -> onnx.ModelProto:
    # The last op's output is read by several consumers and is a graph output.
    nodes = [helper.make_node("Exp", ["data"], ["e"], name="exp"),
             helper.make_node("Identity", ["e"], ["o1"], name="id1"),
             helper.make_node("Identity", ["e"], ["o2"], name="id2")]
    return make_model(nodes, [vi("data", [2, 3])], [vi("e", [2, 3]), vi("o1", [2, 3]), vi("o2", [2, 3])])


def net5() -> onnx.ModelProto:
    # The subgraph reads one tensor twice: one subgraph input, not two.
    nodes = [helper.make_node("Add", ["data", "data"], ["ret"], name="plus")]
    return make_model(nodes, [vi("data", [2, 3])], [vi("ret", [2, 3])])


def net6() -> onnx.ModelProto:
    # A computed weight: sin(data2) feeds the convolution's weight.
    nodes = [helper.make_node("Sin", ["data2"], ["w"], name="sin"),
             helper.make_node("Conv", ["data1", "w"], ["conv"], name="conv", kernel_shape=[2, 2])]
    return make_model(nodes, [vi("data1", [3, 3, 10, 10]), vi("data2", [1, 3, 2, 2])], [vi("conv", [3, 1, 9, 9])])


def net7() -> onnx.ModelProto:
    # sin -> cos x6 -> add, sin -> add: {sin, add} as one subgraph would be a cycle through the cos chain.
    nodes = [helper.make_node("Sin", ["data"], ["s"], name="sin")]
    prev = "s"
    for k in range(6):
        nodes.append(helper.make_node("Cos", [prev], [f"c{k}"], name=f"cos{k}"))
        prev = f"c{k}"
    nodes.append(helper.make_node("Add", ["s", prev], ["ret"], name="plus"))
    return make_model(nodes, [vi("data", [1])], [vi("ret", [1])])


CASES = [
    ("net1", net1, ["Conv"]),
    ("net2", net2, ["Exp", "Sin", "Add"]),
    ("net2", net2, ["Exp", "Cos", "Sin", "Add"]),
    ("net3", lambda: net2(bn=True), ["Exp", "Sin", "Add", "BatchNormalization"]),
    ("net3", lambda: net2(bn=True), ["Exp", "BatchNormalization"]),
    ("net3", lambda: net2(bn=True), ["BatchNormalization"]),
    ("net4", net4, ["Exp"]),
    ("net4", net4, ["Exp", "Identity"]),
    ("net5", net5, ["Add"]),
    ("net6", net6, ["Conv"]),
    ("net6", net6, ["Sin", "Conv"]),
    ("net7", net7, ["Sin", "Add"]),
    ("net7", net7, ["Sin", "Add", "Cos"]),
]


def run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("name,build,ops", CASES, ids=[f"{c[0]}-{'+'.join(c[2])}" for c in CASES])
def test_partition_preserves_results(name: str, build, ops: list[str], rng) -> None:
    model = build()
    graph = load_model(model.SerializeToString())
    result = partition(graph, "default", ops=ops)
    check_partition(result)
    selected = [n.name for n in graph.nodes if n.op_type in ops]
    covered = {n for sg in result.subgraphs for n in sg.nodes}
    assert covered <= set(selected)
    assert covered, "every network has at least one selectable node"
    exported = to_model_proto(result.graph)
    onnx.checker.check_model(exported)
    assert [o.name for o in exported.graph.output] == [o.name for o in model.graph.output]
    assert [i.name for i in exported.graph.input] == [i.name for i in model.graph.input
                                                      if i.name not in {t.name for t in model.graph.initializer}]
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
             for i in model.graph.input}
    for want, got in zip(run(model, feeds), run(exported, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_net7_cycle_splits_sin_and_add() -> None:
    graph = load_model(net7().SerializeToString())
    result = partition(graph, "default", ops=["Sin", "Add"])
    groups = [set(sg.nodes) for sg in result.subgraphs]
    assert {"sin", "plus"} not in groups
    assert not any({"sin", "plus"} <= g for g in groups)
    assert result.cycles and result.cycles[0]["path"][0] == "sin" and result.cycles[0]["path"][-1] == "plus"
    assert "cos0" in result.cycles[0]["path"]


def test_net2_excludes_highest_id_on_cycle() -> None:
    graph = load_model(net2().SerializeToString())
    result = partition(graph, "default", ops=["Exp", "Sin", "Add"])
    groups = sorted(sorted(sg.nodes) for sg in result.subgraphs)
    # MXNet's rule: the candidate with the highest id on the offending path (plus) leaves.
    assert groups == [["exp", "sin"], ["plus"]]
    assert "cycle" in result.excluded.get("cos", "") or "not in the backend's op set" in result.excluded["cos"]


def test_net5_one_input_for_duplicate_reads() -> None:
    graph = load_model(net5().SerializeToString())
    result = partition(graph, "default", ops=["Add"])
    assert result.subgraphs[0].inputs == ["data"]
