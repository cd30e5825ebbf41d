"""The incremental exclusion loop (partition/trim.py) decides exactly as the full loop.

With tracing on, the driver runs the full loop (grow, exact cycle search, exclude,
reset, grow again) through the selector's calls; with tracing off it trims
incrementally. Same subgraphs and same exclusions (seed, excluded node), in order.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from partition import Graph, Node, PartitionRun, check_partition, load_model, partition
from sample_models.synthetic import SUPPORTED_CHAIN_OPS, synthetic_model

OPS = ("Relu", "Sin", "Add", "Mul", "Exp")


@st.composite
def dags(draw) -> Graph:
    n = draw(st.integers(2, 40))
    nodes, tensors = [], ["x"]
    for i in range(n):
        k = draw(st.integers(1, 3))
        recent = tensors[-6:]
        ins = tuple(draw(st.sampled_from(recent if draw(st.booleans()) else tensors)) for _ in range(k))
        nodes.append(Node(f"n{i}", draw(st.sampled_from(OPS)), ins, (f"t{i}",)))
        tensors.append(f"t{i}")
    used = {t for node in nodes for t in node.inputs}
    return Graph("dag", nodes, ["x"], [t for t in tensors[1:] if t not in used] or [tensors[-1]])


def both(graph: Graph, ops: list[str]):
    fast = partition(graph, "default", ops=ops)
    run = PartitionRun(graph, "default", trace=True, ops=ops)
    for _ in run.events():
        pass
    return fast, run.result


def decisions(result) -> tuple[list, list]:
    return ([(s.id, s.nodes) for s in result.subgraphs],
            [(c["seed"], c["excluded"]) for c in result.cycles])


@settings(max_examples=300, deadline=None)
@given(dags(), st.sets(st.sampled_from(OPS), min_size=1))
def test_trimming_equals_the_full_loop_on_random_dags(graph: Graph, ops: set[str]) -> None:
    fast, full = both(graph, sorted(ops))
    check_partition(fast)
    assert decisions(fast) == decisions(full)
    assert {n: r.kind for n, r in fast.reasons.items()} == {n: r.kind for n, r in full.reasons.items()}


def test_trimming_equals_the_full_loop_on_a_chain_with_skips() -> None:
    graph = load_model(synthetic_model(1500, 0.2, seed=3).SerializeToString(), infer_shapes=False)
    fast, full = both(graph, sorted(set(SUPPORTED_CHAIN_OPS) | {"Add"}))
    assert len(fast.cycles) > 500
    assert decisions(fast) == decisions(full)


def both_sized(graph: Graph, ops: list[str], min_size: int):
    fast = partition(graph, "default", ops=ops, min_size=min_size)
    run = PartitionRun(graph, "default", trace=True, ops=ops, min_size=min_size)
    for _ in run.events():
        pass
    return fast, run.result


@settings(max_examples=200, deadline=None)
@given(dags(), st.sets(st.sampled_from(OPS), min_size=1), st.integers(2, 4))
def test_trimming_equals_the_full_loop_when_small_subgraphs_are_rejected(graph: Graph, ops: set[str],
                                                                          min_size: int) -> None:
    """The same with ``min_size``: create_subgraph_node rejects small subgraphs, whose nodes are
    never offered again (the fixed-op seed loop's "accepted and free" flags follow the statuses)."""
    fast, full = both_sized(graph, sorted(ops), min_size)
    check_partition(fast)
    assert decisions(fast) == decisions(full)
    assert {n: r.kind for n, r in fast.reasons.items()} == {n: r.kind for n, r in full.reasons.items()}
    assert {n: r.text for n, r in fast.reasons.items() if r.kind != "cycle"} == \
        {n: r.text for n, r in full.reasons.items() if r.kind != "cycle"}


def test_trimming_equals_the_full_loop_on_a_chain_with_skips_and_a_minimum_size() -> None:
    graph = load_model(synthetic_model(1500, 0.2, seed=3).SerializeToString(), infer_shapes=False)
    fast, full = both_sized(graph, sorted(set(SUPPORTED_CHAIN_OPS) | {"Add"}), 4)
    assert any(r.kind == "rejected" for r in fast.reasons.values())
    assert decisions(fast) == decisions(full)
    assert {n: r.kind for n, r in fast.reasons.items()} == {n: r.kind for n, r in full.reasons.items()}
