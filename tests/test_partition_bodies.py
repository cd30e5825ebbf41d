"""The pass driver's id-based subgraph bodies equal ``subgraph_body`` built from names.

``PassState.body`` (partition/build.py) reads the boundary from the id
adjacency for speed; ``subgraph_body`` is the plain per-tensor definition.
Both must give the same inputs, outputs (in order) and tensor types on every
golden graph and backend, and on a graph with multi-output nodes, graph outputs
inside a subgraph and an If body reading an outer tensor.
"""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from partition import load_model, partition
from partition.build import subgraph_body
from tests.golden_partitions import backends, cases


def _check(result) -> int:
    original = result.original
    final = result.graph.node_by_name
    checked = 0
    for sg in result.subgraphs:
        body = final[sg.node_name].body
        members = sorted((original.node_by_name[n] for n in sg.nodes), key=lambda n: original.index[n.name])
        plain = subgraph_body(original, members, body.name)
        assert body.inputs == plain.inputs, sg.id
        assert body.outputs == plain.outputs, sg.id
        assert body.tensors == plain.tensors, sg.id
        assert [n.name for n in body.nodes] == [n.name for n in plain.nodes]
        checked += 1
    return checked


@pytest.mark.parametrize("case,graph", [c for c in cases() if not c[0].startswith("chain3000")],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_bodies_match_plain_definition(case, graph):
    for _label, backend, options in backends(graph):
        _check(partition(graph, backend, **options))


def _multi_output_model() -> onnx.ModelProto:
    f = TensorProto.FLOAT
    then_g = helper.make_graph([helper.make_node("Relu", ["b"], ["then_out"])], "then", [],
                               [helper.make_tensor_value_info("then_out", f, [4])])
    else_g = helper.make_graph([helper.make_node("Neg", ["b"], ["else_out"])], "else", [],
                               [helper.make_tensor_value_info("else_out", f, [4])])
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="r0"),
        helper.make_node("Split", ["a"], ["s0", "s1"], name="split", axis=0, num_outputs=2),
        helper.make_node("Relu", ["s0"], ["b"], name="r1"),
        helper.make_node("Relu", ["s1"], ["c"], name="r2"),      # a graph output inside the subgraph
        helper.make_node("Sin", ["c"], ["d"], name="sin"),        # unsupported: reads c outside
        helper.make_node("Greater", ["d", "d"], ["cond0"], name="gt"),
        helper.make_node("ReduceMax", ["cond0"], ["cond"], name="rmax", keepdims=0),
        helper.make_node("If", ["cond"], ["y"], name="if", then_branch=then_g, else_branch=else_g),
    ]
    graph = helper.make_graph(nodes, "multi", [helper.make_tensor_value_info("x", f, [8])],
                              [helper.make_tensor_value_info("y", f, [4]),
                               helper.make_tensor_value_info("c", f, [4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_bodies_with_multi_output_nodes_and_outer_reads():
    graph = load_model(_multi_output_model().SerializeToString())
    for ops in (["Relu", "Split"], ["Relu", "Split", "If", "Greater", "ReduceMax"], ["Split", "Relu", "If"]):
        result = partition(graph, "default", ops=ops)
        assert _check(result) >= 1
    result = partition(graph, "default", ops=["Relu", "Split"])
    body = result.graph.node_by_name[result.subgraphs[0].node_name].body
    assert body.outputs == ("b", "c")  # b is read by the If's bodies, c is a graph output (and read by sin)
