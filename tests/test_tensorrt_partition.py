"""The ``tensorrt`` backend: the TensorRT integration design's example, the groups, cycles, min-size, sample models, scale."""

from __future__ import annotations

import time

import networkx as nx
import pytest

from partition import Graph, Node, PartitionRun, check_partition, load_model, partition
from partition.api import get_backend
from partition.build import generic_pass
from partition.errors import LensError
from partition.tensorrt import TensorRTProperty, incompatibility_groups
from partition.tensorrt.algorithm import _Context



def ir_graph(spec: list[tuple[str, str, tuple[str, ...]]], inputs=("x",)) -> Graph:
    """Nodes from (name, op, input node names or graph inputs); each node outputs its own name."""
    nodes = [Node(name, op, tuple(ins), (name,)) for name, op, ins in spec]
    used = {i for _, _, ins in spec for i in ins}
    outputs = [name for name, _, _ in spec if name not in used]
    return Graph("g", nodes, list(inputs), outputs, opset={"": 17})


def trace(graph: Graph, **options):
    run = PartitionRun(graph, "tensorrt", trace=True, **options)
    events = list(run.events())
    return run.result, events


def groups_of(result) -> list[list[str]]:
    return [sorted(s.nodes) for s in result.subgraphs]


# ------------------------------------------------------- the TensorRT design's example
SEED = [("A", "Relu", ("x",)), ("B", "Sigmoid", ("A",)), ("D", "Det", ("A",)), ("C", "Add", ("B", "D"))]


def test_seed_example_never_groups_a_b_c():
    result, events = trace(ir_graph(SEED), min_size=1)
    check_partition(result)
    assert groups_of(result) == [["A", "B"], ["C"]]
    assert result.excluded["D"] == "Det: not supported by TensorRT 10.1's ONNX parser"
    refusals = [e for e in events if e.kind == "refuse" and e.neighbour == "C"]
    assert refusals and refusals[0].extra == {"cause": "group", "incompatible": "D", "group": "descendants"}
    assert "descendants of incompatible node D" in refusals[0].reason


def test_seed_example_min_size_drops_the_single_node():
    result = partition(ir_graph(SEED), "tensorrt")
    assert groups_of(result) == [["A", "B"]]
    assert result.excluded["C"] == ("subgraph of 1 compute node is below --min-size 2; earlier refused by the "
                                    "subgraph grown from A: in the descendants of incompatible node D")
    result3 = partition(ir_graph(SEED), "tensorrt", min_size=3)
    assert result3.subgraphs == []
    assert result3.excluded["A"] == "subgraph of 2 compute nodes is below --min-size 3"


def test_seed_example_from_the_sample_model():
    from sample_models.generate import build_all
    graph = load_model(build_all()["trt_cycle.onnx"].SerializeToString())
    result = partition(graph, "tensorrt", min_size=1)
    check_partition(result)
    assert groups_of(result) == [["A", "B"], ["C"]]


def test_refusal_through_the_ancestors_group():
    # Y is seed; M (a descendant of J) joins, so J's ancestors (P) become forbidden.
    spec = [("Y", "Relu", ("x",)), ("P", "Relu", ("x",)), ("J", "Det", ("P",)), ("M", "Sum", ("Y", "J", "P"))]
    result, events = trace(ir_graph(spec), min_size=1)
    check_partition(result)
    assert groups_of(result) == [["M", "Y"], ["P"]]
    refusal = next(e for e in events if e.kind == "refuse" and e.neighbour == "P")
    assert refusal.extra == {"cause": "group", "incompatible": "J", "group": "ancestors"}
    assert result.excluded == {"J": "Det: not supported by TensorRT 10.1's ONNX parser"}


def test_groups_do_not_matter_without_a_path_through_the_incompatible_node():
    # D hangs off the side: A, B, C form one subgraph.
    spec = [("A", "Relu", ("x",)), ("B", "Relu", ("A",)), ("C", "Relu", ("B",)), ("D", "Det", ("A",))]
    result = partition(ir_graph(spec), "tensorrt")
    assert groups_of(result) == [["A", "B", "C"]]


def test_two_incompatible_nodes_split_a_chain_into_three():
    spec = [("a", "Relu", ("x",)), ("b", "Relu", ("a",)), ("u1", "Det", ("b",)), ("c", "Relu", ("u1",)),
            ("d", "Relu", ("c",)), ("u2", "Det", ("d",)), ("e", "Relu", ("u2",)), ("f", "Relu", ("e",))]
    result = partition(ir_graph(spec), "tensorrt")
    assert groups_of(result) == [["a", "b"], ["c", "d"], ["e", "f"]]
    check_partition(result)


# --------------------------------------------------- cycles with a witness --
# Found by random search: the groups allow {n0, n5}, yet n0 -> n2 -> n6 ~ n1 -> n5
# runs through the earlier subgraph {n1, n3, n6}: MXNet's pass would return it.
CYCLIC = [("n0", "Relu", ("x",)), ("n1", "Add", ("x", "x")), ("n2", "Det", ("n0",)),
          ("n3", "Sum", ("n1", "x", "x")), ("n4", "Det", ("n1",)), ("n5", "Sum", ("n4", "n0", "n1")),
          ("n6", "Sum", ("x", "n2", "n1"))]


def test_cycle_through_an_earlier_subgraph_is_avoided_with_a_witness_path():
    graph = ir_graph(CYCLIC)
    result, events = trace(graph, min_size=1)
    check_partition(result)
    assert groups_of(result) == [["n1", "n3", "n6"], ["n0"], ["n5"]]
    cycle = next(e for e in events if e.kind == "cycle")
    assert list(cycle.path) == ["n0", "n2", "n6", "n1", "n5"]
    assert result.cycles == [{"property": "tensorrt", "seed": "n0", "path": ["n0", "n2", "n6", "n1", "n5"],
                              "excluded": "n5"}]
    assert "would close the cycle n0 -> n2 -> n6 -> n1 -> n5" in \
        next(e for e in events if e.kind == "cycle").reason.replace("contracting would close", "would close the cycle")
    # Independent check that the groups alone were not enough: contract {n0, n5} too.
    dg = nx.DiGraph()
    owner = {"n1": "T", "n3": "T", "n6": "T", "n0": "S", "n5": "S"}
    for node in graph.nodes:
        for p in graph.input_nodes(node):
            a, b = owner.get(p.name, p.name), owner.get(node.name, node.name)
            if a != b:
                dg.add_edge(a, b)
    assert not nx.is_directed_acyclic_graph(dg)


def test_cycle_recorded_in_json_without_tracing():
    result = partition(ir_graph(CYCLIC), "tensorrt", min_size=1)
    assert result.to_json()["cycles"][0]["path"] == ["n0", "n2", "n6", "n1", "n5"]


# ------------------------------------------------------- modes and options --
def test_fast_and_teaching_give_the_same_events():
    for spec in (SEED, CYCLIC):
        _, fast = trace(ir_graph(spec), min_size=1, mode="fast")
        _, teach = trace(ir_graph(spec), min_size=1, mode="teaching")
        assert [e.to_json() for e in fast] == [e.to_json() for e in teach]


def test_options_are_validated():
    with pytest.raises(LensError, match="mode must be one of"):
        get_backend("tensorrt", mode="quick")
    with pytest.raises(LensError, match="takes no --ops"):
        get_backend("tensorrt", ops=["Relu"])
    with pytest.raises(LensError, match="no option"):
        get_backend("tensorrt", min_sise=3)
    with pytest.raises(LensError, match="at least 1"):
        get_backend("tensorrt", min_size=0)


def test_keep_data_dependent_lets_nonzero_in():
    spec = [("a", "Relu", ("x",)), ("nz", "NonZero", ("a",)), ("c", "Cast", ("nz",))]
    assert "nz" in partition(ir_graph(spec), "tensorrt", min_size=1).excluded
    kept = partition(ir_graph(spec), "tensorrt", exclude_data_dependent=False)
    assert groups_of(kept) == [["a", "c", "nz"]]


def test_constant_nodes_do_not_count_toward_min_size():
    spec = [("k", "Constant", ()), ("r", "Add", ("x", "k"))]
    result = partition(ir_graph(spec), "tensorrt")
    assert result.subgraphs == []
    assert result.excluded["r"] == "subgraph of 1 compute node is below --min-size 2"
    assert groups_of(partition(ir_graph(spec), "tensorrt", min_size=1)) == [["k", "r"]]


def test_selector_works_in_the_generic_pass_too():
    # The API contract: the selector alone (breadth-first growth) still respects the groups.
    prop = TensorRTProperty(min_size=1)

    class Generic(TensorRTProperty):
        def partition_pass(self, state):
            return generic_pass(self, state)
    result = partition(ir_graph(SEED), properties=[Generic(min_size=1)])
    check_partition(result)
    assert ["A", "B", "C"] not in groups_of(result)
    assert prop.property_name == "tensorrt"


def test_incompatibility_groups_api_and_unknown_node():
    graph = ir_graph(SEED)
    assert incompatibility_groups(graph, "D") == (["A"], ["C"])
    assert incompatibility_groups(graph, "A") == ([], ["B", "D", "C"])
    with pytest.raises(LensError, match="no node named 'Q'"):
        incompatibility_groups(graph, "Q")


def test_explain_reasons_are_the_rule_reasons():
    prop = TensorRTProperty()
    graph = ir_graph(SEED)
    ctx = _Context.from_graph(graph, prop.rules, "fast")
    assert ctx.reasons == {"D": "Det: not supported by TensorRT 10.1's ONNX parser"}


# ----------------------------------------------------------- sample models --
@pytest.mark.parametrize("name", ["resnet_small.onnx", "transformer_block.onnx", "if_model.onnx", "loop_model.onnx",
                                  "scan_rnn.onnx", "mlp.onnx", "conv_bn_relu_chain.onnx", "trt_cycle.onnx"])
def test_sample_models_partition_validly_in_both_modes(name):
    from sample_models.generate import build_all
    graph = load_model(build_all()[name].SerializeToString())
    fast = partition(graph, "tensorrt")
    teach = partition(graph, "tensorrt", mode="teaching")
    check_partition(fast)
    assert groups_of(fast) == groups_of(teach) and fast.excluded == teach.excluded
    if name != "trt_cycle.onnx":
        # Every op of these models is in TensorRT's table: one engine for the whole model.
        assert len(fast.subgraphs) == 1 and not fast.excluded, fast.excluded


# ------------------------------------------------------------------- scale --
def test_fast_mode_scales_on_a_model_shaped_graph():
    from sample_models.synthetic import UNSUPPORTED_OPS, synthetic_model
    n = 20000
    graph = load_model(synthetic_model(n, 0.2).SerializeToString(), infer_shapes=False)
    start = time.perf_counter()
    result = partition(graph, "tensorrt", fallback_ops=UNSUPPORTED_OPS)
    seconds = time.perf_counter() - start
    bad = sum(1 for node in graph.nodes if node.op_type in UNSUPPORTED_OPS)
    assert bad == n // 5
    assert all(result.excluded[node.name].endswith("forced to fall back (fallback_ops)")
               for node in graph.nodes if node.op_type in UNSUPPORTED_OPS)
    check_partition(result)
    assert seconds < 10, seconds  # ~0.5 s here; a quadratic pass takes minutes
