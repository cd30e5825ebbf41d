"""The subgraph API: built-in selectors, user selectors that misbehave, the lazy trace."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from partition import (ContainOpSelector, PartitionRun, SelectorError, SubgraphProperty, SubgraphSelector,
                       UnknownBackendError, check_partition, get_backend, load_model, partition,
                       register_subgraph_property, unregister_backend)
from tests.conftest import chain_graph, make_model


def conv_model(pattern: list[list[str]]) -> "object":
    """Branches of Conv-led chains on one input, e.g. [["Conv","BatchNormalization","Relu"], ["Conv"]]."""
    rng = np.random.default_rng(0)
    nodes, inits, outs = [], [], []
    w = numpy_helper.from_array(rng.standard_normal((3, 3, 1, 1)).astype(np.float32), "w")
    inits.append(w)
    for p in ("scale", "bias", "mean", "var"):
        inits.append(numpy_helper.from_array(rng.uniform(0.5, 1.5, 3).astype(np.float32), f"bn_{p}"))
    for b, chain in enumerate(pattern):
        prev = "x"
        for k, op in enumerate(chain):
            name = f"b{b}_{op.lower()}{k}"
            ins = {"Conv": [prev, "w"], "BatchNormalization": [prev, "bn_scale", "bn_bias", "bn_mean", "bn_var"]}
            nodes.append(helper.make_node(op, ins.get(op, [prev]), [name], name=name))
            prev = name
        outs.append(prev)
    vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 3, 4, 4])  # noqa: E731
    return load_model(make_model(nodes, [vi("x")], [vi(o) for o in outs], inits).SerializeToString())


def groups(result) -> list[list[str]]:
    return [sg.nodes for sg in result.subgraphs]


def test_seed_conv_bn_example() -> None:
    graph = conv_model([["Conv", "BatchNormalization", "Relu"], ["Conv", "Relu"], ["Conv", "BatchNormalization"]])
    result = partition(graph, "conv_bn")
    check_partition(result)
    assert groups(result) == [["b0_conv0", "b0_batchnormalization1"], ["b2_conv0", "b2_batchnormalization1"]]
    assert "dropped by filter" in result.excluded["b1_conv0"]


def test_conv_bn_relu_positive_and_negative() -> None:
    graph = conv_model([["Conv", "BatchNormalization", "Relu"], ["Conv", "BatchNormalization"],
                        ["Conv", "Relu"], ["Conv", "BatchNormalization", "Sigmoid"]])
    result = partition(graph, "conv_bn_relu")
    check_partition(result)
    assert groups(result) == [["b0_conv0", "b0_batchnormalization1", "b0_relu2"]]


def test_conv_bn_relu_refuses_conv_with_two_readers() -> None:
    graph = chain_graph([("c", "Conv", ["x", "x"]), ("bn", "BatchNormalization", ["c", "x", "x", "x", "x"]),
                         ("r", "Relu", ["bn"]), ("other", "Sigmoid", ["c"])], shape=[1, 1, 1, 1])
    assert partition(graph, "conv_bn_relu").subgraphs == []


class Raising(SubgraphSelector):
    def __init__(self, where: str) -> None:
        self.where = where

    def select(self, node):
        if self.where == "select" and node.op_type == "Sigmoid":
            raise ValueError("boom")
        return True

    def select_output(self, node, output_node):
        if self.where == "select_output":
            raise RuntimeError("kaboom")
        return self.where != "select"

    def filter(self, candidates):
        if self.where == "filter":
            return candidates + [object()]
        return candidates


class RaisingProperty(SubgraphProperty):
    def __init__(self, where: str) -> None:
        self.where = where

    def create_subgraph_selector(self):
        return Raising(self.where)


@pytest.mark.parametrize("where,needle", [("select", "select(s (Sigmoid))"),
                                          ("select_output", "select_output(r (Relu), s (Sigmoid))"),
                                          ("filter", "not one of the candidates")])
def test_misbehaving_selector_is_named(where: str, needle: str) -> None:
    graph = chain_graph([("r", "Relu", ["x"]), ("s", "Sigmoid", ["r"])])
    with pytest.raises(SelectorError) as info:
        partition(graph, properties=[RaisingProperty(where)])
    assert needle in str(info.value)


def test_rejecting_property_keeps_nodes_out() -> None:
    class Reject(SubgraphProperty):
        property_name = "reject"

        def create_subgraph_selector(self):
            return ContainOpSelector({"Relu", "Sigmoid"})

        def create_subgraph_node(self, subgraph, subgraph_id):
            return None

    graph = chain_graph([("r", "Relu", ["x"]), ("s", "Sigmoid", ["r"])])
    result = partition(graph, properties=[Reject()])
    assert result.subgraphs == []
    assert "rejected by create_subgraph_node" in result.excluded["r"]


def test_properties_run_in_registration_order() -> None:
    name = "test_two_passes"
    try:
        from partition.api import ContainOpProperty
        register_subgraph_property(name, ContainOpProperty({"Relu"}, "first"))
        register_subgraph_property(name, ContainOpProperty({"Sigmoid", "Subgraph"}, "second"))
        graph = chain_graph([("r", "Relu", ["x"]), ("s", "Sigmoid", ["r"]), ("t", "Tanh", ["s"])])
        result = partition(graph, name)
        check_partition(result)
        # The second pass takes the first pass's subgraph node in with the Sigmoid.
        assert [sg.property for sg in result.subgraphs] == ["second"]
        assert result.subgraphs[0].nodes == ["r", "s"]
        assert [p.property_name for p in get_backend(name)] == ["first", "second"]
    finally:
        unregister_backend(name)


def test_unknown_backend_and_missing_ops() -> None:
    graph = chain_graph([("r", "Relu", ["x"])])
    with pytest.raises(UnknownBackendError, match="unknown backend 'nope'"):
        partition(graph, "nope")
    with pytest.raises(Exception, match="--ops"):
        partition(graph, "default")


def test_trace_is_lazy() -> None:
    calls: list[str] = []

    class Counting(ContainOpSelector):
        def select_output(self, node, output_node):
            calls.append(output_node.name)
            return super().select_output(node, output_node)

    class Prop(SubgraphProperty):
        def create_subgraph_selector(self):
            return Counting({"Relu"})

    spec = [(f"r{i}", "Relu", [f"r{i-1}" if i else "x"]) for i in range(30)]
    run = PartitionRun(chain_graph(spec), properties=[Prop()], trace=True)
    first = list(itertools.islice(run.events(), 4))
    assert [e.kind for e in first[:2]] == ["pass_start", "seed"]
    assert len(calls) <= 3, "only the steps asked for have run"
    assert run.result is None


def test_trace_events_record_the_calls() -> None:
    graph = chain_graph([("a", "Relu", ["x"]), ("b", "Sigmoid", ["a"]), ("d", "Sin", ["a"]), ("c", "Add", ["b", "d"])])
    run = PartitionRun(graph, "default", ops=["Relu", "Sigmoid", "Add"])
    events = list(run.events())
    kinds = [e.kind for e in events]
    for kind in ("seed", "select_output", "select_input", "cycle", "exclude", "reset", "filter", "subgraph"):
        assert kind in kinds
    cycle = next(e for e in events if e.kind == "cycle")
    assert cycle.path == ("a", "d", "c")
    made = [e.candidates for e in events if e.kind == "subgraph"]
    assert made == [("a", "b"), ("c",)]
    assert all(isinstance(e.to_json(), dict) for e in events)


def test_event_snapshots_keep_the_candidates_of_their_moment() -> None:
    spec = [(f"r{i}", "Relu", [f"r{i-1}" if i else "x"]) for i in range(5)]
    events = list(PartitionRun(chain_graph(spec), "default", ops=["Relu"]).events())
    grows = [e for e in events if e.kind in ("select_input", "select_output") and e.result]
    assert [len(e.candidates) for e in grows] == [2, 3, 4, 5]
    assert grows[0].candidates == ("r0", "r1") and list(grows[-1].candidates)[-1] == "r4"
    assert [tuple(e.queue) for e in grows] == [("r1",), ("r2",), ("r3",), ("r4",)]
    assert grows[1].to_json()["candidates"] == ["r0", "r1", "r2"]


def test_subgraph_node_named_like_a_node_left_outside_is_renamed() -> None:
    """A subgraph node takes a fresh name when a node outside it already has its name; a name
    held by one of its own members is free (the member is replaced). Default names
    (``default_<id>``) and a property's own names are both checked."""
    graph = chain_graph([("default_0", "Sin", ["x"]), ("r", "Relu", ["default_0"]), ("s", "Sigmoid", ["r"]),
                         ("c", "Cos", ["s"]), ("default_1", "Relu", ["c"]), ("t", "Tanh", ["default_1"])])
    result = partition(graph, "default", ops=["Relu", "Sigmoid", "Tanh"])
    check_partition(result)
    assert [(s.nodes, s.node_name) for s in result.subgraphs] == [(["r", "s"], "default_0__sg0"),
                                                                   (["default_1", "t"], "default_1")]

    class Named(SubgraphProperty):
        property_name = "named"

        def create_subgraph_selector(self):
            return ContainOpSelector({"Relu", "Sigmoid"})

        def create_subgraph_node(self, subgraph, subgraph_id):
            node = super().create_subgraph_node(subgraph, subgraph_id)
            return type(node)("c", node.op_type, node.inputs, node.outputs, node.domain, node.attrs, node.subgraphs)

    named = partition(graph, properties=[Named()])
    check_partition(named)
    assert [s.node_name for s in named.subgraphs] == ["c__sg0", "c__sg1"]
