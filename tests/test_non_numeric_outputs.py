"""Outputs that are not numbers. A sequence of maps: onnxruntime's own example
``logreg_iris.onnx`` (shipped in its wheel: LinearClassifier -> Normalizer -> ZipMap, from
scikit-learn) -- `sglens compare` crashed on it (a dict's ``get`` taken for cupy's), `sglens
run` could not print or save it, and a partitioned run's maps came back as an object array that
never matched. Strings: the comparison crashed converting them to float, and our Cast to
string wrote nine significant digits where onnxruntime writes eight."""

from __future__ import annotations

import io
import json
import time

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnxruntime.datasets import get_example

from app import create_app
from engine.compare import errors
from sglens.cli import main

IRIS = get_example("logreg_iris.onnx")


def test_compare_judges_the_maps_key_by_key(capsys):
    assert main(["compare", IRIS, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True, report["verdict"]
    probabilities = report["outputs"]["probabilities"]["engine"]
    assert probabilities["match"] and probabilities["shape"] == [9]   # 3 maps of 3 classes, end to end


def test_maps_with_other_keys_or_values_differ():
    ref = [{0: 0.2, 1: 0.8}, {0: 0.5, 1: 0.5}]
    assert errors([dict(m) for m in ref], ref)["match"]
    assert not errors([{0: 0.2, 2: 0.8}, {0: 0.5, 1: 0.5}], ref)["match"]        # a key differs
    assert not errors([{0: 0.2, 1: 0.8}], ref)["match"]                          # one map short
    got = errors([{0: 0.2, 1: 0.9}, {0: 0.5, 1: 0.5}], ref)
    assert not got["match"] and got["max_abs"] == pytest.approx(0.1)


def test_run_prints_reports_and_saves_the_maps(tmp_path, capsys):
    x = np.random.default_rng(0).standard_normal((3, 2)).astype(np.float32)
    np.savez(tmp_path / "in.npz", float_input=x)
    out = tmp_path / "out.npz"
    assert main(["run", IRIS, "--inputs", str(tmp_path / "in.npz"), "--save-outputs", str(out)]) == 0
    assert "probabilities: sequence of 3 map(s), keys [0, 1, 2]" in capsys.readouterr().out
    assert main(["run", IRIS, "--inputs", str(tmp_path / "in.npz"), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert set(printed["outputs"]["probabilities"]["sequence"][0]["map"]) == {"0", "1", "2"}
    want = ort.InferenceSession(IRIS, providers=["CPUExecutionProvider"]).run(None, {"float_input": x})[1]
    with np.load(out) as saved:
        for i, m in enumerate(want):
            assert list(saved[f"probabilities[{i}].keys"]) == sorted(m)
            np.testing.assert_allclose(saved[f"probabilities[{i}].values"], [m[k] for k in sorted(m)], rtol=1e-6)


def test_a_partitioned_web_run_matches_on_the_maps(tmp_path):
    client = create_app({"SGLENS_INSTANCE": str(tmp_path / "inst")}).test_client()
    with open(IRIS, "rb") as f:
        up = client.post("/api/models", data={"file": (io.BytesIO(f.read()), "logreg_iris.onnx")},
                         content_type="multipart/form-data")
    rid = client.post("/api/runs", json={"model": up.get_json()["id"], "backend": "default",
                                         "ops": ["ZipMap", "Normalizer"]}).get_json()["id"]
    end = time.time() + 60
    while (run := client.get(f"/api/runs/{rid}").get_json())["status"] not in ("done", "failed"):
        assert time.time() < end
        time.sleep(0.05)
    assert run["status"] == "done", run["error"]
    per = run["result"]["comparison"]["outputs"]["probabilities"]
    assert per["engine"]["match"] and per["partitioned"]["match"], per
    assert run["result"]["comparison"]["ok"] is True


def test_strings_are_compared_for_equality():
    same = errors([np.array(["cat", "dog"])], [np.array(["cat", "dog"])])
    assert same["match"] and same["mismatched"] == 0
    other = errors(np.array(["cat", "dog"], dtype=object), np.array(["cat", "cow"], dtype=object))
    assert not other["match"] and other["mismatched"] == 1


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_cast_to_string_writes_what_onnxruntime_writes(dtype, tmp_path, capsys):
    tt = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = helper.make_graph([helper.make_node("Cast", ["x"], ["s"], to=TensorProto.STRING)], "g",
                              [helper.make_tensor_value_info("x", tt, [8])],
                              [helper.make_tensor_value_info("s", TensorProto.STRING, [8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path = tmp_path / "cast.onnx"
    path.write_bytes(model.SerializeToString())
    x = np.array([np.pi, -0.3, 1e-7, 123456.78, 2.0, np.inf, -np.inf, np.nan], dtype)
    np.savez(tmp_path / "in.npz", x=x)
    assert main(["compare", str(path), "--inputs", str(tmp_path / "in.npz"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True, report["outputs"]
    assert report["outputs"]["s"]["engine"]["mismatched"] == 0


def test_a_maps_keys_are_saved_in_their_own_order(tmp_path):
    """Twelve classes: keys 0..11 in number order (sorted as text, 10 came before 2)."""
    from engine.inputs import save_outputs
    probabilities = [{k: float(k) / 100 for k in reversed(range(12))}]
    save_outputs(tmp_path / "o.npz", {"probabilities": probabilities, "label": np.array([3])})
    with np.load(tmp_path / "o.npz") as saved:
        assert list(saved["probabilities[0].keys"]) == list(range(12))
        np.testing.assert_allclose(saved["probabilities[0].values"], np.arange(12) / 100)
        assert list(saved["label"]) == [3]
