"""End to end in a real browser: Playwright drives Debian's chromium against a real server.

Screenshots are kept in ``test-artifacts/`` (gitignored). Skipped, with the reason, when
chromium or Playwright is missing (``make test`` installs chromium first).
"""

from __future__ import annotations


import pytest

from browser_harness import ARTIFACTS, checked_page, chromium, playwright_or_skip, serving
from conftest import SAMPLE_MODELS as SAMPLES

pytestmark = pytest.mark.browser

sync_api = playwright_or_skip()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from app import create_app

    from _web_kernels import find_kernel
    app = create_app({"SGLENS_SAMPLES": True, "SGLENS_INSTANCE": str(tmp_path_factory.mktemp("inst")),
                      "SGLENS_RUN_KERNELS": find_kernel, "SGLENS_RUN_REPEAT": 1})
    with serving(app) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    with chromium(sync_api) as b:
        yield b


@pytest.fixture
def page(browser):
    with checked_page(browser, 1400, 850, 20000) as pg:
        yield pg


def shot(pg, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    pg.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def node_box(pg, name: str) -> str:
    return pg.locator(f'g.node[data-id="{name}"] rect').evaluate(
        "r => [r.getAttribute('x'), r.getAttribute('y'), r.getAttribute('width')].join(',')")


def classes(pg, name: str) -> str:
    return pg.locator(f'g.node[data-id="{name}"]').get_attribute("class")


def test_library_upload_error_and_walkthrough(server, page):
    page.goto(server + "/")
    page.wait_for_selector('.card[data-model="sample-trt_cycle"]')
    assert page.locator(".card").count() >= 8
    page.set_input_files("#upload-file", files=[{"name": "broken.onnx", "mimeType": "application/octet-stream",
                                                "buffer": b"\x08\x07garbage that is not onnx"}])
    page.click("#upload-form button[type=submit]")
    page.wait_for_selector("#upload-error:not([hidden])")
    assert "broken.onnx" in page.inner_text("#upload-error")
    from sample_models.generate import build_all
    page.set_input_files("#upload-file", files=[{"name": "my_mlp.onnx", "mimeType": "application/octet-stream",
                                                "buffer": build_all()["mlp.onnx"].SerializeToString()}])
    page.click("#upload-form button[type=submit]")
    page.wait_for_selector("#upload-progress .label:text('loaded my_mlp.onnx: 10 nodes')")
    page.wait_for_selector(".card:has-text('my_mlp.onnx')")
    assert page.locator("#upload-error").is_hidden()
    shot(page, "library")
    page.click("#learn-link")
    page.wait_for_selector("#learn-steps li")
    while "cycle" not in page.inner_text("#step-call"):
        page.click("#learn-next")
    assert "A -> D -> C" in page.inner_text("#step-text")
    assert "path" in classes(page, "D")
    shot(page, "walkthrough_cycle")


def test_step_selector_forward_and_back(server, page):
    page.goto(server + "/models/sample-trt_cycle?backend=default&ops=Relu,Sigmoid,Add")
    page.wait_for_selector("body[data-ready='1']")
    before = {n: node_box(page, n) for n in "ABCD"}
    page.click("#dbg-start")
    page.wait_for_selector("#dbg-status[data-index='0']")
    page.click("#dbg-next")
    page.wait_for_selector("#dbg-status[data-index='1']")
    assert "current" in classes(page, "A") and "seed" in page.inner_text("#dbg-kind")
    page.click("#dbg-next")
    page.wait_for_selector("#dbg-status[data-index='2']")
    assert "neighbour" in classes(page, "B") and "candidate" in classes(page, "A")
    assert "select_output(A, B)" in page.inner_text("#dbg-call")
    page.click("#dbg-prev")
    page.wait_for_selector("#dbg-status[data-index='1']")
    assert "neighbour" not in classes(page, "B")
    page.locator("#graph").focus()
    page.keyboard.press("ArrowRight")
    page.wait_for_selector("#dbg-status[data-index='2']")
    page.click("#dbg-run")                              # default breakpoint: a cycle found
    page.wait_for_selector("#dbg-kind:text('cycle')")
    assert "path" in classes(page, "D") and "A -> D -> C" in page.inner_text("#dbg-text")
    shot(page, "debugger_cycle")
    assert page.locator("#dbg-nohit").count() == 0                   # that one was hit
    page.click("#dbg-run")                              # the only cycle is behind: none ahead
    page.wait_for_selector("#dbg-nohit")
    assert "not reached" in page.inner_text("#dbg-nohit") and "a cycle found" in page.inner_text("#dbg-nohit")
    assert page.inner_text("#dbg-kind") == "pass_end"
    page.click("#dbg-first")
    page.wait_for_selector("#dbg-status[data-index='0']")
    assert page.locator("#dbg-nohit").count() == 0                   # a later step drops the notice
    page.click("#dbg-last")
    page.wait_for_selector("#dbg-status:text('trace complete')")
    assert "sg" in classes(page, "C") and "sg" not in classes(page, "D")
    assert {n: node_box(page, n) for n in "ABCD"} == before      # stepping never moves a node
    assert page.locator("#dbg-log li").count() >= 4
    # a jump leaves events out of the log: the entry after each gap counts them, and the gaps
    # and entries together are every event up to the last (the pass's end)
    logged = page.eval_on_selector_all("#dbg-log li", "ls => ls.map(l => [Number(l.dataset.index), "
                                       "Number(l.dataset.gap || 0), getComputedStyle(l, '::before').content])")
    indices = [i for i, _, _ in logged]
    assert indices == sorted(indices) and indices[0] == 0, logged
    assert all(gap == (i - p - 1) for (p, _, _), (i, gap, _) in zip(logged, logged[1:])), logged
    gaps = [(i, gap, shown) for i, gap, shown in logged if gap]
    assert gaps and all(f"{gap} event(s) run through" in shown for _, gap, shown in gaps), gaps
    assert len(logged) + sum(g for _, g, _ in gaps) == indices[-1] + 1


def test_tensorrt_incompatibility_group(server, page):
    page.goto(server + "/models/sample-trt_cycle")
    page.wait_for_selector("body[data-ready='1']")
    page.click("[data-tab=trt]")
    page.click("#trt-go")
    page.wait_for_selector("#trt-summary")
    assert "50.0%" in page.inner_text("#trt-summary")
    page.wait_for_selector("g.cluster")                 # the partition drawn as a cluster
    page.click("[data-groups=D]")
    page.wait_for_selector("#groups-panel")
    assert "anc" in classes(page, "A") and "desc" in classes(page, "C") and "path" in classes(page, "D")
    assert "Det" in page.inner_text("#groups-panel")
    shot(page, "tensorrt_groups")


def test_run_comparison_shows_plots(server, page):
    page.goto(server + "/models/sample-trt_cycle?backend=default&ops=Relu,Sigmoid,Add")
    page.wait_for_selector("body[data-ready='1']")
    page.click("[data-tab=runs]")
    page.click("#run-go")
    for cls in ("plot-subgraph-time", "plot-timeline", "plot-memory", "plot-output-diff", "plot-boundary-diff"):
        page.wait_for_selector(f".{cls} .main-svg", timeout=60000)
    assert "outputs match onnxruntime" in page.inner_text("#run-plots")
    assert page.locator("#run-list tr").count() >= 2
    page.select_option("#colour", "time")                 # per-node time from the run colours the graph
    fills = {n: page.locator(f'g.node[data-id="{n}"] rect').evaluate("r => r.style.fill") for n in "ABCD"}
    assert all(fills.values()) and len(set(fills.values())) > 1, fills
    # let the panel grow to its content so the screenshot shows every plot
    page.evaluate("document.querySelector('.model-layout').style.height = 'auto';"
                  "document.querySelector('#tab-runs').style.overflow = 'visible'")
    page.wait_for_timeout(300)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "run_plots.png"), full_page=True)


def test_the_timeline_prints_only_names_that_fit(server, page):
    """With every node outside the subgraphs on the timeline, names of narrow bars overprinted each
    other into an unreadable strip: a name is printed only where its bar holds it (hover has all)."""
    page.goto(server + "/models/sample-transformer_block?backend=default&ops=MatMul")
    page.wait_for_selector("body[data-ready='1']")
    page.click("[data-tab=runs]")
    page.click("#run-go")
    page.wait_for_selector(".plot-timeline .main-svg", timeout=60000)
    # Widths as drawn (getBoundingClientRect): plotly shrinks a name a little to fit its bar with a
    # scale transform, which getBBox leaves out -- a 71 px name drawn at 0.9 in a 64 px bar read as
    # overflowing it (a CI run where that node took just that long)
    bars = page.evaluate("""() => [...document.querySelectorAll('.plot-timeline g.point')].map(g => {
        const bar = g.querySelector('path').getBoundingClientRect(), text = g.querySelector('text');
        const shown = text && text.textContent && getComputedStyle(text).display !== 'none'
                      && getComputedStyle(text).opacity !== '0';
        return {bar: bar.width, text: shown ? text.getBoundingClientRect().width : 0,
                name: text ? text.textContent : ''};
    })""")
    assert len(bars) > 12, bars                           # the host nodes are drawn, each a bar
    # (which names fit depends on how long each node took on this machine: none may, on a busy one)
    shown = [b for b in bars if b["text"]]
    assert len(shown) < len(bars)                         # the narrowest bars print none
    assert all(b["text"] <= b["bar"] + 1 for b in shown), shown


def test_the_node_panel_shows_the_attributes_a_node_leaves_out_as_their_defaults(server, page):
    """resnet_small's convs write no ``group``: the panel says group 1, marked a default, beside
    what the node sets (the oracle: onnx's own schema for Conv at the model's opset)."""
    import onnx
    from partition.onnx_io import attribute_defaults
    model = onnx.load(str(SAMPLES / "resnet_small.onnx"))
    conv = next(n for n in model.graph.node if n.name == "stem/conv")
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    left_out = {k: v for k, v in attribute_defaults("Conv", "", {"": opset}).items()
                if k not in {a.name for a in conv.attribute}}
    assert left_out.get("group") == 1
    page.goto(server + "/models/sample-resnet_small")
    page.wait_for_selector("body[data-ready='1']")
    page.click('g.node[data-id="stem/conv"]')
    page.wait_for_selector("#tab-node:not([hidden]) #node-title")
    rows = page.locator("#tab-node table.kv tr").all_inner_texts()
    defaults = {r.split("\t")[0]: r.split("\t")[1] for r in rows if "(default)" in r}
    assert {k: v.replace(" (default)", "") for k, v in defaults.items()} == {k: str(v) if not isinstance(v, str) else f'"{v}"' for k, v in left_out.items()}
    set_here = [r.split("\t")[0] for r in rows if "(default)" not in r]
    assert sorted(set_here) == sorted(a.name for a in conv.attribute)


def test_break_at_a_node_inside_a_body_breaks_at_the_node_holding_it(server, page):
    """The selector steps over the top-level graph: from a Loop body's node the panel offers the
    Loop itself, and a top-level node offers itself."""
    page.goto(server + "/models/sample-loop_model")
    page.wait_for_selector("body[data-ready='1']")
    page.click('g.node[data-id="loop/loop"]')
    page.wait_for_selector("#node-break")
    assert page.get_attribute("#node-break", "data-target") == "loop/loop"
    assert page.inner_text("#node-break") == "break at this node"
    page.click('button[data-body="loop/loop:body"]')
    page.wait_for_selector('g.node[data-id="loop/body/mul_decay"]')
    page.click('g.node[data-id="loop/body/mul_decay"]')
    page.wait_for_selector("#node-title:has-text('loop/body/mul_decay')")
    assert page.get_attribute("#node-break", "data-target") == "loop/loop"
    assert "break at loop/loop (holds this body)" == page.inner_text("#node-break")
    page.click("#node-break")
    assert page.input_value("#bp-value") == "loop/loop" and page.input_value("#bp-type") == "node"
