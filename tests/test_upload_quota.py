"""Imported uploads held in memory are charged by their objects to the client that uploaded them
(issue 21): over its quota a client's oldest graphs leave memory, and are imported again when used."""

from __future__ import annotations

import io
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "security"))

import sec_models  # noqa: E402

from app import create_app  # noqa: E402
from app.quota import BYTES_PER_OBJECT  # noqa: E402


def test_a_clients_graphs_are_charged_by_their_objects(tmp_path):
    # 2,000 initializers + 1 node each: about 2.8 MB per model; 6 MB per client
    app = create_app({"SGLENS_INSTANCE": str(tmp_path), "SGLENS_CLIENT_CACHE_BYTES": 6_000_000,
                      "SGLENS_CACHE_BYTES": 100_000_000})
    alice, mallory = app.test_client(), app.test_client()
    data = sec_models.tiny_weights(2000)

    def upload(client):
        reply = client.post("/api/models", data={"file": (io.BytesIO(data), "t.onnx")})
        assert reply.status_code == 201, reply.get_json()
        return reply.get_json()["id"]

    mine = upload(alice)
    theirs = [upload(mallory) for _ in range(4)]
    lens = app.extensions["sglens"]
    usage = lens.graphs.usage()
    assert max(usage.values()) <= 6_000_000 and min(usage.values()) == 2001 * BYTES_PER_OBJECT
    held = set(lens.models._graphs)
    assert mine in held and theirs[-1] in held and theirs[0] not in held   # mallory pays for mallory
    assert mallory.get(f"/api/models/{theirs[0]}/inputs").status_code == 200   # imported again from disk
    assert mallory.delete(f"/api/models/{theirs[-1]}").status_code == 200
    assert theirs[-1] not in lens.graphs


def test_models_read_back_from_disk_after_a_restart_are_charged_too(tmp_path):
    """After a restart no upload charged anything: each model a client opened was read back
    from disk and stayed in memory, uncharged, however many were opened."""
    data = sec_models.tiny_weights(2000)
    first = create_app({"SGLENS_INSTANCE": str(tmp_path)}).test_client()
    ids = [first.post("/api/models", data={"file": (io.BytesIO(data), f"t{i}.onnx")}).get_json()["id"]
           for i in range(4)]
    app = create_app({"SGLENS_INSTANCE": str(tmp_path), "SGLENS_CLIENT_CACHE_BYTES": 6_000_000,
                      "SGLENS_CACHE_BYTES": 100_000_000})
    client, lens = app.test_client(), app.extensions["sglens"]
    assert len(client.get("/api/models").get_json()["models"]) == 4   # listing reads no model
    assert not lens.models._graphs
    for mid in ids:
        assert client.get(f"/api/models/{mid}/inputs").status_code == 200
    assert max(lens.graphs.usage().values()) <= 6_000_000
    assert set(lens.models._graphs) == {ids[2], ids[3]}   # the oldest two left memory
    assert client.get(f"/api/models/{ids[0]}/inputs").status_code == 200   # read again when used
