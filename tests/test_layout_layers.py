"""app/layout.py for issue 12: name scopes as layers, the search index, stacked runs of nodes."""

from __future__ import annotations

from onnx import TensorProto
from onnx import helper as oh

from app import layout
from partition import load_model


def _graph(names_ops, branches: bool = False):
    nodes, outs = [], []
    prev = "x"
    for i, (name, op) in enumerate(names_ops):
        src = "x" if branches else prev
        nodes.append(oh.make_node(op, [src], [f"t{i}"], name=name))
        prev = f"t{i}"
        outs.append(prev)
    if branches:
        nodes.append(oh.make_node("Concat", outs, ["y"], name="concat", axis=0))
        prev = "y"
    g = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                      [oh.make_tensor_value_info(prev, TensorProto.FLOAT, None)])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)
    return load_model(m.SerializeToString())


def test_a_root_scope_holding_every_node_is_skipped():
    """``/model/...`` everywhere: the layers start one level down (model.0, model.1), not one box."""
    g = _graph([(f"/model/layer{i // 3}/op{i}", "Relu") for i in range(9)])
    view = layout.graph_view(g, collapse=True)
    groups = sorted(n["id"] for n in view["nodes"] if n["kind"] == "group")
    assert groups == ["scope:model/layer0", "scope:model/layer1", "scope:model/layer2"]
    assert view["layers"] is True


def test_layered_graphs_open_by_scope_past_the_threshold_and_flat_ones_do_not():
    layered = _graph([(f"/blk{i // 50}/op{i}", "Relu") for i in range(layout.LAYERS_OPEN + 1)])
    scopes = frozenset(p for n in layered.nodes for p in layout.scope_parts(n.name))
    assert layout.normalise(layered, scopes, "", None, 1500)[1] is True
    plain = _graph([(f"op{i}", "Relu") for i in range(layout.LAYERS_OPEN + 1)])
    assert layout.normalise(plain, frozenset(), "", None, 1500)[1] is False
    assert layout.has_layers(plain) is False
    small = _graph([(f"/blk{i // 5}/op{i}", "Relu") for i in range(20)])   # small: flat, layers on request
    small_scopes = frozenset(p for n in small.nodes for p in layout.scope_parts(n.name))
    assert layout.normalise(small, small_scopes, "", None, 1500)[1] is False


def test_search_index_lists_names_ops_and_output_tensors():
    g = _graph([("/a/conv", "Relu"), ("/a/act", "Sigmoid")])
    view = layout.graph_view(g, collapse=False)
    assert view["search"] == [["/a/conv", "Relu", ["t0"]], ["/a/act", "Sigmoid", ["t1"]]]


def test_runs_of_parallel_branches_are_stacked_and_edges_keep_their_own_points():
    """Runs no edge joins are chained by invisible edges (a column, not one very wide rank); every
    drawn edge gets the spline of its own two ends (dot may reorder its edge list)."""
    g = _graph([(f"b{i}", "Relu") for i in range(450)], branches=True)
    view = layout.graph_view(g, flat_limit=200)
    runs = sorted((n for n in view["nodes"] if n["id"].startswith("seq:")), key=lambda n: int(n["id"][4:].split("-")[0]))
    assert len(runs) == 5
    assert all(a["y"] < b["y"] for a, b in zip(runs, runs[1:]))            # stacked top to bottom
    pos = {n["id"]: n for n in view["nodes"]}
    for e in view["edges"]:
        if e.get("ghost"):
            continue
        (x0, y0), (x1, y1) = e["points"][0], e["points"][-1]
        src, dst = pos[e["source"]], pos[e["target"]]
        assert abs(x0 - src["x"]) <= src["w"] / 2 + 2 and abs(y0 - src["y"]) <= src["h"] / 2 + 2
        assert abs(x1 - dst["x"]) <= dst["w"] / 2 + 2 and abs(y1 - dst["y"]) <= dst["h"] / 2 + 12


def test_get_requests_take_options_as_json_text(tmp_path):
    """The layout (and other GET routes) carry the backend's options as JSON text; bad text is a 400."""
    import json

    from app import create_app
    c = create_app({"SGLENS_SAMPLES": True, "SGLENS_INSTANCE": str(tmp_path)}).test_client()
    url = "/api/models/sample-trt_cycle/layout?backend=tensorrt"
    two = c.get(url).get_json()                                           # min_size 2: C is left out
    one = c.get(url + "&options=" + json.dumps({"min_size": 1})).get_json()
    sg = lambda v: {n["id"]: n.get("sg") for n in v["nodes"] if n["kind"] == "node"}  # noqa: E731
    assert sg(two)["C"] is None and sg(one)["C"] is not None
    bad = c.get(url + "&options={nope")
    assert bad.status_code == 400 and "options" in bad.get_json()["error"]
    unknown = c.get(url + "&options=" + json.dumps({"bogus": 1}))
    assert unknown.status_code == 400 and "bogus" in unknown.get_json()["error"]
    listed = c.get(url + "&options=[1]")
    assert listed.status_code == 400


def test_a_scope_of_one_node_is_drawn_as_the_node():
    g = _graph([("/m/conv/Conv", "Conv"), ("/m/act/Sigmoid", "Sigmoid"), ("/m/act/Mul", "Mul"), ("/n/x", "Relu")])
    view = layout.graph_view(g, collapse=True, expanded={"scope:m"})
    ids = {n["id"] for n in view["nodes"]}
    assert ids == {"/m/conv/Conv", "scope:m/act", "/n/x"}


def test_open_scopes_are_framed_nested():
    g = _graph([("/m/conv/Conv", "Conv"), ("/m/act/Sigmoid", "Sigmoid"), ("/m/act/Mul", "Mul"), ("/n/x", "Relu"), ("/n/y", "Relu")])
    view = layout.graph_view(g, collapse=True, expanded={"scope:m", "scope:m/act"})
    boxes = {b["id"]: b for b in view["scopes"]}
    assert set(boxes) == {"m", "m/act"}
    outer, inner = boxes["m"], boxes["m/act"]
    assert outer["x"] <= inner["x"] and inner["x"] + inner["w"] <= outer["x"] + outer["w"]
    assert outer["y"] <= inner["y"] and inner["y"] + inner["h"] <= outer["y"] + outer["h"]
    pos = {n["id"]: n for n in view["nodes"]}
    for name, box in (("/m/act/Mul", inner), ("/m/conv/Conv", outer)):
        n = pos[name]
        assert box["x"] <= n["x"] - n["w"] / 2 and n["x"] + n["w"] / 2 <= box["x"] + box["w"]
    n = pos["scope:n"]                                                      # outside every frame
    assert not (outer["x"] <= n["x"] <= outer["x"] + outer["w"] and outer["y"] <= n["y"] <= outer["y"] + outer["h"])


def test_layered_view_edges_carry_shapes_like_the_flat_view():
    """GPT-2 opened by scope showed no shape on any edge (only the flat view had them): an edge
    carrying one tensor gets that tensor's name and shape; one carrying several says how many."""
    nodes = [oh.make_node("Relu", ["x"], ["a"], name="/blk0/r0"),
             oh.make_node("Relu", ["a"], ["b"], name="/blk0/r1"),
             oh.make_node("Sigmoid", ["b"], ["c"], name="/blk1/s0"),
             oh.make_node("Add", ["b", "a"], ["d"], name="/blk1/s1"),
             oh.make_node("Mul", ["c", "d"], ["y"], name="/blk1/m"),
             oh.make_node("Relu", ["y"], ["z"], name="/blk2/r")]
    g = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
                      [oh.make_tensor_value_info("z", TensorProto.FLOAT, None)])
    graph = load_model(oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)], ir_version=8).SerializeToString())
    view = layout.graph_view(graph, collapse=True)
    assert view["mode"] == "collapsed"
    by_pair = {(e["source"], e["target"]): e for e in view["edges"]}
    one = by_pair[("scope:blk1", "/blk2/r")]   # a one-node scope is drawn as the node
    assert one["tensors"] == ["y"] and one["shapes"] == ["batch×3"]
    across = by_pair[("scope:blk0", "scope:blk1")]
    assert across["tensors"] == ["2 tensors"] and across["shapes"] == [None]   # a and b
