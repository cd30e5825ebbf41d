"""Which bound graphs ``engine/gpu_graphs.py`` captures as one CUDA Graph, why not, and
that a capture breaks none of CUDA's capture rules.

The fake cupy enforces those rules (a host wait, a device read, an event query or an
upload while a stream captures raises, as a real capture is invalidated), but it runs
the captured work eagerly and replays nothing: replayed numbers are checked on a real
GPU (``tests/test_executor_gpu.py``).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.executor import Executor
from engine.gpu_graphs import GraphReplay
from engine.kernels import gemm
from fake_cupy import install
from partition import load_model
from test_gpu_counts import _bench_model, _data_if_model, _reference, _shape_math_model


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


def test_an_if_on_a_host_known_condition_is_captured_with_its_branch(monkeypatch, rng):
    fake = install(monkeypatch)
    model, feeds = _shape_math_model(rng)  # its If picks a branch from a shape: a host fact
    replay = _replay(model)
    try:
        assert replay.report()["captured"], replay.report()
        out = replay.run(feeds)
        want = _reference(model, feeds)
        np.testing.assert_allclose(out["y"].get(), want["y"], rtol=1e-5, atol=1e-5)
        assert replay.report()["signatures_captured"] == 1
        with fake.counting() as counts:  # a replay: the feed copied in, one launch, no reads
            replay.run(feeds)
        assert counts.syncs == 0 and counts.waits == 0
    finally:
        replay.ex.close()


def test_a_branch_that_cannot_be_captured_keeps_its_if_eager(monkeypatch, rng):
    install(monkeypatch)
    loop_body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Neg", ["v_in"], ["v_out"])], "loop_body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", TensorProto.FLOAT, None)])
    then = helper.make_graph(
        [helper.make_node("Loop", ["trip", "", "x"], ["looped"], body=loop_body, name="loop")], "then", [],
        [helper.make_tensor_value_info("looped", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Relu", ["x"], ["relu"])], "else", [],
                              [helper.make_tensor_value_info("relu", TensorProto.FLOAT, None)])
    graph = helper.make_graph(
        [helper.make_node("Shape", ["x"], ["shp"]), helper.make_node("Size", ["shp"], ["rank"]),
         helper.make_node("Greater", ["rank", "one"], ["wide"]),
         helper.make_node("If", ["wide"], ["y"], then_branch=then, else_branch=other, name="if")],
        "if_loop", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(1, np.int64), "one"),
         numpy_helper.from_array(np.array(2, np.int64), "trip")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    replay = _replay(model)
    try:
        why = replay.report()["eager_because"]
        assert [w["node"] for w in why] == ["if"]
        assert "branch 'then' cannot be captured: 'loop'" in why[0]["why"], why
        x = rng.standard_normal((2, 3)).astype(np.float32)
        np.testing.assert_allclose(replay.run({"x": x})["y"].get(), x)  # eager: as usual
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


def test_captures_break_no_capture_rule_and_answer_like_onnxruntime(monkeypatch, rng):
    """Each bench model captured under the rule-enforcing fake: a capture that waited,
    read the device, queried an event or uploaded would raise here."""
    install(monkeypatch)
    for name in ("resnet18", "lstm_tagger", "transformer2"):
        model, feeds = _bench_model(name, rng)
        replay = _replay(model)
        try:
            out = replay.run(feeds)   # the capturing run's outputs (the fake runs it eagerly)
            for k, want in _reference(model, feeds).items():
                np.testing.assert_allclose(out[k].get(), want, rtol=1e-4, atol=1e-4, err_msg=f"{name}:{k}")
        finally:
            replay.ex.close()


def test_the_engine_run_would_break_a_capture_which_is_why_replay_runs_inline(monkeypatch, rng):
    """The rule check can fail: the engine's own run records and queries events on its
    streams, which a capture does not permit."""
    fake = install(monkeypatch)
    model, feeds = _bench_model("resnet18", rng)
    with Executor(load_model(model.SerializeToString()), device="gpu") as ex:
        ex.run(feeds)
        stream = fake.cuda.Stream(non_blocking=True)
        stream.begin_capture()
        try:
            with pytest.raises(Exception, match="while a stream is capturing"):
                ex.run(feeds)
        finally:
            stream.end_capture()


def test_a_replaced_weight_is_captured_again(monkeypatch, rng):
    install(monkeypatch)
    model, feeds = _bench_model("lstm_tagger", rng)
    replay = _replay(model)
    try:
        replay.run(feeds)
        init = next(t for t in model.graph.initializer if len(t.dims) == 2
                    and t.data_type == TensorProto.FLOAT and t.name in replay.ex._weight_vars)
        weight = init.name
        new = rng.standard_normal(tuple(init.dims)).astype(np.float32)
        replay.ex.set_weight(weight, new)
        out = replay.run(feeds)
        model.graph.initializer.remove(next(t for t in model.graph.initializer if t.name == weight))
        model.graph.initializer.append(numpy_helper.from_array(new, weight))
        for k, want in _reference(model, feeds).items():
            np.testing.assert_allclose(out[k].get(), want, rtol=1e-4, atol=1e-4)
        assert replay.report()["signatures_captured"] == 1   # the old graph dropped
    finally:
        replay.ex.close()


def test_a_failed_capture_runs_that_signature_eagerly_and_says_why(monkeypatch, rng):
    fake = install(monkeypatch)
    model, feeds = _bench_model("transformer2", rng)
    replay = _replay(model)

    def int_only(*args, **kw):  # a product the capture path refuses, as for an int32 MatMul
        raise gemm.CaptureUnsupported("an int32 x int32 matrix product cannot be captured")
    try:
        monkeypatch.setattr(gemm, "_captured_matmul", int_only)
        out = replay.run(feeds)
        want = _reference(model, feeds)
        for k, v in want.items():
            np.testing.assert_allclose(out[k].get(), v, rtol=1e-4, atol=1e-4)
        report = replay.report()
        assert report["signatures_captured"] == 0 and "int32" in report["capture_failed"][0]
        assert fake.cuda.capturing is None   # the capture was ended
    finally:
        replay.ex.close()


def test_a_measured_gpu_run_reports_its_replays_or_why_it_stayed_eager(monkeypatch, rng, tmp_path, capsys):
    from engine.measure import measure
    from sglens.cli import main
    install(monkeypatch)
    model, feeds = _bench_model("resnet18", rng)
    with Executor(load_model(model.SerializeToString()), device="gpu") as ex:
        m = measure(ex, feeds, repeat=2, warmup=1)
    graph = m.to_json(timeline=False)["cuda_graph"]
    assert graph["captured"] and graph["seconds"] > 0 and len(graph["all_seconds"]) == 2
    assert graph["matches_eager"] is True and graph["signatures_captured"] == 1
    with Executor(load_model(model.SerializeToString()), device="cpu") as ex:
        assert measure(ex, feeds, repeat=1).cuda_graph is None   # the CPU has no graphs to replay

    path = tmp_path / "resnet.onnx"
    path.write_bytes(model.SerializeToString())
    assert main(["run", str(path), "--device", "gpu", "--repeat", "2"]) == 0
    assert "CUDA graph replay:" in capsys.readouterr().out
    data_if = tmp_path / "data_if.onnx"
    data_if.write_bytes(_data_if_model().SerializeToString())
    assert main(["run", str(data_if), "--device", "gpu", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "CUDA graph: not captured, the run is eager only (node 'branch' reads 'pos'" in out, out


def test_a_partitioned_gpu_run_on_our_engine_waits_no_more_and_is_captured(monkeypatch, rng):
    """Subgraph bodies our engine runs go inline on the device: no nested engine run and
    its barrier (a partitioned GPU run cost twice the unpartitioned one), and a capture
    records them with the rest. Another runtime's subgraph keeps the graph eager."""
    from partition.runner import partition
    fake = install(monkeypatch)
    model, feeds = _bench_model("transformer2", rng)
    graph = load_model(model.SerializeToString())
    parts = partition(graph, "default", ops=["MatMul", "Add", "Softmax", "Div", "Mul", "Erf"])
    assert parts.subgraphs, "the default backend takes something"
    want = _reference(model, feeds)
    waits = {}
    for name, g in (("whole", graph), ("partitioned", parts.graph)):
        with Executor(g, device="gpu", subgraph_runtime="engine") as ex:
            ex.run(feeds)
            with fake.counting() as counts:
                got = ex.run(feeds).outputs
            waits[name] = counts.waits
            for k, v in want.items():
                np.testing.assert_allclose(got[k].get(), v, rtol=1e-4, atol=1e-4)
            if name == "partitioned":
                replay = GraphReplay(ex)
                assert replay.report()["captured"], replay.report()
                out = replay.run(feeds)
                for k, v in want.items():
                    np.testing.assert_allclose(out[k].get(), v, rtol=1e-4, atol=1e-4)
    assert waits["partitioned"] <= waits["whole"], waits
    with Executor(parts.graph, device="gpu", subgraph_runtime="onnxruntime") as ex:
        ex.run(feeds)
        why = GraphReplay(ex).report()["eager_because"]
        assert why and "run by onnxruntime" in why[0]["why"], why


def test_a_shape_computed_on_the_host_stays_there_across_a_subgraph_cut(monkeypatch, rng):
    """The cut leaves Shape -> Gather -> Concat outside and the Reshape inside a subgraph:
    the shape crosses the boundary as a host array, so the body reads no device value
    (silero-VAD partitioned by the tensorrt rules synced there, and could not be captured)."""
    from partition.runner import partition
    fake = install(monkeypatch)
    model, feeds = _shape_math_model(rng)
    graph = load_model(model.SerializeToString())
    parts = partition(graph, "default", ops=["Reshape", "Resize", "ReduceMean", "MatMul"])
    with Executor(parts.graph, device="gpu", subgraph_runtime="engine") as ex:
        ex.run(feeds)
        with fake.counting() as counts:
            got = ex.run(feeds).outputs
        assert counts.syncs == 0, counts.sync_calls
        want = _reference(model, feeds)
        for k, v in want.items():
            np.testing.assert_allclose(got[k].get(), v, rtol=1e-4, atol=1e-4)
        assert GraphReplay(ex).report()["captured"], GraphReplay(ex).report()


def test_a_small_int_input_a_subgraph_reads_stays_on_the_host(monkeypatch, rng):
    """silero-VAD's sample rate: a small integer graph input that a subgraph body
    compares and branches on. The subgraph operator takes it as a host array (it does not
    want it as device data), so the body's If reads no device value and is captured."""
    from partition.runner import partition
    fake = install(monkeypatch)
    then = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)])
    graph = helper.make_graph(
        [helper.make_node("Equal", ["sr", "k16"], ["c"], name="is16k"),
         helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other, name="branch")],
        "sr_if", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8]),
                  helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(16000, np.int64), "k16")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    parts = partition(load_model(model.SerializeToString()), "default", ops=["Equal", "If"])
    assert parts.subgraphs
    for sr in (16000, 8000):
        feeds = {"x": rng.standard_normal((1, 8)).astype(np.float32), "sr": np.array(sr, np.int64)}
        with Executor(parts.graph, device="gpu", subgraph_runtime="engine") as ex:
            ex.run(feeds)
            with fake.counting() as counts:
                got = ex.run(feeds).outputs["y"]
            assert counts.syncs == 0, counts.sync_calls
            np.testing.assert_allclose(got.get(), _reference(model, feeds)["y"])
            assert GraphReplay(ex).report()["captured"], GraphReplay(ex).report()
