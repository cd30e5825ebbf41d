"""What every browser test shares: Debian's chromium through Playwright, and an app on loopback.

Chromium runs headless with the background-networking switches off (this machine's
network is closed; without them it retries refused connections at every start).
"""

from __future__ import annotations

import os
import shutil
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pytest

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"   # gitignored screenshots


def playwright_or_skip() -> Any:
    """``playwright.sync_api``, or skip the calling module when chromium or playwright is missing."""
    if not (os.path.exists(CHROMIUM) or shutil.which("chromium")):
        pytest.skip(f"chromium is not installed at {CHROMIUM} (make sysdeps-test installs it)",
                    allow_module_level=True)
    return pytest.importorskip("playwright.sync_api", reason="the playwright python package is not installed")


@contextmanager
def chromium(sync_api: Any) -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium"), args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def serving(app: Any) -> Iterator[str]:
    """``app`` on a free loopback port in a thread; yields its base URL."""
    import logging

    from app.cli import make_server
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    srv = make_server("127.0.0.1", 0, app)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.server_port}"
    finally:
        srv.shutdown()
        thread.join(5)


@contextmanager
def serving_with_model(app: Any, model: Any, filename: str) -> Iterator[tuple[str, str]]:
    """``app`` serving (``serving``) with ``model`` (an ONNX ModelProto) uploaded through its API;
    yields (base URL, model id)."""
    import io
    resp = app.test_client().post("/api/models", data={"file": (io.BytesIO(model.SerializeToString()), filename)},
                                  content_type="multipart/form-data")
    assert resp.status_code in (200, 201), resp.get_json()
    with serving(app) as url:
        yield url, resp.get_json()["id"]


def open_runs_tab(page: Any, url: str, model_path: Any) -> None:
    """Upload ``model_path`` through the home page's form, as a user does, open the model and
    its Runs tab, and wait for the inputs form."""
    page.goto(url + "/")
    page.set_input_files("#upload-file", str(model_path))
    page.click("#upload-form button[type=submit]")
    page.wait_for_selector("#upload-progress a", timeout=60000)
    page.click("#upload-progress a")
    page.wait_for_selector("body[data-ready='1']")
    page.click("[data-tab=runs]")
    page.wait_for_selector("fieldset.input-spec")


def save_screenshot(page: Any, name: str) -> None:
    """``page`` as ``test-artifacts/screenshots/<name>.png`` (kept by CI, looked at by people)."""
    folder = ARTIFACTS / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / f"{name}.png"))


@contextmanager
def checked_page(browser: Any, width: int, height: int, timeout_ms: int,
                 csp_errors: bool = False) -> Iterator[Any]:
    """A page in a fresh browser context; the test fails on any JavaScript error in it,
    and, with ``csp_errors``, on a Content-Security-Policy violation (the console
    reports those, not ``pageerror``)."""
    ctx = browser.new_context(viewport={"width": width, "height": height})
    pg = ctx.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    if csp_errors:
        pg.on("console", lambda m: errors.append(m.text) if "Content Security Policy" in m.text else None)
    pg.set_default_timeout(timeout_ms)
    try:
        yield pg
    finally:
        ctx.close()
    assert errors == [], f"JavaScript errors in the page: {errors}"
