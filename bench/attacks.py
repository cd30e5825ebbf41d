"""Memory of the size attacks of issue 21 at the issue's own sizes, against a real ``sglens serve``.

Reproduce from the repository root (about two minutes; the attack files are built in memory):

    .venv/bin/python bench/attacks.py

For each attack: the answer (status and the start of the message) and how much the web
process's peak resident memory (VmHWM) grew, on a fresh server each, so one attack's peak
does not hide the next. The servers run in their default configuration, except the alias
bundle, which the issue ran under ``--max-upload 8MiB``. The figures are in docs/security.md.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "security")]

import sec_models  # noqa: E402
from sec_server import start_server, stop_server  # noqa: E402

MiB = 1 << 20


def _npz_run(server, mid: str, npz: bytes):
    boundary = uuid.uuid4().hex
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"request\"\r\n\r\n"
            f"{json.dumps({'model': mid, 'backend': 'default', 'ops': ['Relu']})}\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"input:x\"; filename=\"x.npz\"\r\n"
            "Content-Type: application/octet-stream\r\n\r\n").encode() + npz + f"\r\n--{boundary}--\r\n".encode()
    return server.request("POST", "/api/runs", body, {"Content-Type": f"multipart/form-data; boundary={boundary}"})


def _attacks():
    yield "tar, GNU long name claiming 1 GiB", (), lambda s: s.upload(sec_models.tar_header_bomb("gnu", 1024), "b.tar")
    yield "tar, pax header claiming 1 GiB", (), lambda s: s.upload(sec_models.tar_header_bomb("pax", 1024), "b.tar")
    yield ("zip, 64 aliases of 4 MiB (--max-upload 8MiB)", ("--max-upload", str(8 * MiB)),
           lambda s: s.upload(sec_models.alias_bundle(64, 4), "a.zip"))

    def npz(s):
        mid = s.upload(sec_models.one_input_model(16), "relu.onnx").json()["id"]
        return _npz_run(s, mid, sec_models.npz_bomb(1024))
    yield "npz, 1 GiB of zeros for an input [16]", (), npz
    yield "1,000,000 scalar initializers", (), lambda s: s.upload(sec_models.tiny_weights(1_000_000), "t.onnx")


def main() -> None:
    print(f"{'attack':48} {'answer':60} {'peak growth':>12}")
    for name, flags, attack in _attacks():
        with tempfile.TemporaryDirectory() as tmp:
            server = start_server(Path(tmp), "--instance", str(Path(tmp) / "instance"), *flags)
            try:
                time.sleep(1)
                before = server.rss_peak()
                reply = attack(server)
                grew = server.rss_peak() - before
                answer = f"{reply.status} {reply.body[:52].decode('utf-8', 'replace')}"
                healthy = server.request("GET", "/api/health").status == 200
                print(f"{name:48} {answer:60} {grew / MiB:9.0f} MiB{'' if healthy else '  (server down!)'}")
            finally:
                stop_server(server)


if __name__ == "__main__":
    main()
