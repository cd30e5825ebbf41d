"""Issue 20: no run row is ever left queued or falsely 'interrupted', and uploaded bundles keep
their runs, across a restart of a real ``sglens serve`` on the same store (its own server: this
module stops and starts it)."""

from __future__ import annotations

import pytest

from acceptance_harness import FINAL, real_model, wheel_models, serve, stop_server, stuck_runs, submit, upload, wait_run

#: the backends the first start runs (every backend against onnxruntime: test_accept_runs.py); tensorrt
#: was the one whose failed submissions left rows queued forever, then "interrupted" after a restart
BACKENDS = [("conv_bn_relu", {}), ("tensorrt", {"options": {"fallback_ops": ["Resize"]}})]


def _runs(srv) -> dict[str, str]:
    reply = srv.request("GET", "/api/runs")
    assert reply.status == 200
    return {r["id"]: r["status"] for r in reply.json()["runs"]}


@pytest.mark.timeout(900)   # two server starts and four runs
def test_runs_and_bundles_survive_a_restart_and_none_is_left_queued(tmp_path):
    det = real_model("ppocr_det")
    real_model("ppocr_rec")
    bundle = wheel_models.zipped_bundle("ppocr_rec", tmp_path)
    srv = serve(tmp_path)
    try:
        det_id = upload(srv, det)["id"]
        zip_id = upload(srv, bundle)["id"]
        submitted, refused = [], []
        for backend, sel in BACKENDS:
            reply = srv.request("POST", "/api/runs", {"model": det_id, "backend": backend, "repeat": 1, **sel,
                                                      "inputs": [{"name": "x", "shape": [1, 3, 64, 64]}]})
            (submitted if reply.status == 202 else refused).append((backend, reply.status, reply.body[:300]))
            if reply.status == 202:
                submitted[-1] = reply.json()["id"]
        zip_run = submit(srv, {"model": zip_id, "backend": "conv_bn", "repeat": 1,
                               "inputs": [{"name": "x", "shape": [1, 3, 48, 64]}]})["id"]
        ended = {rid: wait_run(srv, rid)["status"] for rid in [*submitted, zip_run]}
        # whatever happened to a submission, no row of it may wait for a worker forever
        assert stuck_runs(srv) == []
        assert refused == [], f"POST /api/runs refused: {refused}"
        assert set(ended.values()) == {"done"}, ended
        before = _runs(srv)
        assert before and set(before.values()) <= set(FINAL) - {"interrupted"}
    finally:
        stop_server(srv)
    again = serve(tmp_path)           # the same folder: the same store
    try:
        assert _runs(again) == before, "a restart changed the state of runs that had ended"
        assert stuck_runs(again) == []
        listed = {m["id"]: m for m in again.request("GET", "/api/models").json()["models"]}
        assert det_id in listed and zip_id in listed, "an uploaded model vanished on restart"
        assert listed[zip_id]["name"] == "ppocr_rec.onnx"
        run = again.request("GET", f"/api/runs/{zip_run}").json()
        assert run["status"] == "done" and run["model_present"] is True
        assert again.request("GET", f"/api/models/{zip_id}/layout").status == 200
        rerun = submit(again, {"repeat_of": zip_run})          # the stored bundle runs again
        assert wait_run(again, rerun["id"])["status"] == "done"
    finally:
        stop_server(again)


@pytest.mark.timeout(600)
def test_a_preloaded_model_keeps_its_id_and_runs_across_restarts(tmp_path):
    """``sglens serve --model m.onnx``: the model is stored; started again, it is the same entry."""
    det = real_model("ppocr_det")
    srv = serve(tmp_path, "--model", str(det))
    try:
        [pre] = [m for m in srv.request("GET", "/api/models").json()["models"] if m["source"] == "preload"]
        rid = submit(srv, {"model": pre["id"], "backend": "conv_bn", "repeat": 1,
                           "inputs": [{"name": "x", "shape": [1, 3, 64, 64]}]})["id"]
        assert wait_run(srv, rid)["status"] == "done"
    finally:
        stop_server(srv)
    again = serve(tmp_path, "--model", str(det))
    try:
        assert [m["id"] for m in again.request("GET", "/api/models").json()["models"]
                if m["source"] == "preload"] == [pre["id"]]
        run = again.request("GET", f"/api/runs/{rid}").json()
        assert run["status"] == "done" and run["model_present"] is True
    finally:
        stop_server(again)
