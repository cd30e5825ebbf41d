"""Issue 12 "done when", the runs part: three differently shaped models in a real browser.

Playwright drives Debian's chromium against a real server (our real engine kernels, real
onnxruntime). For each model the test sets the input shapes in the Runs tab, runs a
comparison and checks the report: the outputs match onnxruntime (the server's verdict, and
our own onnxruntime run on the same inputs for the bundle model), and the timings show a
spread (a median inside a p10-p90 band over several measured repeats, warm-ups counted).

- ``cnn_dynamic``: symbolic batch, height and width;
- ``transformer_dynamic``: int64 ids with a symbolic sequence length;
- ``mlp`` saved with external data (``mlp_ext.onnx`` + ``mlp_ext.onnx.data``) and uploaded as a
  bundle through the library page's file input (both files selected at once).

Screenshots land in ``test-artifacts/runs_*.png``.
"""

from __future__ import annotations

import re
import numpy as np
import onnx
import pytest

from browser_harness import ARTIFACTS, checked_page, chromium, playwright_or_skip, serving
from conftest import SAMPLE_MODELS as SAMPLES, external_data_mlp

pytestmark = pytest.mark.browser

sync_api = playwright_or_skip()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from app import create_app
    app = create_app({"SGLENS_SAMPLES": True, "SGLENS_INSTANCE": str(tmp_path_factory.mktemp("inst"))})
    with serving(app) as url:
        yield url, app


@pytest.fixture(scope="module")
def browser():
    with chromium(sync_api) as b:
        yield b


@pytest.fixture
def page(browser):
    with checked_page(browser, 1400, 900, 30000, csp_errors=True) as pg:
        yield pg


def _open_runs(page, url: str) -> None:
    page.goto(url)
    page.wait_for_selector("body[data-ready='1']")
    page.click("[data-tab=runs]")
    page.wait_for_selector("fieldset.input-spec")


def _set_dims(page, name: str, dims: dict[int, int]) -> None:
    for axis, value in dims.items():
        page.fill(f'input.dim[data-input="{name}"][data-axis="{axis}"]', str(value))


def _run_and_wait(page) -> None:
    page.fill("#run-repeat", "7")
    page.click("#run-go")
    page.wait_for_selector("#run-plots .run-summary", timeout=120000)
    page.wait_for_selector(".plot-timing-spread .main-svg", timeout=60000)


def _check_report(page, shape: str) -> dict[str, tuple[float, float, float]]:
    text = page.inner_text("#run-plots")
    assert "outputs match onnxruntime" in text, text[:2000]
    assert shape in page.inner_text("#run-plots .run-inputs-used"), page.inner_text("#run-plots .run-inputs-used")
    assert "|ours − ref| ≤ atol + rtol·|ref|" in page.inner_text("#run-plots .match-rule")
    # every output row of the error table is a match, with the metrics shown
    rows = page.locator("#run-plots table.run-errors tr[data-output]")
    assert rows.count() >= 2 and page.locator("#run-plots table.run-errors tr.bad").count() == 0
    spreads = {}
    for run in ("onnxruntime", "engine", "partitioned"):
        row = page.locator(f'#run-plots table.run-timings tr[data-run="{run}"]')
        median = float(row.locator(".t-median").inner_text())
        low, high = (float(x) for x in row.locator(".t-spread").inner_text().split("–"))
        # ours warms up past its executor's trial runs of parallel against serial (up to 4 more)
        warm = re.fullmatch(r"7 \(\+(\d) warm-up\)", row.locator(".t-repeats").inner_text())
        assert warm and (int(warm[1]) == 1 if run == "onnxruntime" else 1 <= int(warm[1]) <= 5), warm
        assert 0 < low <= median <= high, (run, low, median, high)
        spreads[run] = (low, median, high)
    # a spread over 7 runs: the band is not a single point for at least one run
    assert any(h > l for l, _, h in spreads.values()), spreads
    # units on the axes: ms for times, MiB for memory
    for cls, unit in (("plot-timing-spread", "ms"), ("plot-subgraph-time", "ms"), ("plot-memory", "MiB")):
        assert unit in page.locator(f".{cls} .ytitle").first.text_content()
    return spreads


def _shot(page, name: str) -> None:
    page.evaluate("document.querySelector('.model-layout').style.height = 'auto';"
                  "document.querySelector('#tab-runs').style.overflow = 'visible'")
    page.wait_for_timeout(300)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"runs_{name}.png"), full_page=True)


def test_cnn_with_symbolic_batch_and_spatial_dims(server, page):
    url, app = server
    _open_runs(page, url + "/models/sample-cnn_dynamic?backend=default&ops=Conv,Relu")
    labels = page.locator('fieldset[data-input="images"] .dimname').all_inner_texts()
    assert labels == ["batch", "height", "width"]                     # symbolic dims named
    # prefilled from the model's own example shape (metadata), not 1
    assert page.input_value('input.dim[data-input="images"][data-axis="2"]') == "96"
    assert "FLOAT" in page.inner_text('fieldset[data-input="images"] .dtype')
    # a shape the model cannot take is refused before anything runs, naming the input
    _set_dims(page, "images", {0: 2, 2: 40, 3: 56})
    page.fill('input.dim[data-input="images"][data-axis="1"]', "4")  # the model fixes axis 1 to 3
    page.click("#run-go")
    page.wait_for_selector("#run-error:not([hidden])")
    assert "input 'images'" in page.inner_text("#run-error") and "fixes it to 3" in page.inner_text("#run-error")
    page.fill('input.dim[data-input="images"][data-axis="1"]', "3")
    _run_and_wait(page)
    _check_report(page, "[2, 3, 40, 56]")
    _shot(page, "cnn_dynamic")
    # the shapes are remembered for this model: a fresh page prefills them
    _open_runs(page, url + "/models/sample-cnn_dynamic?backend=default&ops=Conv,Relu")
    assert [page.input_value(f'input.dim[data-input="images"][data-axis="{a}"]') for a in range(4)] == \
        ["2", "3", "40", "56"]


def test_transformer_with_symbolic_sequence_length(server, page):
    url, app = server
    _open_runs(page, url + "/models/sample-transformer_dynamic?backend=default&ops=MatMul,Add")
    assert page.locator('fieldset[data-input="input_ids"] .dimname').all_inner_texts() == ["batch", "sequence"]
    assert "INT64" in page.inner_text('fieldset[data-input="input_ids"] .dtype')
    _set_dims(page, "input_ids", {1: 24})
    page.fill('fieldset[data-input="input_ids"] .high', "50")
    _run_and_wait(page)
    _check_report(page, "[1, 24]")
    _shot(page, "transformer_dynamic")
    # Repeat re-submits the stored inputs: the same shape, values and verdict again
    first = page.locator("#run-list button.repeat").first
    first.click()
    page.locator("#run-list tr").nth(2).wait_for(timeout=120000)   # listed once it has finished
    page.wait_for_selector("#run-plots .run-summary", timeout=120000)
    assert "[1, 24]" in page.inner_text("#run-plots .run-inputs-used")
    assert "outputs match onnxruntime" in page.inner_text("#run-plots")
    # the two runs side by side: same y-scales on both sides, units on the axes, a heat map with a scale
    boxes = page.locator("#run-list input[type=checkbox]")
    boxes.nth(0).check()
    boxes.nth(1).check()
    page.click("#run-compare")
    page.wait_for_selector("#col-run-b .plot-boundary-diff .main-svg", timeout=60000)
    page.wait_for_selector("#compare-heat .plot-node-heatmap .colorbar", timeout=60000)
    for cls in ("plot-timing-spread", "plot-subgraph-time", "plot-memory"):
        ranges = page.evaluate(f"[...document.querySelectorAll('.{cls}')].map(p => p.layout.yaxis.range)")
        assert len(ranges) == 2 and ranges[0] == ranges[1], (cls, ranges)
    assert "ms" in page.locator("#compare-heat .colorbar .cbtitle").first.text_content()
    assert "spreads overlap" in page.inner_text("#compare-diff") or "×" in page.inner_text("#compare-diff")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "runs_compare.png"), full_page=True)


def test_model_with_external_data_uploaded_as_a_bundle(server, page, tmp_path):
    import onnxruntime as ort
    url, app = server
    path = external_data_mlp(tmp_path / "bundle")
    page.goto(url + "/")
    page.set_input_files("#upload-file", [str(path), str(path.parent / "mlp_ext.onnx.data")])
    page.click("#upload-form button[type=submit]")
    page.wait_for_selector("#upload-progress .label:text('loaded mlp_ext.onnx')")
    card = page.locator(".card", has_text="mlp_ext.onnx")
    card.locator("h3 a").click()
    page.wait_for_selector("body[data-ready='1']")
    mid = page.url.rsplit("/", 1)[-1].split("?")[0]
    _open_runs(page, f"{url}/models/{mid}?backend=default&ops=Gemm,MatMul,Add,Relu")
    assert page.locator('fieldset[data-input="input"] .dimname').all_inner_texts() == ["N"]
    _set_dims(page, "input", {0: 5})
    page.select_option('fieldset[data-input="input"] select.fill', "random")
    page.fill('fieldset[data-input="input"] .seed', "7")
    _run_and_wait(page)
    _check_report(page, "[5, 64]")
    _shot(page, "external_data_bundle")
    # independent oracle: onnxruntime on the original files, fed the very inputs the run stored
    from app.run_inputs import load
    from partition.onnx_io import load_model
    rid = page.locator("#run-plots a[href$='trace.json']").get_attribute("href").split("/")[3]
    used = load(app.instance_path, rid)
    feeds = used.feeds(load_model(str(path)))
    assert feeds["input"].shape == (5, 64)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    from engine.executor import Executor
    with Executor(load_model(str(path))) as ex:
        got = ex.run(feeds).numpy_outputs()
    for name, value in zip([o.name for o in onnx.load(str(path), load_external_data=False).graph.output], want):
        np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=1e-5)
    # the model goes away (deleted here; a restart did it before runs-dask's store): its page says so
    # and its run still opens, with a notice instead of a raw-JSON 404
    assert page.request.delete(f"{url}/api/models/{mid}").ok
    page.goto(f"{url}/models/{mid}")
    assert "not loaded on this server" in page.inner_text("#model-gone")
    page.click(f"#gone-runs a[href*='{rid}']")
    page.wait_for_selector(".notice.model-gone")
    assert "no longer loaded" in page.inner_text(".notice.model-gone")
    assert "outputs match onnxruntime" in page.inner_text("#compare-out")
    page.screenshot(path=str(ARTIFACTS / "runs_model_gone.png"), full_page=True)


# ------------------------------------------------- issue 20: reattach, history, compare --
def _slow_kernel(node, opset):
    """The web kernels with a Sigmoid that takes 0.25 s: a run lasts long enough to reload under it."""
    import time as _time

    from _web_kernels import find_kernel
    if node.op_type == "Sigmoid":
        def slow(xp, x, **_):
            _time.sleep(0.25)
            return ((1 / (1 + xp.exp(-x))).astype(x.dtype),)
        return slow
    return find_kernel(node, opset)


@pytest.fixture(scope="module")
def slow_server(tmp_path_factory):
    from app import create_app
    app = create_app({"SGLENS_SAMPLES": True, "SGLENS_INSTANCE": str(tmp_path_factory.mktemp("slow")),
                      "SGLENS_RUN_KERNELS": _slow_kernel})
    with serving(app) as url:
        yield url, app


CYCLE = "/models/sample-trt_cycle?backend=default&ops=Relu,Sigmoid,Add"


def test_a_reload_during_a_run_follows_it_again(slow_server, page):
    """Reload while a run is in flight: its progress and Cancel come back, and the run list goes
    to 'done' by itself (no second reload), with the report shown."""
    url, _ = slow_server
    _open_runs(page, url + CYCLE)
    page.fill("#run-repeat", "20")     # ~50 slow Sigmoid calls: ~12 s, time enough to reload on a loaded machine
    page.click("#run-go")
    page.wait_for_selector("#run-cancel:not([hidden])")
    rid = page.get_attribute("#run-progress", "data-run")
    page.reload()
    page.wait_for_selector("body[data-ready='1']")
    page.click("[data-tab=runs]")
    page.wait_for_selector("#run-cancel:not([hidden])", timeout=5000)
    assert page.get_attribute("#run-progress", "data-run") == rid and page.is_visible("#run-progress")
    assert page.locator(f'#run-list tr[data-run="{rid}"]').get_attribute("data-status") in ("queued", "running")
    assert page.is_disabled("#run-go")
    # the label moves on while we watch (live progress, not a frozen line)
    first = page.inner_text("#run-progress .label")
    page.wait_for_function("t => document.querySelector('#run-progress .label').textContent !== t", arg=first,
                           timeout=30000)
    page.wait_for_selector(f'#run-list tr[data-run="{rid}"][data-status="done"]', timeout=120000)
    page.wait_for_selector("#run-plots .run-summary", timeout=30000)
    assert page.is_hidden("#run-cancel") and not page.is_disabled("#run-go")
    assert "✔" in page.inner_text(f'#run-list tr[data-run="{rid}"] .h-verdict')


def test_cancel_after_a_reload(slow_server, page):
    url, _ = slow_server
    _open_runs(page, url + CYCLE)
    page.fill("#run-repeat", "20")
    page.click("#run-go")
    page.wait_for_selector("#run-cancel:not([hidden])")
    rid = page.get_attribute("#run-progress", "data-run")
    page.reload()
    page.wait_for_selector("body[data-ready='1']")
    page.click("[data-tab=runs]")
    page.click("#run-cancel", timeout=5000)
    page.wait_for_selector(f'#run-list tr[data-run="{rid}"][data-status="cancelled"]', timeout=60000)
    assert "cancelled" in page.inner_text("#run-error")


def test_history_columns_and_what_differs_between_two_runs(server, page):
    """The history shows verdict, shapes, tolerance, options, median time and the runtimes that
    ran the subgraphs; the form keeps tolerance and repeats; the compare page names every setting
    that differs, what ran each subgraph on each side, and the heat map has node names."""
    url, app = server
    _open_runs(page, url + CYCLE)
    page.fill("#run-repeat", "3")
    page.click("#run-go")
    page.wait_for_selector("#run-plots .run-summary", timeout=120000)
    # the card: what ran each subgraph, and why
    rows = page.locator("#run-plots table.run-subgraphs tr[data-runtime]")
    assert rows.count() == 2
    newest = app.extensions["sglens"].runs.get(app.extensions["sglens"].runs.list()[0]["id"])
    reasons = [s["reason"] for s in newest["result"]["comparison"]["subgraphs"]]
    shared = page.locator("#run-plots p[data-shared]")
    for k in range(2):
        assert rows.nth(k).get_attribute("data-runtime") in ("engine", "onnxruntime")
    if len(set(reasons)) == 1:   # one reason for both: said once above the table, no column
        assert shared.inner_text() == "every subgraph: " + reasons[0]
        assert rows.nth(0).locator(".why").count() == 0
    else:
        assert shared.count() == 0
        assert [rows.nth(k).locator(".why").inner_text().strip() for k in range(2)] == reasons
    assert "→ ran on" in page.inner_text("#run-plots .run-setup")
    # ... and what ran the rest of the graph (issue 23): our engine unless asked otherwise
    host = page.locator("#run-plots .run-setup .run-host")
    assert host.get_attribute("data-host-runtime") == "ours" and "rest of the graph on our engine" in host.inner_text()
    # a subgraph's name is a link to the graph: its members are focused
    link = page.locator("#run-plots table.run-subgraphs .node-link").first
    link.click()
    page.wait_for_function("document.getElementById('graph').dataset.hit")
    hit = page.evaluate("document.getElementById('graph').dataset.hit")
    newest_id = app.extensions["sglens"].runs.list()[0]["id"]
    members = app.extensions["sglens"].runs.get(newest_id)["result"]["partition"]["subgraphs"]
    assert any(hit == sg["nodes"][0] for sg in members), (hit, members)
    assert page.is_visible("#run-plots .run-summary")       # the report stays where it was
    # the second run: another tolerance and runtime; the form kept what was typed
    page.wait_for_function("document.getElementById('run-repeat').value === '3'")
    page.fill("#run-atol", "0.001")
    page.select_option("#run-executor", "onnxruntime")
    page.select_option("#run-host-runtime", "onnxruntime")
    page.click("#run-go")
    page.wait_for_selector("#run-cancel:not([hidden])")
    page.wait_for_selector("#run-cancel[hidden]", state="attached", timeout=120000)
    page.wait_for_selector("#run-list tr[data-status=done] >> nth=1", timeout=30000)
    assert page.input_value("#run-atol") == "0.001" and page.input_value("#run-repeat") == "3"
    newest, older = page.locator("#run-list tr[data-run]").nth(0), page.locator("#run-list tr[data-run]").nth(1)
    for row in (newest, older):
        assert "✔" in row.locator(".h-verdict").inner_text()
        assert row.locator(".h-shapes").inner_text().startswith("input [")
        assert float(row.locator(".h-median").inner_text()) > 0
        assert "ops=Relu,Sigmoid,Add" in row.locator(".h-options").inner_text()
    assert newest.locator(".h-tolerance").inner_text() == "atol 0.001, rtol 0.001"
    assert older.locator(".h-tolerance").inner_text() == "atol 0.0001, rtol 0.001"
    assert "onnxruntime → onnxruntime ×2" in newest.locator(".h-runtime").inner_text()
    assert newest.locator(".h-why").first.inner_text().startswith("onnxruntime: ")   # why it ran there
    assert newest.locator(".h-host").get_attribute("data-host-runtime") == "onnxruntime"
    assert older.locator(".h-host").get_attribute("data-host-runtime") == "ours"
    assert "rest of the graph: onnxruntime" in newest.locator(".h-runtime").inner_text()
    card = page.locator("#run-plots .run-setup .run-host")    # the newest run's card, shown when it ended
    assert card.get_attribute("data-host-runtime") == "onnxruntime" and "1 region(s), 1 node(s)" in card.inner_text()
    boxes = page.locator("#run-list input[type=checkbox]")
    boxes.nth(1).check()
    boxes.nth(0).check()
    page.click("#run-compare")
    page.wait_for_selector("#compare-settings table.settings-diff", timeout=30000)
    settings = page.locator("#compare-settings tr[data-setting]").evaluate_all("rs => rs.map(r => r.dataset.setting)")
    assert {"tolerance", "subgraph runtime asked", "host runtime (outside the subgraphs)"} <= set(settings), settings
    hosts = {page.locator(f"#col-run-{k} .run-host").get_attribute("data-host-runtime") for k in "ab"}
    assert hosts == {"ours", "onnxruntime"}                  # each card says what ran its rest
    assert "0.001" in page.inner_text('#compare-settings tr[data-setting="tolerance"]')
    assert page.locator("#compare-diff table.compare-subgraphs tr[data-subgraph]").count() == 2
    assert "onnxruntime" in page.inner_text("#compare-diff table.compare-subgraphs")
    # a reason every subgraph of a run shares is said once above the table, not on each row
    shared = page.locator("#compare-diff p[data-shared]")
    assert shared.count() >= 1
    for k in range(shared.count()):
        side = shared.nth(k).get_attribute("data-shared")
        assert "every subgraph: " in shared.nth(k).inner_text()
        assert page.locator(f"#compare-diff td.{side}-runtime .why").count() == 0
    page.wait_for_selector("#compare-heat .plot-node-heatmap g.ytick text", state="attached", timeout=60000)
    ticks = page.locator("#compare-heat .plot-node-heatmap g.ytick text").all_text_contents()
    assert {"A", "B", "C", "D"} <= set(ticks), ticks
    # node names in a card open the model page with that node selected
    link = page.locator("#col-run-a table.run-subgraphs a.node-link").first
    assert "node=" in link.get_attribute("href")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "runs_compare_settings.png"), full_page=True)
    from urllib.parse import parse_qs, urlparse
    target = parse_qs(urlparse(link.get_attribute("href")).query)["node"][0]
    assert target in {"A", "B", "C", "D"}                    # a subgraph opens at its first member
    link.click()
    page.wait_for_selector("body[data-ready='1']")
    page.wait_for_function("document.getElementById('graph').dataset.hit")
    assert page.evaluate("document.getElementById('graph').dataset.hit") == target
    page.wait_for_selector("#tab-node:not([hidden])")
    assert target in page.inner_text("#tab-node")


def test_boundary_bytes_of_symbolic_tensors_are_unknown_not_zero(server, page):
    """cnn_dynamic's activations have symbolic batch/height/width: their size is not 0 B."""
    url, app = server
    page.goto(url + "/models/sample-cnn_dynamic")
    page.wait_for_selector("body[data-ready='1']")
    page.click("[data-tab=trt]")
    page.click("#trt-go")
    page.wait_for_selector("#trt-summary")
    from partition import load_model, partition
    from partition.report import describe
    graph = load_model(str(SAMPLES / "cnn_dynamic.onnx"))
    subs = describe(partition(graph, "tensorrt"))["subgraphs"]
    assert subs and all(s["boundary_unknown"] for s in subs)         # the oracle: every boundary is symbolic
    text = page.inner_text("#tab-trt")
    assert "unknown (" in text and "symbolic-shape tensor" in text
    assert " 0 B" not in text


def test_a_gpu_runs_cuda_graph_column_reads_its_report_as_text(server, page):
    """The run card's CUDA Graph cell (static/runcard.js) on the three shapes of report
    ``engine/gpu_graphs.measure_replays`` makes; a node name from the model stays text."""
    url, _app = server
    page.goto(url + "/runs/compare")
    cases = page.evaluate("""() => [
        SG.cudaGraphText({captured: true, seconds: 0.00123, matches_eager: true}),
        SG.cudaGraphText({captured: true, seconds: 0.002, matches_eager: false}),
        SG.cudaGraphText({captured: false, eager_because: [{node: "<img src=x onerror=alert(1)>", why: "Loop"}]}),
        SG.cudaGraphText({captured: true, capture_failed: ["CaptureUnsupported: int32"]}),
        SG.cudaGraphText(null)]""")
    assert cases[0] == "1.230 ms", cases[0]
    assert "differ" in cases[1]
    assert cases[2] == "eager: <img src=x onerror=alert(1)>: Loop"
    assert cases[3] == "eager: CaptureUnsupported: int32"
    assert cases[4] == "–"


def test_the_card_says_a_reason_every_subgraph_shares_once_and_differing_ones_per_row(server, page):
    """The card's table of what ran each subgraph, drawn by the page's own code from two
    results: one where every subgraph ran for the same reason (a CRNN's 23 rows of "auto:
    tensorrt does not import ...") and one where they differ."""
    url, _ = server
    page.goto(url + CYCLE)
    page.wait_for_selector("body[data-ready='1']")
    draw = """reasons => {
        const subs = reasons.map((why, i) => ({ id: i, node: "sg" + i, property: "tensorrt", executor: "onnxruntime",
                                               reason: why, seconds: 0.001, peak_bytes: 10 }));
        const box = document.createElement("div");
        SG.fill(box, SG.subgraphRuntimeTable({ subgraphs: subs }, { partition: { subgraphs: [] } }, {}));
        return { shared: [...box.querySelectorAll("p[data-shared]")].map(p => p.textContent),
                 heads: [...box.querySelectorAll("th")].map(t => t.textContent),
                 whys: [...box.querySelectorAll("td.why")].map(t => t.textContent) };
    }"""
    same = page.evaluate(draw, ["no tensorrt here"] * 3)
    assert same["shared"] == ["every subgraph: no tensorrt here"] and "why" not in same["heads"] and not same["whys"]
    mixed = page.evaluate(draw, ["no tensorrt here", "refused by onnxruntime", "no tensorrt here"])
    assert mixed["shared"] == [] and "why" in mixed["heads"]
    assert mixed["whys"] == ["no tensorrt here", "refused by onnxruntime", "no tensorrt here"]
    one = page.evaluate(draw, ["no tensorrt here"])           # a single subgraph keeps its row's reason
    assert one["shared"] == [] and one["whys"] == ["no tensorrt here"]


def test_a_weak_match_offers_the_atol_that_makes_the_check_mean_something(server, page, tmp_path):
    """A model whose outputs are all near zero (x * 1e-6): the first run's match is weak; the card
    offers "Run again with atol A" (A a thousandth of the largest |ref| onnxruntime gave); one
    click sets atol and runs again, and that run is a plain match at atol A."""
    import browser_harness as bh
    from onnx import TensorProto, helper, numpy_helper
    from conftest import make_model
    url, _ = server
    vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [4, 64])  # noqa: E731
    tiny = numpy_helper.from_array(np.array(1e-6, dtype=np.float32), "tiny")
    model = make_model([helper.make_node("Mul", ["x", "tiny"], ["y"], name="scale")], [vi("x")], [vi("y")],
                       initializers=[tiny])
    path = tmp_path / "tiny_outputs.onnx"
    path.write_bytes(model.SerializeToString())
    bh.open_runs_tab(page, url, path)
    page.click("#run-go")
    page.wait_for_selector("#run-plots .run-summary[data-verdict='weak']", timeout=120000)
    first = page.get_attribute("#run-plots", "data-run")
    peak = page.evaluate(f"fetch('/api/runs/{first}').then(r => r.json())")["result"]["comparison"][
        "outputs"]["y"]["engine"]["ref_max_abs"]
    button = page.wait_for_selector("#run-with-atol")
    atol = float(button.inner_text().rsplit(" ", 1)[1])
    assert 0 < peak <= 1e-6 and atol == pytest.approx(peak / 1000, rel=0.5), (atol, peak)
    page.screenshot(path=str(ARTIFACTS / "runs_weak_match_offers_atol.png"), full_page=True)
    button.click()
    for _ in range(600):   # the next run's card (a polled attribute: this page's CSP forbids eval)
        if page.get_attribute("#run-plots", "data-run") not in (None, first):
            break
        page.wait_for_timeout(200)
    page.wait_for_selector("#run-plots .run-summary[data-verdict='match']", timeout=120000)
    assert float(page.input_value("#run-atol")) == pytest.approx(atol)
    assert page.locator("#run-with-atol").count() == 0       # a real match needs no offer
    assert f"atol {atol:.2e}".replace("e-0", "e-") in page.inner_text("#run-plots .match-rule")
