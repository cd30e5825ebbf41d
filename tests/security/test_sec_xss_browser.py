"""Issue 9, stored script injection, in a real chromium against a real ``sglens serve``: a model whose
every string field carries ``<img src=x onerror=window.__pwned=1>`` opens on every page and tab with
no script run (no dialog, ``window.__pwned`` unset, no <img> made, no CSP violation) and the payload
shown as literal text."""

from __future__ import annotations

import pytest
from onnx import TensorProto, helper

import sec_models
from browser_harness import ARTIFACTS, chromium, playwright_or_skip
from sec_models import PAYLOAD
from sec_server import server  # noqa: F401 - the fixture

pytestmark = pytest.mark.browser
sync_api = playwright_or_skip()


def runnable_model() -> bytes:
    """Runs on every executor, yet names, dims and metadata carry the payload (plot labels, run lists).
    A second output ignores the input (x * 0 + c), so the verdict names it in a detail line too."""
    p = PAYLOAD
    x = helper.make_tensor_value_info(f"in{p}", TensorProto.FLOAT, [f"n{p}", 3])
    y = helper.make_tensor_value_info(f"out{p}", TensorProto.FLOAT, [f"n{p}", 3])
    z = helper.make_tensor_value_info(f"const{p}", TensorProto.FLOAT, [f"n{p}", 3])
    nodes = [helper.make_node("Relu", [x.name], [f"r{p}"], name=f"relu{p}"),
             helper.make_node("Sigmoid", [f"r{p}"], [y.name], name=f"sig{p}"),
             helper.make_node("Mul", [x.name, f"zero{p}"], [f"m{p}"], name=f"mul{p}"),
             helper.make_node("Add", [f"m{p}", f"c{p}"], [z.name], name=f"add{p}")]
    inits = [helper.make_tensor(f"zero{p}", TensorProto.FLOAT, [], [0.0]),
             helper.make_tensor(f"c{p}", TensorProto.FLOAT, [3], [1.0, 2.0, 3.0])]
    m = sec_models.model(nodes, [x], [y, z], inits, name=f"g{p}")
    helper.set_model_props(m, {f"k{p}": f"v{p}"})
    return m.SerializeToString()


@pytest.fixture(scope="module")
def models(server):
    ids = {}
    for name, data in (("hostile", sec_models.injection_model()), ("runnable", runnable_model())):
        reply = server.upload(data, f"{name}{PAYLOAD}.onnx")
        assert reply.status == 201, reply.body
        ids[name] = reply.json()["id"]
    return ids


@pytest.fixture(scope="module")
def browser():
    with chromium(sync_api) as b:
        yield b


class Watch:
    def __init__(self, page):
        self.page, self.dialogs, self.console, self.errors = page, [], [], []
        page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        page.on("console", lambda m: self.console.append(m.text))
        page.on("pageerror", lambda e: self.errors.append(str(e)))

    def check(self, where: str) -> None:
        pg = self.page
        assert pg.evaluate("typeof window.__pwned") == "undefined", where
        assert pg.evaluate("document.querySelectorAll('img').length") == 0, where   # no element was parsed
        assert self.dialogs == [], (where, self.dialogs)
        csp = [m for m in self.console if "Content Security Policy" in m or "Refused to" in m]
        assert csp == [], (where, csp)
        assert self.errors == [], (where, self.errors)


@pytest.fixture
def page(browser):
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    pg = ctx.new_page()
    pg.set_default_timeout(30000)
    yield pg, Watch(pg)
    ctx.close()


def _click_node(pg, name: str) -> None:
    pg.evaluate("name => [...document.querySelectorAll('g.node')].find(g => g.dataset.id === name)"
                ".dispatchEvent(new MouseEvent('click', {bubbles: true}))", name)


def test_library_page_shows_the_payload_as_text(server, models, page):
    pg, watch = page
    pg.goto(server.origin + "/")
    pg.wait_for_selector(f'.card[data-model="{models["hostile"]}"]')
    card = pg.inner_text(f'.card[data-model="{models["hostile"]}"]')
    assert f"hostile{PAYLOAD}.onnx" in card and f"x{PAYLOAD}" in card and f"[batch{PAYLOAD}, 4]" in card
    assert f"Op{PAYLOAD}" in card
    watch.check("library")


def test_model_page_every_tab(server, models, page):
    pg, watch = page
    mid = models["hostile"]
    pg.goto(f"{server.origin}/models/{mid}?backend=default&ops=Relu")
    pg.wait_for_selector("body[data-ready='1']")
    assert PAYLOAD in pg.inner_text("#view-crumbs") and PAYLOAD in pg.title()
    assert f"Op{PAYLOAD}"[:19] in pg.text_content("#graph")                  # the op type, truncated in the box
    watch.check("graph")
    # Summary: symbolic dims, tensor names, metadata
    pg.click("[data-tab=summary]")
    text = pg.inner_text("#tab-summary")
    for needle in (f"[batch{PAYLOAD}, 4]", f"x{PAYLOAD}", f"key{PAYLOAD}", f"value{PAYLOAD}", f"Op{PAYLOAD}"):
        assert needle in text, needle
    watch.check("summary")
    ARTIFACTS.mkdir(exist_ok=True)
    pg.screenshot(path=str(ARTIFACTS / "xss_summary.png"))
    # Node: op type in a custom domain, attribute strings, dims, neighbours
    _click_node(pg, f"custom{PAYLOAD}")
    pg.wait_for_selector("#node-title")
    text = pg.inner_text("#tab-node")
    for needle in (f"Op{PAYLOAD}", f"custom{PAYLOAD}", f"dom{PAYLOAD}", f"attr{PAYLOAD}", f"scope{PAYLOAD}/relu{PAYLOAD}"):
        assert needle in text, needle
    watch.check("node")
    # Debugger: events and the log name the nodes
    pg.click("[data-tab=debug]")
    pg.click("#dbg-start")
    pg.wait_for_selector("#dbg-status[data-index='0']")
    pg.click("#dbg-next")
    pg.wait_for_selector("#dbg-status[data-index='1']")
    assert PAYLOAD in pg.inner_text("#dbg-log") and PAYLOAD in pg.inner_text("#dbg-event")
    pg.click("#dbg-last")
    pg.wait_for_selector("#dbg-status:text('trace complete')")
    watch.check("debugger")
    # TensorRT: the unsupported custom op, the node left out, its incompatibility groups
    pg.click("[data-tab=trt]")
    pg.click("#trt-go")
    pg.wait_for_selector("#trt-summary")
    pg.wait_for_selector("#trt-cycles:not(.muted)")
    assert f"Op{PAYLOAD}" in pg.inner_text("#trt-out")
    pg.evaluate("name => [...document.querySelectorAll('[data-groups]')].find(e => e.dataset.groups === name).click()",
                f"custom{PAYLOAD}")
    pg.wait_for_selector("#groups-panel")
    assert f"custom{PAYLOAD}" in pg.inner_text("#groups-panel")
    watch.check("tensorrt")
    pg.screenshot(path=str(ARTIFACTS / "xss_tensorrt.png"))
    # Rule dialog: op types as check boxes
    pg.select_option("#backend", "rule")
    pg.click("#rule-edit")
    assert f"Op{PAYLOAD}" in pg.inner_text("#rule-ops")
    pg.click("#rule-add")
    pg.keyboard.press("Escape")
    watch.check("rule dialog")
    # Runs: the custom op cannot run; the error text is shown as text
    pg.select_option("#backend", "default")
    pg.click("[data-tab=runs]")
    pg.click("#run-go")
    pg.wait_for_selector("#run-error:not([hidden])", timeout=90000)
    watch.check("failed run")


def test_run_plots_and_compare_page(server, models, page):
    pg, watch = page
    mid = models["runnable"]
    pg.goto(f"{server.origin}/models/{mid}?backend=default&ops=Relu,Sigmoid")
    pg.wait_for_selector("body[data-ready='1']")
    pg.click("[data-tab=runs]")
    for _ in range(2):
        pg.click("#run-go")
        pg.wait_for_selector("#run-go:not([disabled])", timeout=90000)
        pg.wait_for_selector("#run-plots .plot-boundary-diff .main-svg", timeout=90000)
    plots = pg.text_content("#run-plots")
    assert "outputs match onnxruntime" in plots
    assert f"relu{PAYLOAD}"[:12] in plots or PAYLOAD in plots                # plotly axis labels, literal
    assert f"onnxruntime gave const{PAYLOAD} bit for bit again" in plots     # the verdict's detail, literal
    watch.check("run plots")
    rids = [r["id"] for r in server.request("GET", f"/api/runs?model={mid}").json()["runs"] if r["status"] == "done"]
    assert len(rids) >= 2
    pg.goto(f"{server.origin}/runs/compare?a={rids[0]}&b={rids[1]}")
    pg.wait_for_selector("#compare-diff")
    pg.wait_for_selector("#col-run-b .plot-boundary-diff .main-svg", timeout=60000)
    assert f"runnable{PAYLOAD}.onnx" in pg.inner_text("#compare-out")
    watch.check("compare")
    pg.goto(f"{server.origin}/learn")
    pg.wait_for_selector("#learn-steps li")
    watch.check("learn")


def test_the_guessed_ops_and_the_precision_pages_inputs_stay_text(server, models, page):
    """The page's ops guess comes from the server (the summary's suggested_ops: the hostile op type
    among them), and the precision page says which inputs a search ran on (input names, dims)."""
    pg, watch = page
    pg.goto(f"{server.origin}/models/{models['hostile']}")          # no ops in the link: the guess
    pg.wait_for_selector("body[data-ready='1']")
    assert f"Op{PAYLOAD}" in pg.input_value("#ops")
    watch.check("the guessed ops")
    pg.goto(f"{server.origin}/models/{models['runnable']}/precision")
    pg.select_option("#p-backend", "none")
    pg.click("#p-go")
    pg.wait_for_selector("#p-status:not([data-status='running'])[data-status]", timeout=90000)
    assert f"in{PAYLOAD} [1, 3]" in pg.inner_text("#p-inputs-used"), (pg.inner_text("#p-status"), pg.inner_text("#p-error"))
    watch.check("precision page")


@pytest.fixture(scope="module")
def token_server(tmp_path_factory):
    from sec_server import start_server, stop_server
    cwd = tmp_path_factory.mktemp("token-browser")
    srv = start_server(cwd, "--token", "browser-token", "--samples", "--instance", str(cwd / "instance"))
    yield srv
    stop_server(srv)


def test_pages_work_with_the_access_token(token_server, page):
    """The URL printed at start opens the library; the cookie carries the token to every fetch and
    POST of our own pages (which also pass the same-origin check)."""
    pg, watch = page
    url = token_server.first_line.split()[2]
    assert url.endswith("?token=browser-token")
    pg.goto(url)
    pg.wait_for_selector('.card[data-model="sample-trt_cycle"]')
    assert "token" not in pg.url                                            # moved into a cookie
    pg.goto(token_server.origin + "/models/sample-trt_cycle?backend=default&ops=Relu,Sigmoid,Add")
    pg.wait_for_selector("body[data-ready='1']")
    pg.click("#dbg-start")                                                  # a POST from our page
    pg.wait_for_selector("#dbg-status[data-index='0']")
    watch.check("token pages")
    other = pg.context.browser.new_context()                               # no cookie: refused
    p2 = other.new_page()
    assert p2.goto(token_server.origin + "/").status == 401
    other.close()
