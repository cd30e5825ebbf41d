"""Issue 21 (critical): crafted conv/pool geometry must not reach the compiled kernels.

Before the geometry validator (``engine/kernels/geometry.py``), the Conv below made
``sglens run`` die with SIGSEGV in ``_native_conv.c`` (an int64 overflow in
``conv_columns`` put its writes before the column buffer), and with
``--in-process-runs`` one ``POST /api/runs`` killed the web server; the MaxPool
exited 0 with heap bytes as its output. Each attack here runs the real command
line or a real ``sglens serve`` on loopback.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import sec_models
from sec_server import ROOT, SGLENS, start_server, stop_server

INT64_MAX = 2**63 - 1


def conv_overflow(pad_left: int = INT64_MAX - 8, stride: int = 2**53) -> bytes:
    """The issue's Conv: x [1,1,2,8], w ones [1,1,1,1], a stride of 2^53 and a left pad
    that takes the padded width to INT64_MAX (ONNX shape inference accepts it)."""
    w = numpy_helper.from_array(np.ones((1, 1, 1, 1), np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="evil_conv", kernel_shape=[1, 1],
                            strides=[1, stride], pads=[0, pad_left, 0, 0])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    return sec_models.model([node], [x], [y], [w]).SerializeToString()


def maxpool_overflow(pads: tuple = (0, INT64_MAX - 9, 0, 0), strides: tuple = (1, 2**62 + 9)) -> bytes:
    """The issue's MaxPool: x [1,1,1,8], kernel [1,3], a stride of 2^62 + 9 and a left pad of
    2^63 - 10 (its output was [1.85e-40, 0.0], heap bytes)."""
    node = helper.make_node("MaxPool", ["x"], ["y"], name="evil_pool", kernel_shape=[1, 3],
                            strides=list(strides), pads=list(pads))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 1, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    return sec_models.model([node], [x], [y]).SerializeToString()


def _sglens_run(tmp_path: Path, data: bytes, *extra: str) -> subprocess.CompletedProcess:
    model = tmp_path / "m.onnx"
    model.write_bytes(data)
    return subprocess.run([*SGLENS, "run", str(model), *extra], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def _refused(proc: subprocess.CompletedProcess, *words: str) -> str:
    """Exit 2 with one line on stderr that holds ``words``; nothing on stdout (no output
    computed from garbage), no traceback, no signal."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-500:], proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert proc.stdout == "", proc.stdout
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def test_cli_conv_overflow_is_refused_not_a_segfault(tmp_path):
    _refused(_sglens_run(tmp_path, conv_overflow()), "'evil_conv'", "strides[1]")


def test_cli_conv_pad_beyond_int64_through_inputs_file(tmp_path):
    """A left pad of 2^63 - 1: shape inference flags it, but ``--inputs`` skipped inference."""
    np.savez(tmp_path / "in.npz", x=np.ones((1, 1, 2, 8), np.float32))
    data = conv_overflow(pad_left=INT64_MAX, stride=1)
    _refused(_sglens_run(tmp_path, data, "--inputs", str(tmp_path / "in.npz")), "evil_conv")


def test_cli_maxpool_overflow_through_inputs_file_returns_no_heap_bytes(tmp_path):
    np.savez(tmp_path / "in.npz", x=np.arange(1, 9, dtype=np.float32).reshape(1, 1, 1, 8))
    proc = _sglens_run(tmp_path, maxpool_overflow(), "--inputs", str(tmp_path / "in.npz"))
    _refused(proc, "'evil_pool'", "strides[1]")


def test_cli_maxpool_pad_not_smaller_than_kernel_is_refused_as_onnxruntime_does(tmp_path):
    """Small numbers, one rule: onnxruntime refuses "Pad should be smaller than kernel"."""
    line = _refused(_sglens_run(tmp_path, maxpool_overflow(pads=(0, 3, 0, 0), strides=(1, 1))),
                    "'evil_pool'", "pads[1] = 3", "smaller than the kernel")
    assert "Traceback" not in line


def test_cli_lstm_hidden_size_contradicting_r_is_refused(tmp_path):
    hs, wrong = 4, 5
    w = numpy_helper.from_array(np.zeros((1, 4 * hs, 3), np.float32), "w")
    r = numpy_helper.from_array(np.zeros((1, 4 * hs, hs), np.float32), "r")
    node = helper.make_node("LSTM", ["x", "w", "r"], ["y"], name="evil_lstm", hidden_size=wrong)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 1, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    data = sec_models.model([node], [x], [y], [w, r]).SerializeToString()
    np.savez(tmp_path / "in.npz", x=np.ones((2, 1, 3), np.float32))
    _refused(_sglens_run(tmp_path, data, "--inputs", str(tmp_path / "in.npz")),
             "evil_lstm", "hidden_size 5")


# ------------------------------------------------------------- the server --
def _wait_run(server, rid: str, timeout: float = 120) -> dict:
    deadline = time.time() + timeout
    while time.time() < deadline:
        run = server.request("GET", f"/api/runs/{rid}").json()
        if run["status"] in ("done", "failed", "cancelled"):
            return run
        time.sleep(0.2)
    pytest.fail(f"run {rid} did not finish")


def _attack(server, data: bytes, *any_of: str) -> None:
    """Upload ``data``, start a run: it fails (or is refused) with a message holding one
    of ``any_of``, and the server stays up and answers."""
    mid = server.upload(data, "evil.onnx").json()["id"]
    reply = server.request("POST", "/api/runs", {"model": mid, "backend": "default", "ops": ["Conv", "MaxPool"]})
    assert reply.status in (202, 400), reply.body[:500]
    if reply.status == 400:
        error = reply.json()["error"]
    else:
        run = _wait_run(server, reply.json()["id"])
        assert run["status"] == "failed", run
        error = run["error"]
    assert any(word in error for word in any_of), error
    assert server.proc.poll() is None, "the server died"
    assert server.request("GET", "/api/health").json() == {"ok": True}


@pytest.mark.parametrize("args", [(), ("--in-process-runs",)], ids=["dask-workers", "in-process"])
def test_server_survives_crafted_conv_and_maxpool_runs(tmp_path, args):
    """Default configuration (runs on Dask workers) and ``--in-process-runs`` (where one
    POST used to kill the web server): the runs fail naming the node, the server serves."""
    srv = start_server(tmp_path, "--instance", str(tmp_path / "instance"), *args)
    try:
        _attack(srv, conv_overflow(), "node 'evil_conv' (Conv) failed")
        # (the web run loads the model into onnxruntime as its reference, which refuses this
        # pool first; the CLI tests above reach our kernel with it)
        _attack(srv, maxpool_overflow(), "node 'evil_pool' (MaxPool) failed",
                "Pad should be smaller than kernel")
        # and a good model still runs afterwards
        mid = srv.upload(conv_overflow(pad_left=1, stride=2), "good.onnx").json()["id"]
        reply = srv.request("POST", "/api/runs", {"model": mid, "backend": "default", "ops": ["Conv", "MaxPool"]})
        assert reply.status == 202, reply.body[:500]
        assert _wait_run(srv, reply.json()["id"])["status"] == "done"
    finally:
        stop_server(srv)
