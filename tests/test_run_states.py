"""Run states (``app/run_states.py``) and the wall-clock limit of a run, on a real ``sglens serve``
in its default configuration (Dask LocalCluster workers, waitress) and the CLI.

Issue 20: a submission that failed left its row "queued: waiting for a worker" for ever, and after
a restart rows that never started said "interrupted: the server stopped while this run was in
flight". Issue 21: an endless ``Loop`` (2^62 trips) ran until someone cancelled it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "security"))
from _run_models import endless_loop_model  # noqa: E402
from sec_server import SGLENS, start_server, stop_server  # noqa: E402

from app.run_states import FINAL, IN_FLIGHT, TRANSITIONS, RunState, can_move, lost_with_server  # noqa: E402

ENDED = ("done", "failed", "cancelled", "interrupted")


def wait(srv, rid: str, until=ENDED, timeout: float = 180) -> dict:
    end = time.time() + timeout
    run: dict = {}
    while time.time() < end:
        run = srv.request("GET", f"/api/runs/{rid}").json()
        if run["status"] in until:
            return run
        time.sleep(0.1)
    raise AssertionError(f"run {rid} did not reach {until}: {run}")


def submit(srv, model: str, **fields) -> str:
    reply = srv.request("POST", "/api/runs", {"model": model, "backend": "default", "ops": ["Add", "Relu"], **fields})
    assert reply.status == 202, reply.body
    return reply.json()["id"]


# ------------------------------------------------------------------ the table --
def test_the_state_table_ends_in_final_states_and_never_interrupts_a_queued_run():
    assert set(FINAL) == {"done", "failed", "cancelled", "interrupted"} and set(IN_FLIGHT) == {"queued", "running"}
    for state in RunState:
        assert state.final == (state.value in FINAL)
        for to in TRANSITIONS[state]:
            assert not state.final and to is not state
    assert not can_move("queued", "interrupted") and can_move("running", "interrupted")
    assert not any(can_move(end, other) for end in FINAL for other in (*FINAL, *IN_FLIGHT))
    assert lost_with_server("queued")[0] == "failed" and "never started" in lost_with_server("queued")[1]
    assert lost_with_server("running")[0] == "interrupted"


def test_an_ended_run_is_never_changed_again(tmp_path):
    from app.store import RunStore
    runs = RunStore(str(tmp_path / "runs.sqlite3"))
    base = {"model_id": "m", "model_name": "m.onnx", "backend": "default", "options": {}, "device": "cpu",
            "executor": "auto", "created": time.time()}
    runs.create({**base, "id": "r"})
    runs.save({**base, "id": "r", "status": "done", "finished": time.time()}, {"ok": 1}, None)
    runs.save({**base, "id": "r", "status": "failed", "error": "late", "finished": time.time()}, None, None)
    runs.update("r", status="running")
    row = runs.get("r")
    assert row["status"] == "done" and row["error"] is None and row["result"] == {"ok": 1}


def test_runs_left_by_a_dead_server_say_whether_they_ever_started(tmp_path):
    from app import create_app
    from app.store import RunStore
    inst = tmp_path / "inst"
    runs = RunStore(str(inst / "runs.sqlite3"))
    base = {"model_id": "sample-mlp", "model_name": "mlp.onnx", "backend": "default", "options": {},
            "device": "cpu", "executor": "auto", "created": time.time()}
    runs.create({**base, "id": "was_queued"})
    runs.create({**base, "id": "was_running"})
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    with runs.db.connect() as db:   # as if a server that is gone (kill -9) had submitted them
        db.execute("UPDATE runs SET owner = ?", (f"{socket.gethostname()}:{dead.stdout.strip()}:12345.00",))
        db.execute("UPDATE runs SET status = 'running' WHERE id = 'was_running'")
    c = create_app({"SGLENS_INSTANCE": str(inst)}).test_client()
    queued, running = c.get("/api/runs/was_queued").get_json(), c.get("/api/runs/was_running").get_json()
    assert queued["status"] == "failed" and queued["error"].startswith("never started"), queued
    assert "interrupted" not in queued["error"] and "in flight" not in queued["error"]
    assert running["status"] == "interrupted" and "while this run was running" in running["error"], running


def test_a_submission_that_fails_is_recorded_failed_not_left_queued(tmp_path, monkeypatch):
    from app import create_app, jobs

    def refuse(self, job, entry, spec):
        raise TypeError("Could not serialize object of type Thing")
    monkeypatch.setattr(jobs.JobManager, "_start", refuse)
    c = create_app({"SGLENS_SAMPLES": True, "SGLENS_INSTANCE": str(tmp_path / "i")}).test_client()
    reply = c.post("/api/runs", json={"model": "sample-trt_cycle", "backend": "tensorrt"})
    assert reply.status_code == 500 and "recorded as failed" in reply.get_json()["error"]
    runs = c.get("/api/runs").get_json()["runs"]
    assert [(r["status"], "Could not serialize" in (r["error"] or "")) for r in runs] == [("failed", True)], runs


# ------------------------------------------------------- the default server --
def test_a_restart_interrupts_the_running_run_and_says_the_queued_one_never_started(tmp_path):
    instance = str(tmp_path / "instance")
    srv = start_server(tmp_path, "--samples", "--instance", instance, "--worker-memory", "1GiB",
                       "--run-time-limit", "0")
    try:
        model = srv.upload(endless_loop_model(), "endless.onnx").json()["id"]
        running = submit(srv, model)
        wait(srv, running, until=("running",), timeout=120)
        queued = submit(srv, "sample-trt_cycle")       # one worker, busy: this one waits
        assert srv.request("GET", f"/api/runs/{queued}").json()["status"] == "queued"
    finally:
        srv.proc.send_signal(signal.SIGTERM)           # what a service manager does
        srv.proc.wait(120)
    again = start_server(tmp_path, "--samples", "--instance", instance, "--in-process-runs")
    try:
        first = again.request("GET", f"/api/runs/{running}").json()
        second = again.request("GET", f"/api/runs/{queued}").json()
    finally:
        stop_server(again)
    assert first["status"] == "interrupted" and "while this run was running" in first["error"], first
    assert second["status"] == "failed" and second["error"].startswith("never started"), second


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    from test_runs_default_server import PLUGIN, PLUGIN_BACKEND
    cwd = tmp_path_factory.mktemp("limited")
    plugin = cwd / "late_plugin.py"
    plugin.write_text(PLUGIN.format(name=PLUGIN_BACKEND))
    srv = start_server(cwd, "--samples", "--instance", str(cwd / "instance"), "--worker-memory", "1GiB",
                       "--run-time-limit", "4", "--plugin", str(plugin))
    srv.plugin_backend = PLUGIN_BACKEND
    yield srv
    stop_server(srv)


def test_an_endless_loop_fails_at_the_time_limit_and_the_next_run_works(limited):
    srv = limited
    model = srv.upload(endless_loop_model(), "endless.onnx").json()["id"]
    rid = submit(srv, model)
    started = wait(srv, rid, until=("running",) + ENDED, timeout=120)
    t = time.time()
    run = wait(srv, rid, timeout=120)
    assert run["status"] == "failed", run
    assert run["error"].startswith("exceeded the time limit of 4 s"), run
    assert started["worker"] and f"its worker {started['worker']} was still running it and was restarted" in run["error"]
    assert time.time() - t < 60
    assert srv.request("GET", "/api/health").json() == {"ok": True}          # the server kept serving
    # the next run goes to the replacement worker, which got the server's --plugin too
    reply = srv.request("POST", "/api/runs", {"model": "sample-trt_cycle", "backend": srv.plugin_backend})
    assert reply.status == 202, reply.body
    nxt = wait(srv, reply.json()["id"], timeout=180)
    assert nxt["status"] == "done" and nxt["worker"] != started["worker"], nxt
    assert nxt["result"]["comparison"]["ok"] is True and nxt["result"]["comparison"]["subgraphs"]


@pytest.mark.parametrize("command", [["run"], ["compare", "--ops", "Add"]])
def test_the_cli_stops_an_endless_run_at_its_time_limit(tmp_path, command):
    path = tmp_path / "endless.onnx"
    path.write_bytes(endless_loop_model())
    t = time.time()
    out = subprocess.run([*SGLENS, *command[:1], str(path), *command[1:], "--time-limit", "2"], capture_output=True,
                         text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert out.returncode == 2, out
    lines = out.stderr.strip().splitlines()
    assert lines[-1] == (f"sglens {command[0]}: exceeded the time limit of 2 s (--time-limit); stopped. "
                         "Use a smaller input or raise --time-limit"), out.stderr
    assert "Traceback" not in out.stderr and time.time() - t < 60


def test_a_bad_time_limit_is_one_line_and_exit_2(tmp_path):
    for argv in (["serve", "--port", "0", "--run-time-limit", "-1"], ["run", "x.onnx", "--time-limit", "nan"]):
        out = subprocess.run([*SGLENS, *argv], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                             env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
        assert out.returncode == 2 and "time-limit" in out.stderr and "seconds" in out.stderr, out
        assert "Traceback" not in out.stderr
