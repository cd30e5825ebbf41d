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


def _weight_alias_model():
    """Hugging Face style: one shared weight reached through Identity nodes (T5 draws 180 of them
    in a row), and every real node under one ``model/`` scope split into encoder and decoder."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    from conftest import make_model
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "shared.weight")
    nodes = [helper.make_node("Identity", ["shared.weight"], [f"alias{i}"], name=f"Identity_{i}") for i in range(3)]
    prev = "x"
    for i, part in enumerate(("encoder", "encoder", "decoder", "decoder")):
        nodes.append(helper.make_node("MatMul", [prev, f"alias{i % 3}"], [f"h{i}"], name=f"/model/{part}/MatMul_{i}"))
        prev = f"h{i}"
    vi = helper.make_tensor_value_info
    return make_model(nodes, [vi("x", TensorProto.FLOAT, [1, 4])], [vi(prev, TensorProto.FLOAT, [1, 4])], [w])


def test_identity_of_a_weight_folds_like_a_constant_and_does_not_count_for_layers():
    graph = load_model(_weight_alias_model().SerializeToString())
    view = layout.graph_view(graph, collapse=False, fold_constants=True)
    assert view["folded_count"] == 3 and view["folded"]["Identity_0"] == "/model/encoder/MatMul_0"
    assert not any(n["id"].startswith("Identity") for n in view["nodes"])
    # the one scope holding every real node says nothing: the layers open at encoder / decoder
    assert set(layout.useful_scopes(graph)) == {"model/encoder", "model/decoder"}
    collapsed = layout.graph_view(graph, collapse=True, fold_constants=True)
    assert {n["id"] for n in collapsed["nodes"]} == {"scope:model/encoder", "scope:model/decoder"}
    # an Identity of a graph input is a real node: drawn
    kept = layout.graph_view(load_model(bookkeeping_heavy_model().SerializeToString()), collapse=False,
                             fold_constants=True)
    assert "ident0" in {n["id"] for n in kept["nodes"]}
