"""Issue 21, connections against a real ``sglens serve`` in its default configuration: an idle-socket
flood from one address does not keep other clients out, and waitress's own error answers carry
the security headers. Loopback only; every loop is bounded."""

from __future__ import annotations

import socket
import time

import pytest

from sec_server import start_server, stop_server

#: The default of ``--connections-per-client``.
PER_CLIENT = 32


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("conns")
    srv = start_server(cwd, "--instance", str(cwd / "instance"))
    yield srv
    stop_server(srv)


def _exchange(server, raw: bytes, source: str = "127.0.0.1", timeout: float = 10) -> bytes:
    """Send ``raw`` from ``source`` and read the answer until the server closes or it is complete."""
    with socket.create_connection((server.host, server.port), timeout=timeout, source_address=(source, 0)) as s:
        s.sendall(raw)
        data = b""
        deadline = time.time() + timeout
        while time.time() < deadline:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
            head, sep, body = data.partition(b"\r\n\r\n")
            length = [int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:")]
            if sep and length and len(body) >= length[0]:
                break
        return data


def _get(server, path: str, source: str = "127.0.0.1") -> bytes:
    return _exchange(server, f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
                             "Connection: close\r\n\r\n".encode(), source)


def test_an_idle_socket_flood_does_not_keep_others_out(server):
    flood: list[socket.socket] = []
    try:
        for _ in range(200):                      # opened, nothing sent
            flood.append(socket.create_connection((server.host, server.port), timeout=5))
        time.sleep(0.5)                           # the server has accepted what it will
        # another address (127.0.0.2 is loopback too) is answered at once
        started = time.time()
        reply = _get(server, "/api/health", source="127.0.0.2")
        assert reply.startswith(b"HTTP/1.1 200") and b'"ok":true' in reply.replace(b" ", b""), reply[:300]
        assert time.time() - started < 10
        # the flooding address itself is told why, in a 503 with our headers
        over = _get(server, "/api/health")
        assert over.startswith(b"HTTP/1.1 503"), over[:300]
        assert b"too many open connections from your address" in over and b"Content-Security-Policy" in over
        # the server holds at most PER_CLIENT of the flood: the rest were closed at once
        closed = 0
        for s in flood:
            s.settimeout(0.05)
            try:
                if s.recv(1024).startswith(b"HTTP/1.1 503"):
                    closed += 1
            except (TimeoutError, OSError):
                pass
        assert closed >= 200 - PER_CLIENT
    finally:
        for s in flood:
            s.close()
    deadline = time.time() + 10                   # once the flood is gone, the address is served again
    while time.time() < deadline and not _get(server, "/api/health").startswith(b"HTTP/1.1 200"):
        time.sleep(0.2)
    assert _get(server, "/api/health").startswith(b"HTTP/1.1 200")


def test_waitress_error_answers_carry_the_security_headers(server):
    big = _exchange(server, f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nX-Big: {'a' * 70_000}\r\n\r\n".encode())
    bad = _exchange(server, b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n")
    for reply in (big, bad):
        status = reply.split(b"\r\n", 1)[0]
        assert status.split(b" ")[1].startswith(b"4"), reply[:300]   # waitress answers HTTP/1.0 here
        for header in (b"Content-Security-Policy: default-src 'self'", b"X-Frame-Options: DENY",
                       b"X-Content-Type-Options: nosniff"):
            assert header in reply, (status, header)
    assert _get(server, "/api/health").startswith(b"HTTP/1.1 200")
