"""Property tests on random DAGs and op sets, with networkx as the independent oracle."""

from __future__ import annotations

import networkx as nx
from hypothesis import given, settings
from hypothesis import strategies as st

from partition import Graph, Node, partition
from partition.build import seed_order
from partition.cycles import CycleChecker

OPS = ("Relu", "Sin", "Add", "Mul", "Exp")


@st.composite
def random_graphs(draw) -> Graph:
    n = draw(st.integers(1, 28))
    nodes: list[Node] = []
    tensors = ["x"]
    for i in range(n):
        k = draw(st.integers(1, 3))
        ins = tuple(draw(st.sampled_from(tensors)) for _ in range(k))
        op = draw(st.sampled_from(OPS))
        nodes.append(Node(f"n{i}", op, ins, (f"t{i}",)))
        tensors.append(f"t{i}")
    used = {t for node in nodes for t in node.inputs}
    outputs = [t for t in tensors[1:] if t not in used] or [tensors[-1]]
    return Graph("random", nodes, ["x"], outputs)


def contracted(graph: Graph, groups: list[list[str]]) -> nx.DiGraph:
    owner = {n: f"sg{k}" for k, g in enumerate(groups) for n in g}
    dg = nx.DiGraph()
    for node in graph.nodes:
        dg.add_node(owner.get(node.name, node.name))
        for p in graph.input_nodes(node):
            a, b = owner.get(p.name, p.name), owner.get(node.name, node.name)
            if a != b:
                dg.add_edge(a, b)
    return dg


@settings(max_examples=150, deadline=None)
@given(random_graphs(), st.sets(st.sampled_from(OPS), min_size=1))
def test_partition_invariants(graph: Graph, ops: set[str]) -> None:
    result = partition(graph, "default", ops=sorted(ops))
    groups = [sg.nodes for sg in result.subgraphs]
    flat = [n for g in groups for n in g]
    assert len(flat) == len(set(flat)), "subgraphs are disjoint"
    assert all(graph.node_by_name[n].op_type in ops for n in flat)
    assert nx.is_directed_acyclic_graph(contracted(graph, groups)), "contraction stays acyclic"
    for g in groups:
        sub = nx.Graph()
        sub.add_nodes_from(g)
        for n in g:
            for p in graph.input_nodes(graph.node_by_name[n]):
                if p.name in g:
                    sub.add_edge(p.name, n)
        assert nx.is_connected(sub), f"subgraph {g} is connected"
    for node in graph.nodes:
        assert node.name in flat or result.excluded.get(node.name), f"{node.name} has a reason"
    assert list(result.graph.outputs) == list(graph.outputs)


@settings(max_examples=200, deadline=None)
@given(random_graphs(), st.data())
def test_cycle_checker_matches_networkx(graph: Graph, data) -> None:
    order = seed_order(graph)
    id_of = {n.name: i for i, n in enumerate(order)}
    succs: list[list[int]] = [[] for _ in order]
    for n in order:
        for p in graph.input_nodes(n):
            succs[id_of[p.name]].append(id_of[n.name])
    for s in succs:
        s.sort()
    checker = CycleChecker(succs)
    groups: list[list[str]] = []
    free = [n.name for n in order]
    for _ in range(data.draw(st.integers(1, 4))):
        if not free:
            break
        cand = data.draw(st.lists(st.sampled_from(free), min_size=1, max_size=6, unique=True))
        witness = checker.find_cycle([id_of[c] for c in cand])
        cyclic = not nx.is_directed_acyclic_graph(contracted(graph, groups + [cand]))
        assert (witness is not None) == cyclic
        if witness is not None:
            path = [order[i].name for i in witness.path]
            assert path[0] in cand and path[-1] in cand and not set(path[1:-1]) & set(cand)
        else:
            checker.add([id_of[c] for c in cand])
            groups.append(cand)
            free = [f for f in free if f not in cand]


@settings(max_examples=60, deadline=None)
@given(random_graphs(), st.sets(st.sampled_from(OPS), min_size=1))
def test_traced_and_untraced_agree(graph: Graph, ops: set[str]) -> None:
    from partition import PartitionRun
    run = PartitionRun(graph, "default", trace=True, ops=sorted(ops))
    events = list(run.events())
    assert events[0].kind == "pass_start" and events[-1].kind == "pass_end"
    assert [e.step for e in events] == list(range(1, len(events) + 1))
    plain = partition(graph, "default", ops=sorted(ops))
    assert [s.nodes for s in run.result.subgraphs] == [s.nodes for s in plain.subgraphs]
    made = [e for e in events if e.kind == "subgraph"]
    assert [list(e.candidates) for e in made] == [s.nodes for s in plain.subgraphs] or \
        sorted(map(sorted, (e.candidates for e in made))) == sorted(map(sorted, (s.nodes for s in plain.subgraphs)))
