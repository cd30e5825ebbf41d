"""/learn ends with the final subgraphs drawn as boxes (issue 20's minors): real chromium, real
server, the boxes checked against the partition the API reports for the walkthrough."""

from __future__ import annotations

import pytest

from browser_harness import ARTIFACTS, checked_page, chromium, playwright_or_skip, serving

pytestmark = pytest.mark.browser

sync_api = playwright_or_skip()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from app import create_app
    app = create_app({"SGLENS_SAMPLES": True, "SGLENS_INSTANCE": str(tmp_path_factory.mktemp("inst"))})
    with serving(app) as url:
        yield url


INSIDE = """([sg, name]) => {
  const c = document.querySelector(`#graph g.cluster[data-sg="${sg}"] rect`).getBoundingClientRect();
  const n = [...document.querySelectorAll('#graph g.node')].find(g => g.dataset.id === name).querySelector('rect').getBoundingClientRect();
  return n.left >= c.left && n.right <= c.right && n.top >= c.top && n.bottom <= c.bottom; }"""


def test_walkthrough_ends_with_the_subgraphs_as_boxes(server):
    with chromium(sync_api) as browser, checked_page(browser, 1440, 900, 30000) as pg:
        pg.goto(server + "/learn")
        pg.wait_for_selector("#learn-steps li")
        assert pg.locator("#graph g.cluster").count() == 0              # the trace: no boxes yet
        data = pg.evaluate("fetch('/api/learn').then(r => r.json())")
        subgraphs = data["result"]["subgraphs"]
        assert subgraphs
        pg.click("#learn-last")
        pg.wait_for_selector("#graph[data-layout='final']")
        assert pg.inner_text("#step-call").startswith("result:")
        assert "subgraph 0 = {" in pg.inner_text("#step-text") and "no cycle" in pg.inner_text("#step-text")
        assert pg.locator("#graph g.cluster").count() == len(subgraphs)
        for sg in subgraphs:
            for name in sg["nodes"]:
                assert pg.evaluate(INSIDE, [sg["id"], name]), (sg, name)
        assert pg.locator("#learn-steps li").last.inner_text().startswith("result:")
        (ARTIFACTS / "screenshots").mkdir(parents=True, exist_ok=True)
        pg.screenshot(path=str(ARTIFACTS / "screenshots" / "learn_result.png"))
        pg.click("#learn-prev")                                          # back into the trace
        pg.wait_for_selector("#graph[data-layout='trace']")
        assert pg.locator("#graph g.cluster").count() == 0
