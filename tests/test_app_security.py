"""Issue 9 in-process: per-client quotas, one graphviz per model, normalised layout keys, the
upload checker on every nesting level, path scrubbing, the Flask test client under the guards."""

from __future__ import annotations

import io
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from app import create_app, layout
from app.quota import ClientQuota

sys.path.insert(0, str(Path(__file__).resolve().parent / "security"))
import sec_models  # noqa: E402


@pytest.fixture
def app(tmp_path):
    return create_app({"SGLENS_SAMPLES": True, "SGLENS_INSTANCE": str(tmp_path / "inst")})


def test_test_client_passes_the_guards_and_gets_headers(app):
    c = app.test_client()
    r = c.post("/api/sessions", json={"model": "sample-trt_cycle", "backend": "tensorrt"})
    assert r.status_code == 201                                   # no Origin: not a browser page
    assert r.headers["X-Frame-Options"] == "DENY" and "frame-ancestors 'none'" in r.headers["Content-Security-Policy"]
    assert c.post("/api/sessions", json={}, headers={"Origin": "http://x.example"}).status_code == 403
    assert c.get("/api/health", headers={"Host": "x.example"}).status_code == 400


def test_one_client_cannot_evict_another_clients_sessions(tmp_path):
    # each session of trt_cycle is estimated at a few KiB: a quota of 40 KiB per client, 100 KiB in all
    app = create_app({"SGLENS_SAMPLES": True, "SGLENS_INSTANCE": str(tmp_path), "SGLENS_CLIENT_CACHE_BYTES": 40_000,
                      "SGLENS_CACHE_BYTES": 100_000})
    alice, mallory = app.test_client(), app.test_client()
    body = {"model": "sample-resnet_small", "backend": "tensorrt"}
    mine = alice.post("/api/sessions", json=body).get_json()["id"]
    made = [mallory.post("/api/sessions", json=body).get_json()["id"] for _ in range(30)]
    assert alice.get(f"/api/sessions/{mine}").status_code == 200          # still there
    alive = [s for s in made if mallory.get(f"/api/sessions/{s}").status_code == 200]
    assert 0 < len(alive) < len(made) and made[-1] in alive               # mallory evicted mallory's own
    usage = app.extensions["sglens"].sessions.usage()
    assert max(usage.values()) <= 40_000 + 20_000


def test_quota_evicts_the_biggest_client_when_full():
    q: ClientQuota[str] = ClientQuota(total_bytes=100, client_bytes=80)
    q.put("a1", "x", "a", 30)
    for i in range(5):
        q.put(f"b{i}", "x", "b", 25)
    assert "a1" in q and q.usage()["b"] <= 80
    q.put("c1", "x", "c", 40)                                             # over the total: b pays
    assert "a1" in q and "c1" in q and sum(q.usage().values()) <= 100


def test_one_dot_per_model_at_a_time(app, monkeypatch):
    running, peak, lock = [0], [0], threading.Lock()
    real = layout._dot_json

    def counting(source):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.3)
        try:
            return real(source)
        finally:
            with lock:
                running[0] -= 1
    monkeypatch.setattr(layout, "_dot_json", counting)
    clients = [app.test_client() for _ in range(4)]
    queries = ["", "?collapse=1", "?collapse=0", "?expand=x"]
    threads = [threading.Thread(target=lambda c=c, q=q: c.get(f"/api/models/sample-resnet_small/layout{q}"))
               for c, q in zip(clients, queries)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert peak[0] == 1


def test_junk_layout_requests_share_one_cache_entry(app):
    c = app.test_client()
    cache = app.extensions["sglens"].layouts
    first = c.get("/api/models/sample-mlp/layout").get_json()
    n = len(cache._views)
    for q in ("?expand=,,,", "?expand=scope:nope,seq:3-1,part:x", "?collapse=junk", "?expand=" + "a," * 5000):
        assert c.get(f"/api/models/sample-mlp/layout{q}").get_json()["nodes"] == first["nodes"], q
    assert len(cache._views) == n


def test_dot_failure_gives_a_grid_with_a_note(app, monkeypatch):
    def broken(source):
        raise layout.LayoutError("graphviz dot failed (exit 1: syntax error)")
    monkeypatch.setattr(layout, "_dot_json", broken)
    r = app.test_client().get("/api/models/sample-trt_cycle/layout")
    assert r.status_code == 200
    view = r.get_json()
    assert "graphviz dot failed" in view["note"] and "plain grid" in view["note"] and len(view["nodes"]) == 6


def _function_model_with_external(location: str) -> bytes:
    t = sec_models.external(numpy_helper.from_array(np.zeros(4, np.uint8), "c"), location)
    fn = helper.make_function("local", "Leak", [], ["c"], [helper.make_node("Constant", [], ["c"], value=t)],
                              [helper.make_opsetid("", 17)])
    y = helper.make_tensor_value_info("y", TensorProto.UINT8, [4])
    m = sec_models.model([helper.make_node("Leak", [], ["y"], domain="local", name="call")], [], [y],
                         opsets=(("", 17), ("local", 1)))
    m.functions.append(fn)
    return m.SerializeToString()


def test_upload_refuses_external_data_inside_functions(app):
    r = app.test_client().post("/api/models", data={"file": (io.BytesIO(_function_model_with_external("runs.sqlite3")), "f.onnx")},
                               content_type="multipart/form-data")
    assert r.status_code == 400 and "model uses external data file 'runs.sqlite3'" in r.get_json()["error"]


def test_error_messages_lose_server_paths(app):
    from app.errors import scrub
    with app.app_context():
        msg = scrub(f"cannot open {app.instance_path}/uploads/x.onnx in {Path.cwd()}/y")
    assert app.instance_path not in msg and str(Path.cwd()) not in msg
    assert "<instance>/uploads/x.onnx" in msg
    assert scrub("/model/Conv_1: bad") == "/model/Conv_1: bad"          # node names with slashes stay


def test_index_and_limit_arguments_are_checked(app):
    c = app.test_client()
    sid = c.post("/api/sessions", json={"model": "sample-trt_cycle", "backend": "tensorrt"}).get_json()["id"]
    assert c.get(f"/api/sessions/{sid}?index=abc").status_code == 400
    assert c.get(f"/api/sessions/{sid}/events?limit=-5").status_code == 400
    assert c.get(f"/api/sessions/{sid}/events?limit=0").get_json()["events"] == []


@pytest.mark.parametrize("header,name", [("[::1]:8000", "::1"), ("LocalHost:80", "localhost"), ("a.example.", "a.example"),
                                         ("127.0.0.1", "127.0.0.1"), ("[::1]", "::1"), ("", "")])
def test_host_name_of_a_host_header(header, name):
    from app.security import host_name
    assert host_name(header) == name


def test_allowed_host_given_with_a_port_or_brackets(tmp_path):
    app = create_app({"SGLENS_INSTANCE": str(tmp_path), "SGLENS_ALLOWED_HOSTS": ("Lens.Example:8000", "[fd00::1]")})
    c = app.test_client()
    for host in ("lens.example", "lens.example:9999", "[fd00::1]:80"):
        assert c.get("/api/health", headers={"Host": host}).status_code == 200, host
    assert c.get("/api/health", headers={"Host": "other.example"}).status_code == 400


def test_wildcard_bind_answers_ip_literals_only(tmp_path):
    app = create_app({"SGLENS_INSTANCE": str(tmp_path), "SGLENS_BIND_HOST": "0.0.0.0", "SGLENS_TOKEN": "t"})
    c = app.test_client()
    auth = {"Authorization": "Bearer t"}
    assert c.get("/api/health", headers={"Host": "192.0.2.7:8000", **auth}).status_code == 200
    assert c.get("/api/health", headers={"Host": "rebind.example:8000", **auth}).status_code == 400
    assert c.get("/api/health", headers={"Host": "192.0.2.7:8000"}).status_code == 401


def test_run_errors_lose_server_paths(app, monkeypatch):
    from app import jobs

    def failing(self, job, *a, **kw):
        raise RuntimeError(f"cannot read {app.instance_path}/uploads/abc.onnx")
    monkeypatch.setattr(jobs.JobManager, "_work", failing)
    c = app.test_client()
    rid = c.post("/api/runs", json={"model": "sample-trt_cycle", "backend": "tensorrt"}).get_json()["id"]
    for _ in range(100):
        run = c.get(f"/api/runs/{rid}").get_json()
        if run["status"] == "failed":
            break
        time.sleep(0.05)
    assert run["status"] == "failed" and "<instance>/uploads/abc.onnx" in run["error"]
    listed = c.get("/api/runs").get_json()["runs"]
    assert all(app.instance_path not in (r.get("error") or "") for r in listed)


def test_a_session_trace_stops_at_the_clients_share(tmp_path):
    # a small share: the floor of 1,000 events; a 1,500-node chain's trace is longer
    app = create_app({"SGLENS_INSTANCE": str(tmp_path), "SGLENS_CLIENT_CACHE_BYTES": 100_000})
    c = app.test_client()
    data = sec_models.chain_without_scopes(1500)
    mid = c.post("/api/models", data={"file": (io.BytesIO(data), "chain.onnx")},
                 content_type="multipart/form-data").get_json()["id"]
    sid = c.post("/api/sessions", json={"model": mid, "backend": "default", "ops": ["Relu"]}).get_json()["id"]
    state = c.post(f"/api/sessions/{sid}/step", json={"action": "last", "index": 0}).get_json()
    assert state["done"] and state["known"] == 1000 and "longer than 1000 events" in state["error"]
    big = create_app({"SGLENS_INSTANCE": str(tmp_path / "b")}).test_client()       # the default share
    mid = big.post("/api/models", data={"file": (io.BytesIO(data), "chain.onnx")},
                   content_type="multipart/form-data").get_json()["id"]
    sid = big.post("/api/sessions", json={"model": mid, "backend": "default", "ops": ["Relu"]}).get_json()["id"]
    state = big.post(f"/api/sessions/{sid}/step", json={"action": "last", "index": 0}).get_json()
    assert state["done"] and state["known"] > 1000 and state["error"] is None


def test_too_many_scopes_fall_back_to_runs_of_nodes():
    """2,000 top-level name scopes are too many boxes for one level: runs of nodes instead, with a note."""
    from partition import load_model
    from onnx import helper as oh
    nodes = [oh.make_node("Relu", [f"t{i}" if i else "x"], [f"t{i + 1}"], name=f"s{i}/relu") for i in range(2000)]
    m = sec_models.model(nodes, [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                         [oh.make_tensor_value_info("t2000", TensorProto.FLOAT, [2])])
    view = layout.graph_view(load_model(m.SerializeToString()), flat_limit=1500)
    assert view["mode"] == "collapsed" and len(view["nodes"]) == 20
    assert "not name scopes" in view["note"]


def test_fresh_cookies_from_one_address_cannot_outvote_another_address():
    # a client within its quota (at most half the total) is never the one to pay for another's entries
    q: ClientQuota[str] = ClientQuota(total_bytes=100, client_bytes=50)
    q.put("victim", "x", "10.0.0.1|alice", 50)
    for i in range(20):                                             # a new cookie per request
        q.put(f"flood{i}", "x", f"10.0.0.2|c{i}", 10)
    assert "victim" in q and "flood19" in q and sum(q.usage().values()) <= 100
