"""The library page after an upload (issue 20's minors): a link opens the new model, and an uploaded
model can be deleted from its card (two clicks; the server's same-origin check passes for the
page's own request); sample models have no Delete button. Real chromium, real server."""

from __future__ import annotations

import pytest

from browser_harness import ARTIFACTS, checked_page, chromium, playwright_or_skip, serving
from ui_models import long_names_model

pytestmark = pytest.mark.browser

sync_api = playwright_or_skip()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from app import create_app
    app = create_app({"SGLENS_SAMPLES": True, "SGLENS_INSTANCE": str(tmp_path_factory.mktemp("inst"))})
    with serving(app) as url:
        yield url


def test_upload_offers_to_open_and_delete_removes(server):
    with chromium(sync_api) as browser, checked_page(browser, 1440, 900, 30000) as pg:
        pg.goto(server + "/")
        pg.wait_for_selector('.card[data-model="sample-trt_cycle"]')
        assert pg.locator('.card[data-model="sample-trt_cycle"] .card-delete').count() == 0
        pg.set_input_files("#upload-file", files=[{"name": "yolo_long.onnx", "mimeType": "application/octet-stream",
                                                   "buffer": long_names_model(2).SerializeToString()}])
        pg.click("#upload-form button[type=submit]")
        pg.wait_for_selector("#upload-open")
        (ARTIFACTS / "screenshots").mkdir(parents=True, exist_ok=True)
        pg.screenshot(path=str(ARTIFACTS / "screenshots" / "library_uploaded.png"))
        pg.click("#upload-open")
        pg.wait_for_selector("body[data-ready='1']")
        assert pg.inner_text(".crumb") == "yolo_long.onnx"
        mid = pg.get_attribute("#app", "data-model")

        pg.goto(server + "/")
        card = f'.card[data-model="{mid}"]'
        pg.wait_for_selector(card)
        pg.click(f"{card} .card-delete")                              # first click asks
        assert "yolo_long.onnx?" in pg.inner_text(f"{card} .card-delete")
        assert pg.locator(card).count() == 1
        pg.click(f"{card} .card-delete")                              # second deletes
        pg.wait_for_selector(card, state="detached")
        assert pg.evaluate(f"fetch('/api/models/{mid}').then(r => r.status)") == 404
        assert pg.locator("#toast").is_hidden()
