"""One selection (backend + options) for the whole model page, kept in the URL (issue 20's major).

In a real chromium: ``fallback_ops`` set in the toolbar is what the TensorRT tab shows and
partitions with (it used to keep its own copy and wipe the toolbar's); a reload restores the
selection; the page's URL opened in a fresh browser context (a shared link) gives the same
selection and the same partition. Also the ``ops`` guess on a fresh page: compute ops, not
Constant/Identity/Shape.
"""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlparse

import pytest

from browser_harness import checked_page, chromium, playwright_or_skip, save_screenshot, serving_with_model
from ui_models import bookkeeping_heavy_model, control_flow_top_model

pytestmark = pytest.mark.browser

sync_api = playwright_or_skip()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from app import create_app
    app = create_app({"SGLENS_SAMPLES": True, "SGLENS_INSTANCE": str(tmp_path_factory.mktemp("inst"))})
    with serving_with_model(app, bookkeeping_heavy_model(), "book.onnx") as served:
        yield served


@pytest.fixture(scope="module")
def browser():
    with chromium(sync_api) as b:
        yield b


def shot(pg, name: str) -> None:
    save_screenshot(pg, f"selection_{name}")


def url_selection(url: str) -> tuple[str, dict]:
    q = parse_qs(urlparse(url).query)
    return q["backend"][0], json.loads(q.get("options", ["{}"])[0])


def open_page(pg, url: str) -> None:
    pg.goto(url)
    pg.wait_for_selector("body[data-ready='1']")


def coverage(pg) -> str:
    return pg.inner_text("#trt-summary")


def test_toolbar_options_are_the_tensorrt_tab_s_and_survive_reload_and_sharing(server, browser):
    base, _ = server
    with checked_page(browser, 1440, 900, 30000) as pg:
        open_page(pg, f"{base}/models/sample-trt_cycle")
        pg.select_option("#backend", "tensorrt")
        pg.fill("#opt-fallback_ops", "Relu")                        # set in the toolbar
        assert url_selection(pg.evaluate("location.href")) == ("tensorrt", {"fallback_ops": ["Relu"]})
        pg.click("[data-tab=trt]")
        assert pg.input_value("#trt-opt-fallback_ops") == "Relu"     # the tab shows the same state
        assert "fallback_ops=Relu" in pg.inner_text("#trt-selection")
        pg.click("#trt-go")
        pg.wait_for_selector("#trt-summary")
        with_fallback = coverage(pg)
        assert "100.0%" not in with_fallback                          # Relu forced out: not full coverage
        assert pg.input_value("#opt-fallback_ops") == "Relu"         # the toolbar was not overridden
        assert url_selection(pg.evaluate("location.href")) == ("tensorrt", {"fallback_ops": ["Relu"]})
        shot(pg, "trt_tab")

        pg.fill("#trt-opt-min_size", "3")                             # an edit in the tab shows in the toolbar
        assert pg.input_value("#opt-min_size") == "3"
        assert url_selection(pg.evaluate("location.href")) == ("tensorrt", {"fallback_ops": ["Relu"], "min_size": 3})

        pg.reload()                                                   # a reload restores it
        pg.wait_for_selector("body[data-ready='1']")
        assert pg.input_value("#backend") == "tensorrt"
        assert pg.input_value("#opt-fallback_ops") == "Relu" and pg.input_value("#opt-min_size") == "3"
        assert pg.input_value("#trt-opt-fallback_ops") == "Relu"
        shared = pg.evaluate("location.href")

    with checked_page(browser, 1920, 1080, 30000) as fresh:          # a shared link, a fresh context
        open_page(fresh, shared)
        assert fresh.input_value("#backend") == "tensorrt"
        assert fresh.input_value("#opt-fallback_ops") == "Relu" and fresh.input_value("#opt-min_size") == "3"
        fresh.click("[data-tab=trt]")
        assert fresh.input_value("#trt-opt-min_size") == "3"
        fresh.click("#trt-go")
        fresh.wait_for_selector("#trt-summary")
        assert fresh.input_value("#opt-fallback_ops") == "Relu"
        assert url_selection(fresh.evaluate("location.href")) == ("tensorrt", {"fallback_ops": ["Relu"], "min_size": 3})


def test_debugger_uses_the_page_selection(server, browser):
    base, _ = server
    with checked_page(browser, 1440, 900, 30000) as pg:
        open_page(pg, f"{base}/models/sample-trt_cycle?backend=default&ops=Relu,Add")   # the older link shape
        assert pg.input_value("#ops") == "Relu,Add"
        assert url_selection(pg.evaluate("location.href")) == ("default", {"ops": ["Relu", "Add"]})
        pg.click("#dbg-start")
        pg.wait_for_selector("#dbg-status[data-index='0']")
        pg.select_option("#bp-type", "kind")
        pg.select_option("#bp-kind", "pass_end")
        pg.click("#dbg-run")
        pg.wait_for_selector("#dbg-kind:text('pass_end')")
        # the session partitioned what the toolbar says: only Relu and Add nodes in subgraphs
        ops = pg.evaluate("""() => { const S = SG.M.S; const byId = new Map(S.layout.nodes.map(n => [n.id, n.op]));
          return [...new Set(S.dbgSubgraphs.flatMap(sg => sg.nodes).map(n => byId.get(n)))]; }""")
        assert ops and set(ops) <= {"Relu", "Add"}, ops


def test_ops_guess_is_compute_ops(server, browser):
    base, mid = server
    with checked_page(browser, 1440, 900, 30000) as pg:
        open_page(pg, f"{base}/models/{mid}")
        guess = pg.input_value("#ops").split(",")
        assert set(guess) == {"Mul", "Add", "Relu"}, guess               # not Constant, Identity, Shape
        assert url_selection(pg.evaluate("location.href")) == ("default", {"ops": guess})


def test_a_top_level_without_compute_ops_still_runs_on_a_fresh_page(browser, tmp_path_factory):
    """Casts and an Equal around one If holding the compute: the guess falls back to the most
    frequent op types (If among them) instead of none, and the first click on "Run comparison"
    gives a finished run, not "backend 'default' needs the op types"."""
    from app import create_app
    app = create_app({"SGLENS_INSTANCE": str(tmp_path_factory.mktemp("inst_cf"))})
    with serving_with_model(app, control_flow_top_model(), "cf.onnx") as (base, mid):
        with checked_page(browser, 1440, 900, 60000) as pg:
            open_page(pg, f"{base}/models/{mid}")
            guess = pg.input_value("#ops").split(",")
            assert "If" in guess and "Identity" not in guess, guess
            pg.click("[data-tab=runs]")
            pg.wait_for_selector("fieldset.input-spec")
            pg.click("#run-go")
            pg.wait_for_selector("#run-plots .run-summary", timeout=120000)
            assert "match" in pg.inner_text("#run-plots .run-summary")
            assert pg.is_hidden("#run-error")
            shot(pg, "control_flow_top")


def test_constants_folded_with_shapes_on_edges_and_search_position(server, browser):
    base, mid = server
    with checked_page(browser, 1440, 900, 30000) as pg:
        open_page(pg, f"{base}/models/{mid}")
        assert "8 constant nodes folded" in pg.inner_text("#constants-toggle")
        assert pg.locator('#graph g.node[data-id="const0"]').count() == 0
        shapes = pg.eval_on_selector_all("#graph .edge text.shape", "ts => ts.map(t => t.textContent)")
        assert shapes and set(shapes) == {"1×4"}
        pg.fill("#search", "const")                                   # folded nodes are found in their consumer
        pg.wait_for_selector("#graph[data-hit]")
        assert pg.inner_text("#search-count") == "1/8"
        assert "match" in pg.get_attribute('#graph g.node[data-id="mul0"]', "class")
        pg.press("#search", "Enter")
        assert pg.inner_text("#search-count") == "2/8"
        shot(pg, "folded")
        pg.click("#constants-toggle")                                 # draw them
        pg.wait_for_selector('#graph g.node[data-id="const0"]')
        assert pg.locator("#graph g.node:not(.io)").count() == 28
