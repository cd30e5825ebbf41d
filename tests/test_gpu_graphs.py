"""Which bound graphs ``engine/gpu_graphs.py`` would capture as one CUDA Graph, and why not.

Only the decision is tested (the fake cupy has no stream capture; the capture and replay
themselves are unverified: no GPU is lent to this project).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from engine.executor import Executor
from engine.gpu_graphs import GraphReplay
from fake_cupy import install
from partition import load_model
from test_gpu_counts import _bench_model, _shape_math_model


def _replay(model):
    return GraphReplay(Executor(load_model(model.SerializeToString()), device="gpu"))


def test_static_graphs_are_captured(monkeypatch, rng):
    install(monkeypatch)
    for name in ("resnet18", "lstm_tagger", "transformer2"):  # token ids go up as data: no host input
        replay = _replay(_bench_model(name, rng)[0])
        try:
            assert replay.report()["captured"], replay.report()
        finally:
            replay.ex.close()


def test_control_flow_and_device_reads_keep_a_graph_eager(monkeypatch, rng):
    install(monkeypatch)
    model = _shape_math_model(rng)[0]  # its If picks a branch from a (host) value
    replay = _replay(model)
    try:
        why = replay.report()["eager_because"]
        assert [w["node"] for w in why] == [n.name for n in replay.ex.graph.nodes if n.op_type == "If"]
        assert "depends on values" in why[0]["why"]
        feeds = _shape_math_model(rng)[1]
        assert replay.run(feeds)["y"].shape == (2, 4)  # an eager graph answers as usual
    finally:
        replay.ex.close()


def test_a_pad_read_from_the_device_keeps_it_eager(monkeypatch, rng):
    install(monkeypatch)
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Cast", ["x"], ["xi"], to=TensorProto.INT64, name="cast"),
             helper.make_node("Pad", ["x", "xi"], ["y"], name="pad")]
    graph = helper.make_graph(nodes, "pad", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.zeros(1, np.float32), "unused")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    replay = _replay(model)
    try:
        why = replay.report()["eager_because"]
        assert why == [{"node": "pad", "why": "reads 'xi' from the device on the host"}]
    finally:
        replay.ex.close()
