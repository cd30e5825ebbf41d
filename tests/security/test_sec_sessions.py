"""Issue 21: debug-session eviction counts sessions per remote address, not per cookie. A real
``sglens serve`` on its default loopback address: the victim connects from 127.0.0.1, the attacker
from another loopback address (127.0.0.2, bound as the client's source address), opening sessions
with a fresh cookie each time. Only loopback traffic: nothing leaves the machine."""

from __future__ import annotations

import http.client
import json

import pytest

import sec_models
from sec_server import start_server, stop_server


ATTACKER = "127.0.0.2"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("sessions")
    # Loopback clients count by address here (by cookie by default, for a local reverse proxy), so two
    # loopback addresses stand for two machines: the same grouping every non-loopback address gets.
    srv = start_server(cwd, "--instance", str(cwd / "instance"), env={"SGLENS_LOOPBACK_CLIENTS": "address"})
    yield srv
    stop_server(srv)


def _call(server, source: str, method: str, path: str, body: dict | None = None,
          cookie: str = "") -> tuple[int, dict]:
    """A request to the server's own address from ``source`` (any 127.x address is this machine)."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=60, source_address=(source, 0))
    headers = {"Host": f"{server.host}:{server.port}", "Content-Type": "application/json"}
    if cookie:
        headers["Cookie"] = f"sglens_client={cookie}"
    try:
        conn.request(method, path, json.dumps(body).encode() if body is not None else None, headers)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")
    finally:
        conn.close()


def test_fresh_cookies_from_one_address_cannot_evict_another_address(server):
    up = server.upload(sec_models.one_input_model(4))
    assert up.status == 201, up.body
    mid = up.json()["id"]
    request = {"model": mid, "backend": "default", "ops": ["Relu"]}
    status, mine = _call(server, "127.0.0.1", "POST", "/api/sessions", request, cookie="victimcookie0001")
    assert status == 201, mine
    attacker = ATTACKER
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
