"""Closed name-scope boxes show their members' share, not their worst member's colour (issue 20).

In a real chromium with a real partition and a real comparison run: colouring by "supported or not"
gives each closed layer a bar of its members per category and "k/n in subgraphs", checked against
the partition the API returns; colouring by time gives each closed layer the sum of its members'
measured seconds (from the run the API stored) and a heat fill, where every box used to stay white.
Screenshots in ``test-artifacts/screenshots/groups_*.png``.
"""

from __future__ import annotations

import json
import re
import urllib.request

import pytest

from browser_harness import ARTIFACTS, checked_page, chromium, playwright_or_skip, save_screenshot, serving_with_model
from ui_models import OPS, long_names_model

pytestmark = pytest.mark.browser

sync_api = playwright_or_skip()
BLOCKS = 8


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from app import create_app
    app = create_app({"SGLENS_INSTANCE": str(tmp_path_factory.mktemp("inst"))})
    with serving_with_model(app, long_names_model(BLOCKS), "yolo_long.onnx") as served:
        yield served


@pytest.fixture(scope="module")
def browser():
    with chromium(sync_api) as b:
        yield b


def api(base: str, path: str, body=None):
    req = urllib.request.Request(base + path, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def shot(pg, name: str) -> None:
    save_screenshot(pg, f"groups_{name}")


def layer_members(names: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for n in names:
        m = re.match(r"/(model\.\d+)/", n)
        if m:
            out.setdefault(f"scope:{m.group(1)}", []).append(n)
    return {k: v for k, v in out.items() if len(v) > 1}


BADGES = """() => Object.fromEntries([...document.querySelectorAll('#graph g.node.group')].map(g => [g.dataset.id, {
  text: (g.querySelector('text.badge') || {}).textContent || null,
  parts: [...g.querySelectorAll('.badge.bar rect')].map(r => [Number(r.dataset.frac), getComputedStyle(r).fill]),
  fill: getComputedStyle(g.querySelector('rect')).fill}]))"""


def test_closed_layers_show_coverage_share_and_summed_time(server, browser):
    base, mid = server
    ops = OPS.split(",")
    result = api(base, f"/api/models/{mid}/partition", {"backend": "default", "options": {"ops": ops}})
    left = {e["node"] for e in result["excluded"]}
    names = [n for sg in result["subgraphs"] for n in sg["nodes"]] + sorted(left)
    layers = layer_members(names)
    assert len(layers) == BLOCKS
    with checked_page(browser, 1440, 900, 60000) as pg:
        pg.goto(f"{base}/models/{mid}?backend=default&ops={OPS}")
        pg.wait_for_selector("body[data-ready='1']")
        pg.click("#partition-go")
        pg.wait_for_selector("#graph g.cluster")
        pg.click("#layers-toggle")                                     # one box per model.N layer
        pg.wait_for_selector("#graph[data-mode='collapsed']")
        pg.select_option("#colour", "supported")
        badges = pg.evaluate(BADGES)
        partial = 0
        for gid, members in layers.items():
            covered = sum(1 for n in members if n not in left)
            b = badges[gid]
            assert b["text"] == f"{covered}/{len(members)} in subgraphs", (gid, b)
            assert abs(b["parts"][0][0] - covered / len(members)) < 1e-3, (gid, b)
            assert abs(sum(f for f, _ in b["parts"]) - 1) < 1e-3
            if 0 < covered < len(members):
                partial += 1
                assert b["fill"] != "rgb(252, 165, 165)", f"{gid}: partly covered, drawn as unsupported"
        assert partial >= 1, "the model must give at least one partly covered layer"
        shot(pg, "coverage")

        pg.click("[data-tab=runs]")                                    # a real comparison run
        pg.wait_for_selector("fieldset.input-spec")
        pg.fill("#run-repeat", "1")
        pg.click("#run-go")
        pg.wait_for_selector("#run-plots .run-summary", timeout=180000)
        rid = api(base, f"/api/runs?model={mid}")["runs"][0]["id"]
        secs = api(base, f"/api/runs/{rid}")["result"]["original_node_seconds"]
        pg.select_option("#colour", "time")
        badges = pg.evaluate(BADGES)
        fills = set()
        for gid, members in layers.items():
            total = sum(secs[n] for n in members)
            text = badges[gid]["text"]
            m = re.fullmatch(r"([\d.]+) (s|ms|µs) in (\d+) nodes", text or "")
            assert m, (gid, text)
            shown = float(m.group(1)) * {"s": 1, "ms": 1e-3, "µs": 1e-6}[m.group(2)]
            assert int(m.group(3)) == len(members)
            assert abs(shown - total) <= max(0.006 * total, 1e-7), (gid, shown, total)
            fills.add(badges[gid]["fill"])
        assert fills - {"rgb(255, 255, 255)", "rgb(241, 245, 249)"}, "closed layers must be shaded by time"
        legend = pg.inner_text("#legend")
        assert "0 →" in legend and "a group: the sum of its members" in legend, legend
        shot(pg, "time")
        check_plots(pg)


# The run's charts (static/plots.js): no tick label cut off by its chart's box, plotly's toolbar
# clear of every title, and long tensor names shown by their end.
PLOTS = """() => [...document.querySelectorAll('#run-plots .plot')].filter(p => p.querySelector('.main-svg')).map(p => {
  const box = p.getBoundingClientRect();
  const rect = e => { const r = e.getBoundingClientRect(); return {l: r.left, r: r.right, t: r.top, b: r.bottom, w: r.width}; };
  const ticks = [...p.querySelectorAll('.xtick text, .ytick text')].map(t => ({text: t.textContent, ...rect(t)}));
  const title = p.querySelector('.gtitle'); const bar = p.querySelector('.modebar');
  return {cls: p.className, box: rect(p), ticks, title: title ? rect(title) : null, bar: bar ? rect(bar) : null};
})"""


def check_plots(pg) -> None:
    pg.wait_for_selector("#run-plots .plot-boundary-diff .main-svg", timeout=60000)
    pg.wait_for_timeout(300)
    plots = pg.evaluate(PLOTS)
    assert len(plots) >= 5, [p["cls"] for p in plots]
    for p in plots:
        b = p["box"]
        for t in p["ticks"]:
            assert t["l"] >= b["l"] - 1 and t["r"] <= b["r"] + 1 and t["t"] >= b["t"] - 1 and t["b"] <= b["b"] + 1, \
                f"{p['cls']}: tick label {t['text']!r} is cut off by the chart's box {b}"
        if p["title"] and p["bar"] and p["bar"]["w"] > 0:
            ti, bar = p["title"], p["bar"]
            overlap = ti["l"] < bar["r"] and bar["l"] < ti["r"] and ti["t"] < bar["b"] and bar["t"] < ti["b"]
            assert not overlap, f"{p['cls']}: the plotly toolbar covers the title"
    for cls in ("plot-boundary-diff", "plot-timing-spread"):
        pg.locator(f"#run-plots .{cls}").screenshot(path=str(ARTIFACTS / "screenshots" / f"groups_{cls}.png"))
    boundary = next(p for p in plots if "plot-boundary-diff" in p["cls"])
    names = [t["text"] for t in boundary["ticks"] if "…" in t["text"]]
    assert names and all(re.fullmatch(r"#\d+ (input|output) ….*_output_0", n) for n in names), names
