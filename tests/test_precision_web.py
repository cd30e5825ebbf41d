"""The precision page and its API on a real server: a bisection end to end in chromium.

The transformer with a massive-activation input overflows FP16 (attention logits, the
LayerNorm's squares); the page must show the run history, the pins, the trtexec flags and a
download of the marked model, and the graph must be coloured. The API checks: bad requests
are 400s naming the field, one search at a time, unknown ids 404, a no-trouble model gets
"no pins needed".
"""

from __future__ import annotations

import io
import json
import time

import numpy as np
import onnx
import pytest

from browser_harness import ARTIFACTS, checked_page, chromium, playwright_or_skip, serving
from engine.precision_export import pinned_nodes
from sample_models.builders_fp16 import build_fp16_trouble_transformer, fp16_trouble_inputs


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    from app import create_app
    folder = tmp_path_factory.mktemp("prec_web")
    path = folder / "trouble.onnx"
    onnx.save(build_fp16_trouble_transformer(), path)
    npz = folder / "inputs.npz"
    np.savez(npz, **fp16_trouble_inputs())
    application = create_app({"SGLENS_INSTANCE": str(folder / "inst"), "SGLENS_MODELS": [str(path)],
                              "SGLENS_PRECISION_MAX_RUNS": 300})
    application.config["TEST_NPZ"] = str(npz)
    return application


def _model_id(client) -> str:
    models = client.get("/api/models").get_json()["models"]
    return next(m["id"] for m in models if m["name"].startswith("trouble"))


def _wait(client, jid: str, seconds: float = 120) -> dict:
    end = time.time() + seconds
    while time.time() < end:
        st = client.get(f"/api/precision/{jid}").get_json()
        if st["status"] != "running":
            return st
        time.sleep(0.1)
    raise AssertionError("the search did not finish")


def _post(client, mid: str, fields: dict, npz: str | None = None):
    data = {"request": json.dumps(fields)}
    if npz:
        data["inputs"] = (open(npz, "rb"), "inputs.npz")
    return client.post(f"/api/models/{mid}/precision", data=data, content_type="multipart/form-data")


def test_api_search_with_uploaded_inputs(app):
    client = app.test_client()
    mid = _model_id(client)
    resp = _post(client, mid, {"target": "fp16", "atol": 0.01, "rtol": 0.01}, app.config["TEST_NPZ"])
    assert resp.status_code == 202, resp.get_json()
    st = _wait(client, resp.get_json()["id"])
    assert st["status"] == "done", st
    time.sleep(0.3)   # the clock stopped when the search ended
    assert client.get(f"/api/precision/{st['id']}").get_json()["seconds"] == st["seconds"]
    rep = st["report"]
    assert "attn/scores" in rep["pins"] and rep["verified"]["match"]
    assert [e["stage"] for e in st["history"][:2]] == ["reference", "all reduced"]
    marked = onnx.load_model_from_string(client.get(f"/api/precision/{st['id']}/marked.onnx").data)
    assert pinned_nodes(marked) == rep["pins"]
    json.dumps(st, allow_nan=False)     # strict JSON: no NaN/Infinity reaches the browser


def test_api_without_trouble_and_bad_requests(app):
    client = app.test_client()
    mid = _model_id(client)
    resp = _post(client, mid, {"target": "fp16", "atol": 0.01, "rtol": 0.01})   # random inputs in [-1, 1]
    st = _wait(client, resp.get_json()["id"])
    assert st["report"]["no_pins_needed"] and st["report"]["pins"] == []
    for fields, word in (({"target": "fp8"}, "target"), ({"max_runs": 10000}, "cap of 300"),
                         ({"atol": "x"}, "atol"), ({"scope": "half"}, "scope"),
                         ({"backend": "nope"}, "nope")):
        bad = _post(client, mid, fields)
        assert bad.status_code == 400 and word in bad.get_json()["error"], (fields, bad.get_json())
    assert client.get("/api/precision/0123abcd").status_code == 404
    assert client.post("/api/models/nope/precision", json={}).status_code == 404
    assert client.get("/api/health").status_code == 200      # still serving


def test_one_search_at_a_time_and_cancel(app):
    client = app.test_client()
    mid = _model_id(client)
    # BF16 at a tolerance it cannot meet: hundreds of runs, long enough to cancel
    first = _post(client, mid, {"target": "bf16", "atol": 1e-6, "rtol": 1e-6, "max_runs": 300},
                  app.config["TEST_NPZ"])
    assert first.status_code == 202
    jid = first.get_json()["id"]
    second = _post(client, mid, {"target": "fp16"})
    assert second.status_code == 429 and jid in second.get_json()["error"]
    assert client.post(f"/api/precision/{jid}/cancel").status_code == 200
    st = _wait(client, jid, 60)
    assert st["status"] == "cancelled" and st["runs"] < 300
    assert client.get(f"/api/precision/{jid}/marked.onnx").status_code == 409
    assert _post(client, mid, {"target": "fp16"}).status_code == 202     # free again
    _wait(client, _last_job(app))


def _last_job(app) -> str:
    return next(reversed(app.extensions["sglens_precision"].jobs))


@pytest.mark.browser
def test_browser_bisection_end_to_end(app):
    sync_api = playwright_or_skip()     # here, not at import: the API tests run without chromium
    mid = _model_id(app.test_client())
    with serving(app) as url, chromium(sync_api) as browser, \
            checked_page(browser, 1400, 900, 60000, csp_errors=True) as page:
        page.goto(f"{url}/models/{mid}")
        page.wait_for_selector("body[data-ready='1']")
        page.click("#precision-link")
        page.wait_for_selector("body[data-ready='1']")
        page.fill("#p-atol", "0.01")
        page.fill("#p-rtol", "0.01")
        page.set_input_files("#p-inputs", app.config["TEST_NPZ"])
        page.click("#p-go")
        page.wait_for_selector("#p-status[data-status='done']", timeout=120000)
        pins = page.locator("#p-pins li code").all_inner_texts()
        assert "attn/scores" in pins and "attn/ln/pow" in pins
        assert int(page.locator("#p-runs tr").count()) >= 5
        assert "--layerPrecisions=" in page.inner_text("#p-trtexec")
        notes = page.locator("#p-notes li").all_inner_texts()   # the report's notes, as the CLI prints them
        assert notes and any("subgraph" in n for n in notes), notes
        # coloured by error growth: the overflowing MatMul is drawn in the inf/NaN colour
        fill = page.locator('#graph [data-id="attn/scores"] rect').evaluate("r => r.style.fill || r.getAttribute('fill')")
        assert fill and fill not in ("", "none")
        assert page.locator('#graph .node.match').count() == len(pins)
        assert "attn/scores" in page.inner_text("#p-nodes")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "precision_bisection.png"))
        with page.expect_download() as dl:
            page.click("#p-download")
        marked = onnx.load_model_from_string(open(dl.value.path(), "rb").read())
        assert pinned_nodes(marked) == pins
        # a real exporter's node names are long unbroken paths: the panel wraps them instead of
        # cutting them off at its edge (BERT's /model/encoder/layer.0/attention/output/LayerNorm/...)
        page.evaluate("""() => { const c = document.createElement("code"); c.className = "cand";
            c.textContent = "/model/" + "encoder/layer.0/attention/output/".repeat(8);
            document.getElementById("p-candidate").appendChild(c);
            const r = document.getElementById("p-result"); r.textContent += " " + c.textContent; }""")
        width, shown = page.evaluate("() => { const s = document.querySelector('.precisionpage .side');"
                                     " return [s.scrollWidth, s.clientWidth]; }")
        assert width <= shown, (width, shown)


def _strict(text: str):
    """JSON as a browser's JSON.parse reads it: a bare NaN / Infinity is an error."""
    def refuse(word):
        raise ValueError(f"not JSON: {word}")
    return json.loads(text, parse_constant=refuse)


def test_every_answer_is_json_a_browser_parses_when_values_are_infinite(tmp_path):
    """An attention mask of -inf (T5's export has them) made a node's largest input inf: the poll
    answered ``"max_abs_in": Infinity``, the page's JSON.parse failed and its search view stopped."""
    from onnx import TensorProto, helper, numpy_helper
    from app import create_app
    from conftest import make_model
    mask = numpy_helper.from_array(np.array([[0.0, 0.0, -np.inf, -np.inf]], np.float32), "mask")
    nodes = [helper.make_node("Add", ["x", "mask"], ["logits"], name="masked"),
             helper.make_node("Softmax", ["logits"], ["y"], name="softmax", axis=-1)]
    vi = helper.make_tensor_value_info
    path = tmp_path / "masked.onnx"
    onnx.save(make_model(nodes, [vi("x", TensorProto.FLOAT, [1, 4])], [vi("y", TensorProto.FLOAT, [1, 4])],
                         [mask]), path)
    application = create_app({"SGLENS_INSTANCE": str(tmp_path / "inst"), "SGLENS_MODELS": [str(path)]})
    client = application.test_client()
    mid = next(m["id"] for m in _strict(client.get("/api/models").get_data(as_text=True))["models"])
    resp = _post(client, mid, {"target": "fp16", "atol": 0.01, "rtol": 0.01})
    jid = _strict(resp.get_data(as_text=True))["id"]
    end = time.time() + 120
    while True:
        st = _strict(client.get(f"/api/precision/{jid}").get_data(as_text=True))   # every poll, not only the last
        if st["status"] != "running" or time.time() > end:
            break
        time.sleep(0.05)
    assert st["status"] == "done", st
    # the -inf reached the answer (else this proves nothing), written as a string the page shows
    assert {n["node"]: n["max_abs_in"] for n in st["nodes"]}["softmax"] == "inf"
