"""Issue 21: debug-session eviction counts sessions per remote address, not per cookie. A real
``sglens serve`` bound to all addresses: the victim on loopback, the attacker on this machine's
own non-loopback address opening sessions with a fresh cookie each time."""

from __future__ import annotations

import http.client
import json

import pytest

import sec_models
from sec_server import start_server, stop_server


def _own_address() -> str | None:
    import psutil
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family.name == "AF_INET" and not a.address.startswith("127."):
                return a.address
    return None


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if _own_address() is None:
        pytest.skip("this machine has no non-loopback IPv4 address")
    cwd = tmp_path_factory.mktemp("sessions")
    srv = start_server(cwd, "--host", "0.0.0.0", "--instance", str(cwd / "instance"))
    srv.token = srv.first_line.split("token=", 1)[1].split()[0]
    yield srv
    stop_server(srv)


def _call(server, via: str, method: str, path: str, body: dict | None = None, cookie: str = "") -> tuple[int, dict]:
    conn = http.client.HTTPConnection(via, server.port, timeout=60)
    headers = {"Host": f"{via}:{server.port}", "Authorization": f"Bearer {server.token}",
               "Content-Type": "application/json"}
    if cookie:
        headers["Cookie"] = f"sglens_client={cookie}"
    try:
        conn.request(method, path, json.dumps(body).encode() if body is not None else None, headers)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")
    finally:
        conn.close()


def test_fresh_cookies_from_one_address_cannot_evict_another_address(server):
    boundary = "b0undary"
    data = sec_models.one_input_model(4)
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"m.onnx\"\r\n\r\n").encode() \
        + data + f"\r\n--{boundary}--\r\n".encode()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    conn.request("POST", "/api/models", body, {"Host": f"127.0.0.1:{server.port}", "Authorization": f"Bearer {server.token}",
                                              "Content-Type": f"multipart/form-data; boundary={boundary}"})
    mid = json.loads(conn.getresponse().read())["id"]
    conn.close()
    request = {"model": mid, "backend": "default", "ops": ["Relu"]}
    status, mine = _call(server, "127.0.0.1", "POST", "/api/sessions", request, cookie="victimcookie0001")
    assert status == 201, mine
    attacker = _own_address()
    made = []
    for _ in range(70):                            # more than the 64 sessions kept, a new cookie each time
        status, made_one = _call(server, attacker, "POST", "/api/sessions", request)
        assert status == 201, made_one
        made.append(made_one["id"])
    status, still = _call(server, "127.0.0.1", "GET", f"/api/sessions/{mine['id']}", cookie="victimcookie0001")
    assert status == 200, still                    # the victim's session is still there
    gone = [sid for sid in made[:10] if _call(server, attacker, "GET", f"/api/sessions/{sid}")[0] == 404]
    assert gone, "the attacker's own oldest sessions went"
    assert _call(server, "127.0.0.1", "GET", "/api/health")[1] == {"ok": True}
