"""Today's partitions equal those recorded before the pass driver was rewritten.

The fixture (``tests/data/partition_golden.json``, written by
``tests/golden_partitions.py`` with the code before the pass rewrite, re-recorded once after
the TensorRT rule tables changed the verdicts) covers 40
random DAGs, the sample models and two chain-with-skips models (500 and 3000
nodes, thousands of cycle exclusions) under ``default`` (two op sets),
``conv_bn``, ``conv_bn_relu`` and ``tensorrt`` (two settings): subgraph ids,
properties and members, every cycle avoided (seed, witness path, excluded
node) and, on the samples and the smaller DAGs, every reason.
"""

from __future__ import annotations

import json

import pytest

from golden_partitions import FIXTURE, backends, cases, record, with_reasons
from partition import check_partition, partition

EXPECTED = json.loads(FIXTURE.read_text())
CASES = list(cases())


@pytest.mark.parametrize("case,graph", CASES, ids=[c for c, _ in CASES])
def test_partitions_are_unchanged(case: str, graph) -> None:
    for label, backend, options in backends(graph, case):
        result = partition(graph, backend, **options)
        check_partition(result)
        got = record(result, with_reasons(case))
        want = EXPECTED[f"{case}/{label}"]
        assert got["subgraphs"] == want["subgraphs"], f"{case}/{label}: subgraphs differ"
        assert [c[:2] + c[3:] for c in got["cycles"]] == [c[:2] + c[3:] for c in want["cycles"]], \
            f"{case}/{label}: the cycles avoided (seed, excluded node) differ"
        owner = {n: k for k, sg in enumerate(result.subgraphs) for n in sg.nodes}
        for _prop, _seed, path, excluded in got["cycles"]:
            _assert_witness(graph, owner, path, excluded)
        assert _no_paths(got.get("reasons")) == _no_paths(want.get("reasons")), f"{case}/{label}: reasons differ"


def _assert_witness(graph, owner: dict[str, int], path: list[int], excluded: int | None) -> None:
    """A witness path may differ from the recorded one (the incremental check finds its own),
    but it is a real path (edges, or jumps inside an earlier subgraph) that ends in the
    excluded node."""
    assert len(path) >= 3
    if excluded is not None:
        assert path[-1] == excluded
    nodes = graph.nodes
    for a, b in zip(path, path[1:]):
        same = owner.get(nodes[a].name, -1) == owner.get(nodes[b].name, -2)
        assert same or set(nodes[a].outputs) & set(graph.reads(nodes[b])), \
            f"no edge {nodes[a].name} -> {nodes[b].name}"


def _no_paths(reasons: dict[str, str] | None) -> dict[str, str] | None:
    """Reasons with the witness path cut off the cycle exclusions."""
    if reasons is None:
        return None
    return {k: r.split(": it would close the cycle")[0] for k, r in reasons.items()}


def test_fixture_covers_cycles_and_every_backend() -> None:
    assert sum(len(v["cycles"]) for v in EXPECTED.values()) > 1000
    labels = {k.split("/")[1] for k in EXPECTED}
    assert labels == {"default", "default_half", "conv_bn", "conv_bn_relu", "tensorrt", "tensorrt_min3",
                      "tensorrt_8.5", "tensorrt_8.6", "tensorrt_10.0", "tensorrt_dla_8.5", "tensorrt_dla_8.6",
                      "tensorrt_dla_10.0", "tensorrt_dla_10.1"}
    releases = {k: v for k, v in EXPECTED.items() if k.split("/")[1].startswith("tensorrt_") and "min3" not in k}
    assert len(releases) == 7 * 8  # every sample model under each older release and the DLA target
    assert any("GPU fallback" in r for k, v in releases.items() if "dla" in k for r in v["reasons"].values())
