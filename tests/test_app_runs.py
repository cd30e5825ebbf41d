"""Run jobs: background comparison with progress, cancel, failures, runs kept in SQLite."""

from __future__ import annotations

import json
import sqlite3
import threading
import time

import pytest

import app.jobs as jobs
from app import create_app
from _web_kernels import find_kernel

OPS = {"backend": "default", "ops": ["Relu", "Sigmoid", "Add"]}


@pytest.fixture
def app(tmp_path):
    return create_app({"SGLENS_SAMPLES": True, "SGLENS_INSTANCE": str(tmp_path / "inst"),
                       "SGLENS_RUN_KERNELS": find_kernel, "SGLENS_RUN_REPEAT": 1})


def _wait(client, rid, timeout=60):
    end = time.time() + timeout
    seen = []
    while time.time() < end:
        run = client.get(f"/api/runs/{rid}").get_json()
        seen.append((run["status"], run.get("progress")))
        if run["status"] in ("done", "failed", "cancelled"):
            return run, seen
        time.sleep(0.05)
    raise AssertionError(f"run {rid} did not finish: {seen[-3:]}")


def test_run_compares_and_is_stored(app, tmp_path):
    c = app.test_client()
    resp = c.post("/api/runs", json={"model": "sample-trt_cycle", "device": "cpu", "executor": "auto", **OPS})
    assert resp.status_code == 202
    rid = resp.get_json()["id"]
    run, seen = _wait(c, rid)
    assert run["status"] == "done", run["error"]
    r = run["result"]
    assert r["comparison"]["ok"] is True
    assert set(r["comparison"]["outputs"]["output"]) == {"engine", "partitioned"}
    assert [s["node"] for s in r["subgraph_times"]] == ["default_0", "default_1"]
    assert all(s["seconds"] > 0 for s in r["subgraph_times"])
    assert {t["name"] for t in r["timeline"]} >= {"default_0", "D", "default_1"}
    mem = r["memory"]
    assert mem["peak_bytes"] == max(mem["bytes"]) > 0 and len(mem["t_us"]) == len(mem["bytes"])
    assert r["partition"]["cycles"][0]["path"] == ["A", "D", "C"]
    assert set(r["original_node_seconds"]) == {"A", "B", "C", "D"}     # the "time" colouring
    trace = c.get(f"/api/runs/{rid}/trace.json")
    events = json.loads(trace.data)["traceEvents"]
    assert any(e.get("ph") == "X" and e["name"] == "default_0" for e in events)
    onnx_bytes = c.get(f"/api/runs/{rid}/partitioned.onnx")
    assert onnx_bytes.status_code == 200 and len(onnx_bytes.data) > 100
    listed = c.get("/api/runs?model=sample-trt_cycle").get_json()["runs"]
    assert [x["id"] for x in listed] == [rid]
    # kept in SQLite in the instance folder: a new app on the same folder sees it
    db = sqlite3.connect(str(tmp_path / "inst" / "runs.sqlite3"))
    assert db.execute("SELECT status FROM runs WHERE id = ?", (rid,)).fetchone() == ("done",)
    again = create_app({"SGLENS_INSTANCE": str(tmp_path / "inst")}).test_client()
    assert again.get(f"/api/runs/{rid}").get_json()["result"]["comparison"]["ok"] is True


def test_failing_run_is_reported_and_server_goes_on(app):
    c = app.test_client()
    rid = c.post("/api/runs", json={"model": "sample-trt_cycle", "executor": "tensorrt", **OPS}).get_json()["id"]
    run, _ = _wait(c, rid)
    assert run["status"] == "failed" and run["error"] and run["result"] is None
    assert c.get("/api/health").get_json() == {"ok": True}
    assert c.get(f"/api/runs/{rid}/trace.json").status_code == 404


def test_cancel_stops_a_run(app, monkeypatch):
    gate = threading.Event()
    real = jobs.JobManager._work

    def slow(self, job, *a, **kw):
        job.stage, job.message = "partition", "waiting"
        gate.wait(10)
        job.check()
        return real(self, job, *a, **kw)
    monkeypatch.setattr(jobs.JobManager, "_work", slow)
    c = app.test_client()
    rid = c.post("/api/runs", json={"model": "sample-trt_cycle", **OPS}).get_json()["id"]
    assert c.post(f"/api/runs/{rid}/cancel").status_code == 200
    gate.set()
    run, _ = _wait(c, rid)
    assert run["status"] == "cancelled"


def test_run_request_errors(app, monkeypatch):
    c = app.test_client()
    for body, status in (({"model": "sample-trt_cycle", "device": "tpu", **OPS}, 400),
                         ({"model": "sample-trt_cycle", "executor": "magic", **OPS}, 400),
                         ({"model": "nope", **OPS}, 404), ({**OPS}, 400),
                         ({"model": "sample-trt_cycle", "repeat": 0, **OPS}, 400)):
        resp = c.post("/api/runs", json=body)
        assert resp.status_code == status and "error" in resp.get_json(), body
    assert c.post("/api/runs/nope/cancel").status_code == 404
    assert c.get("/api/runs/nope").status_code == 404


def test_memory_series_marks_the_peak():
    from partition import load_model
    from sample_models.generate import build_all
    import numpy as np
    g = load_model(build_all()["trt_cycle.onnx"].SerializeToString())
    tl = [{"name": n, "start_us": 10.0 * i, "dur_us": 5.0} for i, n in enumerate(["A", "B", "D", "C"])]
    from engine.run import memory_series
    m = memory_series(g, tl, {"input": np.zeros((4, 4), np.float32)})
    # input (64 B) dies when A ends; a_out (64) lives until D ends; b_out (64) and d_out (4) until C
    assert m["t_us"] == [0.0, 5.0, 15.0, 25.0, 35.0]
    assert m["bytes"] == [64, 64, 128, 68, 0]
    assert m["peak_bytes"] == 128 and m["peak_t_us"] == 15.0


# ----------------------------------------------- issue 12: inputs, tolerance, bundles --
import io as _io
import subprocess as _subprocess
import sys as _sys
import zipfile as _zipfile
from pathlib import Path as _Path

import numpy as _np
import onnx as _onnx
import onnxruntime as _ort

from app.run_inputs import load as _load_inputs
from conftest import external_data_mlp
from partition.onnx_io import load_model as _load_model

SAMPLES = _Path(__file__).resolve().parent.parent / "sample_models"
CNN = {"model": "sample-cnn_dynamic", "backend": "default", "ops": ["Conv", "Relu"]}


@pytest.fixture
def real_app(tmp_path):
    """Our real engine kernels (no injected ones): the numbers are the engine's own."""
    return create_app({"SGLENS_SAMPLES": True, "SGLENS_INSTANCE": str(tmp_path / "inst"), "SGLENS_RUN_REPEAT": 3})


def test_inputs_form_is_prefilled_from_the_model(real_app):
    c = real_app.test_client()
    cnn = c.get("/api/models/sample-cnn_dynamic/inputs").get_json()
    (spec,) = cnn["inputs"]
    assert spec["name"] == "images" and spec["dtype"] == "FLOAT"
    assert spec["dim_names"] == ["batch", None, "height", "width"]
    assert spec["shape"] == [1, 3, 96, 128]                       # the model's own example shape
    assert cnn["tolerance"] == {"atol": 1e-4, "rtol": 1e-3} and "atol" not in cnn["rule"]
    tr = c.get("/api/models/sample-transformer_dynamic/inputs").get_json()["inputs"][0]
    assert tr["dtype"] == "INT64" and tr["dim_names"] == ["batch", "sequence"] and tr["shape"] == [1, 32]
    assert c.get("/api/models/nope/inputs").status_code == 404


@pytest.mark.parametrize("body, message", [
    ({"inputs": [{"name": "images", "shape": [2, 3, 32]}]}, "input 'images': shape [2, 3, 32] has rank 3"),
    ({"inputs": [{"name": "images", "shape": [1, 4, 32, 32]}]}, "input 'images': size 4 on axis 1"),
    ({"inputs": [{"name": "pixels", "shape": [1]}]}, "input 'pixels' is not a graph input"),
    ({"inputs": [{"name": "images", "shape": [1, 3, 8, 8], "low": 3, "high": 1}]}, "low < high"),
    ({"inputs": [{"name": "images", "shape": [1, 3, 8, 8], "fill": "file"}]}, "no array was uploaded"),
    ({"inputs": [{"name": "images", "shape": [1, 3, 8, 8], "fill": "noise"}]}, "fill 'noise' is not one of"),
    ({"tolerance": {"atol": -1}}, "atol must be a finite number >= 0"),
    ({"inputs": "images=1x3x8x8"}, "'inputs' must be a list"),
])
def test_bad_inputs_are_refused_before_anything_runs(real_app, body, message):
    c = real_app.test_client()
    resp = c.post("/api/runs", json={**CNN, **body})
    assert resp.status_code == 400 and message in resp.get_json()["error"], resp.get_json()
    assert c.get("/api/runs").get_json()["runs"] == []            # nothing was queued


def test_shape_the_model_cannot_take_is_refused_by_shape_inference(real_app):
    """A MatMul whose inner dims disagree: ONNX shape inference says so before the run is queued."""
    from onnx import TensorProto, helper

    from conftest import make_model
    w = _onnx.numpy_helper.from_array(_np.ones((8, 4), _np.float32), "W")
    model = make_model([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "k"])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    c = real_app.test_client()
    mid = c.post("/api/models", data={"file": (_io.BytesIO(model.SerializeToString()), "mm.onnx")},
                 content_type="multipart/form-data").get_json()["id"]
    resp = c.post("/api/runs", json={"model": mid, "backend": "default", "ops": ["MatMul"],
                                     "inputs": [{"name": "x", "shape": [2, 5]}]})
    assert resp.status_code == 400 and "cannot take these input shapes" in resp.get_json()["error"]
    ok = c.post("/api/runs", json={"model": mid, "backend": "default", "ops": ["MatMul"],
                                   "inputs": [{"name": "x", "shape": [2, 8]}]})
    assert ok.status_code == 202


def test_run_uses_the_shapes_tolerance_and_remembers_them(real_app):
    c = real_app.test_client()
    resp = c.post("/api/runs", json={**CNN, "repeat": 5, "tolerance": {"atol": 1e-5, "rtol": 1e-4},
                                     "inputs": [{"name": "images", "shape": [2, 3, 40, 56], "seed": 3,
                                                 "low": 0, "high": 2}]})
    assert resp.status_code == 202, resp.get_json()
    run, _ = _wait(c, resp.get_json()["id"], timeout=180)
    assert run["status"] == "done", run["error"]
    comp = run["result"]["comparison"]
    assert comp["tolerance"] == {"atol": 1e-5, "rtol": 1e-4}
    assert run["result"]["inputs"]["arrays"] == {"images": {"shape": [2, 3, 40, 56], "dtype": "float32"}}
    assert run["inputs_used"]["specs"][0]["shape"] == [2, 3, 40, 56] and run["model_present"] is True
    for name in ("onnxruntime", "engine", "partitioned"):
        t = comp["timings"][name]
        assert t["repeat"] == 5 and len(t["all_seconds"]) == 5
        # ours warms up past its executor's trial runs (engine.measure): up to 4 more
        assert t["warmup"] == 1 if name == "onnxruntime" else 1 <= t["warmup"] <= 5
        assert t["p10"] <= t["seconds"] <= t["p90"]
    # the verdict is right: onnxruntime on the same stored inputs agrees with our engine
    used = _load_inputs(real_app.instance_path, run["id"])
    feeds = used.feeds(real_app.extensions["sglens"].models.get("sample-cnn_dynamic").graph)
    assert float(feeds["images"].min()) >= 0 and float(feeds["images"].max()) <= 2
    want = _ort.InferenceSession(str(SAMPLES / "cnn_dynamic.onnx"), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    from engine.executor import Executor
    with Executor(_load_model(str(SAMPLES / "cnn_dynamic.onnx"))) as ex:
        got = next(iter(ex.run(feeds).numpy_outputs().values()))
    assert comp["ok"] == bool(_np.allclose(got, want, atol=1e-5, rtol=1e-4)) is True
    # remembered per model: the next form is prefilled with the shape just used
    assert c.get("/api/models/sample-cnn_dynamic/inputs").get_json()["inputs"][0]["shape"] == [2, 3, 40, 56]
    assert c.get("/api/models/sample-mlp/inputs").get_json()["remembered"] == []


def test_uploaded_arrays_are_used_stored_and_repeated_exactly(real_app):
    c = real_app.test_client()
    # 2.3 MiB: over the 1 MiB cap of JSON bodies, which a run's uploaded arrays are not held to
    x = _np.random.default_rng(5).standard_normal((3, 3, 200, 340)).astype(_np.float32)
    buf = _io.BytesIO()
    _np.save(buf, x)
    buf.seek(0)
    resp = c.post("/api/runs", data={"request": json.dumps({**CNN, "repeat": 4,
                                                            "inputs": [{"name": "images", "fill": "file"}]}),
                                     "input:images": (buf, "images.npy")}, content_type="multipart/form-data")
    assert resp.status_code == 202, resp.get_json()
    first, _ = _wait(c, resp.get_json()["id"], timeout=180)
    assert first["status"] == "done" and first["inputs_used"]["files"] == ["images"]
    assert first["result"]["inputs"]["arrays"]["images"]["shape"] == [3, 3, 200, 340]
    again = c.post("/api/runs", json={"repeat_of": first["id"]})
    assert again.status_code == 202
    second, _ = _wait(c, again.get_json()["id"], timeout=180)
    assert second["status"] == "done" and second["backend"] == "default"
    assert second["result"]["comparison"]["timings"]["engine"]["repeat"] == 4     # measured alike
    graph = real_app.extensions["sglens"].models.get("sample-cnn_dynamic").graph
    for rid in (first["id"], second["id"]):
        _np.testing.assert_array_equal(_load_inputs(real_app.instance_path, rid).feeds(graph)["images"], x)
    # junk instead of an array, a pickled array, an .npz without the input: 400 naming the upload
    for payload, name in ((b"junk", "a.npy"), (_pickled(), "p.npy")):
        bad = c.post("/api/runs", data={"request": json.dumps(CNN), "input:images": (_io.BytesIO(payload), name)},
                     content_type="multipart/form-data")
        assert bad.status_code == 400 and name in bad.get_json()["error"]
    assert c.post("/api/runs", json={"repeat_of": "0123456789abcdef"}).status_code == 404


def _pickled() -> bytes:
    buf = _io.BytesIO()
    _np.save(buf, _np.array([{"a": 1}], dtype=object), allow_pickle=True)
    return buf.getvalue()


def test_random_values_are_the_same_for_the_same_specs(real_app):
    c = real_app.test_client()
    ids = [c.post("/api/runs", json={**CNN, "inputs": [{"name": "images", "shape": [1, 3, 16, 16], "seed": 9}]})
           .get_json()["id"] for _ in range(2)]
    for rid in ids:
        _wait(c, rid, timeout=180)
    graph = real_app.extensions["sglens"].models.get("sample-cnn_dynamic").graph
    a, b = (_load_inputs(real_app.instance_path, rid).feeds(graph)["images"] for rid in ids)
    _np.testing.assert_array_equal(a, b)


def test_bundle_upload_as_files_and_as_zip_runs_against_onnxruntime(real_app, tmp_path):
    c = real_app.test_client()
    path = external_data_mlp(tmp_path / "src")
    data = path.parent / "mlp_ext.onnx.data"
    # the .onnx alone is refused (its data is not there), as before
    alone = c.post("/api/models", data={"file": (_io.BytesIO(path.read_bytes()), "mlp_ext.onnx")},
                   content_type="multipart/form-data")
    assert alone.status_code == 400 and "upload the model together with its data files" in alone.get_json()["error"]
    files = c.post("/api/models", data={"file": [(_io.BytesIO(path.read_bytes()), "mlp_ext.onnx"),
                                                 (_io.BytesIO(data.read_bytes()), "mlp_ext.onnx.data")]},
                   content_type="multipart/form-data")
    assert files.status_code == 201, files.get_json()
    zbuf = _io.BytesIO()
    with _zipfile.ZipFile(zbuf, "w") as zf:
        zf.write(path, "mlp/mlp_ext.onnx")
        zf.write(data, "mlp/mlp_ext.onnx.data")
    zbuf.seek(0)
    zipped = c.post("/api/models", data={"file": (zbuf, "mlp.zip")}, content_type="multipart/form-data")
    assert zipped.status_code == 201, zipped.get_json()
    assert zipped.get_json()["inputs"][0]["shape"] == ["N", 64]
    for mid in (files.get_json()["id"], zipped.get_json()["id"]):
        resp = c.post("/api/runs", json={"model": mid, "backend": "default", "ops": ["MatMul", "Add", "Relu"],
                                         "inputs": [{"name": "input", "shape": [6, 64], "seed": 2}]})
        assert resp.status_code == 202, resp.get_json()
        run, _ = _wait(c, resp.get_json()["id"], timeout=180)
        assert run["status"] == "done" and run["result"]["comparison"]["ok"] is True, run.get("error")
        feeds = _load_inputs(real_app.instance_path, run["id"]).feeds(_load_model(str(path)))
        want = _ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
        from engine.executor import Executor
        with Executor(real_app.extensions["sglens"].models.get(mid).graph) as ex:
            _np.testing.assert_allclose(ex.run(feeds).numpy_outputs()["probs"], want, rtol=1e-4, atol=1e-6)


def test_bad_bundles_are_refused_and_leave_nothing(real_app, tmp_path):
    c = real_app.test_client()
    path = external_data_mlp(tmp_path / "src")
    bundles = _Path(real_app.instance_path) / "bundles"

    def post(files):
        return c.post("/api/models", data={"file": files}, content_type="multipart/form-data")
    # the data file is missing from the bundle (another file given instead)
    r = post([(_io.BytesIO(path.read_bytes()), "mlp_ext.onnx"), (_io.BytesIO(b"x"), "notes.txt")])
    assert r.status_code == 400 and "mlp_ext.onnx.data" in r.get_json()["error"]
    # a member escaping the bundle
    zbuf = _io.BytesIO()
    with _zipfile.ZipFile(zbuf, "w") as zf:
        zf.writestr("../evil.onnx", path.read_bytes())
    zbuf.seek(0)
    r = post((zbuf, "evil.zip"))
    assert r.status_code == 400 and "outside the bundle" in r.get_json()["error"]
    r = post([(_io.BytesIO(b"a"), "a.data"), (_io.BytesIO(b"b"), "b.data")])
    assert r.status_code == 400 and "no .onnx file" in r.get_json()["error"]
    assert not bundles.exists() or not any(p for p in bundles.iterdir() if not p.name.startswith("."))
    assert len(c.get("/api/models").get_json()["models"]) == len([p for p in SAMPLES.glob("*.onnx")])


def test_a_run_whose_model_is_gone_says_so(real_app, tmp_path):
    c = real_app.test_client()
    path = external_data_mlp(tmp_path / "src")
    data = path.parent / "mlp_ext.onnx.data"
    mid = c.post("/api/models", data={"file": [(_io.BytesIO(path.read_bytes()), "mlp_ext.onnx"),
                                               (_io.BytesIO(data.read_bytes()), "mlp_ext.onnx.data")]},
                 content_type="multipart/form-data").get_json()["id"]
    rid = c.post("/api/runs", json={"model": mid, "backend": "default", "ops": ["MatMul"]}).get_json()["id"]
    _wait(c, rid, timeout=180)
    folder = _Path(real_app.instance_path) / "bundles" / mid
    assert folder.is_dir()
    assert c.delete(f"/api/models/{mid}").status_code == 200
    assert not folder.exists()                                      # the bundle's files went with it
    run = c.get(f"/api/runs/{rid}").get_json()
    assert run["status"] == "done" and run["model_present"] is False and run["result"] is not None


def test_serve_preloads_models_from_files_folders_and_archives(tmp_path):
    path = external_data_mlp(tmp_path / "folder")
    zpath = tmp_path / "mlp.zip"
    with _zipfile.ZipFile(zpath, "w") as zf:
        for p in path.parent.iterdir():
            zf.write(p, p.name)
    for i, given in enumerate((path, path.parent, zpath)):
        app = create_app({"SGLENS_INSTANCE": str(tmp_path / f"inst{i}"), "SGLENS_MODELS": (str(given),)})
        models = app.test_client().get("/api/models").get_json()["models"]
        assert [(m["name"], m["nodes"], m["source"]) for m in models] == [("mlp_ext.onnx", 10, "preload")], given
    # the same model three ways is the same content: stored once (issue 20: --model models are stored)
    app = create_app({"SGLENS_INSTANCE": str(tmp_path / "inst"),
                      "SGLENS_MODELS": (str(path), str(path.parent), str(zpath))})
    assert [m["name"] for m in app.test_client().get("/api/models").get_json()["models"]] == ["mlp_ext.onnx"]
    # a bad --model is one line and exit 2
    bad = _subprocess.run([_sys.executable, "-m", "sglens", "serve", "--port", "0", "--instance", str(tmp_path / "i2"),
                           "--model", str(tmp_path / "missing.onnx")], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "no such model file" in bad.stderr


def test_cli_commands_take_a_bundle_archive(tmp_path):
    path = external_data_mlp(tmp_path / "folder")
    zpath = tmp_path / "mlp.zip"
    with _zipfile.ZipFile(zpath, "w") as zf:
        for p in path.parent.iterdir():
            zf.write(p, f"m/{p.name}")
    out = _subprocess.run([_sys.executable, "-m", "sglens", "partition", str(zpath), "--ops", "MatMul,Add", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["summary"]["partitions"] >= 1
    out = _subprocess.run([_sys.executable, "-m", "sglens", "compare", str(zpath), "--ops", "MatMul,Add",
                           "--shape", "input=4x64"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "OK" in out.stdout.splitlines()[0]


def test_page_of_a_model_that_is_gone_says_so(real_app):
    c = real_app.test_client()
    page = c.get("/models/0123456789abcdef")
    text = page.get_data(as_text=True)
    assert page.status_code == 404 and page.mimetype == "text/html"
    assert "not loaded on this server" in text and 'data-model="0123456789abcdef"' in text
    assert "<script>" not in text and "gone.js" in text
    evil = c.get('/models/"><script>alert(1)</script>')
    assert evil.status_code == 404 and "<script>alert" not in evil.get_data(as_text=True)


def _off_sigmoid(node, opset):
    """The web kernels with a Sigmoid that is off by 5e-4: between the two tolerances below."""
    if node.op_type == "Sigmoid":
        return lambda xp, x, **_: (((1 / (1 + xp.exp(-x))) + 5e-4).astype(x.dtype),)
    return find_kernel(node, opset)


def test_tolerance_decides_the_verdict_and_the_first_node_is_named(tmp_path):
    app = create_app({"SGLENS_SAMPLES": True, "SGLENS_INSTANCE": str(tmp_path / "inst"),
                      "SGLENS_RUN_KERNELS": _off_sigmoid, "SGLENS_RUN_REPEAT": 1})
    c = app.test_client()
    verdicts = {}
    for atol in (1e-4, 1e-3):
        rid = c.post("/api/runs", json={"model": "sample-trt_cycle", **OPS, "tolerance": {"atol": atol, "rtol": 0},
                                        "inputs": [{"name": "input", "seed": 1}]}).get_json()["id"]
        run, _ = _wait(c, rid)
        comp = run["result"]["comparison"]
        verdicts[atol] = comp["ok"]
        err = comp["outputs"]["output"]["engine"]
        assert 4e-4 < err["max_abs"] < 6e-4 and err["mean_abs"] > 0 and err["cosine"] > 0.99
        if not comp["ok"]:
            node = comp["first_divergent_node"]
            assert (node["node"], node["op_type"], node["tensor"]) == ("B", "Sigmoid", "b_out")
            assert err["mismatched"] > 0
            # alone on onnxruntime's inputs it still differs, and ONNX's reference sides with onnxruntime
            assert "our kernel is wrong" in node["isolated"]["finding"], node["isolated"]
    assert verdicts == {1e-4: False, 1e-3: True}


def test_the_shape_check_before_a_run_is_not_a_memory_bomb(tmp_path):
    """ONNX data propagation materialised ConstantOfShape values: the up-front shape check of a
    130-byte model asking for 1.3 GB died of std::bad_alloc (or took the server down). Run in a
    child with a 1.5 GiB address-space limit, it must pass quickly."""
    code = (
        "import resource, sys; sys.path.insert(0, 'tests')\n"
        "resource.setrlimit(resource.RLIMIT_AS, (1536 << 20, 1536 << 20))\n"
        "import onnx, onnx.shape_inference as si\n"
        "real, errors = si.infer_shapes, []\n"
        "def spy(*a, **k):\n"
        "    try:\n"
        "        return real(*a, **k)\n"
        "    except BaseException as e:\n"
        "        errors.append(type(e).__name__)\n"
        "        raise\n"
        "si.infer_shapes = spy\n"
        "from test_runs_dask import bomb_model\n"
        "from partition.onnx_io import load_model\n"
        "from app.run_inputs import parse_run_inputs\n"
        "data = bomb_model()\n"
        "run = parse_run_inputs(load_model(data), onnx.load_model_from_string(data), {}, {}, None)\n"
        "print('checked', [s.shape for s in run.specs], 'errors', errors)\n")
    out = _subprocess.run([_sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=str(_Path(__file__).resolve().parent.parent))
    assert out.returncode == 0 and "checked [[1]] errors []" in out.stdout, (out.stdout, out.stderr[-2000:])


def test_history_and_compare_say_what_each_run_used_and_what_ran_it(app):
    """Issue 20: the run list carries verdict, shapes, tolerance, options and median time; each
    subgraph says which runtime ran it and why; the compare API names every differing setting."""
    c = app.test_client()
    rid_a = c.post("/api/runs", json={"model": "sample-trt_cycle", **OPS, "executor": "auto",
                                      "tolerance": {"atol": 1e-4, "rtol": 1e-3},
                                      "inputs": [{"name": "input", "seed": 1}]}).get_json()["id"]
    run_a, _ = _wait(c, rid_a)
    rid_b = c.post("/api/runs", json={"model": "sample-trt_cycle", **OPS, "executor": "onnxruntime",
                                      "tolerance": {"atol": 1e-3, "rtol": 1e-3},
                                      "inputs": [{"name": "input", "seed": 2}]}).get_json()["id"]
    run_b, _ = _wait(c, rid_b)
    assert run_a["status"] == run_b["status"] == "done"
    listed = {r["id"]: r for r in c.get("/api/runs?model=sample-trt_cycle").get_json()["runs"]}
    for run in (run_a, run_b):
        comp = run["result"]["comparison"]
        s = listed[run["id"]]["summary"]
        assert s["verdict"]["status"] == comp["verdict"]["status"] == "match"
        assert s["shapes"] == {"input": run["result"]["inputs"]["arrays"]["input"]["shape"]}
        assert s["tolerance"] == comp["tolerance"]
        assert s["median_seconds"] == comp["timings"]["partitioned"]["seconds"] > 0
        used = [sg["executor"] for sg in comp["subgraphs"]]
        assert len(used) == 2 and all(u in ("engine", "onnxruntime", "tensorrt") for u in used)
        assert all(sg["reason"] for sg in comp["subgraphs"])        # why that runtime ran it
        assert s["runtimes"] == {u: used.count(u) for u in used}
        assert s["runtime_reasons"] == {u: list(dict.fromkeys(sg["reason"] for sg in comp["subgraphs"]
                                                              if sg["executor"] == u)) for u in used}
        assert listed[run["id"]]["options"] == {"ops": OPS["ops"]}
    assert listed[rid_b]["summary"]["runtimes"] == {"onnxruntime": 2}
    diff = c.get(f"/api/runs/diff?a={rid_a}&b={rid_b}").get_json()["differences"]
    by = {d["setting"]: d for d in diff}
    expected = {"subgraph runtime asked", "tolerance", "input values"}
    if listed[rid_a]["summary"]["runtimes"] != {"onnxruntime": 2}:
        expected.add("subgraph runtimes used")
    assert set(by) == expected, diff
    assert by["tolerance"]["a"]["atol"] == 1e-4 and by["tolerance"]["b"]["atol"] == 1e-3
    assert (by["subgraph runtime asked"]["a"], by["subgraph runtime asked"]["b"]) == ("auto", "onnxruntime")
    assert by["input values"]["a"]["input"]["seed"] == 1 and by["input values"]["b"]["input"]["seed"] == 2
    assert c.get(f"/api/runs/diff?a={rid_a}&b={rid_a}").get_json()["differences"] == []
    missing = c.get(f"/api/runs/diff?a={rid_a}&b=nope")
    assert missing.status_code == 404 and "'b'" in missing.get_json()["error"]


def _upload(c, model, name):
    resp = c.post("/api/models", data={"file": (_io.BytesIO(model.SerializeToString()), name)},
                  content_type="multipart/form-data")
    assert resp.status_code == 201, resp.get_json()
    return resp.get_json()["id"]


def test_a_constant_fill_feeds_every_element_that_value(real_app):
    """silero VAD's ``sr`` input wants 16000, not random: y = x * sr, checked against onnxruntime."""
    from onnx import TensorProto, helper

    from conftest import make_model
    model = make_model([helper.make_node("Mul", ["x", "sr"], ["y"], name="scale")],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8]),
                        helper.make_tensor_value_info("sr", TensorProto.FLOAT, [1])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])])
    c = real_app.test_client()
    mid = _upload(c, model, "vad_like.onnx")
    assert "constant" in c.get(f"/api/models/{mid}/inputs").get_json()["fills"]
    resp = c.post("/api/runs", json={"model": mid, "backend": "default", "ops": ["Mul"],
                                     "inputs": [{"name": "sr", "fill": "constant", "value": 16000}]})
    assert resp.status_code == 202, resp.get_json()
    run, _ = _wait(c, resp.get_json()["id"], timeout=120)
    assert run["status"] == "done" and run["result"]["comparison"]["ok"]
    used = _load_inputs(real_app.instance_path, run["id"])
    feeds = used.feeds(real_app.extensions["sglens"].models.get(mid).graph)
    assert feeds["sr"].tolist() == [16000.0]
    want = _ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    _np.testing.assert_allclose(want, feeds["x"] * 16000.0)
    bad = c.post("/api/runs", json={"model": mid, "backend": "default", "ops": ["Mul"],
                                    "inputs": [{"name": "sr", "fill": "constant", "value": "nan"}]})
    assert bad.status_code == 400 and "constant value must be a finite number" in bad.get_json()["error"]


def test_ultralytics_imgsz_metadata_prefills_the_image_shape(real_app):
    from onnx import TensorProto, helper

    from conftest import make_model
    model = make_model([helper.make_node("Relu", ["images"], ["y"], name="relu")],
                       [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, "height", "width"])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    helper.set_model_props(model, {"imgsz": "[320, 256]", "batch": "1", "task": "detect"})
    c = real_app.test_client()
    mid = _upload(c, model, "yolo_like.onnx")
    (spec,) = c.get(f"/api/models/{mid}/inputs").get_json()["inputs"]
    assert spec["shape"] == [1, 3, 320, 256]
    helper.set_model_props(model, {"imgsz": "640"})       # one number: a square image
    other = _upload(c, model, "yolo_square.onnx")
    assert c.get(f"/api/models/{other}/inputs").get_json()["inputs"][0]["shape"] == [1, 3, 640, 640]


def test_a_shape_inference_refusal_is_said_in_plain_words(real_app):
    """A declared intermediate shape the chosen input cannot give: ONNX says "Can't merge shape
    info" or "existing shape differ"; the message names the node, the axis and what to do."""
    from onnx import TensorProto, helper

    from conftest import make_model
    model = make_model([helper.make_node("Relu", ["x"], ["a"], name="first_relu"),
                        helper.make_node("Relu", ["a"], ["y"], name="second_relu")],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "k"])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model.graph.value_info.append(helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 4]))
    c = real_app.test_client()
    mid = _upload(c, model, "declared.onnx")
    resp = c.post("/api/runs", json={"model": mid, "backend": "default", "ops": ["Relu"],
                                     "inputs": [{"name": "x", "shape": [1, 5]}]})
    err = resp.get_json()["error"]
    assert resp.status_code == 400 and "cannot take these input shapes" in err
    assert "node 'first_relu' (Relu)" in err and "axis 1" in err and "declares 4" in err, err
    assert "Use the sizes the model was exported for" in err


def _with_mul(node, opset):
    if node.op_type == "Mul":
        return lambda xp, a, b, **_: (a * b,)
    return find_kernel(node, opset)


def _wrong_relu(node, opset):
    """The web kernels with a Relu 0.5 too high: a difference a small scale later squashes."""
    if node.op_type == "Relu":
        return lambda xp, x, **_: (xp.maximum(x, 0) + 0.5,)
    return _with_mul(node, opset)


@pytest.mark.parametrize("wrong, add_x, status", [(False, False, "weak"), (True, True, "match"), (True, False, "weak")])
def test_run_verdicts_say_what_a_match_is_worth(tmp_path, wrong, add_x, status):
    """Through the real app: y = relu(x) * 1e-6 (+ x). A reference mostly below atol is a weak match,
    a Relu that is 0.5 off inside the graph is never 'first subgraph introducing a difference' under
    a match; the history's verdict is the run's."""
    from test_compare_verdict import _scaled_model
    app = create_app({"SGLENS_INSTANCE": str(tmp_path / "inst"), "SGLENS_RUN_REPEAT": 1,
                      "SGLENS_RUN_KERNELS": _wrong_relu if wrong else _with_mul})
    c = app.test_client()
    model = _scaled_model(1e-6, add_x=add_x)
    mid = _upload(c, model, "scaled.onnx")
    rid = c.post("/api/runs", json={"model": mid, "backend": "default", "ops": ["Relu"], "executor": "engine",
                                    "inputs": [{"name": "x", "seed": 4}]}).get_json()["id"]
    run, _ = _wait(c, rid)
    assert run["status"] == "done", run["error"]
    comp = run["result"]["comparison"]
    feeds = _load_inputs(app.instance_path, rid).feeds(app.extensions["sglens"].models.get(mid).graph)
    ref = _ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    below = float(_np.mean(_np.abs(ref) <= 1e-4))
    assert comp["ok"] and comp["verdict"]["status"] == status
    assert comp["first_divergent"] is None and comp["verdict"]["first_divergent"] is None
    if status == "weak":
        assert f"most of the reference ({100 * below:.1f}% of y)" in comp["verdict"]["headline"]
    assert (comp["verdict"]["inner_difference"] is not None) == wrong
    assert comp["subgraphs"][0]["introduces_difference"] == wrong
    (listed,) = c.get(f"/api/runs?model={mid}").get_json()["runs"]
    assert listed["summary"]["verdict"] == {k: comp["verdict"][k] for k in ("status", "headline")}
