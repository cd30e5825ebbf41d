"""Per-subgraph GPU memory: the cupy pool's high-water mark beside time, in the comparison the
run card and the compare page show (``comparison.subgraphs[*].pool_peak_bytes``).

On the fake cupy (tests/fake_cupy.py) the pool reports the bytes allocated so far, so the mark
is positive exactly where it is read; on the CPU there is no pool and the field is None.
"""

from __future__ import annotations

import numpy as np
from onnx import helper

from conftest import make_model
from engine.compare import compare
from fake_cupy import install
from partition import load_model
from partition.runner import partition
from test_executor import vi


def _partitioned(rng):
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Mul", ["a", "x"], ["b"], name="mul"),
             helper.make_node("Add", ["b", "x"], ["y"], name="add")]
    model = make_model(nodes, [vi("x", [64, 32])], [vi("y", [64, 32])])
    graph = load_model(model.SerializeToString())
    return graph, model, partition(graph, "default", ops=["Relu", "Add"]), \
        {"x": rng.standard_normal((64, 32)).astype(np.float32)}


def test_gpu_subgraphs_report_the_pool_high_water_mark(monkeypatch, rng):
    install(monkeypatch)
    graph, model, part, feeds = _partitioned(rng)
    c = compare(graph, model, feeds, partitioned=part, executor="engine", device="gpu", repeat=1)
    assert c.ok and len(c.subgraphs) == 2
    for sg in c.subgraphs:  # at least the subgraph's own output was allocated before it ended
        assert sg["pool_peak_bytes"] >= 64 * 32 * 4, sg
    assert "GPU pool" in c.text()


def test_cpu_subgraphs_have_no_pool_mark(rng):
    graph, model, part, feeds = _partitioned(rng)
    c = compare(graph, model, feeds, partitioned=part, executor="engine", repeat=1)
    assert c.ok and all(sg["pool_peak_bytes"] is None for sg in c.subgraphs)
    assert "GPU pool" not in c.text()
