"""Hypothesis tests on random DAGs, with networkx and brute force as independent oracles.

- the contraction of every result is acyclic (networkx);
- no subgraph holds both an ancestor and a descendant of one incompatible node;
- fast and teaching modes agree, event for event;
- the fast tracker's answers equal a brute-force reading of the TensorRT design's rule;
- every "refuse" blaming an incompatible node is true of the graph;
- incompatibility groups equal networkx's ancestors / descendants.
"""

from __future__ import annotations

import networkx as nx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partition import Graph, Node, PartitionRun, check_partition
from partition.build import seed_order
from partition.tensorrt import FastTracker, NaiveTracker, incompatibility_groups, naive_pairs


GOOD = ("Relu", "Add", "Sum")
SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def dags(draw, max_nodes: int = 22) -> Graph:
    n = draw(st.integers(1, max_nodes))
    p_bad = draw(st.sampled_from([0.1, 0.25, 0.4]))
    nodes: list[Node] = []
    tensors = ["x"]
    for i in range(n):
        bad = draw(st.floats(0, 1)) < p_bad
        k = 1 if bad else draw(st.integers(1, 3))
        # Bias towards recent tensors so graphs get depth.
        ins = tuple(tensors[max(0, len(tensors) - 1 - draw(st.integers(0, len(tensors) - 1)))] for _ in range(k))
        op = "Det" if bad else draw(st.sampled_from(GOOD))
        nodes.append(Node(f"n{i}", op, ins, (f"t{i}",)))
        tensors.append(f"t{i}")
    used = {t for node in nodes for t in node.inputs}
    outputs = [t for t in tensors[1:] if t not in used] or [tensors[-1]]
    return Graph("random", nodes, ["x"], outputs, opset={"": 17})


def digraph(graph: Graph) -> nx.DiGraph:
    dg = nx.DiGraph()
    for node in graph.nodes:
        dg.add_node(node.name)
        for p in graph.input_nodes(node):
            dg.add_edge(p.name, node.name)
    return dg


def run(graph: Graph, **options):
    r = PartitionRun(graph, "tensorrt", trace=True, **options)
    events = list(r.events())
    return r.result, events


@SETTINGS
@given(dags(), st.integers(1, 3))
def test_partition_invariants(graph: Graph, min_size: int):
    result, events = run(graph, min_size=min_size)
    check_partition(result)
    dg = digraph(graph)
    bad = [n.name for n in graph.nodes if n.op_type == "Det"]
    owner = {name: f"sg{s.id}" for s in result.subgraphs for name in s.nodes}
    # Acyclic once contracted (networkx, not our CycleChecker).
    contracted = nx.DiGraph()
    contracted.add_nodes_from(owner.get(n, n) for n in dg.nodes)
    contracted.add_edges_from((owner.get(a, a), owner.get(b, b)) for a, b in dg.edges if owner.get(a, a) != owner.get(b, b))
    assert nx.is_directed_acyclic_graph(contracted)
    # Incompatible nodes are out, with the rule's reason; subgraphs meet min_size.
    for name in bad:
        assert name not in owner
        assert result.excluded[name].startswith("Det: not supported")
    for s in result.subgraphs:
        assert len(s.nodes) >= min_size
    # No subgraph mixes the two groups of one incompatible node.
    for name in bad:
        anc, desc = nx.ancestors(dg, name), nx.descendants(dg, name)
        for s in result.subgraphs:
            members = set(s.nodes)
            assert not (members & anc and members & desc), (name, s.nodes)
    # Every refusal blaming a group is true of the graph.
    for e in events:
        if e.kind == "refuse" and "group" in e.extra:
            inc, group = e.extra["incompatible"], e.extra["group"]
            blocked = nx.descendants(dg, inc) if group == "descendants" else nx.ancestors(dg, inc)
            other = nx.ancestors(dg, inc) if group == "descendants" else nx.descendants(dg, inc)
            assert e.neighbour in blocked
            assert set(e.candidates) & other


@SETTINGS
@given(dags(), st.integers(1, 3))
def test_fast_and_teaching_agree(graph: Graph, min_size: int):
    fast_result, fast_events = run(graph, min_size=min_size, mode="fast")
    teach_result, teach_events = run(graph, min_size=min_size, mode="teaching")
    assert [s.nodes for s in fast_result.subgraphs] == [s.nodes for s in teach_result.subgraphs]
    assert fast_result.excluded == teach_result.excluded
    assert [e.to_json() for e in fast_events] == [e.to_json() for e in teach_events]


@SETTINGS
@given(dags(max_nodes=18), st.data())
def test_trackers_match_brute_force(graph: Graph, data):
    order = seed_order(graph)
    id_of = {n.name: i for i, n in enumerate(order)}
    preds = [[id_of[p.name] for p in graph.input_nodes(n)] for n in order]
    succs: list[list[int]] = [[] for _ in order]
    for i, ps in enumerate(preds):
        for p in ps:
            succs[p].append(i)
    bad = bytearray(1 if n.op_type == "Det" else 0 for n in order)
    dg = nx.DiGraph()
    dg.add_nodes_from(range(len(order)))
    dg.add_edges_from((p, i) for i, ps in enumerate(preds) for p in ps)
    incompat = [i for i, b in enumerate(bad) if b]
    anc = {i: nx.ancestors(dg, i) for i in incompat}
    desc = {i: nx.descendants(dg, i) for i in incompat}
    good = [i for i, b in enumerate(bad) if not b]
    if not good:
        return
    joins = data.draw(st.lists(st.sampled_from(good), min_size=1, max_size=6, unique=True))
    fast, naive = FastTracker(preds, succs, bad), NaiveTracker(naive_pairs(preds, succs, incompat))
    members: list[int] = []
    for m in joins:
        fast.join(m)
        naive.join(m)
        members.append(m)
        queries = data.draw(st.lists(st.sampled_from(good), max_size=5))
        for v in queries:
            causes = [(i, "descendants") for i in incompat if v in desc[i] and any(x in anc[i] for x in members)]
            causes += [(i, "ancestors") for i in incompat if v in anc[i] and any(x in desc[i] for x in members)]
            expected = min(causes) if causes else None
            assert fast.forbids(v) == (expected is not None) == naive.forbids(v)
            assert fast.cause(v) == expected == naive.cause(v)


@SETTINGS
@given(dags(max_nodes=15))
def test_groups_equal_networkx(graph: Graph):
    dg = digraph(graph)
    index = graph.index
    for node in graph.nodes:
        anc, desc = incompatibility_groups(graph, node.name)
        assert anc == sorted(nx.ancestors(dg, node.name), key=index.__getitem__)
        assert desc == sorted(nx.descendants(dg, node.name), key=index.__getitem__)
