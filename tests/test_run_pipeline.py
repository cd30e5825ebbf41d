"""One run pipeline (issue 22): a web run partitions once and costs one set of measured
executions; ``subgraph_runtime`` with ``executor`` as its alias; ``host_runtime`` (issue 23)."""

from __future__ import annotations

import time

import numpy as np
import onnxruntime as ort
import pytest

from app import create_app
from engine.executor import Executor
from partition.runner import PartitionRun
from _web_kernels import find_kernel

OPS = {"backend": "default", "ops": ["Relu", "Sigmoid", "Add"]}
REPEAT, WARMUP = 2, 1


@pytest.fixture
def client(tmp_path):
    app = create_app({"SGLENS_SAMPLES": True, "SGLENS_INSTANCE": str(tmp_path / "inst"),
                      "SGLENS_RUN_KERNELS": find_kernel, "SGLENS_RUN_REPEAT": REPEAT})
    return app.test_client()


def _wait(c, rid, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        run = c.get(f"/api/runs/{rid}").get_json()
        if run["status"] in ("done", "failed", "cancelled"):
            return run
        time.sleep(0.05)
    raise AssertionError(f"run {rid} did not finish")


class Counted:
    """Counts the real calls of a method, then makes them (a spy, not a stand-in)."""

    def __init__(self, monkeypatch, owner, name, count_if=lambda obj: True):
        self.calls = 0
        real = getattr(owner, name)

        def counted(obj, *args, **kwargs):
            if count_if(obj):
                self.calls += 1
            return real(obj, *args, **kwargs)
        monkeypatch.setattr(owner, name, counted)


def _ran(result, side):
    """Runs one side made, as its timing reports them: the measured ones and every warm-up --
    at least the spec's, more while our executor still tried parallel against serial runs
    (``Executor.calibrating``; on this small graph the first run's code generation alone)."""
    t = result["comparison"]["timings"][side]
    assert t["repeat"] == REPEAT and WARMUP <= t["warmup"] <= WARMUP + 4, t
    return t["warmup"] + t["repeat"]


def test_one_web_run_partitions_once_and_runs_each_side_warmup_plus_repeat_times(client, monkeypatch):
    # top-level executions only: a body's child executor runs inside its node
    ours = Counted(monkeypatch, Executor, "run", lambda ex: ex.parent is None)
    onnxruntime = Counted(monkeypatch, ort.InferenceSession, "run")
    partitions = Counted(monkeypatch, PartitionRun, "run")
    rid = client.post("/api/runs", json={"model": "sample-trt_cycle", "subgraph_runtime": "engine",
                                         **OPS}).get_json()["id"]
    run = _wait(client, rid)
    assert run["status"] == "done", run["error"]
    # the engine unpartitioned and the partitioned graph, warm-up + measured each: nothing more
    # (before: + 1 run keeping the boundaries + 2 for a timeline + 1 + min(repeat, 3) for node times)
    r = run["result"]
    assert ours.calls == _ran(r, "engine") + _ran(r, "partitioned")
    # the reference only, once more on redrawn inputs (do the outputs depend on them?), and once
    # in the session exposing the boundary tensors (the timed one is the model as it deploys)
    assert onnxruntime.calls == WARMUP + REPEAT + 1 + 1
    assert partitions.calls == 1
    # ... and that one set still gave everything the run card draws
    assert {t["name"] for t in r["timeline"]} >= {"default_0", "D", "default_1"}
    assert set(r["original_node_seconds"]) == {"A", "B", "C", "D"}
    assert set(r["node_seconds"]) >= {"default_0", "D", "default_1"}   # (+ the engine-run bodies' nodes)
    assert r["comparison"]["timings"]["partitioned"]["repeat"] == REPEAT
    assert all(sg["outputs"] for sg in r["comparison"]["subgraphs"])   # boundaries judged (warm-up kept them)
    assert r["runtimes"] == {"subgraphs": "engine", "host": "ours"}


def test_subgraph_runtime_and_its_older_name_executor(client):
    for body in ({"subgraph_runtime": "onnxruntime"}, {"executor": "onnxruntime"},
                 {"subgraph_runtime": "onnxruntime", "executor": "onnxruntime"}):
        rid = client.post("/api/runs", json={"model": "sample-trt_cycle", **OPS, **body}).get_json()["id"]
        run = _wait(client, rid)
        assert run["status"] == "done" and run["executor"] == "onnxruntime", (body, run["error"])
        assert {s["executor"] for s in run["result"]["comparison"]["subgraphs"]} == {"onnxruntime"}
    clash = client.post("/api/runs", json={"model": "sample-trt_cycle", **OPS,
                                           "subgraph_runtime": "engine", "executor": "onnxruntime"})
    assert clash.status_code == 400 and "disagree" in clash.get_json()["error"]
    bad = client.post("/api/runs", json={"model": "sample-trt_cycle", **OPS, "subgraph_runtime": "magic"})
    assert bad.status_code == 400 and "subgraph_runtime 'magic'" in bad.get_json()["error"]


def test_host_runtime_onnxruntime_runs_the_rest_in_onnxruntime_regions(client, monkeypatch):
    bad = client.post("/api/runs", json={"model": "sample-trt_cycle", **OPS, "host_runtime": "tvm"})
    assert bad.status_code == 400 and "host_runtime 'tvm'" in bad.get_json()["error"]
    ours = Counted(monkeypatch, Executor, "run", lambda ex: ex.parent is None)
    rid = client.post("/api/runs", json={"model": "sample-trt_cycle", **OPS, "subgraph_runtime": "engine",
                                         "host_runtime": "onnxruntime"}).get_json()["id"]
    run = _wait(client, rid)
    assert run["status"] == "done", run["error"]
    r = run["result"]
    assert r["runtimes"]["host"] == "onnxruntime" and r["runtimes"]["host_regions"] == 1
    assert r["runtimes"]["host_on_engine"] == []
    ran = {s["node"]: (s["property"], s["executor"]) for s in r["subgraph_times"]}
    # the one node outside the subgraphs (D) ran as a host region on onnxruntime; the subgraphs on ours
    assert ran == {"default_0": ("default", "engine"), "host_0": ("host", "onnxruntime"),
                   "default_1": ("default", "engine")}
    # numbers: the partitioned graph with its host part on onnxruntime still matches the reference
    comp = r["comparison"]
    assert comp["ok"] and all(per["partitioned"]["match"] for per in comp["outputs"].values())
    assert ours.calls == _ran(r, "engine") + _ran(r, "partitioned")
    assert run["summary"]["host_runtime"] == "onnxruntime"
    listed = client.get("/api/runs?model=sample-trt_cycle").get_json()["runs"]
    assert [x["summary"]["host_runtime"] for x in listed] == ["onnxruntime"]


def test_host_regions_never_form_a_cycle_and_match_onnxruntime_on_fresh_inputs(rng):
    """The partitioner groups the host nodes: on trt_cycle the host node D sits between the two
    subgraphs; on a transformer block every node outside an op-set subgraph goes to onnxruntime."""
    from engine.compare import compare
    from engine.host_regions import HOST_PROPERTY, host_regions
    from partition.onnx_io import read_model_proto, load_model
    from partition.runner import partition
    path = "sample_models/transformer_block.onnx"
    graph, model = load_model(path), read_model_proto(path)
    part = partition(graph, "default", ops=["MatMul", "Add"])
    regions = host_regions(part.graph)
    assert regions.subgraphs and all(s.property == HOST_PROPERTY for s in regions.subgraphs)
    feeds = {}
    for name in graph.inputs:
        info = graph.info(name)
        shape = [d if isinstance(d, int) and d > 0 else 2 for d in info.shape]
        feeds[name] = rng.standard_normal(shape).astype(np.float32)
    c = compare(graph, model, feeds, partitioned=part, partitioned_graph=regions.graph, executor="engine",
                repeat=1, warmup=1, runtime_by_property=((HOST_PROPERTY, "onnxruntime"),))
    assert c.ok, c.text()
    ran = {s["property"]: s["executors"] for s in c.measurements["partitioned"].subgraphs}
    assert ran == {"default": ["engine"], HOST_PROPERTY: ["onnxruntime"]}


def test_cli_host_runtime_and_the_executor_alias():
    import json
    import os
    import subprocess
    import sys
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    base = [sys.executable, "-m", "sglens", "compare", "sample_models/trt_cycle.onnx", "--ops", "Relu,Sigmoid,Add",
            "--repeat", "1", "--json"]
    done = subprocess.run(base + ["--executor", "engine", "--host-runtime", "onnxruntime"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["runtimes"]["subgraphs"] == "engine" and data["runtimes"]["host"] == "onnxruntime"
    assert data["ok"] and {s["executor"] for s in data["subgraphs"]} == {"engine"}
    bad = subprocess.run(base + ["--host-runtime", "tvm"], env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--host-runtime" in bad.stderr and "Traceback" not in bad.stderr


def test_subgraph_and_host_sessions_do_not_spin_while_idle(rng):
    """Many onnxruntime sessions in one graph: idle intra-op threads must sleep (docs/running.md)."""
    from engine.host_regions import HOST_PROPERTY, host_regions
    from engine.subgraph_ops import SubgraphOp
    from partition.onnx_io import load_model
    from partition.runner import partition
    graph = load_model("sample_models/trt_cycle.onnx")
    regions = host_regions(partition(graph, "default", ops=["Relu", "Sigmoid", "Add"]).graph)
    feeds = {"input": rng.standard_normal((4, 4)).astype(np.float32)}
    with Executor(regions.graph, subgraph_runtime="onnxruntime",
                  runtime_by_property=((HOST_PROPERTY, "onnxruntime"),)) as ex:
        ex.run(feeds)
        ops = [s.call.__self__ for s in ex._steps if isinstance(getattr(s.call, "__self__", None), SubgraphOp)]
    assert len(ops) == 3
    for op in ops:
        assert op._impl.name == "onnxruntime"
        spin = op._impl.session.get_session_options().get_session_config_entry("session.intra_op.allow_spinning")
        assert spin == "0", op.node.name


@pytest.mark.parametrize("model, ops", [("sample-mlp", ["Det"]), ("sample-transformer_block", ["MatMul"])],
                         ids=["no-subgraph", "between-subgraphs"])
def test_the_timeline_holds_the_nodes_outside_the_subgraphs(model, ops, tmp_path):
    """The run card's timeline and memory chart are drawn from the partitioned run's node times; the
    nodes left to our engine run as generated code (engine/codegen.py) where a segment holds no
    subgraph node, and each is on it: a partition that took nothing drew an empty timeline. The
    server's own kernels, as `make run` has them."""
    client = create_app({"SGLENS_SAMPLES": True, "SGLENS_INSTANCE": str(tmp_path / "inst"),
                         "SGLENS_RUN_REPEAT": REPEAT}).test_client()
    rid = client.post("/api/runs", json={"model": model, "backend": "default", "ops": ops,
                                         "subgraph_runtime": "onnxruntime"}).get_json()["id"]
    run = _wait(client, rid)
    assert run["status"] == "done", run["error"]
    r = run["result"]
    names = [t["name"] for t in r["timeline"]]
    fused = {n for n in names if "+" in n}   # a fused step: one bar, its parts' times shared out
    assert names and set(names) - fused <= set(r["node_seconds"])
    assert {s["node"] for s in r["subgraph_times"]} <= set(names)
    if ops == ["Det"]:   # nothing taken: every node of the model, each once
        assert not r["subgraph_times"] and sorted(names) == sorted(r["original_node_seconds"])
    else:
        host = {"attn/split_shape/shape", "attn/split_shape/gather", "attn/softmax", "attn/scale", "ffn/ln"}
        assert host <= set(names)
    assert r["memory"]["peak_bytes"] > 0
    starts = [t["start_us"] for t in r["timeline"]]
    assert starts == sorted(starts) and all(t["dur_us"] >= 0 for t in r["timeline"])
