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
    assert run["status"] == "done", run
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
    monkeypatch.setattr(jobs, "runs_available", lambda: "runs not available yet: test")
    resp = c.post("/api/runs", json={"model": "sample-trt_cycle", **OPS})
    assert resp.status_code == 503 and resp.get_json() == {"error": "runs not available yet: test"}


def test_memory_series_marks_the_peak():
    from partition import load_model
    from sample_models.generate import build_all
    import numpy as np
    g = load_model(build_all()["trt_cycle.onnx"].SerializeToString())
    tl = [{"name": n, "start_us": 10.0 * i, "dur_us": 5.0} for i, n in enumerate(["A", "B", "D", "C"])]
    m = jobs.memory_series(g, tl, {"input": np.zeros((4, 4), np.float32)})
    # input (64 B) dies when A ends; a_out (64) lives until D ends; b_out (64) and d_out (4) until C
    assert m["t_us"] == [0.0, 5.0, 15.0, 25.0, 35.0]
    assert m["bytes"] == [64, 64, 128, 68, 0]
    assert m["peak_bytes"] == 128 and m["peak_t_us"] == 15.0
