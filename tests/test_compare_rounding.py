"""A quantized model's outputs differ from onnxruntime's by whole quantization steps even when no
kernel of ours departs: onnxruntime fuses the QDQ pairs into integer kernels (QLinearConv), we
compute the float ops the model writes, and a value next to a QuantizeLinear's rounding boundary
goes to neighbouring steps. ``compare`` runs every node out of tolerance alone on onnxruntime's own
inputs (``engine.isolate.local_check``): none departing is the ``rounding`` verdict, one departing
keeps ``differ`` and names it. Real ``onnxruntime.quantization`` output, fresh random inputs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.compare import compare
from engine.options import find_kernel
from engine.tolerance import Tolerance
from engine.verdict import judge
from partition import load_model

from conftest import make_model

ort_quant = pytest.importorskip("onnxruntime.quantization")


def _quantized_cnn(tmp_path, rng) -> onnx.ModelProto:
    """Conv -> Relu -> Conv -> Relu -> Conv, 32 channels at 24x24, statically quantized to QDQ
    int8 by onnxruntime's quantizer (per-channel weights, MinMax calibration), as users do."""
    def w(*shape):
        return rng.standard_normal(shape).astype(np.float32) * np.float32(1 / np.sqrt(np.prod(shape[1:])))
    inits = [numpy_helper.from_array(w(32, 3, 3, 3), "w1"), numpy_helper.from_array(w(32, 32, 3, 3), "w2"),
             numpy_helper.from_array(w(8, 32, 1, 1), "w3")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("Conv", ["r2", "w3"], ["y"], name="conv3")]
    shape = [1, 3, 24, 24]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 24, 24])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    src, out = tmp_path / "cnn.onnx", tmp_path / "cnn_qdq.onnx"
    onnx.save(model, src)

    class Batches(ort_quant.CalibrationDataReader):
        def __init__(self):
            self.items = iter([{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(4)])

        def get_next(self):
            return next(self.items, None)

    ort_quant.quantize_static(str(src), str(out), Batches(), quant_format=ort_quant.QuantFormat.QDQ,
                              activation_type=ort_quant.QuantType.QInt8,
                              weight_type=ort_quant.QuantType.QInt8, per_channel=True)
    quantized = onnx.load(out)
    quantized.ir_version = 8
    return quantized


def _nudged_convs(scale: float):
    """Our kernels, with every Conv's output scaled by ``scale`` (a kernel that departs)."""
    def find(node, opset):
        kernel = find_kernel(node, opset)
        if node.op_type == "Conv":
            return lambda xp, *args, **attrs: tuple(y * np.float32(scale) for y in kernel(xp, *args, **attrs))
        return kernel
    return find


def _boundary_model() -> onnx.ModelProto:
    """x -> Q/DQ (scale 0.5) -> a 1x1 identity Conv (int8 weights behind a DQ) -> Q/DQ (scale 1)
    -> y. Fed half-integers, the Conv gives them exactly, and the second QuantizeLinear rounds each
    half to even: a rounding-level change of the Conv's output moves every even one a whole step."""
    c = 4
    eye = np.eye(c, dtype=np.int8).reshape(c, c, 1, 1)
    inits = [numpy_helper.from_array(np.array(0.5, np.float32), "sx"),
             numpy_helper.from_array(np.array(1.0, np.float32), "sy"),
             numpy_helper.from_array(np.array(0, np.int8), "z"),
             numpy_helper.from_array(eye, "wq"), numpy_helper.from_array(np.ones(c, np.float32), "sw"),
             numpy_helper.from_array(np.zeros(c, np.int8), "zw")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "z"], ["xq"], name="quantize_x"),
             helper.make_node("DequantizeLinear", ["xq", "sx", "z"], ["xd"], name="dequantize_x"),
             helper.make_node("DequantizeLinear", ["wq", "sw", "zw"], ["w"], name="dequantize_w", axis=0),
             helper.make_node("Conv", ["xd", "w"], ["c"], name="conv"),
             helper.make_node("QuantizeLinear", ["c", "sy", "z"], ["cq"], name="quantize_c"),
             helper.make_node("DequantizeLinear", ["cq", "sy", "z"], ["y"], name="dequantize_c")]
    g = helper.make_graph(nodes, "boundary", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 8, 8])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_a_qdq_models_steps_are_called_rounding_when_no_kernel_departs(rng):
    """Our Conv a rounding-level 1e-6 off (two correct implementations accumulate in different
    orders): every even half-integer goes to the next step in our run, and each node out of
    tolerance, run alone on onnxruntime's inputs, gives onnxruntime's output."""
    model = _boundary_model()
    graph = load_model(model.SerializeToString())
    x = (rng.integers(-40, 40, (1, 4, 8, 8)) + 0.5).astype(np.float32)
    c = compare(graph, model, {"x": x}, executor="engine", kernels=_nudged_convs(1 + 1e-6), repeat=1, warmup=0)
    e = c.outputs["y"]["engine"]
    # the premise, by construction: the nudge moves every half that rounds to even toward zero
    moved = int(np.sum(np.rint(x.astype(np.float64) * (1 + 1e-6)) != np.rint(x)))
    assert not c.ok and e["mismatched"] == moved > 0 and e["max_abs"] == 1.0
    local = c.local_check
    assert local["complete"] and local["n_departing"] == 0 and local["checked"] == local["differing"] > 0
    v = c.verdict
    assert v.status == "rounding" and v.headline.startswith("≈") and "not by a kernel" in v.headline
    assert any("no kernel of ours departs" in d for d in v.details), v.details
    assert c.to_json()["verdict"]["status"] == "rounding"
    assert "->  ROUNDING ONLY" in c.text().splitlines()[0]


def test_a_kernel_that_departs_keeps_the_difference_and_is_named(tmp_path, rng):
    """The same model with every Conv 1% off: the Convs still differ when run alone on
    onnxruntime's inputs, so the verdict is ``differ`` and says where the difference is made."""
    model = _quantized_cnn(tmp_path, rng)
    graph = load_model(model.SerializeToString())
    feeds = {"x": rng.standard_normal((1, 3, 24, 24)).astype(np.float32)}
    c = compare(graph, model, feeds, executor="engine", kernels=_nudged_convs(1.01), repeat=1, warmup=0)
    local = c.local_check
    convs = {n.name for n in graph.nodes if n.op_type == "Conv"}
    assert not local["complete"] and set(local["departing"]) <= convs and local["n_departing"] >= 1
    v = c.verdict
    assert v.status == "differ" and v.headline.startswith("✘")
    assert any("still differ" in d and local["departing"][0] in d for d in v.details), v.details
    assert "->  DIFFERENT" in c.text().splitlines()[0]


def _differing(run: str) -> dict:
    return {"y": {run: {"match": False, "max_abs": 0.05, "mean_abs": 0.01, "mismatched": 3}}}


COMPLETE = {"differing": 4, "checked": 4, "departing": [], "n_departing": 0, "unchecked": [],
            "n_unchecked": 0, "complete": True}


def test_rounding_needs_every_differing_node_run_alone_and_our_kernels_in_every_run():
    """The rule alone (engine.verdict.judge): a node that could not be run alone, or a partitioned
    run whose subgraphs onnxruntime ran (kernels the local check did not look at), keep ``differ``."""
    tol = Tolerance()
    assert judge(_differing("engine"), [], tol, COMPLETE).status == "rounding"
    assert judge(_differing("engine"), [], tol, None).status == "differ"
    unchecked = {**COMPLETE, "checked": 3, "unchecked": ["loop"], "n_unchecked": 1, "complete": False}
    v = judge(_differing("engine"), [], tol, unchecked)
    assert v.status == "differ" and any("could not be run alone" in d and "loop" in d for d in v.details)
    def boundary(alone):
        return [{"id": 0, "node": "sg0", "executor": "onnxruntime", "alone_matches": alone,
                 "outputs": {"t": {"match": False}}}]
    assert judge(_differing("partitioned"), boundary(True), tol, COMPLETE).status == "rounding"
    for alone in (False, None):   # made there, or not run alone
        assert judge(_differing("partitioned"), boundary(alone), tol, COMPLETE).status == "differ"
    matching = [{"id": 0, "node": "sg0", "executor": "onnxruntime", "outputs": {"t": {"match": True}}}]
    assert judge(_differing("partitioned"), matching, tol, COMPLETE).status == "rounding"


def test_a_partitioned_runs_subgraphs_are_run_alone_by_their_runtime(rng):
    """The boundary model with its QuantizeLinear/DequantizeLinear in subgraphs onnxruntime runs
    and the Conv on our engine, a rounding-level 1e-6 off: the subgraphs whose outputs differ give
    onnxruntime's output when run alone on its inputs, so the partitioned run's difference is
    carried too; with the Conv 1% off, our Conv is where it is made."""
    from partition.runner import partition
    model = _boundary_model()
    graph = load_model(model.SerializeToString())
    part = partition(graph, "default", ops=["QuantizeLinear", "DequantizeLinear"])
    x = (rng.integers(-40, 40, (1, 4, 8, 8)) + 0.5).astype(np.float32)
    c = compare(graph, model, {"x": x}, partitioned=part, executor="onnxruntime",
                kernels=_nudged_convs(1 + 1e-6), repeat=1, warmup=0)
    assert not c.outputs["y"]["partitioned"]["match"] and not c.outputs["y"]["engine"]["match"]
    differing = [sg for sg in c.subgraphs if not all(e["match"] for e in sg["outputs"].values())]
    assert differing and all(sg["executor"] == "onnxruntime" and sg["alone_matches"] is True
                             for sg in differing)
    assert c.verdict.status == "rounding" and "engine and partitioned runs" in c.verdict.headline
    assert any("came in through their inputs" in d for d in c.verdict.details), c.verdict.details
    wrong = compare(graph, model, {"x": x}, partitioned=part, executor="onnxruntime",
                    kernels=_nudged_convs(1.01), repeat=1, warmup=0)
    assert wrong.verdict.status == "differ" and wrong.local_check["departing"] == ["conv"]


def test_a_fused_kernel_that_departs_is_not_excused_by_the_nodes_alone(rng, monkeypatch):
    """The nodes checked alone are those of the run that keeps every tensor, where a fused
    Q->DQ pair runs as written; the measured run fuses it (engine/fuse_qdq.py). A fused kernel 1%
    off while every node alone is right: the two runs part, so the verdict stays ``differ``."""
    import engine.fuse_qdq
    real = engine.fuse_qdq.fake_quantize
    monkeypatch.setattr(engine.fuse_qdq, "fake_quantize",
                        lambda xp, x, *a, **kw: real(xp, x, *a, **kw) * np.float32(1.01))
    model = _boundary_model()
    graph = load_model(model.SerializeToString())
    x = (rng.integers(-40, 40, (1, 4, 8, 8)) + 0.5).astype(np.float32)
    c = compare(graph, model, {"x": x}, executor="engine", kernels=_nudged_convs(1 + 1e-6), repeat=1, warmup=0)
    local = c.local_check
    assert local["n_departing"] == 0 and local["fused_differs"] == ["y"] and not local["complete"]
    assert c.verdict.status == "differ"
    assert any("a fused kernel adds a difference" in d for d in c.verdict.details), c.verdict.details


def test_no_node_out_of_tolerance_against_onnxruntimes_unfused_run_is_rounding(rng):
    """A run whose every tensor is within tolerance of onnxruntime's run of the ops as written
    (every tensor exposed, nothing fused) differs at the outputs only from onnxruntime's fused
    default run: ``diagnose`` finds no node and a complete check, the verdict says so."""
    from engine.compare import diagnose
    import onnxruntime as ort
    model = _boundary_model()
    graph = load_model(model.SerializeToString())
    x = (rng.integers(-40, 40, (1, 4, 8, 8)) + 0.5).astype(np.float32)
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    names = [t for n in model.graph.node for t in n.output]
    exposed.graph.output.extend(onnx.ValueInfoProto(name=t) for t in names if t != "y")
    sess = ort.InferenceSession(exposed.SerializeToString(), providers=["CPUExecutionProvider"])
    theirs = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"x": x})))
    first, local = diagnose(graph, model, {"x": x}, theirs, Tolerance())   # ours = onnxruntime's own
    assert first is None and local["differing"] == 0 and local["complete"]
    v = judge(_differing("engine"), [], Tolerance(), local)
    assert v.status == "rounding" and any("no node of ours is out of tolerance" in d for d in v.details)


def test_a_check_out_of_time_judges_nothing(rng, monkeypatch):
    """The local check has a time budget (a large quantized model has hundreds of nodes out of
    tolerance); nodes it had no time to run alone leave the difference unexplained: ``differ``."""
    import engine.isolate
    monkeypatch.setattr(engine.isolate, "LOCAL_SECONDS", -1.0)
    model = _boundary_model()
    graph = load_model(model.SerializeToString())
    x = (rng.integers(-40, 40, (1, 4, 8, 8)) + 0.5).astype(np.float32)
    c = compare(graph, model, {"x": x}, executor="engine", kernels=_nudged_convs(1 + 1e-6), repeat=1, warmup=0)
    assert c.local_check["checked"] == 0 < c.local_check["differing"] and not c.local_check["complete"]
    assert c.verdict.status == "differ"
    assert any("in the time the check has" in d for d in c.verdict.details), c.verdict.details


def test_where_onnxruntime_departs_the_headline_says_so():
    """Nodes that still differ alone, where ONNX's reference evaluator sides with ours (a QDQ
    YOLOv8n's Convs: onnxruntime 7.7e-3 off on values of 228, ours exact): still ``differ`` --
    the outputs do differ -- but the headline says whose kernel departs; one of ours among them
    and it does not."""
    from engine.isolate import _theirs
    ok, off = {"match": True}, {"match": False}
    assert _theirs({"vs_ours": {"t": ok}, "vs_onnxruntime": {"t": off}})
    assert not _theirs({"vs_ours": {"t": off}, "vs_onnxruntime": {"t": ok}}) and not _theirs(None)
    tol = Tolerance()
    theirs = {**COMPLETE, "departing": ["conv"], "n_departing": 1, "n_theirs": 1, "complete": False}
    v = judge(_differing("engine"), [], tol, theirs)
    assert v.status == "differ" and "whose own kernels depart" in v.headline
    assert any("onnxruntime's kernel departs there, not ours" in d for d in v.details)
    mixed = {**theirs, "departing": ["conv", "add"], "n_departing": 2}
    v = judge(_differing("engine"), [], tol, mixed)
    assert v.status == "differ" and "whose own kernels depart" not in v.headline
    assert any("at 1 of them ONNX's reference evaluator agrees with ours" in d for d in v.details)


def test_within_rounding_is_a_tolerance_miss_at_float32_rounding_of_the_largest_value(rng):
    """A conv whose terms of +-90 cancel to near zero differs by ~1e-4 between two correct
    summation orders: out of tolerance there, yet 1e-6 of the tensor's largest value."""
    from engine.tolerance import compare_arrays, within_rounding
    ref = rng.standard_normal(1000).astype(np.float32) * 90
    ref[:10] = 1e-6                                   # near-zero results of large terms
    near = ref.copy()
    near[:10] += 2e-4                                 # 2.2e-6 of max |ref|: rounding where terms cancel
    e = compare_arrays(near, ref)
    assert not e["match"] and within_rounding(e)
    far = ref.copy()
    far[:10] += 0.05                                  # 5.6e-4 of max |ref|: not rounding
    e = compare_arrays(far, ref)
    assert not e["match"] and not within_rounding(e)
    assert within_rounding(compare_arrays(ref, ref))
    # a float16 tensor (onnxruntime computes it in float16, we in float32): its own last place
    half = ref.astype(np.float16)
    off = half.copy()
    off[:10] += np.float16(0.05)                       # 1e-3 of max |ref|: float16 rounding where terms cancel
    e = compare_arrays(off, half, Tolerance(1e-3, 1e-2))
    assert not e["match"] and within_rounding(e, np.float16) and not within_rounding(e)


def _float16_add(rng: np.random.Generator) -> tuple:
    """A float16 Add whose terms cancel at four places (near zero among values of ~30), its
    inputs, and onnxruntime's output off by float16 rounding of the terms there (~1e-3 of max
    |a|: out of tolerance, within rounding) and by 5.0 (a departure)."""
    nodes = [helper.make_node("Add", ["a", "b"], ["y"], name="add")]
    f16 = TensorProto.FLOAT16
    model = make_model(nodes, [helper.make_tensor_value_info(t, f16, [64]) for t in "ab"],
                       [helper.make_tensor_value_info("y", f16, [64])])
    a = (rng.standard_normal(64) * 30).astype(np.float16)
    b = (rng.standard_normal(64) * 0.01).astype(np.float16)
    b[:4] = -a[:4] + b[:4]
    y = (a.astype(np.float32) + b.astype(np.float32)).astype(np.float16)
    rounded, wrong = y.copy(), y.copy()
    rounded[:4] += np.float16(0.03)
    wrong[:4] += np.float16(5.0)
    return load_model(model.SerializeToString()), a, b, rounded, wrong


def test_the_local_check_judges_a_float16_tensor_by_float16_rounding(rng):
    """A float16 node whose output, run alone, is a float16 last place of its largest value off
    (onnxruntime computes it in float16, we in float32): not a departure; 1% off: a departure."""
    from engine.isolate import local_check
    graph, a, b, rounded, wrong = _float16_add(rng)
    tol = Tolerance(1e-3, 1e-2)
    got = local_check(graph.nodes, graph.opset, {"a": a, "b": b, "y": rounded}, None, tol)
    assert got["complete"] and got["n_departing"] == 0
    got = local_check(graph.nodes, graph.opset, {"a": a, "b": b, "y": wrong}, None, tol)
    assert got["departing"] == ["add"] and not got["complete"]


def test_each_differing_subgraph_is_run_alone_by_its_runtime(rng):
    """``alone_matches``: onnxruntime's inputs through the subgraph alone give onnxruntime's output
    (True), or not (False: a value that is not what the subgraph computes), or it cannot be run
    alone (None: an input value missing)."""
    import onnxruntime as ort
    from engine.compare import _subgraphs_alone
    from partition.runner import partition
    model = _boundary_model()
    graph = load_model(model.SerializeToString())
    part = partition(graph, "default", ops=["QuantizeLinear", "DequantizeLinear"])
    sg_node = next(n for n in part.graph.nodes if n.is_subgraph and "x" in n.inputs)
    x = (rng.integers(-40, 40, (1, 4, 8, 8)) + 0.5).astype(np.float32)
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    exposed.graph.output.extend(onnx.ValueInfoProto(name=t) for t in sg_node.outputs)
    sess = ort.InferenceSession(exposed.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = {"x": x, **dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"x": x})))}
    out = sg_node.outputs[0]

    def alone(values):
        record = {"node": sg_node.name, "executor": "engine", "outputs": {out: {"match": False}}}
        _subgraphs_alone([record], part.graph, values, None, Tolerance())
        return record["alone_matches"]
    assert alone(ref) is True
    assert alone({**ref, out: ref[out] + np.float32(1.0)}) is False
    assert alone({k: v for k, v in ref.items() if k != "x"}) is None


def test_the_reference_evaluator_is_asked_only_about_nodes_that_depart(rng, monkeypatch):
    """ONNX's reference evaluator is numpy loops (a float16 1024x1024 segmentation model's convs
    took the local check's whole minute after two nodes): a node alone out of tolerance but
    within rounding of onnxruntime needs no oracle; one that departs still gets it."""
    import engine.isolate as isolate_module
    calls = []
    real = isolate_module._run_reference
    monkeypatch.setattr(isolate_module, "_run_reference", lambda *a: calls.append(1) or real(*a))
    graph, a, b, rounded, wrong = _float16_add(rng)
    tol = Tolerance(1e-3, 1e-2)
    got = isolate_module.local_check(graph.nodes, graph.opset, {"a": a, "b": b, "y": rounded}, None, tol)
    assert got["complete"] and not calls
    got = isolate_module.local_check(graph.nodes, graph.opset, {"a": a, "b": b, "y": wrong}, None, tol)
    assert got["departing"] == ["add"] and len(calls) == 1
