"""Web debugger performance: a 5,000-node model's first view in the browser, one step's round trip.

    .venv/bin/python bench/web.py [--nodes 5000] [--steps 50]

Starts the app on a free loopback port with a ``sample_models.synthetic``
chain of ``--nodes`` nodes (scoped names ``stage/block/op``), then with
Playwright driving Debian's chromium (``/usr/bin/chromium``):

- **first view**: from navigation to the model page until the graph is drawn
  (``body[data-ready]``), cold (layout not cached on the server) and warm.
  A graph over ``SGLENS_FLAT_LIMIT`` (1,500) nodes is shown collapsed by name
  scope: ``dot`` never sees 5,000 nodes (it needs ~45 s flat);
- **step round trip**: a debugger step clicked in the page until its state is
  drawn, median and p95 over ``--steps``: ``step_in_page`` as Playwright sees it
  (click + polling for the new state: includes Playwright's own overhead),
  ``step_js`` measured in the page (fetch + server step + JSON + DOM classes),
  early in the trace and near its end (where every step carries all subgraphs
  made so far); also the bare HTTP round trip of ``POST /api/sessions/<id>/step``.

Targets (issue): first view < 3 s; one step < 100 ms.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--steps", type=int, default=50)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    from app import create_app
    from app.cli import make_server
    from partition.onnx_io import load_model
    from sample_models.synthetic import UNSUPPORTED_OPS, synthetic_model
    logging.getLogger("werkzeug").setLevel(logging.ERROR)

    t0 = time.perf_counter()
    data = synthetic_model(args.nodes).SerializeToString()
    graph = load_model(data)
    load_s = time.perf_counter() - t0
    app = create_app({"SGLENS_INSTANCE": tempfile.mkdtemp(prefix="sglens-bench-")})
    entry = app.extensions["sglens"].models.add_graph(f"synthetic_{args.nodes}.onnx", graph, data)
    ops = [op for op in graph.op_counts() if op not in UNSUPPORTED_OPS]
    srv = make_server("127.0.0.1", 0, app)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{srv.server_port}"
    url = f"{base}/models/{entry.id}?backend=default&ops={','.join(ops)}"
    results: dict[str, object] = {"nodes": len(graph.nodes), "model_build_and_load_s": round(load_s, 3)}

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 850})
        for label in ("first_view_cold_s", "first_view_warm_s"):
            start = time.perf_counter()
            page.goto(url)
            page.wait_for_selector("body[data-ready='1']", timeout=60000)
            results[label] = round(time.perf_counter() - start, 3)
        results["view_mode"] = page.get_attribute("#graph", "data-mode")
        results["boxes_drawn"] = int(page.get_attribute("#graph", "data-nodes"))
        # expand one group: one level more
        start = time.perf_counter()
        page.click("g.node.group")
        # polled with evaluate: wait_for_function evaluates a string, which the page's CSP forbids
        while page.evaluate("n => document.querySelectorAll('g.node').length <= n", results["boxes_drawn"]):
            page.wait_for_timeout(10)
        results["expand_one_group_s"] = round(time.perf_counter() - start, 3)
        page.click("#dbg-start")
        page.wait_for_selector("#dbg-status[data-index='0']")
        times, inpage = [], []
        for i in range(1, args.steps + 1):
            start = time.perf_counter()
            page.click("#dbg-next")
            page.wait_for_selector(f"#dbg-status[data-index='{i}']")
            times.append(time.perf_counter() - start)
            inpage.append(float(page.get_attribute("#dbg-status", "data-ms")))
        results["step_js_ms_median"] = round(statistics.median(inpage), 1)
        results["step_js_ms_p95"] = round(sorted(inpage)[int(0.95 * (len(inpage) - 1))], 1)
        results["step_in_page_ms_median"] = round(1000 * statistics.median(times), 1)
        results["step_in_page_ms_p95"] = round(1000 * sorted(times)[int(0.95 * (len(times) - 1))], 1)
        # near the end of the trace every step carries all subgraphs made so far
        start = time.perf_counter()
        page.click("#dbg-last")
        page.wait_for_selector("#dbg-status:text('trace complete')", timeout=120000)
        results["run_to_last_s"] = round(time.perf_counter() - start, 3)
        last = int(page.get_attribute("#dbg-status", "data-index"))
        results["trace_events"] = last + 1
        late, late_js = [], []
        for i in range(1, 11):
            start = time.perf_counter()
            page.click("#dbg-prev")
            page.wait_for_selector(f"#dbg-status[data-index='{last - i}']")
            late.append(time.perf_counter() - start)
            late_js.append(float(page.get_attribute("#dbg-status", "data-ms")))
        results["step_in_page_near_end_ms_median"] = round(1000 * statistics.median(late), 1)
        results["step_js_near_end_ms_median"] = round(statistics.median(late_js), 1)
        page.screenshot(path=os.path.join(tempfile.gettempdir(), "sglens-bench-5000.png"))
        browser.close()

    req = urllib.request.Request(f"{base}/api/sessions", method="POST", headers={"Content-Type": "application/json"},
                                 data=json.dumps({"model": entry.id, "backend": "default", "ops": ops}).encode())
    sid = json.loads(urllib.request.urlopen(req).read())["id"]
    http = []
    index = 0
    for _ in range(args.steps * 4):
        body = json.dumps({"action": "next", "index": index}).encode()
        start = time.perf_counter()
        out = json.loads(urllib.request.urlopen(urllib.request.Request(
            f"{base}/api/sessions/{sid}/step", data=body, method="POST",
            headers={"Content-Type": "application/json"})).read())
        http.append(time.perf_counter() - start)
        index = out["index"]
    results["step_http_ms_median"] = round(1000 * statistics.median(http), 2)
    results["step_http_ms_p95"] = round(1000 * sorted(http)[int(0.95 * (len(http) - 1))], 2)
    srv.shutdown()
    results["machine"] = f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    print(json.dumps(results, indent=1))
    ok = (results["first_view_cold_s"] < 3 and results["step_in_page_ms_median"] < 100
          and results["step_in_page_near_end_ms_median"] < 100)
    print("targets (first view < 3 s, step < 100 ms):", "met" if ok else "NOT met")
    print("reproduce: .venv/bin/python bench/web.py --nodes 5000 --steps 50")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
