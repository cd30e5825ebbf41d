"""The web API through Flask's test client: models, layout, partition, sessions, groups, errors."""

from __future__ import annotations

import io
import json
import os
import uuid

import onnx
import onnxruntime as ort
import pytest

from app import create_app
from partition.api import unregister_backend
from sglens.cli import main as cli_main
from sample_models.generate import build_all

TRT_OPS = ["Relu", "Sigmoid", "Add"]


@pytest.fixture
def app(tmp_path):
    return create_app({"SGLENS_SAMPLES": True, "SGLENS_INSTANCE": str(tmp_path / "instance"), "TESTING": True})


@pytest.fixture
def client(app):
    return app.test_client()


def _upload(client, data: bytes, name: str = "m.onnx"):
    return client.post("/api/models", data={"file": (io.BytesIO(data), name)},
                       content_type="multipart/form-data")


def _error(resp, status):
    assert resp.status_code == status, resp.get_data(as_text=True)
    body = resp.get_json()
    assert isinstance(body, dict) and set(body) == {"error"} and body["error"], body
    return body["error"]


# ------------------------------------------------------------------ models --
def test_health_and_sample_library(client):
    assert client.get("/api/health").get_json() == {"ok": True}
    models = {m["name"]: m for m in client.get("/api/models").get_json()["models"]}
    assert set(build_all()) <= set(models)
    m = models["trt_cycle.onnx"]
    assert m["nodes"] == 4 and m["op_counts"] == {"Add": 1, "Det": 1, "Relu": 1, "Sigmoid": 1}
    assert m["inputs"] == [{"name": "input", "dtype": "FLOAT", "shape": [4, 4], "bytes": 64}]
    assert m["opset"][""] == 17 and m["source"] == "sample"


def test_upload_stores_under_a_generated_name(client, app):
    data = build_all()["mlp.onnx"].SerializeToString()
    resp = _upload(client, data, "../../etc/evil name.onnx")
    assert resp.status_code == 201
    body = resp.get_json()
    assert body["name"] == "evil name.onnx" and body["nodes"] == 10 and body["id"]
    files = os.listdir(os.path.join(app.instance_path, "uploads"))
    assert files == [f"{body['id']}.onnx"]
    assert not os.path.exists(os.path.join(app.instance_path, "..", "etc"))
    assert client.get(f"/api/models/{body['id']}").get_json()["op_counts"]["MatMul"] == 3
    assert any(m["id"] == body["id"] for m in client.get("/api/models").get_json()["models"])


@pytest.mark.parametrize("payload, needle", [
    (b"", "empty"),
    (b"this is not a protobuf at all \xff\xfe", "not a valid ONNX model"),
    (build_all()["resnet_small.onnx"].SerializeToString()[:5000], "ONNX"),
])
def test_bad_uploads_are_4xx_and_leave_nothing(client, app, payload, needle):
    msg = _error(_upload(client, payload, "bad.onnx"), 400)
    assert needle in msg and "bad.onnx" in msg
    assert os.listdir(os.path.join(app.instance_path, "uploads")) == []
    assert client.get("/api/health").status_code == 200


def test_upload_over_the_limit_is_413(tmp_path):
    app = create_app({"SGLENS_INSTANCE": str(tmp_path), "SGLENS_MAX_UPLOAD": 1000})
    c = app.test_client()
    msg = _error(_upload(c, build_all()["mlp.onnx"].SerializeToString()), 413)
    assert "limit" in msg
    assert os.listdir(tmp_path / "uploads") == []
    # far over the limit: Flask's MAX_CONTENT_LENGTH answers before reading
    _error(_upload(c, b"x" * (3 << 20)), 413)


def test_upload_without_file_field(client):
    assert "field 'file'" in _error(client.post("/api/models", data={}), 400)


def test_unknown_model_route_and_method_are_json(client):
    _error(client.get("/api/models/nope"), 404)
    _error(client.get("/api/does-not-exist"), 404)
    _error(client.post("/api/health"), 405)
    _error(client.post("/api/models/sample-mlp/partition", data="{not json",
                       content_type="application/json"), 400)


# --------------------------------------------------------------- partition --
def test_partition_is_the_cli_json(client, tmp_path, capsys):
    path = tmp_path / "trt_cycle.onnx"
    onnx.save_model(build_all()["trt_cycle.onnx"], str(path))
    assert cli_main(["partition", str(path), "--ops", ",".join(TRT_OPS), "--json"]) == 0
    expected = json.loads(capsys.readouterr().out)
    got = client.post("/api/models/sample-trt_cycle/partition", json={"backend": "default", "ops": TRT_OPS})
    assert got.status_code == 200
    got = got.get_json()
    expected.pop("seconds"), got.pop("seconds")
    assert got == expected
    assert got["cycles"] == [{"property": "default", "seed": "A", "path": ["A", "D", "C"], "excluded": "C"}]


def test_partition_errors(client):
    assert "unknown backend" in _error(client.post("/api/models/sample-mlp/partition",
                                                   json={"backend": "no-such"}), 400)  # a bad field in the request, not a missing resource
    assert "needs the op types" in _error(client.post("/api/models/sample-mlp/partition",
                                                      json={"backend": "default"}), 400)
    _error(client.post("/api/models/sample-mlp/partition", json={"backend": "default", "ops": "Relu",
                                                                 "min_size": "x"}), 400)


def test_rule_selector_from_json(client):
    rule = {"name": "gemmish", "ops": ["MatMul", "Add", "Relu"],
            "conditions": [{"op": "*", "attr": "alpha", "cmp": "absent"}]}
    got = client.post("/api/models/sample-mlp/partition", json={"backend": "rule", "rule": rule}).get_json()
    assert got["subgraphs"] and all(s["property"] == "gemmish" for s in got["subgraphs"])
    covered = {n for s in got["subgraphs"] for n in s["nodes"]}
    assert all("softmax" not in n.lower() for n in covered)
    # a condition that no Conv meets leaves the Convs out, with the rule's reason
    rule2 = {"ops": ["Conv", "Relu"], "conditions": [{"op": "Conv", "attr": "group", "cmp": ">", "value": 4}]}
    got2 = client.post("/api/models/sample-resnet_small/partition", json={"backend": "rule", "rule": rule2}).get_json()
    reasons = {e["reason"] for e in got2["excluded"]}
    assert any("condition 'group > 4' does not hold" in r for r in reasons)
    for bad in ({"ops": []}, {"ops": ["Relu"], "conditions": [{"attr": "x", "cmp": "~"}]},
                {"ops": ["Relu"], "name": "../x"}, "import os", {"ops": ["Relu"], "conditions": [{"attr": "a", "cmp": "in", "value": 3}]}):
        _error(client.post("/api/models/sample-mlp/partition", json={"backend": "rule", "rule": bad}), 400)


def _convs_with_and_without_group():
    """x -> a (Conv, no group attribute: group 1 by ONNX's schema) -> r (Relu) -> b (Conv, group 2)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    from conftest import make_model
    w1 = numpy_helper.from_array(np.ones((4, 2, 1, 1), np.float32), "w1")
    w2 = numpy_helper.from_array(np.ones((4, 2, 1, 1), np.float32), "w2")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], name="a"),
             helper.make_node("Relu", ["a"], ["r"], name="r"),
             helper.make_node("Conv", ["r", "w2"], ["b"], name="b", group=2)]
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
                      [helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 4, 4, 4])], [w1, w2])


def test_a_rule_compares_an_attribute_a_node_leaves_out_as_its_onnx_default(client):
    """A Conv without ``group`` has group 1: ``group == 1`` selects it, as ONNX and every
    backend read it. ``absent`` still asks whether the node sets it; an attribute with no
    schema default (``strides``), left out, fails a comparison."""
    mid = _upload(client, _convs_with_and_without_group().SerializeToString()).get_json()["id"]

    def covered(*conditions):
        rule = {"ops": ["Conv", "Relu"], "conditions": [dict(zip(("op", "attr", "cmp", "value"), c)) for c in conditions]}
        got = client.post(f"/api/models/{mid}/partition", json={"backend": "rule", "rule": rule, "min_size": 1})
        assert got.status_code == 200, got.get_data(as_text=True)
        data = got.get_json()
        return {n for sg in data["subgraphs"] for n in sg["nodes"]}, {e["node"]: e["reason"] for e in data["excluded"]}

    nodes, why = covered(("Conv", "group", "==", 1))
    assert nodes == {"a", "r"} and "condition 'group == 1' does not hold" in why["b"]
    nodes, _ = covered(("Conv", "group", "in", [2, 3]))
    assert nodes == {"r", "b"}
    nodes, _ = covered(("Conv", "group", "absent", None))
    assert nodes == {"a", "r"}
    nodes, _ = covered(("Conv", "strides", "==", [1, 1]))
    assert nodes == {"r"}
    # the node panel shows the same reading: what a node leaves out, as its default
    a = client.get(f"/api/models/{mid}/node?name=a").get_json()
    b = client.get(f"/api/models/{mid}/node?name=b").get_json()
    assert "group" not in a["attrs"] and a["attr_defaults"]["group"] == 1 and a["attr_defaults"]["auto_pad"] == "NOTSET"
    assert b["attrs"]["group"] == 2 and "group" not in b["attr_defaults"] and "strides" not in b["attr_defaults"]


def test_a_rule_compares_float_attributes_as_onnx_stores_them(client):
    """ONNX keeps float attributes in float32: 0.2 is stored as 0.2000000030, so a condition
    typed as 0.2 compares in float32 too; the default alpha (0.01) likewise."""
    import numpy as np
    from onnx import TensorProto, helper
    from conftest import make_model
    nodes = [helper.make_node("LeakyRelu", ["x"], ["a"], name="a", alpha=0.2),
             helper.make_node("LeakyRelu", ["a"], ["b"], name="b")]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                       [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])])
    mid = _upload(client, model.SerializeToString()).get_json()["id"]
    assert client.get(f"/api/models/{mid}/node?name=a").get_json()["attrs"]["alpha"] == float(np.float32(0.2)) != 0.2

    def covered(cmp, value):
        rule = {"ops": ["LeakyRelu"], "conditions": [{"op": "LeakyRelu", "attr": "alpha", "cmp": cmp, "value": value}]}
        got = client.post(f"/api/models/{mid}/partition", json={"backend": "rule", "rule": rule, "min_size": 1}).get_json()
        return {n for sg in got["subgraphs"] for n in sg["nodes"]}

    assert covered("==", 0.2) == {"a"}
    assert covered("==", 0.01) == {"b"}
    assert covered("in", [0.01, 0.2]) == {"a", "b"}
    assert covered("!=", 0.2) == {"b"}
    assert covered("<", 0.1) == {"b"}
    assert covered(">=", 1e300) == set()     # past float32's range: inf, no error


def test_downloads_run_in_onnxruntime(client):
    q = "backend=tensorrt"
    sub = client.get(f"/api/models/sample-resnet_small/subgraphs/0.onnx?{q}")
    assert sub.status_code == 200 and "attachment" in sub.headers["Content-Disposition"]
    ort.InferenceSession(sub.data, providers=["CPUExecutionProvider"])
    whole = client.get(f"/api/models/sample-resnet_small/partitioned.onnx?{q}")
    model = onnx.load_from_string(whole.data)
    assert any(n.domain == "sglens" for n in model.graph.node)
    _error(client.get(f"/api/models/sample-resnet_small/subgraphs/99.onnx?{q}"), 404)


def test_groups_of_the_incompatible_node(client):
    g = client.get("/api/models/sample-trt_cycle/groups?node=D").get_json()
    assert g["compatible"] is False and "Det" in g["reason"]
    assert g["ancestors"] == ["A"] and g["descendants"] == ["C"]
    _error(client.get("/api/models/sample-trt_cycle/groups?node=../../x"), 404)


# ------------------------------------------------------------------ layout --
def test_flat_layout_with_clusters_is_cached_and_stable(client):
    plain = client.get("/api/models/sample-trt_cycle/layout").get_json()
    assert plain["mode"] == "flat" and plain["clusters"] == []
    ids = {n["id"] for n in plain["nodes"]}
    assert {"A", "B", "C", "D", "in:input", "out:output"} == ids
    by = {n["id"]: n for n in plain["nodes"]}
    assert by["A"]["y"] < by["B"]["y"] < by["C"]["y"]          # y grows downwards, data flows down
    assert all(len(e["points"]) >= 2 for e in plain["edges"])
    again = client.get("/api/models/sample-trt_cycle/layout").get_json()
    assert again["nodes"] == plain["nodes"]
    part = client.get("/api/models/sample-trt_cycle/layout?backend=default&ops=Relu,Sigmoid,Add").get_json()
    assert sorted(c["id"] for c in part["clusters"]) == [0, 1]
    assert {n["id"]: n.get("sg") for n in part["nodes"] if n["kind"] == "node"} == \
        {"A": 0, "B": 0, "C": 1, "D": None}


def test_collapsed_layout_by_scope_expands_one_level(tmp_path):
    app = create_app({"SGLENS_SAMPLES": True, "SGLENS_INSTANCE": str(tmp_path), "SGLENS_FLAT_LIMIT": 10})
    c = app.test_client()
    top = c.get("/api/models/sample-resnet_small/layout").get_json()
    assert top["mode"] == "collapsed"
    groups = {n["id"]: n for n in top["nodes"] if n["kind"] == "group"}
    assert "scope:stem" in groups and sum(g["count"] for g in groups.values()) <= 30
    assert top["units"]["stem/conv"] == "scope:stem"
    opened = c.get("/api/models/sample-resnet_small/layout?expand=scope:stem").get_json()
    ids = {n["id"] for n in opened["nodes"]}
    assert "stem/conv" in ids and "scope:stem" not in ids
    assert opened["expanded"] == ["scope:stem"]


def test_node_panel_and_bodies(client):
    n = client.get("/api/models/sample-resnet_small/node?name=stem/conv").get_json()
    assert n["op_type"] == "Conv" and "kernel_shape" in n["attrs"]
    assert n["inputs"][0]["shape"] == [1, 3, 32, 32] and n["inputs"][1]["weight"] is True
    assert n["outputs"][0]["dtype"] == "FLOAT"
    models = {m["name"]: m["id"] for m in client.get("/api/models").get_json()["models"]}
    mid = models["if_model.onnx"]
    layout = client.get(f"/api/models/{mid}/layout").get_json()
    holder = next(x for x in layout["nodes"] if x.get("bodies"))
    body = f"{holder['id']}:{holder['bodies'][0]}"
    inner = client.get(f"/api/models/{mid}/layout", query_string={"body": body}).get_json()
    assert inner["body"] == body and inner["nodes"]
    inner_node = next(x for x in inner["nodes"] if x["kind"] == "node")
    detail = client.get(f"/api/models/{mid}/node", query_string={"body": body, "name": inner_node["id"]})
    assert detail.status_code == 200
    _error(client.get(f"/api/models/{mid}/layout", query_string={"body": "nope:body"}), 404)
    _error(client.get("/api/models/sample-mlp/node?name=missing"), 404)


# ---------------------------------------------------------------- sessions --
def _start(client, **kw):
    body = {"model": "sample-trt_cycle", "backend": "default", "ops": TRT_OPS, **kw}
    resp = client.post("/api/sessions", json=body)
    assert resp.status_code == 201, resp.get_data(as_text=True)
    return resp.get_json()


def test_session_steps_forward_back_first_last(client):
    s = _start(client)
    sid = s["id"]
    assert s["index"] == 0 and s["event"]["kind"] == "pass_start" and s["known"] == 1
    step = lambda **b: client.post(f"/api/sessions/{sid}/step", json=b).get_json()  # noqa: E731
    e1 = step(action="next", index=0)
    assert e1["index"] == 1 and e1["event"]["kind"] == "seed" and e1["highlight"]["node"] == ["A"]
    assert e1["known"] == 2            # pulled live, one event at a time
    e2 = step(action="next", index=1)
    assert e2["event"]["call"] == "select_output(A, B) -> True"
    assert e2["highlight"]["candidates"] == ["A", "B"] and "joins through select_output" in e2["event"]["text"]
    back = step(action="prev", index=2)
    assert back["index"] == 1 and back["event"] == e1["event"] and back["known"] == 3
    cyc = step(action="run", index=1, breakpoint={"cycle": True})
    assert cyc["event"]["kind"] == "cycle" and cyc["highlight"]["path"] == ["A", "D", "C"]
    assert cyc["breakpoint_hit"] is True
    # the model's only cycle is behind: a second run ends on the last event and says it met none
    again = step(action="run", index=cyc["index"], breakpoint={"cycle": True})
    assert again["breakpoint_hit"] is False and again["done"] and again["event"]["kind"] == "pass_end"
    assert again["index"] == again["known"] - 1
    assert "A -> D -> C" in cyc["event"]["text"]
    nxt = step(action="next", index=cyc["index"])
    assert nxt["event"]["kind"] == "exclude" and nxt["event"]["node"] == "C"
    last = step(action="last", index=0)
    assert last["done"] and last["event"]["kind"] == "pass_end"
    assert last["subgraphs"] == [{"id": 0, "nodes": ["A", "B"]}, {"id": 1, "nodes": ["C"]}]
    first = step(action="first", index=last["index"])
    assert first["index"] == 0 and first["subgraphs"] == []
    mid = step(action="goto", index=13)
    assert mid["subgraphs"] == [{"id": 0, "nodes": ["A", "B"]}]
    to_op = step(action="run", index=0, breakpoint={"op": "Det"})
    assert "D" in (to_op["event"]["node"], to_op["event"]["neighbour"])
    kinds = client.get(f"/api/sessions/{sid}/events?kinds=cycle").get_json()
    assert [e["path"] for e in kinds["events"]] == [["A", "D", "C"]]


def test_session_errors_and_isolation(client, app):
    a, b = _start(client), _start(client)
    assert a["id"] != b["id"] and len(a["id"]) >= 20
    client.post(f"/api/sessions/{a['id']}/step", json={"action": "last", "index": 0})
    sb = client.get(f"/api/sessions/{b['id']}").get_json()
    assert sb["known"] == 1                      # b did not move when a did
    _error(client.post(f"/api/sessions/{a['id']}/step", json={"action": "jump"}), 400)
    _error(client.post(f"/api/sessions/{a['id']}/step", json={"action": "run", "breakpoint": {"kind": "x"}}), 400)
    _error(client.post(f"/api/sessions/{a['id']}/step", json={"action": "run", "breakpoint": {}}), 400)
    # a node or op type the model lacks could never match: refused, naming it, the session unmoved
    for spec, named in (({"node": "no_such_node"}, "no_such_node"), ({"op": "conv"}, "conv")):
        err = _error(client.post(f"/api/sessions/{b['id']}/step",
                                 json={"action": "run", "index": 0, "breakpoint": spec}), 400)
        assert f"'{named}'" in err and "in this model" in err
    assert client.get(f"/api/sessions/{b['id']}").get_json()["known"] == 1
    # a node inside a body is named with the control-flow node that holds it: the one to break at
    s = client.post("/api/sessions", json={"model": "sample-loop_model", "backend": "default", "ops": "Loop,Mul"})
    assert s.status_code == 201, s.get_data(as_text=True)
    err = _error(client.post(f"/api/sessions/{s.get_json()['id']}/step",
                             json={"action": "run", "index": 0, "breakpoint": {"node": "loop/body/mul_decay"}}), 400)
    assert "inside the body of 'loop/loop'" in err and "break at 'loop/loop'" in err
    _error(client.post("/api/sessions/not-a-session/step", json={}), 404)
    _error(client.post("/api/sessions", json={"model": "sample-trt_cycle", "backend": "nope"}), 400)
    _error(client.post("/api/sessions", json={}), 400)


def test_sessions_are_bounded_lru(tmp_path):
    app = create_app({"SGLENS_SAMPLES": True, "SGLENS_INSTANCE": str(tmp_path), "SGLENS_MAX_SESSIONS": 2})
    c = app.test_client()
    ids = [_start(c)["id"] for _ in range(3)]
    _error(c.get(f"/api/sessions/{ids[0]}"), 404)
    assert c.get(f"/api/sessions/{ids[2]}").status_code == 200


# ----------------------------------------------------------------- plugins --
PLUGIN = '''
from partition import SubgraphProperty, SubgraphSelector, register_subgraph_property

class Sel(SubgraphSelector):
    def select(self, node):
        if node.op_type == "Det":
            raise RuntimeError("boom in select")
        return node.op_type == "Relu"
    def select_output(self, node, out):
        return out.op_type in ("Sigmoid", "Relu")

class Prop(SubgraphProperty):
    property_name = "{name}"
    def create_subgraph_selector(self):
        return Sel()

register_subgraph_property("{name}", Prop())
'''


def test_plugin_stepped_live_and_plugin_errors(tmp_path):
    name = f"plug_{uuid.uuid4().hex[:8]}"
    good = tmp_path / "good.py"
    good.write_text(PLUGIN.format(name=name))
    broken = tmp_path / "broken.py"
    broken.write_text("raise ValueError('cannot import me')\n")
    try:
        app = create_app({"SGLENS_SAMPLES": True, "SGLENS_INSTANCE": str(tmp_path / "i"),
                          "SGLENS_PLUGINS": (str(good), str(broken))})
        c = app.test_client()
        be = c.get("/api/backends").get_json()
        assert {"name": name, "plugin": True, "needs_ops": False} in be["backends"]
        assert "cannot import me" in be["plugin_errors"][str(broken)]
        s = _start(c, backend=name, ops=None)  # a plugin backend without a schema takes no options
        st = c.post(f"/api/sessions/{s['id']}/step", json={"action": "last", "index": 0}).get_json()
        assert st["done"] and "boom in select" in st["error"] and "select(D (Det))" in st["error"]
        assert st["event"] is not None                 # the events before the failure stay viewable
        msg = _error(c.post("/api/models/sample-trt_cycle/partition", json={"backend": name}), 400)
        assert "boom in select" in msg
        assert c.get("/api/health").get_json() == {"ok": True}
    finally:
        unregister_backend(name)


# ---------------------------------------------------------------- teaching --
def test_walkthrough_is_the_real_trace_explained(client):
    data = client.get("/api/learn").get_json()
    steps = data["steps"]
    texts = [s["text"] for s in steps]
    assert data["nodes"] == {"A": "Relu", "B": "Sigmoid", "D": "Det", "C": "Add"}
    assert any(t.startswith("A (Relu) is selected as a seed") for t in texts)
    assert any(t.startswith("B (Sigmoid) joins through select_output") for t in texts)
    cycle = next(s for s in steps if s["kind"] == "cycle")
    assert "A -> D -> C" in cycle["text"] and "D is outside" in cycle["text"]
    exclude = next(s for s in steps if s["kind"] == "exclude")
    assert exclude["node"] == "C" and "starts again" in exclude["text"]
    assert {n["id"] for n in data["layout"]["nodes"]} >= {"A", "B", "C", "D"}


# -------------------------------------------------------------------- pages --
def test_pages_render_and_plotly_is_served(client):
    for url, needle in (("/", "Upload a model"), ("/learn", "Why partitioning must avoid cycles"),
                        ("/models/sample-mlp", "data-model=\"sample-mlp\""), ("/runs/compare", "Compare two runs")):
        r = client.get(url)
        assert r.status_code == 200 and needle in r.get_data(as_text=True), url
    js = client.get("/vendor/plotly.min.js")
    assert js.status_code == 200 and js.content_length > 1_000_000 and b"plotly" in js.data[:2000].lower()
    js.close()
    gone = client.get("/models/unknown")   # issue 12: a page saying the model is gone, not raw JSON
    assert gone.status_code == 404 and "not loaded on this server" in gone.get_data(as_text=True)


def test_serve_command_is_registered():
    from sglens.cli import build_parser
    args = build_parser().parse_args(["serve", "--samples", "--plugin", "a.py"])
    assert args.host == "127.0.0.1" and args.port == 8000 and args.samples and args.plugin == ["a.py"]


def test_upload_with_external_data_is_refused_without_reading_files(client, app):
    from onnx import TensorProto, helper
    from conftest import make_model
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4])
    w.data_location = TensorProto.EXTERNAL
    w.external_data.add(key="location", value="../../../../etc/passwd")
    model = make_model([helper.make_node("Add", ["x", "w"], ["y"], name="add")],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], [w])
    msg = _error(_upload(client, model.SerializeToString(), "ext.onnx"), 400)
    assert "external" in msg and "passwd" in msg
    assert os.listdir(os.path.join(app.instance_path, "uploads")) == []


def test_collapsed_view_groups_by_partition(tmp_path):
    app = create_app({"SGLENS_SAMPLES": True, "SGLENS_INSTANCE": str(tmp_path), "SGLENS_FLAT_LIMIT": 10})
    c = app.test_client()
    q = "backend=tensorrt&group=partition"
    view = c.get(f"/api/models/sample-conv_bn_relu_chain/layout?{q}").get_json()
    parts = [n for n in view["nodes"] if n.get("group") == "part"]
    result = c.post("/api/models/sample-conv_bn_relu_chain/partition", json={"backend": "tensorrt"}).get_json()
    assert len(parts) == len(result["subgraphs"]) >= 1
    assert sum(p["count"] for p in parts) == sum(len(s["nodes"]) for s in result["subgraphs"])
    opened = c.get(f"/api/models/sample-conv_bn_relu_chain/layout?{q}&expand={parts[0]['id']}").get_json()
    assert parts[0]["id"] not in {n["id"] for n in opened["nodes"]}


def test_layout_falls_back_to_collapsed_when_dot_is_too_slow(monkeypatch):
    import app.layout as layout
    from partition import load_model
    from sample_models.synthetic import synthetic_model
    g = load_model(synthetic_model(300).SerializeToString())
    real = layout._dot_json
    sizes = []

    def slow_when_big(source):
        sizes.append(source.count("\n"))
        if sizes[-1] > 300:          # the flat graph: "times out"; the collapsed one is small
            raise layout.LayoutTimeout("dot took over 60 s")
        return real(source)
    monkeypatch.setattr(layout, "_dot_json", slow_when_big)
    view = layout.graph_view(g, flat_limit=1500)
    assert len(sizes) == 2
    assert view["mode"] == "collapsed" and "too long" in view["note"]
    assert sum(n.get("count", 1) for n in view["nodes"]) == 300


def test_unknown_ops_load_and_are_explained(client):
    from onnx import TensorProto, helper
    from conftest import make_model
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("FrobnicateOp", ["a"], ["b"], name="frob", domain="com.example"),
             helper.make_node("Relu", ["b"], ["y"], name="relu2")]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])])
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    up = _upload(client, model.SerializeToString(), "custom.onnx")
    assert up.status_code == 201, up.get_data(as_text=True)
    mid = up.get_json()["id"]
    res = client.post(f"/api/models/{mid}/partition", json={"backend": "tensorrt"}).get_json()
    reason = {e["node"]: e["reason"] for e in res["excluded"]}["frob"]
    assert "FrobnicateOp" in reason
    assert client.get(f"/api/models/{mid}/layout").get_json()["mode"] == "flat"


def test_node_panel_names_data_type_attributes(client):
    """Cast's ``to`` is an enum number in ONNX (magika's Cast read "to 6"): the answer names it."""
    from onnx import TensorProto, helper
    from conftest import make_model
    vi = helper.make_tensor_value_info
    nodes = [helper.make_node("Cast", ["x"], ["y"], name="to_int", to=TensorProto.INT32),
             helper.make_node("Relu", ["x"], ["z"], name="relu")]
    model = make_model(nodes, [vi("x", TensorProto.FLOAT, [2])],
                       [vi("y", TensorProto.INT32, [2]), vi("z", TensorProto.FLOAT, [2])])
    resp = client.post("/api/models", data={"file": (io.BytesIO(model.SerializeToString()), "cast.onnx")},
                       content_type="multipart/form-data")
    mid = resp.get_json()["id"]
    cast = client.get(f"/api/models/{mid}/node?name=to_int").get_json()
    assert cast["attrs"]["to"] == TensorProto.INT32 and cast["attr_dtypes"] == {"to": "INT32"}
    assert client.get(f"/api/models/{mid}/node?name=relu").get_json()["attr_dtypes"] == {}
