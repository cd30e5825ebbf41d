"""The web's one selection shape, ``{"backend", "options"}`` (issue 22 item 1), with the older
top-level fields as aliases: the same partition either way, a conflict refused by name, and no
silent truncation of a bad ``trt_version``."""

from __future__ import annotations

import pytest

from app import create_app


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    app = create_app({"SGLENS_INSTANCE": str(tmp_path_factory.mktemp("inst")), "SGLENS_SAMPLES": True})
    return app.test_client()


URL = "/api/models/sample-trt_cycle/partition"


def _nodes(resp) -> list[list[str]]:
    assert resp.status_code == 200, resp.get_json()
    return [sorted(sg["nodes"]) for sg in resp.get_json()["subgraphs"]]


def test_one_shape_and_its_aliases_give_the_same_partition(client):
    one = _nodes(client.post(URL, json={"backend": "default", "options": {"ops": ["Relu", "Sigmoid", "Add"], "min_size": 2}}))
    alias = _nodes(client.post(URL, json={"backend": "default", "ops": "Relu,Sigmoid,Add", "min_size": "2"}))
    assert one == alias and one
    get = client.get("/api/models/sample-trt_cycle/layout?backend=default&options=%7B%22ops%22%3A%5B%22Relu%22%2C%22Add%22%5D%7D")
    assert get.status_code == 200 and any("sg" in n for n in get.get_json()["nodes"])


def test_tensorrt_options_in_the_one_shape(client):
    full = client.post(URL, json={"backend": "tensorrt", "options": {"min_size": 1}}).get_json()["summary"]
    fallback = client.post(URL, json={"backend": "tensorrt",
                                      "options": {"min_size": 1, "fallback_ops": ["Relu"]}}).get_json()["summary"]
    assert fallback["nodes_covered"] < full["nodes_covered"]
    old = client.post(URL, json={"backend": "tensorrt", "min_size": 1, "keep_data_dependent": True})
    assert old.status_code == 200, old.get_json()


def test_an_alias_that_disagrees_with_options_is_refused(client):
    resp = client.post(URL, json={"backend": "default", "ops": ["Relu"], "options": {"ops": ["Add"]}})
    assert resp.status_code == 400
    assert "'ops' and options.ops disagree" in resp.get_json()["error"]


def test_a_bad_trt_version_is_refused_not_truncated(client):
    resp = client.post(URL, json={"backend": "tensorrt", "trt_version": "10.1" + "x" * 30})
    assert resp.status_code == 400
    err = resp.get_json()["error"]
    assert "trt_version must be one of" in err and "x" * 30 in err
