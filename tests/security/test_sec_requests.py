"""Issue 9: cross-site requests, DNS rebinding, the access token, response headers, body caps,
validation up front, and the command line's answer to a busy port, against a real server."""

from __future__ import annotations

import http.client
import subprocess

import pytest

from sec_server import SGLENS, server, start_server, stop_server  # noqa: F401 - fixture

SESSION = {"model": "sample-trt_cycle", "backend": "tensorrt"}


# ------------------------------------------------------------- cross-site --
def test_cross_origin_state_changes_are_refused(server):
    evil = {"Origin": "http://evil.example"}
    for method, path, body in (("POST", "/api/sessions", SESSION), ("POST", "/api/runs", {**SESSION}),
                               ("POST", "/api/models/sample-mlp/partition", {"backend": "tensorrt"}),
                               ("DELETE", "/api/models/sample-mlp", None)):
        reply = server.request(method, path, body, evil)
        assert reply.status == 403, (path, reply.body)
        assert "cross-origin request from 'http://evil.example' refused" in reply.json()["error"]
    assert server.upload(b"x", headers=evil).status == 403
    # a sandboxed frame or data: page sends Origin: null; a cross-site form without Origin, a Referer
    assert server.request("POST", "/api/sessions", SESSION, {"Origin": "null"}).status == 403
    assert server.request("POST", "/api/sessions", SESSION, {"Referer": "http://evil.example/page"}).status == 403
    for site in ("cross-site", "same-site"):                     # what modern browsers add on their own
        assert server.request("POST", "/api/sessions", SESSION, {"Sec-Fetch-Site": site}).status == 403
    # another port on the same host is another origin
    other = {"Origin": f"http://{server.host}:{server.port + 1}"}
    assert server.request("POST", "/api/sessions", SESSION, other).status == 403
    assert len(server.request("GET", "/api/models").json()["models"]) >= 8   # nothing was deleted


def test_same_origin_and_non_browser_requests_are_accepted(server):
    own = {"Origin": server.origin}
    assert server.request("POST", "/api/sessions", SESSION, own).status == 201
    assert server.request("POST", "/api/sessions", SESSION, {"Referer": server.origin + "/models/x"}).status == 201
    assert server.request("POST", "/api/sessions", SESSION).status == 201          # curl: no Origin at all
    assert server.request("GET", "/api/models", headers={"Origin": "http://evil.example"}).status == 200  # reads


# ------------------------------------------------------------ DNS rebinding --
@pytest.mark.parametrize("path", ["/", "/api/models", "/api/health", "/static/common.js"])
def test_foreign_host_header_is_refused(server, path):
    reply = server.request("GET", path, host="evil.example")
    assert reply.status == 400
    assert "host 'evil.example' is not allowed" in reply.json()["error"]
    reply = server.request("GET", path, host=f"evil.example:{server.port}")
    assert reply.status == 400


@pytest.mark.parametrize("host", ["127.0.0.1:{p}", "localhost:{p}", "[::1]:{p}", "LOCALHOST", "lens.example:{p}"])
def test_loopback_and_allowed_hosts_are_answered(server, host):
    assert server.request("GET", "/api/health", host=host.format(p=server.port)).status == 200


# ------------------------------------------------------------------ token --
@pytest.fixture(scope="module")
def token_server(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("token")
    srv = start_server(cwd, "--token", "s3cret-token", "--instance", str(cwd / "instance"), "--samples")
    yield srv
    stop_server(srv)


def test_token_is_required_on_every_request(token_server):
    srv = token_server
    assert srv.first_line.split()[2].endswith("?token=s3cret-token")     # printed once, with the URL
    for path in ("/", "/api/models", "/static/common.js", "/models/sample-mlp"):
        reply = srv.request("GET", path)
        assert reply.status == 401 and "access token" in reply.json()["error"], path
    assert srv.request("GET", "/api/models", headers={"Authorization": "Bearer wrong"}).status == 401
    assert srv.request("GET", "/api/models?token=wrong").status == 401
    assert srv.request("GET", "/api/models", headers={"Authorization": "Bearer s3cret-token"}).status == 200


def test_token_in_the_url_becomes_a_cookie(token_server):
    srv = token_server
    first = srv.request("GET", "/?token=s3cret-token")
    assert first.status == 302 and first.headers["Location"] == "/"        # the token leaves the address bar
    cookie = first.headers["Set-Cookie"]
    assert "sglens_token=s3cret-token" in cookie and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    again = srv.request("GET", "/", headers={"Cookie": "sglens_token=s3cret-token"})
    assert again.status == 200 and b"Upload a model" in again.body
    # the token does not replace the other guards
    assert srv.request("POST", "/api/sessions", SESSION, {"Cookie": "sglens_token=s3cret-token",
                                                          "Origin": "http://evil.example"}).status == 403


def test_non_loopback_host_generates_a_token_and_warns():
    """Binding 0.0.0.0 on a shared test machine would expose it, so the config step is checked."""
    from app.cli import add_serve_parser, serve_config
    import argparse
    parser = argparse.ArgumentParser()
    add_serve_parser(parser.add_subparsers())
    config, warnings = serve_config(parser.parse_args(["serve", "--host", "0.0.0.0"]))
    assert len(config["SGLENS_TOKEN"]) >= 30 and warnings and "reachable from other machines" in warnings[0]
    config2, _ = serve_config(parser.parse_args(["serve", "--host", "0.0.0.0"]))
    assert config2["SGLENS_TOKEN"] != config["SGLENS_TOKEN"]                # generated, not fixed
    config3, warnings3 = serve_config(parser.parse_args(["serve"]))
    assert config3["SGLENS_TOKEN"] is None and warnings3 == []             # loopback: no token needed


# ---------------------------------------------------------------- headers --
@pytest.mark.parametrize("path", ["/", "/models/sample-mlp", "/learn", "/runs/compare", "/api/models",
                                  "/static/common.js", "/api/nope", "/vendor/plotly.min.js"])
def test_security_headers_on_every_response(server, path):
    h = server.request("GET", path).headers
    csp = h["Content-Security-Policy"]
    assert "script-src 'self';" in csp and "unsafe-inline' " not in csp.split("script-src")[1].split(";")[0]
    assert "unsafe-eval" not in csp and "frame-ancestors 'none'" in csp and "object-src 'none'" in csp
    assert h["X-Content-Type-Options"] == "nosniff" and h["X-Frame-Options"] == "DENY"
    assert h["Referrer-Policy"] == "same-origin"


def test_pages_have_no_inline_script(server):
    import re
    for path in ("/", "/models/sample-mlp", "/learn", "/runs/compare"):
        html = server.request("GET", path).body.decode()
        scripts = re.findall(r"<script([^>]*)>(.*?)</script>", html, re.S)
        assert scripts and all("src=" in attrs and not body.strip() for attrs, body in scripts), path
        assert not re.search(r"<[^>]+\son[a-z]+\s*=", html), path        # no inline event handlers
        assert "javascript:" not in html


# -------------------------------------------------------------- body caps --
def test_json_bodies_are_capped(server):
    big = b'{"model": "sample-mlp", "pad": "' + b"x" * (2 << 20) + b'"}'
    reply = server.request("POST", "/api/sessions", big, {"Content-Type": "application/json"})
    assert reply.status == 413
    assert "larger than the limit of 1048576 bytes" in reply.json()["error"]
    assert server.request("GET", "/api/health").status == 200


def test_chunked_json_bodies_are_capped_too(server):
    conn = http.client.HTTPConnection(server.host, server.port, timeout=60)
    chunks = (b"x" * 65536 for _ in range(40))                      # 2.5 MiB, no Content-Length
    conn.request("POST", "/api/sessions", body=chunks, encode_chunked=True,
                 headers={"Host": f"{server.host}:{server.port}", "Content-Type": "application/json",
                          "Transfer-Encoding": "chunked"})
    resp = conn.getresponse()
    body = resp.read()
    assert resp.status == 413 and b"larger than the limit of 1048576 bytes" in body, body


# ------------------------------------------------------------- validation --
@pytest.mark.parametrize("body,needle", [
    ({"model": "sample-mlp", "backend": "no-such"}, "unknown backend 'no-such'"),
    ({"model": "sample-mlp", "backend": "default", "ops": ["Relu"], "min_size": -5}, "min_size must be at least 1, got -5"),
    ({"model": "sample-mlp", "backend": "default", "ops": ["Relu"], "min_size": "x"}, "min_size must be an integer, got 'x'"),
])
def test_bad_runs_are_refused_up_front(server, body, needle):
    runs = len(server.request("GET", "/api/runs").json()["runs"])
    reply = server.request("POST", "/api/runs", body)
    assert reply.status == 400 and needle in reply.json()["error"]
    assert len(server.request("GET", "/api/runs").json()["runs"]) == runs     # no run was queued


def test_negative_event_limit_is_refused(server):
    sid = server.request("POST", "/api/sessions", SESSION).json()["id"]
    for bad in ("-5", "x", "99999999"):
        reply = server.request("GET", f"/api/sessions/{sid}/events?limit={bad}")
        assert reply.status == 400 and "'limit'" in reply.json()["error"], bad
    assert server.request("GET", f"/api/sessions/{sid}/events?limit=3").json()["events"].__len__() <= 3


def test_errors_do_not_show_server_paths(server):
    for reply in (server.upload(b"\x08\x07garbage", "bad.onnx"), server.upload(b"", "empty.onnx"),
                  server.request("GET", "/api/models/nope"), server.request("GET", "/static/../../etc/passwd")):
        text = reply.body.decode(errors="replace")
        assert str(server.cwd) not in text and "/home/" not in text and "/tmp/" not in text, text


# --------------------------------------------------------------------- cli --
def test_busy_port_is_one_line_and_exit_2(server, tmp_path):
    proc = subprocess.run([*SGLENS, "serve", "--port", str(server.port),
                           "--instance", str(tmp_path / "i")], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    assert len(lines) == 1 and f"cannot listen on 127.0.0.1:{server.port}" in lines[0], lines
