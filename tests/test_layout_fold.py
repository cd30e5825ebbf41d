"""Constant nodes folded in the drawing (on by default, with a count; ``constants=1`` draws them)
and tensor shapes on the flat view's edges (issue 20's minors). Real graphviz, the app's API."""

from __future__ import annotations

import io

import pytest

from app import create_app
from app import layout
from ui_models import bookkeeping_heavy_model
from partition.onnx_io import load_model


def test_graph_view_folds_constants_into_their_consumers():
    graph = load_model(bookkeeping_heavy_model().SerializeToString())
    view = layout.graph_view(graph, collapse=False, fold_constants=True)
    drawn = {n["id"] for n in view["nodes"] if n["kind"] == "node"}
    assert not any(n.startswith("const") for n in drawn)
    assert view["folded_count"] == 8
    assert view["folded"]["const0"] == "mul0" and view["folded"]["const_b0"] == "add0"
    assert all(e["source"] in drawn | {"in:x"} for e in view["edges"])
    plain = layout.graph_view(graph, collapse=False)
    assert {n["id"] for n in plain["nodes"]} >= {"const0", "const_b3"} and plain["folded_count"] == 0
    collapsed = layout.graph_view(graph, collapse=True, fold_constants=True)
    assert "const0" not in collapsed["units"] and collapsed["folded"]["const0"]


def test_edges_carry_known_shapes():
    graph = load_model(bookkeeping_heavy_model().SerializeToString())
    view = layout.graph_view(graph, collapse=False, fold_constants=True)
    by_pair = {(e["source"], e["target"]): e for e in view["edges"]}
    assert by_pair[("in:x", "ident0")]["shapes"] == ["1×4"]
    assert by_pair[("mul0", "add0")]["shapes"] == ["1×4"]


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    return create_app({"SGLENS_INSTANCE": str(tmp_path_factory.mktemp("inst"))}).test_client()


def test_layout_api_folds_by_default(client):
    resp = client.post("/api/models", data={"file": (io.BytesIO(bookkeeping_heavy_model().SerializeToString()), "b.onnx")},
                       content_type="multipart/form-data")
    mid = resp.get_json()["id"]
    folded = client.get(f"/api/models/{mid}/layout").get_json()
    assert folded["folded_count"] == 8 and len([n for n in folded["nodes"] if n["kind"] == "node"]) == 20
    shown = client.get(f"/api/models/{mid}/layout?constants=1").get_json()
    assert shown["folded_count"] == 0 and len([n for n in shown["nodes"] if n["kind"] == "node"]) == 28
