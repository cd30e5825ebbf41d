"""Issue 21, size bombs against a real ``sglens serve`` in its default configuration: each attack
is refused with a clear 4xx before the server allocates what it asks for (the server's peak
resident memory, VmHWM, is checked against a generous bound), and the server keeps serving."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

import sec_models
from sec_server import ROOT, SGLENS, start_server, stop_server, tree_rss_peak

MiB = 1 << 20


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The default configuration: only an instance folder of its own."""
    cwd = tmp_path_factory.mktemp("limits")
    srv = start_server(cwd, "--instance", str(cwd / "instance"))
    yield srv
    stop_server(srv)


def _healthy(server) -> None:
    assert server.request("GET", "/api/health").json() == {"ok": True}


@pytest.mark.parametrize("kind", ["gnu", "pax"])
def test_tar_header_bomb_is_refused_before_it_allocates(server, kind):
    data = sec_models.tar_header_bomb(kind, 384)     # a 384 MiB long-name / pax header
    assert len(data) < 10_000
    before = server.rss_peak()
    reply = server.upload(data, "bomb.tar")
    grew = server.rss_peak() - before
    assert reply.status == 400, reply.body[:300]
    error = reply.json()["error"]
    assert "extended header" in error and "declares" in error, error
    assert grew < 96 * MiB, f"the server's peak memory grew by {grew >> 20} MiB"
    _healthy(server)
    assert not list((server.cwd / "instance" / "bundles").glob("*/*"))   # nothing left behind


def test_alias_amplification_is_refused_at_upload(server):
    """80 initializers of 16 MiB all reading the same 16 MiB of w.bin: 1.25 GiB once read,
    over the 1 GiB default limit, from a 17 KB zip."""
    data = sec_models.alias_bundle(80, 16)
    assert len(data) < 100_000
    before = tree_rss_peak(server)
    reply = server.upload(data, "alias.zip")
    assert reply.status == 400, reply.body[:300]
    error = reply.json()["error"]
    assert "once read" in error and "'w.bin'" in error and "--max-upload" in error, error
    grew = tree_rss_peak(server) - before
    assert grew < 128 * MiB, f"peak memory grew by {grew >> 20} MiB"
    _healthy(server)


def test_npz_input_bomb_is_refused_from_its_header(server):
    """A 256 MiB array in a 260 KB .npz, for an input declared [16]: refused from the .npy header."""
    mid = server.upload(sec_models.one_input_model(16), "relu.onnx").json()["id"]
    bomb = sec_models.npz_bomb(256)
    before = server.rss_peak()
    reply = _run_with_file(server, mid, bomb)
    grew = server.rss_peak() - before
    assert reply.status == 400, reply.body[:300]
    error = reply.json()["error"]
    assert "'x'" in error and "size 67108864" in error and "[16]" in error, error
    assert grew < 64 * MiB, f"the server's peak memory grew by {grew >> 20} MiB"
    _healthy(server)


def _run_with_file(server, mid: str, npz: bytes):
    import json
    import uuid
    boundary = uuid.uuid4().hex
    parts = [f"--{boundary}\r\nContent-Disposition: form-data; name=\"request\"\r\n\r\n"
             f"{json.dumps({'model': mid, 'backend': 'default', 'ops': ['Relu']})}\r\n".encode(),
             f"--{boundary}\r\nContent-Disposition: form-data; name=\"input:x\"; filename=\"x.npz\"\r\n"
             "Content-Type: application/octet-stream\r\n\r\n".encode() + npz + b"\r\n",
             f"--{boundary}--\r\n".encode()]
    return server.request("POST", "/api/runs", b"".join(parts),
                          {"Content-Type": f"multipart/form-data; boundary={boundary}"})


#: Runs a command and prints its peak resident memory (KiB) as the last line of stderr.
_PEAK = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]); "
         "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(r.returncode)")


def test_cli_npz_input_bomb_without_a_memory_limit(tmp_path):
    """``sglens run --inputs`` with no ``--memory-limit``: the 256 MiB array is refused from its
    header (the model declares [16]), exit 2 and one line, without unpacking it."""
    model = tmp_path / "m.onnx"
    model.write_bytes(sec_models.one_input_model(16))
    bomb = tmp_path / "x.npz"
    bomb.write_bytes(sec_models.npz_bomb(256))
    proc = subprocess.run([sys.executable, "-c", _PEAK, *SGLENS, "run", str(model), "--inputs", str(bomb)],
                          capture_output=True, text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                          timeout=300)
    *lines, peak_kib = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(lines) == 1 and "'x'" in lines[0] and "[16]" in lines[0], proc.stderr
    assert int(peak_kib) * 1024 < 160 * MiB, f"the CLI peaked at {int(peak_kib) >> 10} MiB"


def test_many_tiny_weights_are_refused_at_import(server):
    """150,000 scalar initializers in a 4 MB file: counted on the wire, refused before parsing."""
    data = sec_models.tiny_weights(150_000)
    before = server.rss_peak()
    reply = server.upload(data, "tiny.onnx")
    grew = server.rss_peak() - before
    assert reply.status == 400, reply.body[:300]
    error = reply.json()["error"]
    assert "150000 initializers" in error and "(100000)" in error and "--max-initializers" in error, error
    assert grew < 64 * MiB, f"the server's peak memory grew by {grew >> 20} MiB"
    _healthy(server)
    assert all(m["name"] != "tiny.onnx" for m in server.request("GET", "/api/models").json()["models"])


@pytest.fixture
def limited_server(tmp_path):
    srv = start_server(tmp_path, "--instance", str(tmp_path / "instance"), "--store-limit", str(3 * MiB))
    yield srv
    stop_server(srv)


def test_store_limit_counts_unpacked_bundles_and_stored_run_inputs(limited_server):
    server = limited_server
    # a 20 KB zip that unpacks to 4 MiB: over the 3 MiB store
    reply = server.upload(sec_models.alias_bundle(1, 4), "big.zip")
    assert reply.status == 507, reply.body[:300]
    assert "the store is full" in reply.json()["error"] and "--store-limit" in reply.json()["error"]
    assert not [p for p in (server.cwd / "instance" / "bundles").rglob("*") if p.is_file()]
    # run inputs kept for "repeat": 1.6 MB each, uncompressed on disk; the second passes the limit
    mid = server.upload(sec_models.one_input_model(400_000), "relu.onnx").json()["id"]
    import io
    import numpy as np
    buf = io.BytesIO()
    np.savez_compressed(buf, x=np.zeros(400_000, np.float32))
    first = _run_with_file(server, mid, buf.getvalue())
    assert first.status == 202, first.body[:300]
    second = _run_with_file(server, mid, buf.getvalue())
    assert second.status == 507, second.body[:300]
    assert "the store is full" in second.json()["error"]
    _healthy(server)


def test_a_name_that_is_not_utf8_is_a_400(server):
    data = sec_models.one_input_model(4).replace(b"relu", b"r\xffl\xfe")     # the node's name
    reply = server.upload(data, "latin.onnx")
    assert reply.status == 400, reply.body[:300]
    assert "node name, op type or domain is not valid UTF-8" in reply.json()["error"]
    _healthy(server)


def test_mutated_models_answer_4xx_never_500(server):
    """Byte-mutated models (seeded): each upload and the views of those accepted answer 2xx or a 4xx
    with a message; before issue 21, invalid UTF-8 in names gave 500s in uploads, layouts, partitions."""
    import random
    rng = random.Random(1)
    bases = [sec_models.injection_model(), sec_models.one_input_model(4), sec_models.wide_node(5),
             sec_models.memory_bomb()]
    statuses = []
    for _ in range(120):
        data = bytearray(rng.choice(bases))
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        reply = server.upload(bytes(data), "mutant.onnx")
        statuses.append(reply.status)
        assert reply.status in (201, 400, 413), reply.body[:300]
        if reply.status != 201:
            assert reply.json()["error"]
            continue
        mid = reply.json()["id"]
        for method, path, body in (("GET", f"/api/models/{mid}/layout", None),
                                   ("GET", f"/api/models/{mid}/inputs", None),
                                   ("POST", f"/api/models/{mid}/partition", {"backend": "tensorrt"})):
            view = server.request(method, path, body)
            assert view.status < 500, (path, view.body[:300])
        server.request("DELETE", f"/api/models/{mid}")
    assert statuses.count(201) > 5 and statuses.count(400) > 50      # both kinds were exercised
    _healthy(server)


def test_cli_default_budget_refuses_a_header_that_declares_a_terabyte(tmp_path):
    """No ``--memory-limit``: the default budget (a quarter of the memory) refuses, from the header,
    an .npz whose array declares 1 TiB for an input of symbolic size; exit 2, one line."""
    import io
    import zipfile

    import numpy as np
    model = tmp_path / "m.onnx"
    model.write_bytes(sec_models.symbolic_input_model())
    header = io.BytesIO()
    np.lib.format.write_array_header_2_0(header, {"descr": "<f4", "fortran_order": False, "shape": (1 << 38,)})
    bomb = tmp_path / "x.npz"
    with zipfile.ZipFile(bomb, "w") as zf:
        zf.writestr("x.npy", header.getvalue() + bytes(64))     # the data is never sent
    proc = subprocess.run([sys.executable, "-c", _PEAK, *SGLENS, "run", str(model), "--inputs", str(bomb)],
                          capture_output=True, text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                          timeout=300)
    *lines, peak_kib = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(lines) == 1 and "memory limit" in lines[0] and "--memory-limit" in lines[0], proc.stderr
    assert int(peak_kib) * 1024 < 160 * MiB
