"""Today's partitions equal those recorded before the pass driver was rewritten.

The fixture (``tests/data/partition_golden.json``, written by
``tests/golden_partitions.py`` with the code of commit 93f6955) covers 40
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
    for label, backend, options in backends(graph):
        result = partition(graph, backend, **options)
        check_partition(result)
        got = record(result, with_reasons(case))
        want = EXPECTED[f"{case}/{label}"]
        assert got["subgraphs"] == want["subgraphs"], f"{case}/{label}: subgraphs differ"
        assert got["cycles"] == want["cycles"], f"{case}/{label}: cycles differ"
        assert got.get("reasons") == want.get("reasons"), f"{case}/{label}: reasons differ"


def test_fixture_covers_cycles_and_every_backend() -> None:
    assert sum(len(v["cycles"]) for v in EXPECTED.values()) > 1000
    labels = {k.split("/")[1] for k in EXPECTED}
    assert labels == {"default", "default_half", "conv_bn", "conv_bn_relu", "tensorrt", "tensorrt_min3"}
