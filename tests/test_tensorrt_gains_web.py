"""The TensorRT tab's "what to support first" ranking on the web: the route against the library's
``rank_gains`` (the same figures), its bounds, and in a real browser (Playwright + Debian chromium)
the ranking shown in the tab with its "treat as supported (plugin)" box re-partitioning live.
Screenshot: ``test-artifacts/screenshots/trt_gains_*.png``."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from browser_harness import checked_page, chromium, playwright_or_skip, save_screenshot, serving_with_model


def dla_chain(blocks: int):
    """Conv -> Elu ``blocks`` times: on the DLA every Elu falls back to the GPU (Orin's matrix: not through
    TensorRT) and splits the DLA regions, so 17 blocks are 17 loadables, one over the per-core limit."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])
    nodes, t = [], "x"
    for i in range(blocks):
        nodes += [helper.make_node("Conv", [t, "k"], [f"c{i}"], name=f"conv{i}", pads=[1, 1, 1, 1]),
                  helper.make_node("Elu", [f"c{i}"], [f"l{i}"], name=f"elu{i}")]
        t = f"l{i}"
    graph = helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info(t, TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.ones((8, 8, 3, 3), np.float32) / 72, "k")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.fixture
def app(tmp_path):
    from app import create_app
    return create_app({"SGLENS_INSTANCE": str(tmp_path / "inst")})


def _upload(app, model):
    import io
    resp = app.test_client().post("/api/models", data={"file": (io.BytesIO(model.SerializeToString()), "c.onnx")},
                                  content_type="multipart/form-data")
    assert resp.status_code in (200, 201), resp.get_json()
    return resp.get_json()["id"]


def test_route_gives_the_library_ranking_and_is_bounded(app):
    from partition import load_model
    from partition.tensorrt.gains import rank_gains
    model = dla_chain(17)
    mid = _upload(app, model)
    client = app.test_client()
    options = {"trt_target": "dla", "trt_version": "8.6"}
    resp = client.get(f"/api/models/{mid}/gains", query_string={"options": json.dumps(options)})
    assert resp.status_code == 200, resp.get_json()
    got = resp.get_json()
    want = rank_gains(load_model(model.SerializeToString()), options)
    assert got["op_types"] == json.loads(json.dumps(want["op_types"])) and got["base"] == want["base"]
    assert got["base"]["subgraphs"] == 17 and got["op_types"][0]["op_type"] == "Elu"
    assert got["op_types"][0]["gain"]["subgraphs_merged"] == 16   # one loadable instead of 17
    # a bad option is a 400 naming it; the server keeps serving
    bad = client.get(f"/api/models/{mid}/gains", query_string={"options": json.dumps({"trt_target": "tpu"})})
    assert bad.status_code == 400 and "trt_target" in bad.get_json()["error"]
    assert client.get(f"/api/models/{mid}/gains").status_code == 200
    # above the node limit: refused with the CLI to use instead
    app.config["SGLENS_GAINS_MAX_NODES"] = 10
    big = client.get(f"/api/models/{mid}/gains", query_string={"options": json.dumps({"trt_version": "10.0"})})
    assert big.status_code == 413 and "sglens gains" in big.get_json()["error"]
    assert client.get("/api/models/nope/gains").status_code == 404


# ------------------------------------------------------------------------------------- browser --
def _wait(pg, js: str, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout   # polled: wait_for_function evaluates strings, which the CSP forbids
    while not pg.evaluate(js):
        assert time.monotonic() < end, f"timed out waiting for {js}"
        pg.wait_for_timeout(50)


@pytest.mark.browser
def test_tab_ranks_and_the_toggle_repartitions_live(app):
    sync_api = playwright_or_skip()
    with serving_with_model(app, dla_chain(17), "chain.onnx") as (base, mid), chromium(sync_api) as browser, \
            checked_page(browser, 1400, 900, 60000) as pg:
        pg.goto(f"{base}/models/{mid}")
        pg.wait_for_selector("body[data-ready='1']")
        pg.click("[data-tab=trt]")
        pg.select_option("#trt-opt-trt_target", "dla")
        pg.click("#trt-go")
        pg.wait_for_selector("#trt-gains-ops")
        assert "17 DLA loadables; at most 16" in pg.inner_text("#trt-dla")
        assert "none" in pg.inner_text("#trt-dla-changes")          # 10.1 reads the same Orin matrix as 10.0
        header = pg.inner_text("#trt-gains-ops tr:first-child")
        assert "loadables saved" in header
        best = pg.locator("#trt-gains-ops tr.gain-best td")
        assert best.nth(0).inner_text() == "Elu" and best.nth(1).inner_text() == "17" and best.nth(2).inner_text() == "16"
        assert "now: 17 DLA loadable(s)" in pg.inner_text("#trt-gains")
        pg.locator("#trt-gains").scroll_into_view_if_needed()
        save_screenshot(pg, "trt_gains_dla")
        pg.click('#trt-gains-ops .trt-assume[data-op="Elu"]')          # treat Elu as supported (a plugin)
        _wait(pg, "() => (document.querySelector('#trt-dla') || {}).textContent?.startsWith('1 of at most 16')")
        assert "Elu" in pg.input_value("#trt-opt-assume_supported")
        pg.wait_for_selector("#trt-gains p")
        _wait(pg, "() => /nothing left out/.test(document.querySelector('#trt-gains').textContent)")
        assert pg.locator('#trt-unsupported .trt-assume[data-op="Elu"]:checked').count() == 1
        pg.locator("#trt-summary").scroll_into_view_if_needed()
        save_screenshot(pg, "trt_gains_assumed")
        pg.click('#trt-unsupported .trt-assume[data-op="Elu"]')         # and back
        _wait(pg, "() => (document.querySelector('#trt-dla') || {}).textContent?.startsWith('17 of at most 16')")
        pg.wait_for_selector("#trt-gains-ops")
