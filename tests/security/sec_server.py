"""A real ``sglens serve`` on loopback for the attack tests: started as a subprocess in its own
working folder (where an attacker would aim relative paths), spoken to over raw HTTP."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: How the tests start the command line: the package's own entry module (no stale console script).
SGLENS = [sys.executable, "-m", "sglens"]


@dataclass
class Reply:
    status: int
    headers: http.client.HTTPMessage
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Server:
    proc: subprocess.Popen
    host: str
    port: int
    cwd: Path
    first_line: str
    stderr: list[str] = field(default_factory=list)

    @property
    def origin(self) -> str:
        return f"http://{self.host}:{self.port}"

    def request(self, method: str, path: str, body: bytes | dict | None = None,
                headers: dict[str, str] | None = None, host: str | None = None) -> Reply:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=120)
        hdrs = {"Host": host or f"{self.host}:{self.port}", **(headers or {})}
        if isinstance(body, dict):
            body = json.dumps(body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        try:
            conn.request(method, path, body=body, headers=hdrs)
            resp = conn.getresponse()
            return Reply(resp.status, resp.headers, resp.read())
        finally:
            conn.close()

    def upload(self, data: bytes, name: str = "m.onnx", headers: dict[str, str] | None = None) -> Reply:
        boundary = uuid.uuid4().hex
        body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\n"
                "Content-Type: application/octet-stream\r\n\r\n").encode() + data + f"\r\n--{boundary}--\r\n".encode()
        return self.request("POST", "/api/models", body,
                            {"Content-Type": f"multipart/form-data; boundary={boundary}", **(headers or {})})

    def rss_peak(self) -> int:
        """The server's peak resident memory in bytes (VmHWM)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        return 0


def start_server(cwd: Path, *args: str, env: dict[str, str] | None = None) -> Server:
    cmd = [*SGLENS, "serve", "--port", "0", *args]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT), **(env or {})}
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    err: list[str] = []
    threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True).start()
    line = ""
    deadline = time.time() + 90
    while time.time() < deadline:
        line = proc.stdout.readline()
        if "http://" in line or proc.poll() is not None:
            break
    if "http://" not in line:
        proc.kill()
        pytest.fail(f"sglens serve did not start: {line!r} {''.join(err)}")
    threading.Thread(target=proc.stdout.read, daemon=True).start()
    hostport = line.split("http://", 1)[1].split("/", 1)[0]
    host, _, port = hostport.rpartition(":")
    return Server(proc, host, int(port), cwd, line.strip(), err)


def stop_server(srv: Server) -> None:
    srv.proc.terminate()
    try:
        srv.proc.wait(10)
    except subprocess.TimeoutExpired:
        srv.proc.kill()
        srv.proc.wait(10)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("served")
    srv = start_server(cwd, "--samples", "--instance", str(cwd / "instance"),
                       "--allowed-host", "lens.example", "--run-memory-limit", str(200 << 20))
    yield srv
    stop_server(srv)


def tree_rss_peak(srv: Server) -> int:
    """Peak resident bytes of the server and its child processes (Dask workers, inference
    children) added up: each one's VmHWM, so a generous bound on what the machine gave them."""
    import psutil
    total = 0
    try:
        procs = [psutil.Process(srv.proc.pid), *psutil.Process(srv.proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    for p in procs:
        try:
            for line in Path(f"/proc/{p.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total
