"""The graph view and the TensorRT tab in a real browser (issue 12): Playwright drives Debian's chromium
against a real server on loopback.

Checked as rendered, not as computed: node boxes inside the graph's viewport after open, after *Fit*
and after a window resize; the op label's font on screen (CSS size times the SVG scale) at least 10
px on open; the minimap moves the view; search centres a hit (opening collapsed groups); Play keeps
the current node in view and opens the box holding it; the TensorRT tab's click lands the node and
its groups panel in view; the left-out colours of the list, the legend and the graph agree.
Screenshots in ``test-artifacts/graph_*.png``.
"""

from __future__ import annotations

import io

import pytest
from onnx import TensorProto
from onnx import helper as oh

from browser_harness import ARTIFACTS, checked_page, chromium, playwright_or_skip, serving

pytestmark = pytest.mark.browser

sync_api = playwright_or_skip()


def _model(nodes, out: str, extra_domains=()):
    g = oh.make_graph(nodes, "generated", [oh.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])],
                      [oh.make_tensor_value_info(out, TensorProto.FLOAT, None)])
    opsets = [oh.make_opsetid("", 17)] + [oh.make_opsetid(d, 1) for d in extra_domains]
    return oh.make_model(g, opset_imports=opsets, ir_version=8)


def wide_model(branches: int, depth: int):
    """``branches`` parallel chains of ``depth`` nodes joined by a Concat: wide and long, no name scopes."""
    nodes, outs = [], []
    for b in range(branches):
        prev = "x"
        for d in range(depth):
            op = ("Relu", "Sigmoid", "Tanh", "Abs")[d % 4]
            nodes.append(oh.make_node(op, [prev], [f"t{b}_{d}"], name=f"b{b}_n{d}"))
            prev = f"t{b}_{d}"
        outs.append(prev)
    nodes.append(oh.make_node("Concat", outs, ["y"], name="concat", axis=0))
    return _model(nodes, "y")


def mixed_model(blocks: int = 60):
    """Chained diamonds A->B->C, A->D->C (D a Det every other block, as in trt_cycle) under torch-style
    scopes, with custom ops: left out as unsupported, for --min-size only, and supported but isolated."""
    nodes, prev = [], "x"
    for k in range(blocks):
        p = f"/blk{k // 10}/unit{k}/"
        side = "Det" if k % 2 == 0 else "Abs"
        nodes += [oh.make_node("Relu", [prev], [p + "a"], name=p + "Relu"),
                  oh.make_node("Sigmoid", [p + "a"], [p + "b"], name=p + "Sigmoid"),
                  oh.make_node(side, [p + "a"], [p + "d"], name=p + side),
                  oh.make_node("Add", [p + "b", p + "d"], [p + "c"], name=p + "Add")]
        prev = p + "c"
        if k % 7 == 3:
            for name, op, dom in (("MyPlugin", "MyPlugin", "custom.ops"), ("Relu_1", "Relu", ""), ("MyPlugin_1", "MyPlugin", "custom.ops")):
                nodes.append(oh.make_node(op, [prev], [p + name + "_out"], name=p + name, domain=dom))
                prev = p + name + "_out"
    return _model(nodes, prev, ["custom.ops"])


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from app import create_app
    app = create_app({"SGLENS_SAMPLES": True, "SGLENS_INSTANCE": str(tmp_path_factory.mktemp("inst"))})
    client = app.test_client()
    ids = {}
    for name, model in (("wide2000", wide_model(40, 50)), ("wide1200", wide_model(30, 40)), ("mixed", mixed_model()),
                        ("tall300", wide_model(1, 300))):
        resp = client.post("/api/models", data={"file": (io.BytesIO(model.SerializeToString()), name + ".onnx")},
                           content_type="multipart/form-data")
        assert resp.status_code in (200, 201), resp.get_json()
        ids[name] = resp.get_json()["id"]
    ids.update(cnn="sample-cnn_dynamic", transformer="sample-transformer_dynamic", cycle="sample-trt_cycle")
    with serving(app) as url:
        yield url, ids


@pytest.fixture(scope="module")
def browser():
    with chromium(sync_api) as b:
        yield b


@pytest.fixture
def page(browser):
    with checked_page(browser, 1400, 850, 60000) as pg:
        yield pg


def shot(pg, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    pg.screenshot(path=str(ARTIFACTS / f"graph_{name}.png"))


def wait_until(pg, js: str, arg=None, timeout: float = 60.0) -> None:
    """Poll a page function (``wait_for_function`` evaluates strings, which the page's CSP forbids)."""
    import time
    end = time.monotonic() + timeout
    while not pg.evaluate(js, arg):
        assert time.monotonic() < end, f"timed out waiting for {js}"
        pg.wait_for_timeout(50)


def open_model(pg, base: str, mid: str, query: str = "") -> None:
    pg.goto(f"{base}/models/{mid}{query}")
    pg.wait_for_selector("body[data-ready='1']")
    pg.wait_for_timeout(100)


# What the user sees, measured in the page: boxes against the graph's rectangle, fonts on screen.
BOXES = """() => {
  const v = document.getElementById('graph').getBoundingClientRect();
  const shapes = [...document.querySelectorAll('#graph g.node > rect, #graph g.node > ellipse')];
  const inside = r => r.left >= v.left - 1 && r.right <= v.right + 1 && r.top >= v.top - 1 && r.bottom <= v.bottom + 1;
  const rects = shapes.map(s => s.getBoundingClientRect());
  const visible = rects.filter(r => r.right > v.left && r.left < v.right && r.bottom > v.top && r.top < v.bottom);
  return {total: rects.length, inside: rects.filter(inside).length, visible: visible.length};
}"""
OP_FONT = """() => {
  const v = document.getElementById('graph').getBoundingClientRect();
  const t = [...document.querySelectorAll('#graph g.node text.op')].find(t => {
    const r = t.getBoundingClientRect(); return r.left >= v.left && r.right <= v.right && r.top >= v.top && r.bottom <= v.bottom; });
  return t ? parseFloat(getComputedStyle(t).fontSize) * t.getScreenCTM().a : 0;
}"""
CENTRE_OFFSET = """name => {
  const v = document.getElementById('graph').getBoundingClientRect();
  const g = [...document.querySelectorAll('#graph g.node')].find(g => g.dataset.id === name);
  if (!g) return null;
  const r = g.querySelector('rect, ellipse').getBoundingClientRect();
  return [r.left + r.width / 2 - (v.left + v.width / 2), r.top + r.height / 2 - (v.top + v.height / 2)];
}"""
IN_WINDOW = """sel => { const r = document.querySelector(sel).getBoundingClientRect();
  return r.top >= 0 && r.top < innerHeight - 20 && r.left >= 0 && r.right <= innerWidth; }"""
NODE_IN_GRAPH = """name => {
  const v = document.getElementById('graph').getBoundingClientRect();
  const g = [...document.querySelectorAll('#graph g.node')].find(g => g.dataset.id === name);
  if (!g) return false;
  const r = g.querySelector('rect, ellipse').getBoundingClientRect();
  return r.left >= v.left && r.right <= v.right && r.top >= v.top && r.bottom <= v.bottom;
}"""


@pytest.mark.parametrize("key", ["cnn", "transformer", "wide2000", "wide1200"])
def test_graph_visible_readable_and_fit(server, page, key):
    base, ids = server
    open_model(page, base, ids[key])
    opened = page.evaluate(BOXES)
    assert opened["visible"] >= min(4, opened["total"]), opened            # the graph shows on open
    assert page.evaluate(OP_FONT) >= 10, "op labels must be readable on open"
    shot(page, f"{key}_open")
    page.click("#fit")
    fitted = page.evaluate(BOXES)
    assert fitted["inside"] == fitted["total"] > 0, fitted                 # Fit: the whole graph
    assert page.locator(".minimap").is_hidden()                            # nothing left for the minimap
    shot(page, f"{key}_fit")
    page.set_viewport_size({"width": 1000, "height": 700})
    page.wait_for_timeout(300)
    resized = page.evaluate(BOXES)
    assert resized["inside"] == resized["total"], resized                  # a resize fits again
    shot(page, f"{key}_resized")


VISIBLE_IDS = """() => {
  const v = document.getElementById('graph').getBoundingClientRect();
  return [...document.querySelectorAll('#graph g.node')].filter(g => {
    const r = g.querySelector('rect, ellipse').getBoundingClientRect();
    return r.right > v.left && r.left < v.right && r.bottom > v.top && r.top < v.bottom; }).map(g => g.dataset.id);
}"""


def test_minimap_moves_the_view(server, page):
    base, ids = server
    open_model(page, base, ids["wide1200"])
    mini = page.locator(".minimap")
    assert mini.is_visible()
    seen_before = set(page.evaluate(VISIBLE_IDS))
    frame_before = page.locator(".minimap-view").bounding_box()
    box = mini.bounding_box()
    page.mouse.click(box["x"] + box["width"] * 0.9, box["y"] + box["height"] * 0.9)   # bottom right corner
    frame = page.locator(".minimap-view").bounding_box()
    assert frame["x"] > frame_before["x"] and frame["y"] > frame_before["y"]
    seen = set(page.evaluate(VISIBLE_IDS))
    assert seen and not seen & seen_before                               # another part of the graph
    # the frame is centred where the minimap was clicked (unless clipped at the minimap's edge)
    assert abs(frame["x"] + frame["width"] / 2 - (box["x"] + box["width"] * 0.9)) < 3 or frame["x"] + frame["width"] >= box["x"] + box["width"] - 3
    shot(page, "minimap")
    page.mouse.move(box["x"] + box["width"] * 0.9, box["y"] + box["height"] * 0.9)   # drag back to the top left
    page.mouse.down()
    page.mouse.move(box["x"] + 2, box["y"] + 2, steps=5)
    page.mouse.up()
    frame = page.locator(".minimap-view").bounding_box()
    assert frame["x"] <= box["x"] + 3 and frame["y"] <= box["y"] + 3
    assert set(page.evaluate(VISIBLE_IDS)) != seen


def test_search_centres_hits_by_name_op_and_tensor(server, page):
    base, ids = server
    open_model(page, base, ids["transformer"])
    page.fill("#search", "layer.0/attention/softmax")                      # a node name
    page.wait_for_selector("#graph[data-hit]")
    hit = page.get_attribute("#graph", "data-hit")
    assert hit == "/encoder/layer.0/attention/Softmax"
    dx, dy = page.evaluate(CENTRE_OFFSET, hit)
    assert abs(dx) < 4 and abs(dy) < 4
    assert "match" in page.locator(f'g.node[data-id="{hit}"]').get_attribute("class")
    page.fill("#search", "LayerNormalization")                             # an op type: several hits, cycled
    wait_until(page, "() => document.getElementById('search-count').textContent.startsWith('1/')")
    first = page.get_attribute("#graph", "data-hit")
    page.press("#search", "Enter")
    wait_until(page, "() => document.getElementById('search-count').textContent.startsWith('2/')")
    second = page.get_attribute("#graph", "data-hit")
    assert first != second
    dx, dy = page.evaluate(CENTRE_OFFSET, second)
    assert abs(dx) < 4 and abs(dy) < 4
    # a tensor name, in a collapsed view: the groups holding its producer open, then it is centred
    open_model(page, base, ids["wide2000"])
    assert page.get_attribute("#graph", "data-mode") == "collapsed"
    page.fill("#search", "t37_44")
    wait_until(page, "() => document.getElementById('graph').dataset.hit === 'b37_n44'")
    dx, dy = page.evaluate(CENTRE_OFFSET, "b37_n44")
    assert abs(dx) < 4 and abs(dy) < 4
    assert page.evaluate(OP_FONT) >= 10
    shot(page, "search_collapsed")


def test_layers_by_name_scope(server, page):
    base, ids = server
    open_model(page, base, ids["cnn"])
    assert page.get_attribute("#graph", "data-mode") == "flat"
    page.click("#layers-toggle")                                           # the model's own layers
    page.wait_for_selector("#graph[data-mode='collapsed']")
    groups = page.eval_on_selector_all("g.node.group", "gs => gs.map(g => g.dataset.id)")
    assert groups == sorted(groups, key=groups.index) and set(groups) == {f"scope:model.{i}" for i in range(4)} | {"scope:head"}
    page.click('g.node[data-id="scope:model.2"]')
    page.wait_for_selector('g.node[data-id="scope:model.2/act"]')               # Sigmoid + Mul
    assert page.locator('g.node[data-id="/model.2/conv/Conv"]').count() == 1   # a scope of one: the node itself
    shot(page, "layers")
    assert page.locator('g.scope-box[data-scope="scope:model.2"]').count() == 1   # the opened layer framed
    assert page.evaluate("""() => { const v = document.getElementById('graph').getBoundingClientRect();
      const r = document.querySelector('g.scope-box[data-scope="scope:model.2"] rect').getBoundingClientRect();
      return r.top >= v.top && r.top < v.bottom && r.left >= v.left && r.right <= v.right; }"""), "the opened layer is in view"
    page.click('[data-collapse="scope:model.2"]')                          # close that layer again
    page.wait_for_selector('g.node[data-id="scope:model.2"]')
    page.click('g.node[data-id="scope:model.1"]')                          # or by the frame's own name
    page.wait_for_selector('g.scope-box[data-scope="scope:model.1"]')
    page.click('g.scope-box[data-scope="scope:model.1"] text')
    page.wait_for_selector('g.node[data-id="scope:model.1"]')
    open_model(page, base, ids["mixed"])                                   # 267 nodes with scopes: opens by layer
    assert page.get_attribute("#graph", "data-mode") == "collapsed"
    assert page.locator('g.node[data-id="scope:blk0"]').count() == 1


def test_play_follows_and_opens_the_current_box(server, page):
    base, ids = server
    open_model(page, base, ids["mixed"], "?backend=default&ops=Relu,Sigmoid,Add")
    page.click("#dbg-start")
    page.wait_for_selector("#dbg-status[data-index='0']")
    page.evaluate("document.getElementById('dbg-speed').value = 30")
    page.click("#dbg-play")
    wait_until(page, "() => Number(document.getElementById('dbg-status').dataset.index) > 30")
    page.wait_for_selector("g.node.current:not(.group)")                  # its box was opened
    page.click("#dbg-play")                                                # pause
    page.wait_for_timeout(400)
    cur = page.eval_on_selector("g.node.current", "g => g.dataset.id")
    assert page.evaluate(NODE_IN_GRAPH, cur), f"the current node {cur} is out of view"
    shot(page, "play")


def _swatch(pg, sel: str) -> str:
    return pg.eval_on_selector(sel, "e => getComputedStyle(e).backgroundColor")


def test_tensorrt_tab_lands_in_view_with_matching_colours(server, page):
    base, ids = server
    open_model(page, base, ids["mixed"])
    page.click("[data-tab=trt]")
    page.click("#trt-go")
    page.wait_for_selector("#trt-summary")
    assert "10.1" in page.inner_text("#trt-rules")
    kinds = page.eval_on_selector_all("#trt-excluded details", "ds => ds.map(d => d.dataset.kind)")
    assert set(kinds) == {"unsupported", "below_min_size"}
    summary = page.inner_text('#trt-excluded details[data-kind="unsupported"] summary')
    assert "unsupported op" in summary and "(48)" in summary
    # the three categories: the list's swatches, the legend above it and the graph legend agree
    for cat in ("unsupported", "min_size", "isolated"):
        item = f'#trt-excluded li[data-category="{cat}"] .sw'
        assert page.locator(item).count() > 0, cat
        colour = _swatch(page, item)
        assert colour == _swatch(page, f"#trt-legend .lo-{cat}") == _swatch(page, f"#legend .lo-{cat}"), cat
    assert len({_swatch(page, f"#trt-legend .lo-{c}") for c in ("unsupported", "min_size", "isolated")}) == 3
    shot(page, "trt_list")
    # the last entry of the list: far down the tab and inside a collapsed layer of the graph
    last = page.eval_on_selector_all("[data-groups]", "xs => xs[xs.length - 1].dataset.groups")
    page.eval_on_selector_all("[data-groups]", "xs => xs[xs.length - 1].scrollIntoView()")
    page.locator("[data-groups]").last.click()
    page.wait_for_selector("#groups-panel")
    page.wait_for_timeout(200)
    assert page.evaluate(NODE_IN_GRAPH, last), "the clicked node must be centred in the graph"
    assert page.evaluate(IN_WINDOW, "#groups-panel"), "the groups panel must be in view"
    assert "path" in page.locator(f'g.node[data-id="{last}"]').get_attribute("class")
    shot(page, "trt_click")
    # a node drawn with its category's fill once the groups are cleared (colour by supported or not)
    page.select_option("#colour", "supported")
    cat = page.eval_on_selector(f'#trt-excluded li:has([data-groups="{last}"])', "li => li.dataset.category")
    fill = page.locator(f'g.node[data-id="{last}"] rect').evaluate("r => getComputedStyle(r).fill")
    assert fill == _swatch(page, f"#trt-legend .lo-{cat}")


def test_tensorrt_release_plugins_and_bad_options(server, page):
    base, ids = server
    open_model(page, base, ids["mixed"])
    page.click("[data-tab=trt]")
    page.select_option("#trt-opt-trt_version", "10.0")
    page.fill("#trt-opt-trt_plugins", "MyPlugin")
    page.click("#trt-go")
    page.wait_for_selector("#trt-summary")
    assert "10.0" in page.inner_text("#trt-rules")
    # what the release changes from the one before, from the two tables
    assert "since 8.6" in page.inner_text("#trt-summary")
    assert "Hardmax" in page.inner_text("#trt-release-changes")
    assert "MyPlugin" in page.inner_text("#trt-out")                       # the plugin warning
    assert page.locator("#trt-notes").count() == 1
    assert "MyPlugin" not in page.inner_text("#trt-excluded")              # declared: not left out
    # the backend form comes from the option schema; the server's refusal is shown as it says it
    page.select_option("#backend", "default")
    assert page.locator("#opt-min_size").get_attribute("type") == "number"
    page.fill("#opt-min_size", "0")
    page.click("#partition-go")
    page.wait_for_selector("#toast:not([hidden])")
    assert "min_size" in page.inner_text("#toast")
    shot(page, "trt_options")


def test_tensorrt_treat_as_supported_toggle_and_dla_colours(server, page):
    base, ids = server
    open_model(page, base, ids["mixed"])
    page.click("[data-tab=trt]")
    page.click("#trt-go")
    page.wait_for_selector("#trt-summary")
    before = page.inner_text("#trt-summary")
    assert page.locator('#trt-unsupported .trt-assume[data-op="MyPlugin"]').count() == 1
    page.check('#trt-unsupported .trt-assume[data-op="MyPlugin"]')        # "treat as supported (plugin)"
    wait_until(page, "() => !!document.querySelector('#trt-unsupported .trt-assume[data-op=\"MyPlugin\"]:checked')")
    assert "MyPlugin" in page.input_value("#trt-opt-assume_supported")
    assert page.inner_text("#trt-summary") != before                      # the partition changed live
    assert "MyPlugin" not in page.inner_text("#trt-excluded")
    page.uncheck('#trt-unsupported .trt-assume[data-op="MyPlugin"]')      # and back
    wait_until(page, "() => !document.querySelector('#trt-unsupported .trt-assume:checked')")
    assert page.inner_text("#trt-summary") == before
    # the DLA target on a model with dynamic dimensions: every node falls back to the GPU, in its own colour
    open_model(page, base, ids["cnn"])
    page.click("[data-tab=trt]")
    page.select_option("#trt-opt-trt_target", "dla")
    page.click("#trt-go")
    page.wait_for_selector("#trt-dla")
    assert "0 of at most 16 per core" in page.inner_text("#trt-dla")
    node = page.eval_on_selector('#trt-excluded li[data-category="gpu_fallback"] [data-groups]', "e => e.dataset.groups")
    page.select_option("#colour", "supported")
    fill = page.locator(f'g.node[data-id="{node}"] rect').evaluate("r => getComputedStyle(r).fill")
    assert fill == _swatch(page, "#trt-legend .lo-gpu_fallback") != _swatch(page, "#trt-legend .lo-unsupported")


def test_a_tall_graph_stays_readable_beside_the_run_card(server, page):
    """Opening the Runs tab narrows the graph's pane: the view stays readable from the top
    (it once fitted the whole of a 300-node chain into a thin strip beside the run card);
    after Fit, a narrower pane fits the whole graph again."""
    base, ids = server
    open_model(page, base, ids["tall300"])
    assert page.evaluate(OP_FONT) >= 10
    page.click("button[data-tab=runs]")
    page.wait_for_timeout(300)
    shot(page, "tall300_runs_tab")
    assert page.evaluate(OP_FONT) >= 10, "op labels must stay readable beside the run card"
    assert page.evaluate(BOXES)["visible"] >= 4
    page.click("button[data-tab=debug]")
    page.click("#fit")
    page.click("button[data-tab=runs]")
    page.wait_for_timeout(300)
    fitted = page.evaluate(BOXES)
    assert fitted["inside"] == fitted["total"] > 0, fitted       # Fit chosen: still the whole graph
