"""Every sample model partitioned by every built-in backend: invariants and numerics.

The partitioned graph is exported (subgraphs as ONNX functions) and run by
onnxruntime; its outputs must equal the original model's on fresh random inputs.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from partition import check_partition, partition, to_model_proto
from partition.onnx_io import from_model_proto
from sample_models.generate import build_all, random_feeds

MODELS = build_all()
BACKENDS = [
    ("default", {"ops": ["Conv", "Relu", "Add", "MatMul", "BatchNormalization", "Gemm", "Softmax", "Sigmoid",
                         "LayerNormalization", "Transpose", "Mul", "Div", "Tanh"]}),
    ("conv_bn", {}),
    ("conv_bn_relu", {}),
]


@pytest.mark.parametrize("backend,options", BACKENDS, ids=[b for b, _ in BACKENDS])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_sample_partitions_are_valid_and_exact(name: str, backend: str, options: dict, rng) -> None:
    model = MODELS[name]
    graph = from_model_proto(model)
    result = partition(graph, backend, **options)
    check_partition(result)
    for node in graph.nodes:
        assert node.name in result.subgraph_of() or node.name in result.excluded
    feeds = random_feeds(model, seed=int(rng.integers(1 << 30)))
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    exported = to_model_proto(result.graph)
    got = ort.InferenceSession(exported.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_conv_bn_relu_chain_fuses_exactly_the_full_patterns() -> None:
    graph = from_model_proto(MODELS["conv_bn_relu_chain.onnx"])
    result = partition(graph, "conv_bn_relu")
    fused = [[graph.node_by_name[n].op_type for n in sg.nodes] for sg in result.subgraphs]
    assert fused and all(ops == ["Conv", "BatchNormalization", "Relu"] for ops in fused)
    prefixes = sorted({sg.nodes[0].split("/")[0] for sg in result.subgraphs})
    assert prefixes == ["rep1", "rep2", "rep3", "rep4"]


def test_trt_cycle_default_backend_avoids_the_cycle() -> None:
    graph = from_model_proto(MODELS["trt_cycle.onnx"])
    ops = [n.op_type for n in graph.nodes if n.name != "D"]
    result = partition(graph, "default", ops=ops)
    check_partition(result)
    assert not any({"A", "C"} <= set(sg.nodes) for sg in result.subgraphs)
    assert result.cycles and result.cycles[0]["path"] == ["A", "D", "C"]


@pytest.mark.parametrize("name", ["if_model.onnx", "loop_model.onnx", "scan_rnn.onnx"])
def test_control_flow_nodes_inside_subgraphs_keep_their_outer_reads(name: str, rng) -> None:
    """If/Loop/Scan taken into a subgraph: outer-scope reads of their bodies become subgraph inputs."""
    model = MODELS[name]
    graph = from_model_proto(model)
    result = partition(graph, "default", ops=sorted({n.op_type for n in graph.nodes}))
    check_partition(result)
    flow = [n for n in graph.nodes if n.subgraphs]
    sg = next(s for s in result.subgraphs if flow[0].name in s.nodes)
    produced_inside = {t for n in sg.nodes for t in graph.node_by_name[n].outputs}
    for body in flow[0].subgraphs.values():
        for t in body.free_tensors:
            assert t in produced_inside or t in sg.inputs
    feeds = random_feeds(model, seed=int(rng.integers(1 << 30)))
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = ort.InferenceSession(to_model_proto(result.graph).SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, feeds)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
