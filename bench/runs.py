"""Run latency: clicking Run -> first progress event -> result, in-process threads vs a Dask LocalCluster.

The same app API the page uses (``POST /api/runs``, then ``GET /api/runs/<id>`` polled every
2 ms) on a small model, for the two runners of ``app.jobs``: ``JobManager`` (threads in the
web process, the first release) and ``DaskJobManager`` (one LocalCluster worker process, what
``sglens serve`` uses). The first run of each side is reported apart (a fresh worker imports
numpy, onnxruntime and the engine); the medians are of the warm runs. The Dask overhead on the
result must stay under 0.5 s.

    .venv/bin/python bench/runs.py [--runs 10] [--model trt_cycle.onnx]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

OPS = {"backend": "default", "ops": ["Relu", "Sigmoid", "Add"]}


def one_run(client, model: str) -> tuple[float, float]:
    """Seconds from the POST to the first progress seen, and to the result."""
    t0 = time.perf_counter()
    resp = client.post("/api/runs", json={"model": model, "repeat": 1, **OPS})
    assert resp.status_code == 202, resp.get_json()
    rid = resp.get_json()["id"]
    first = None
    while True:
        run = client.get(f"/api/runs/{rid}").get_json()
        now = time.perf_counter() - t0
        if first is None and (run["status"] != "queued" or run["stage"] != "queued"):
            first = now
        if run["status"] in ("done", "failed", "cancelled"):
            assert run["status"] == "done", run.get("error")
            return first if first is not None else now, now
        time.sleep(0.002)


def measure(cluster: str | None, model: str, runs: int) -> dict[str, float]:
    from app import create_app
    with tempfile.TemporaryDirectory() as inst:
        t = time.perf_counter()
        app = create_app({"SGLENS_SAMPLES": True, "SGLENS_INSTANCE": inst, "SGLENS_RUN_CLUSTER": cluster,
                          "SGLENS_WORKERS": 1, "SGLENS_WORKER_MEMORY": 2 << 30, "SGLENS_RUN_WORKERS": 1})
        startup = time.perf_counter() - t
        client = app.test_client()
        try:
            cold = one_run(client, model)
            warm = [one_run(client, model) for _ in range(runs)]
        finally:
            app.extensions["sglens"].jobs.close()
    return {"startup": startup, "cold_first": cold[0], "cold_result": cold[1],
            "first": statistics.median(w[0] for w in warm), "result": statistics.median(w[1] for w in warm)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10, help="warm runs per side (default 10)")
    ap.add_argument("--model", default="trt_cycle.onnx", help="a sample model (default trt_cycle.onnx)")
    args = ap.parse_args()
    model = "sample-" + Path(args.model).stem
    inproc = measure(None, model, args.runs)
    dask = measure("local", model, args.runs)
    print(f"model {args.model}, {args.runs} warm runs per side (medians), polled every 2 ms")
    print(f"{'':22}{'in-process':>12}{'LocalCluster':>14}{'overhead':>10}")
    for key, label in (("first", "Run -> first progress"), ("result", "Run -> result"),
                       ("cold_first", "cold: first progress"), ("cold_result", "cold: result"),
                       ("startup", "server start")):
        a, b = inproc[key], dask[key]
        print(f"{label:22}{a:11.3f}s{b:13.3f}s{b - a:+9.3f}s")
    overhead = dask["result"] - inproc["result"]
    ratio = dask["result"] / inproc["result"] if inproc["result"] else float("inf")
    verdict = "OK" if overhead < 0.5 else "OVER the 0.5 s budget"
    print(f"LocalCluster / in-process (warm result): {ratio:.2f}x; overhead {overhead * 1000:.0f} ms: {verdict}")
    print("reproduce: .venv/bin/python bench/runs.py --runs", args.runs, "--model", args.model)
    return 0 if overhead < 0.5 else 1


if __name__ == "__main__":       # LocalCluster's worker processes are spawned: keep this guard
    sys.exit(main())
