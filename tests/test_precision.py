"""Reduced-precision emulation (engine/precision.py) against an independent reference, and
the search for the nodes that must stay FP32 (engine/precision_search.py).

The reference: onnxruntime running the model with explicit Cast-to-FP16/BF16-and-back
around every float input and output of the reduced nodes (``with_explicit_casts``). Each
node then computes in FP32 in onnxruntime's own kernels, so nothing in onnxruntime can
skip a rounding, and the rounding is onnxruntime's Cast, not ours.
"""
from __future__ import annotations

from partition import select

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.precision import PrecisionError, PrecisionRunner, round_bf16, round_fp16
from engine.precision_export import (mark_pins, pinned_nodes, polygraphy_flags, trtexec_flags,
                                     with_explicit_casts)
from engine.precision_report import PrecisionRequest, groups_for, investigate
from engine.precision_search import Group, ddmin, search
from engine.tolerance import Tolerance
from partition.onnx_io import load_model
from sample_models.builders_fp16 import build_fp16_trouble_transformer, fp16_trouble_inputs

TOL = Tolerance(1e-2, 1e-2)


@pytest.fixture(scope="module")
def transformer(tmp_path_factory):
    model = build_fp16_trouble_transformer()
    path = tmp_path_factory.mktemp("prec") / "trouble.onnx"
    onnx.save(model, path)
    return model, load_model(str(path))


def _ort(model: onnx.ModelProto, feeds) -> dict[str, np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def _cast_model(target: str) -> onnx.ModelProto:
    to = TensorProto.FLOAT16 if target == "fp16" else TensorProto.BFLOAT16
    nodes = [helper.make_node("Cast", ["x"], ["low"], to=to), helper.make_node("Cast", ["low"], ["y"], to=1)]
    g = helper.make_graph(nodes, "cast", [helper.make_tensor_value_info("x", 1, [None])],
                          [helper.make_tensor_value_info("y", 1, [None])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("target,rounder", [("fp16", round_fp16), ("bf16", round_bf16)])
def test_rounding_equals_onnxruntime_cast(target, rounder, rng):
    x = np.concatenate([rng.standard_normal(2000) * 10.0 ** rng.integers(-9, 9, 2000),
                        [65504.0, 65519.0, 65520.0, 1e5, -1e5, 2.0 ** -25, 2.0 ** -24, 3e-8, 0.0,
                         np.inf, -np.inf, 3.39e38, 3.4e38, 1e-40]]).astype(np.float32)
    ours = rounder(np, x)
    ref = _ort(_cast_model(target), {"x": x})["y"]
    np.testing.assert_array_equal(ours, ref)
    if target == "fp16":   # the FP16 edges: 65519 rounds down, 65520 overflows, 2^-25 flushes
        assert ours[2001] == 65504.0 and np.isinf(ours[2002]) and ours[2005] == 0.0


@pytest.mark.parametrize("target", ["fp16", "bf16"])
def test_emulation_matches_explicit_casts_in_onnxruntime(transformer, target, rng):
    model, graph = transformer
    feeds = fp16_trouble_inputs(seed=int(rng.integers(1 << 30)), outlier=float(rng.uniform(300, 1500)))
    with PrecisionRunner(graph, target) as runner:
        reduced = [n for n in runner.candidates if rng.random() < 0.7]
        ours = runner.run(feeds, reduced)[0]["output"]
    ref = _ort(with_explicit_casts(model, reduced, target), feeds)["output"]
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(ref))
    np.testing.assert_array_equal(np.isinf(ours), np.isinf(ref))
    finite = np.isfinite(ref)
    np.testing.assert_allclose(ours[finite], ref[finite], rtol=1e-2, atol=1e-2)


def test_emulation_matches_explicit_casts_on_a_cnn(rng):
    model = onnx.load("sample_models/resnet_small.onnx")
    graph = load_model("sample_models/resnet_small.onnx")
    x = (rng.standard_normal((1, 3, 32, 32)) * 50).astype(np.float32)
    feeds = {graph.inputs[0]: x}
    with PrecisionRunner(graph, "fp16") as runner:
        ours = next(iter(runner.run(feeds, runner.candidates)[0].values()))
        fp32 = next(iter(runner.run(feeds, ())[0].values()))
    ref = next(iter(_ort(with_explicit_casts(model, [n.name for n in model.graph.node], "fp16"),
                         feeds).values()))
    np.testing.assert_allclose(ours, ref, rtol=2e-3, atol=2e-3 * float(np.abs(ref).max()))
    assert not np.array_equal(ours, fp32), "the FP16 run must differ from FP32 somewhere"


def test_overflow_counts_name_the_attention_logits(transformer):
    _, graph = transformer
    with PrecisionRunner(graph, "fp16") as runner:
        _, counts = runner.run(fp16_trouble_inputs(), runner.candidates, stats=True)
        _, quiet = runner.run(fp16_trouble_inputs(outlier=1.0), runner.candidates, stats=True)
    assert counts["attn/scores"].overflow > 0
    assert all(c.overflow == 0 for c in quiet.values())


def test_a_mask_of_float32_min_is_an_infinity_not_an_overflow(tmp_path, rng):
    """transformers writes torch.finfo(float32).min as a mask's minus infinity: in FP16 it is
    -inf and the Softmax gives the same zeros, so neither the mask Add nor the Softmax is an
    overflow; a real activation past 65504 still is."""
    big = numpy_helper.from_array(np.array([0, 0, 0, np.finfo(np.float32).min], np.float32), "mask")
    scale = numpy_helper.from_array(np.array(5.0e4, np.float32), "scale")
    nodes = [helper.make_node("Add", ["x", "mask"], ["s"], name="mask_add"),
             helper.make_node("Softmax", ["s"], ["p"], name="softmax", axis=-1),
             helper.make_node("Mul", ["x", "scale"], ["big"], name="too_big")]
    g = helper.make_graph(nodes, "masked", [helper.make_tensor_value_info("x", 1, [2, 4])],
                          [helper.make_tensor_value_info("p", 1, [2, 4]),
                           helper.make_tensor_value_info("big", 1, [2, 4])], [big, scale])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "masked.onnx"
    onnx.save(model, path)
    graph = load_model(str(path))
    feeds = {"x": (rng.uniform(2.0, 3.0, (2, 4))).astype(np.float32)}
    with PrecisionRunner(graph, "fp16") as runner:
        out, counts = runner.run(feeds, runner.candidates, stats=True)
    assert counts["mask_add"].overflow == 0 and counts["softmax"].overflow == 0
    assert counts["too_big"].overflow == 8                  # 5e4 x 2..3: past FP16's 65504
    want = _ort(model, feeds)["p"]
    np.testing.assert_allclose(out["p"], want, atol=2e-3)   # the masked column is 0 either way
    assert not out["p"][:, 3].any()


def test_an_answer_on_outputs_below_atol_says_it_proves_little(tmp_path, rng):
    """An untrained MobileViT's outputs are ~1e-41: "no pins needed" held for any run. The
    report now says so; the same graph with outputs of real size does not."""
    for scale, weak in ((1e-6, True), (1.0, False)):
        s = numpy_helper.from_array(np.array(scale, np.float32), "s")
        nodes = [helper.make_node("Mul", ["x", "s"], ["m"], name="scale"),
                 helper.make_node("Tanh", ["m"], ["y"], name="tanh")]
        g = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", 1, [4, 8])],
                              [helper.make_tensor_value_info("y", 1, [4, 8])], [s])
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        path = tmp_path / f"tiny_{weak}.onnx"
        onnx.save(model, path)
        feeds = {"x": rng.standard_normal((4, 8)).astype(np.float32)}
        report = investigate(load_model(str(path)), feeds, PrecisionRequest(selection=None))
        said = [n for n in report["notes"] if "proves little" in n]
        assert bool(said) == weak and report["baseline"]["weak"] == (["y"] if weak else []), report["notes"]
        if weak:
            assert report["no_pins_needed"]   # any run passes: the answer the note qualifies


def test_ddmin_finds_a_one_minimal_set_deterministically():
    items = tuple("abcdefghij")
    seen: list[tuple[str, ...]] = []

    def passes(sub: tuple[str, ...]) -> bool:
        seen.append(sub)
        return {"c", "h"} <= set(sub)
    assert ddmin(items, passes) == ("c", "h")
    first = list(seen)
    seen.clear()
    assert ddmin(items, passes) == ("c", "h") and seen == first


def test_search_pins_bring_the_output_back_and_onnxruntime_agrees(transformer):
    model, graph = transformer
    feeds = fp16_trouble_inputs()
    with PrecisionRunner(graph, "fp16") as runner:
        result = search(runner, feeds, TOL, [Group("all", tuple(runner.candidates))], max_runs=200)
        candidates = list(runner.candidates)
    assert not result.no_pins_needed and not result.capped
    assert result.baseline.match is False and result.verified.match is True
    assert "attn/scores" in result.pins and "attn/ln/pow" in result.pins
    assert len(result.pins) < len(candidates) // 3
    for pin in result.pins:   # 1-minimal: every pin alone (all else FP32) breaks the output
        assert result.alone[pin]["match"] is False
    # Independent check: onnxruntime, FP16 rounding by explicit Casts, exactly those pins.
    reduced = [n for n in candidates if n not in set(result.pins)]
    fp32 = _ort(model, feeds)["output"]
    pinned = _ort(with_explicit_casts(model, reduced, "fp16"), feeds)["output"]
    unpinned = _ort(with_explicit_casts(model, candidates, "fp16"), feeds)["output"]
    assert np.allclose(pinned, fp32, atol=TOL.atol, rtol=TOL.rtol)
    assert not np.allclose(unpinned, fp32, atol=TOL.atol, rtol=TOL.rtol)


def test_no_trouble_means_no_pins(transformer):
    _, graph = transformer
    report = investigate(graph, fp16_trouble_inputs(outlier=1.0), PrecisionRequest(atol=1e-2, rtol=1e-2))
    assert report["no_pins_needed"] and report["pins"] == [] and report["runs"] == 2
    assert "no pins needed" in report["summary"]


def test_cap_stops_the_search_with_a_passing_set(transformer):
    _, graph = transformer
    with PrecisionRunner(graph, "fp16") as runner:
        result = search(runner, fp16_trouble_inputs(), TOL, [Group("all", tuple(runner.candidates))],
                        max_runs=3)
    assert result.capped and result.search_runs == 3
    assert result.verified.match   # what it holds still passes, just not minimal


def test_investigate_reports_suspects_and_growth(transformer):
    _, graph = transformer
    report = investigate(graph, fp16_trouble_inputs(), PrecisionRequest(atol=1e-2, rtol=1e-2))
    rows = {r["node"]: r for r in report["nodes"]}
    assert rows["attn/scores"]["overflow"] > 0 and rows["attn/scores"]["growth"] is None
    assert rows["attn/ln/pow"]["max_abs"] > 65504
    # after the logits' NaN the full run cannot see the Pow's own overflow; alone it shows
    assert rows["attn/ln/pow"]["growth"] == 0.0 and rows["attn/ln/pow"]["alone_nonfinite"]
    assert rows["attn/ln/pow"]["overflow"] > 0
    assert max(r["alone_growth"] or 0 for r in report["nodes"]) < 1   # the rest: roundings
    suspects = {s["node"]: s["why"] for s in report["suspects"]}
    assert "attention logits" in suspects["attn/scores"] and "Pow" in suspects["attn/ln/pow"]
    assert report["trtexec"].startswith("--fp16 --precisionConstraints=obey --layerPrecisions=")
    assert all(f"{p}:fp32" in report["trtexec"] for p in report["pins"])


def _qdq_model(bad_scale: float) -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((16, 16)) * 0.5).astype(np.float32)
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(np.float32(4 / 127), "s1"),
             numpy_helper.from_array(np.int8(0), "z"), numpy_helper.from_array(np.float32(bad_scale), "s2")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s1", "z"], ["xq"], name="q_in"),
             helper.make_node("DequantizeLinear", ["xq", "s1", "z"], ["xd"], name="dq_in"),
             helper.make_node("MatMul", ["xd", "W"], ["h"], name="matmul"),
             helper.make_node("QuantizeLinear", ["h", "s2", "z"], ["hq"], name="q_h"),
             helper.make_node("DequantizeLinear", ["hq", "s2", "z"], ["hd"], name="dq_h"),
             helper.make_node("Relu", ["hd"], ["y"], name="relu")]
    g = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", 1, [1, 16])],
                          [helper.make_tensor_value_info("y", 1, [1, 16])], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_int8_pins_the_saturating_quantize(tmp_path, rng):
    path = tmp_path / "qdq.onnx"
    onnx.save(_qdq_model(bad_scale=0.002), path)   # h reaches ~5: saturates at 0.254
    graph = load_model(str(path))
    feeds = {"x": rng.uniform(-2, 2, (1, 16)).astype(np.float32)}
    report = investigate(graph, feeds, PrecisionRequest(target="int8", atol=0.05, rtol=0.05))
    assert report["pins"] == ["q_h"] and report["verified"]["match"]
    assert {s["node"] for s in report["suspects"]} >= {"q_h"}
    # the INT8 run itself is the model as written: onnxruntime runs the same Q/DQ
    with PrecisionRunner(graph, "int8") as runner:
        ours = runner.run(feeds, runner.candidates)[0]["y"]
    np.testing.assert_allclose(ours, _ort(onnx.load(path), feeds)["y"], rtol=1e-5, atol=1e-6)


def test_int8_without_qdq_is_a_clear_error(transformer):
    _, graph = transformer
    with pytest.raises(PrecisionError, match="no QuantizeLinear nodes"):
        PrecisionRunner(graph, "int8")


def test_bad_requests_are_named():
    with pytest.raises(PrecisionError, match="--target 'fp8'"):
        PrecisionRequest(target="fp8")
    with pytest.raises(PrecisionError, match="--max-runs 0"):
        PrecisionRequest(max_runs=0)
    with pytest.raises(PrecisionError, match="atol"):
        PrecisionRequest(atol=-1.0)


def test_exports(transformer):
    model, _ = transformer
    marked = mark_pins(model, ["attn/scores", "attn/ln/pow"], "fp16")
    assert pinned_nodes(marked) == ["attn/scores", "attn/ln/pow"]
    assert pinned_nodes(model) == []     # the input model is left alone
    meta = {p.key: p.value for p in marked.metadata_props}
    assert '"attn/scores"' in meta["sglens.precision.fp32_nodes"]
    with pytest.raises(PrecisionError, match="not top-level nodes"):
        mark_pins(model, ["nope"], "fp16")
    assert trtexec_flags([], "fp16") == "--fp16"
    assert polygraphy_flags(["a b"], "bf16") == \
        "--bf16 --precision-constraints obey --layer-precisions 'a b:float32'"
    with pytest.raises(PrecisionError, match="','"):
        trtexec_flags(["a,b"], "fp16")


def test_other_converters_behave_as_documented(transformer):
    """docs/precision.md's table: onnxruntime's CPU provider hides the FP16 overflow that the
    explicit-cast model (and our emulation) shows, and its converter rounds between two
    blocked nodes. If this fails, onnxruntime changed: update the docs."""
    f16 = pytest.importorskip("onnxruntime.transformers.float16")
    model, _ = transformer
    feeds = fp16_trouble_inputs()
    fp32 = _ort(model, feeds)["output"]
    converted = f16.convert_float_to_float16(model, keep_io_types=True)
    hidden = _ort(converted, feeds)["output"]
    explicit = _ort(with_explicit_casts(model, [n.name for n in model.graph.node], "fp16"), feeds)["output"]
    assert np.allclose(hidden, fp32, atol=1e-2, rtol=1e-2)        # the overflow is hidden
    assert not np.allclose(explicit, fp32, atol=1e-2, rtol=1e-2)  # rounding at every node shows it
    blocked = f16.convert_float_to_float16(model, keep_io_types=True,
                                           node_block_list=["attn/ln/pow", "attn/ln/var"])
    var = next(n for n in blocked.graph.node if n.name == "attn/ln/var")
    producer = {o: n for n in blocked.graph.node for o in n.output}
    back = producer[var.input[0]]
    assert back.op_type == "Cast" and producer[back.input[0]].op_type == "Cast"   # fp32 -> fp16 -> fp32


def _two_layers(tmp_path):
    model = build_fp16_trouble_transformer(layers=2)
    path = tmp_path / "two.onnx"
    onnx.save(model, path)
    graph = load_model(str(path))
    ops = sorted({n.op_type for n in graph.nodes} - {"Softmax", "Relu"})
    return model, graph, select("default", ops=ops)


def _reduced_without_pins(graph, selection, pins) -> list[str]:
    with PrecisionRunner(graph, "fp16") as runner:
        groups, _ = groups_for(graph, list(runner.candidates), selection, "subgraphs")
    return [n for g in groups for n in g.nodes if n not in set(pins)]


def test_subgraphs_first_then_nodes(tmp_path):
    """Two layers cut into several subgraphs (the default backend without Softmax and Relu),
    searched without the analysis (so without suspects): the first stage blames only
    subgraphs of the first layer, whose input has the outlier; every pin lies in a guilty
    subgraph; onnxruntime agrees the pins suffice."""
    model, graph, selection = _two_layers(tmp_path)
    feeds = fp16_trouble_inputs()
    report = investigate(graph, feeds, PrecisionRequest(atol=1e-2, rtol=1e-2, selection=selection,
                                                        analyse=False))
    assert len(report["groups"]) >= 3
    guilty = [g for g in report["groups"] if g["guilty"]]
    assert guilty and len(guilty) < len(report["groups"])
    assert not any(p.startswith("layer1/") for p in report["pins"])
    assert report["verified"]["match"] and report["history"][1]["stage"] == "subgraphs"
    pinned = _ort(with_explicit_casts(model, _reduced_without_pins(graph, selection, report["pins"]),
                                      "fp16"), feeds)["output"]
    assert np.allclose(pinned, _ort(model, feeds)["output"], atol=1e-2, rtol=1e-2)


def test_the_analysis_suspects_start_the_search_when_they_suffice(tmp_path):
    """With the analysis, pinning its suspects (overflow, NaN, a decade of error alone) is
    tried first, in one run; it passes here, so ddmin narrows them instead of the whole
    model: fewer runs for a 1-minimal answer that onnxruntime confirms."""
    model, graph, selection = _two_layers(tmp_path)
    feeds = fp16_trouble_inputs()
    request = dict(atol=1e-2, rtol=1e-2, selection=selection)
    guided = investigate(graph, feeds, PrecisionRequest(**request))
    blind = investigate(graph, feeds, PrecisionRequest(**request, analyse=False))
    suspects = {s["node"] for s in guided["suspects"]}
    assert guided["history"][1]["stage"] == "suspects" and guided["history"][1]["match"]
    assert set(guided["pins"]) <= suspects | {r["node"] for r in guided["nodes"] if r["alone_growth"]
                                              and r["alone_growth"] > 1}
    assert guided["verified"]["match"] and not guided["capped"]
    assert guided["search_runs"] < blind["search_runs"], (guided["search_runs"], blind["search_runs"])
    assert all(not guided["alone"][p]["match"] for p in guided["pins"])   # each pin needed alone
    pinned = _ort(with_explicit_casts(model, _reduced_without_pins(graph, selection, guided["pins"]),
                                      "fp16"), feeds)["output"]
    assert np.allclose(pinned, _ort(model, feeds)["output"], atol=1e-2, rtol=1e-2)


def test_suspects_that_do_not_suffice_cost_one_run_and_the_search_goes_on(transformer):
    """A wrong lead (here the output node only) fails in one run; ddmin then runs as before."""
    _, graph = transformer
    with PrecisionRunner(graph, "fp16") as runner:
        group = [Group("all", tuple(runner.candidates))]
        plain = search(runner, fp16_trouble_inputs(), TOL, group)
        led = search(runner, fp16_trouble_inputs(), TOL, group, suspects=[runner.candidates[-1]])
    assert led.history[1]["stage"] == "suspects" and not led.history[1]["match"]
    assert led.pins == plain.pins and led.search_runs == plain.search_runs + 1


def test_batchnorm_rounds_its_folded_scale_not_its_variance(tmp_path, rng):
    """A running variance beyond 65504 is fine in TensorRT (folded into scale = gamma /
    sqrt(var + eps) in FP32 first); rounding the variance itself would make it inf."""
    c = 4
    inits = [numpy_helper.from_array(np.ones(c, np.float32), "g"), numpy_helper.from_array(np.zeros(c, np.float32), "b"),
             numpy_helper.from_array(np.zeros(c, np.float32), "m"),
             numpy_helper.from_array(np.array([1e5, 2e5, 1.0, 4.0], np.float32), "v")]
    g = helper.make_graph([helper.make_node("BatchNormalization", ["x", "g", "b", "m", "v"], ["y"], name="bn")],
                          "bn", [helper.make_tensor_value_info("x", 1, [1, c, 3, 3])],
                          [helper.make_tensor_value_info("y", 1, [1, c, 3, 3])], initializer=inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "bn.onnx")
    graph = load_model(str(tmp_path / "bn.onnx"))
    x = (rng.standard_normal((1, c, 3, 3)) * 300).astype(np.float32)
    with PrecisionRunner(graph, "fp16") as runner:
        ours, counts = runner.run({"x": x}, ["bn"], stats=True)
    ref = _ort(with_explicit_casts(model, ["bn"], "fp16"), {"x": x})["y"]
    fp32 = _ort(model, {"x": x})["y"]
    assert counts["bn"].overflow == 0 and np.isfinite(ours["y"]).all()
    np.testing.assert_allclose(ours["y"], ref, rtol=1e-3, atol=1e-6)
    np.testing.assert_allclose(ours["y"], fp32, rtol=2e-3, atol=1e-3)


def test_scope_all_adds_the_nodes_outside_subgraphs(transformer):
    from engine.precision_report import groups_for
    _, graph = transformer
    names = [n.name for n in graph.nodes]
    ops = sorted({n.op_type for n in graph.nodes} - {"Softmax"})
    inside, notes = groups_for(graph, names, select("default", ops=ops), "subgraphs")
    everything, _ = groups_for(graph, names, select("default", ops=ops), "all")
    assert "attn/softmax" not in {n for g in inside for n in g.nodes}
    assert everything[-1].name.startswith("outside subgraphs") and "attn/softmax" in everything[-1].nodes
    assert any("stay FP32" in n for n in notes)


def test_a_real_cnn_from_the_rapidocr_wheel_needs_no_pins(tmp_path, rng):
    """The PP-OCR direction classifier shipped in rapidocr_onnxruntime 1.4.4 (a real MobileNet
    CNN, 566 nodes): FP16 within 1e-2 on normalised-image inputs. The wheel is fetched by
    ``python bench/precision.py --rapidocr`` into ~/.cache/sglens/wheels."""
    import zipfile
    from pathlib import Path
    wheels = sorted((Path.home() / ".cache" / "sglens" / "wheels").glob("rapidocr_onnxruntime-1.4.4-*.whl"))
    if not wheels:
        pytest.skip("the rapidocr_onnxruntime 1.4.4 wheel is not cached; python bench/precision.py --rapidocr fetches it")
    with zipfile.ZipFile(wheels[0]) as z:
        (tmp_path / "cls.onnx").write_bytes(z.read("rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx"))
    graph = load_model(str(tmp_path / "cls.onnx"))
    x = rng.uniform(-1, 1, (1, 3, 48, 192)).astype(np.float32)
    report = investigate(graph, {graph.inputs[0]: x}, PrecisionRequest(atol=1e-2, rtol=1e-2))
    assert report["no_pins_needed"] and report["candidates"] > 200
    model = onnx.load(tmp_path / "cls.onnx")
    reduced = [r["node"] for r in report["nodes"] if r["reduced"]]
    ref = _ort(with_explicit_casts(model, reduced, "fp16"), {graph.inputs[0]: x})
    with PrecisionRunner(graph, "fp16") as runner:
        ours = runner.run({graph.inputs[0]: x}, reduced)[0]
    # 566 nodes deep, one FP16 ulp flipped by a different FP32 kernel travels to the output:
    # the two emulations agree to the size of FP16's own error here (up to ~5e-3), not bitwise
    for name, value in ref.items():
        np.testing.assert_allclose(ours[name], value, rtol=0, atol=1e-2)


def test_a_backend_that_takes_nothing_says_so(transformer):
    _, graph = transformer
    report = investigate(graph, fp16_trouble_inputs(), PrecisionRequest(
        selection=select("default", ops=["Nope"])))
    assert report["candidates"] == 0 and report["no_pins_needed"]
    assert any("no node runs in reduced precision" in n for n in report["notes"])


def _rounding_chain(tmp_path, rng, steps: int = 16):
    """x -> (Mul by ~1, Add ~0.1) x steps: every node rounds once in FP16, none more."""
    nodes, inits, prev = [], [], "x"
    for i in range(steps):
        inits += [numpy_helper.from_array((1 + 0.01 * rng.standard_normal(64)).astype(np.float32), f"w{i}"),
                  numpy_helper.from_array((0.1 * rng.standard_normal(64)).astype(np.float32), f"b{i}")]
        nodes += [helper.make_node("Mul", [prev, f"w{i}"], [f"m{i}"], name=f"mul{i}"),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"], name=f"add{i}")]
        prev = f"a{i}"
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", 1, [1, 64])],
                          [helper.make_tensor_value_info(prev, 1, [1, 64])], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path / "chain.onnx"
    onnx.save(m, path)
    return load_model(str(path))


def test_a_capped_search_with_no_culprit_says_the_error_is_spread_and_what_tolerance_passes(tmp_path, rng):
    """No node adds a decade of error alone, yet together they miss a tight tolerance: the
    capped search's many pins are not the answer. The note says so and names a tolerance;
    that tolerance, tried, needs no pins."""
    graph = _rounding_chain(tmp_path, rng)
    feeds = {"x": rng.uniform(1, 4, (1, 64)).astype(np.float32)}
    report = investigate(graph, feeds, PrecisionRequest(atol=1e-5, rtol=0.0, max_runs=4))
    assert report["capped"] and not report["no_pins_needed"]
    note = next(n for n in report["notes"] if n.startswith("no small set of pins"))
    atol = float(note.split("(atol ")[1].split(")")[0])
    assert atol >= report["baseline"]["max_abs"]
    again = investigate(graph, feeds, PrecisionRequest(atol=atol, rtol=0.0, max_runs=4))
    assert again["no_pins_needed"]


def test_a_capped_search_with_a_culprit_gets_no_spread_note(transformer):
    _, graph = transformer
    report = investigate(graph, fp16_trouble_inputs(), PrecisionRequest(atol=1e-2, rtol=1e-2, max_runs=1))
    assert not any(n.startswith("no small set of pins") for n in report["notes"])


def test_nodes_on_integers_and_booleans_only_are_not_candidates(tmp_path):
    """Nothing to round: position arithmetic and masks built from integers (GPT-2's
    LessOrEqual, And, Cast to int) stay out of the search; a comparison of floats, and a
    Cast of a mask to float, stay in (their float input or output rounds)."""
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Gather", ["s", "one"], ["n"], name="gather_dim", axis=0),
             helper.make_node("Equal", ["n", "four"], ["is4"], name="int_equal"),
             helper.make_node("Not", ["is4"], ["not4"], name="bool_not"),
             helper.make_node("Less", ["x", "zero"], ["neg"], name="float_less"),
             helper.make_node("Or", ["neg", "not4"], ["mask"], name="bool_or"),
             helper.make_node("Cast", ["mask"], ["maskf"], name="mask_to_float", to=TensorProto.FLOAT),
             helper.make_node("Mul", ["x", "maskf"], ["y"], name="mul")]
    inits = [numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array(4, np.int64), "four"),
             numpy_helper.from_array(np.array(0, np.float32), "zero")]
    g = helper.make_graph(nodes, "mask", [helper.make_tensor_value_info("x", 1, [1, 4])],
                          [helper.make_tensor_value_info("y", 1, [1, 4])], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path / "mask.onnx"
    onnx.save(m, path)
    with PrecisionRunner(load_model(str(path)), "fp16") as runner:
        assert runner.candidates == ["float_less", "mask_to_float", "mul"]


@pytest.mark.parametrize("target", ["fp16", "bf16"])
def test_values_rounded_once_are_not_rounded_again_and_nothing_changes(transformer, target, rng, monkeypatch):
    """A reduced node takes an input a reduced producer rounded as it is, and data movement of
    rounded values is not rounded again (whisper-tiny's 13.5M-element attention tensors were
    rounded by each producer and each consumer: 8 -> 4 s a search run). Rounding is idempotent,
    so every output is bit for bit what rounding at every input and output gives."""
    import engine.precision as precision
    model, graph = transformer
    resnet = load_model("sample_models/resnet_small.onnx")
    cases = [(graph, fp16_trouble_inputs(seed=int(rng.integers(1 << 30)))),
             (resnet, {resnet.inputs[0]: (rng.standard_normal((1, 3, 32, 32)) * 50).astype(np.float32)})]
    for g, feeds in cases:
        with PrecisionRunner(g, target) as runner:
            reduced = [n for n in runner.candidates if rng.random() < 0.7]
            fast = runner.run(feeds, reduced)[0]
            everything = runner.run(feeds, runner.candidates)[0]
        with monkeypatch.context() as m:   # every input and output rounded, as before
            m.setattr(precision._State, "is_rounded", lambda self, v: False)
            m.setattr(precision, "KEEPS_ROUNDED", frozenset())
            with PrecisionRunner(g, target) as runner:
                slow = runner.run(feeds, reduced)[0]
                slow_all = runner.run(feeds, runner.candidates)[0]
        for name in slow:
            np.testing.assert_array_equal(fast[name], slow[name])
            np.testing.assert_array_equal(everything[name], slow_all[name])


def test_a_pads_constant_is_rounded_even_when_its_input_was(tmp_path):
    """Pad writes its constant, which FP16 need not represent (0.1; an attribute before opset 11,
    so no input rounding reaches it): its output is rounded though its input came rounded from a
    reduced Relu."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Pad", ["r"], ["y"], name="pad", pads=[1, 1], value=0.1)]
    g = helper.make_graph(nodes, "pad", [helper.make_tensor_value_info("x", 1, [4])],
                          [helper.make_tensor_value_info("y", 1, [6])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 10)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "pad.onnx")
    graph = load_model(str(tmp_path / "pad.onnx"))
    with PrecisionRunner(graph, "fp16") as runner:
        y = runner.run({"x": np.array([1.0, 2.0, 3.0, 4.0], np.float32)}, ["relu", "pad"])[0]["y"]
    assert y[0] == y[-1] == np.float32(np.float16(0.1)) != np.float32(0.1)
