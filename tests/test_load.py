"""A bounded load test against a real ``sglens serve`` on loopback: 20 clients x 50 requests.

Each client reads the library, layouts and node panels, partitions, and steps its own debug
session (checking it only ever sees its own steps). Every answer must be a 2xx.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CLIENTS, REQUESTS = 20, 50


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    inst = tmp_path_factory.mktemp("load")
    proc = subprocess.Popen([sys.executable, "-m", "sglens", "serve", "--port", "0", "--samples",
                             "--instance", str(inst)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    line = ""
    deadline = time.time() + 60
    while time.time() < deadline:
        line = proc.stdout.readline()
        if "http://" in line or proc.poll() is not None:
            break
    if "http://" not in line:
        proc.kill()
        pytest.fail(f"sglens serve did not print its URL: {line!r}")
    url = line.split()[2].rstrip("/")
    assert url.startswith("http://127.0.0.1:")          # loopback by default
    threading.Thread(target=proc.stdout.read, daemon=True).start()
    yield url
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


def _call(url: str, method: str = "GET", body: dict | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, {"error": exc.read()[:200]}


def _client(base: str, k: int) -> list[str]:
    problems: list[str] = []
    model = ["sample-trt_cycle", "sample-mlp", "sample-resnet_small", "sample-conv_bn_relu_chain"][k % 4]
    status, s = _call(f"{base}/api/sessions", "POST", {"model": "sample-trt_cycle", "backend": "default",
                                                       "ops": ["Relu", "Sigmoid", "Add"]})
    if status != 201:
        return [f"client {k}: session {status}"]
    index = s["index"]
    for i in range(REQUESTS - 1):
        kind = i % 5
        if kind == 0:
            status, out = _call(f"{base}/api/models")
        elif kind == 1:
            status, out = _call(f"{base}/api/models/{model}/layout")
        elif kind == 2:
            status, out = _call(f"{base}/api/models/{model}/partition", "POST", {"backend": "tensorrt"})
        else:
            action = "next" if (i // 5) % 3 != 2 else "prev"
            status, out = _call(f"{base}/api/sessions/{s['id']}/step", "POST", {"action": action, "index": index})
            if status == 200:
                expect = min(index + 1, out["known"] - 1) if action == "next" else max(0, index - 1)
                if out["index"] != expect:
                    problems.append(f"client {k}: {action} from {index} gave {out['index']}")
                index = out["index"]
        if status >= 300:
            problems.append(f"client {k} request {i}: HTTP {status} {out}")
    return problems


def test_twenty_clients_fifty_requests(served):
    start = time.perf_counter()
    with ThreadPoolExecutor(CLIENTS) as pool:
        results = list(pool.map(lambda k: _client(served, k), range(CLIENTS)))
    elapsed = time.perf_counter() - start
    problems = [p for r in results for p in r]
    assert problems == []
    assert elapsed < 120, f"{CLIENTS * REQUESTS} requests took {elapsed:.1f} s"
    assert _call(f"{served}/api/health") == (200, {"ok": True})
