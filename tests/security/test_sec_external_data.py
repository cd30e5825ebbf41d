"""Issue 9, critical: an uploaded single file never reads the server's files through external data."""

from __future__ import annotations


import pytest

import sec_models
from sec_server import server  # noqa: F401 - the fixture

SECRET = b"TOP-SECRET-0123456789abcdef-do-not-leak"


@pytest.fixture(scope="module")
def secrets_in_cwd(server):
    """Files an attacker would aim at: one in the server's working folder, its run database."""
    (server.cwd / "secret.bin").write_bytes(SECRET)
    assert (server.cwd / "instance" / "runs.sqlite3").exists()
    return server


CASES = [
    ("initializer", sec_models.external_initializer, "secret.bin"),
    ("constant", sec_models.external_constant, "secret.bin"),
    ("constant-db", sec_models.external_constant, "instance/runs.sqlite3"),
    ("if-body", sec_models.external_in_if_body, "secret.bin"),
    ("absolute", sec_models.external_constant, "/etc/passwd"),
    ("dotdot", sec_models.external_initializer, "../../../../etc/hostname"),
]


@pytest.mark.parametrize("label,build,location", CASES, ids=[c[0] for c in CASES])
def test_upload_with_external_data_is_refused(secrets_in_cwd, label, build, location):
    server = secrets_in_cwd
    before = {m["id"] for m in server.request("GET", "/api/models").json()["models"]}
    reply = server.upload(build(location), f"{label}.onnx")
    assert reply.status == 400, reply.body
    err = reply.json()["error"]
    assert f"model uses external data file '{location}'" in err        # the uploader's own text, quoted
    assert "upload the model together with its data files" in err
    # nothing leaked: no content, no size, no server path
    assert SECRET[:8].decode() not in err and str(len(SECRET)) not in err
    assert str(server.cwd) not in err
    size = (server.cwd / "instance" / "runs.sqlite3").stat().st_size
    assert str(size) not in err
    after = {m["id"] for m in server.request("GET", "/api/models").json()["models"]}
    assert after == before                       # the refused upload left nothing behind
    leftovers = list((server.cwd / "instance" / "uploads").glob("*.onnx")) if (server.cwd / "instance" / "uploads").exists() else []
    assert all(p.stem in after for p in leftovers)


def test_upload_temp_files_live_in_the_instance_folder(server):
    """Multipart bodies are spooled to the instance folder's tmp/, and nothing is left there after."""
    data = sec_models.chain_without_scopes(20)
    reply = server.upload(data + b"", "ok.onnx")
    assert reply.status == 201, reply.body
    tmp = server.cwd / "instance" / "tmp"
    assert tmp.is_dir() and list(tmp.iterdir()) == []      # unnamed temp files: gone once closed
    assert server.request("DELETE", f"/api/models/{reply.json()['id']}").status == 200
