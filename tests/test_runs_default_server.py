"""Every built-in backend and a ``--plugin`` backend, run through ``POST /api/runs`` on a real
``sglens serve`` in its default configuration (Dask LocalCluster workers, waitress), to ``done``
with the partitioned graph's outputs matching onnxruntime (issue 20's first blocker, issue 21's
plugin item).

Before the run spec was plain data, every ``tensorrt`` run answered 500 ("Could not serialize
object of type LLGExpr") and left its row queued; ``--plugin`` made the server fail to start.
"""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "security"))
from sec_server import start_server, stop_server  # noqa: E402

pytestmark = pytest.mark.slow

PLUGIN = '''
from partition import SubgraphProperty, SubgraphSelector, register_subgraph_property


class ReluSigmoid(SubgraphSelector):
    def select(self, node):
        return node.op_type == "Relu"

    def select_output(self, node, out):
        return out.op_type in ("Sigmoid", "Relu", "Add")


class Prop(SubgraphProperty):
    property_name = "{name}"

    def create_subgraph_selector(self):
        return ReluSigmoid()


register_subgraph_property("{name}", Prop())
'''
PLUGIN_BACKEND = f"plug_{uuid.uuid4().hex[:8]}"

#: (model, request fields): every built-in backend, tensorrt with its options, a rule and a plugin.
CASES = {
    "default": ("sample-trt_cycle", {"backend": "default", "ops": ["Relu", "Sigmoid", "Add"]}),
    "conv_bn": ("sample-conv_bn_relu_chain", {"backend": "conv_bn"}),
    "conv_bn_relu": ("sample-conv_bn_relu_chain", {"backend": "conv_bn_relu"}),
    "tensorrt": ("sample-trt_cycle", {"backend": "tensorrt"}),
    "tensorrt_options": ("sample-resnet_small", {"backend": "tensorrt", "options": {
        "fallback_ops": ["MaxPool"], "mode": "teaching", "min_size": 1, "trt_version": "10.0"}}),
    "tensorrt_conv": ("sample-conv_bn_relu_chain", {"backend": "tensorrt", "trt_plugins": "MyOp",
                                                    "keep_data_dependent": True}),
    "rule": ("sample-trt_cycle", {"backend": "rule", "rule": {"name": "r", "ops": ["Relu", "Add", "Sigmoid"]}}),
    "plugin": ("sample-trt_cycle", {"backend": PLUGIN_BACKEND}),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("default_server")
    plugin = cwd / "my_plugin.py"
    plugin.write_text(PLUGIN.format(name=PLUGIN_BACKEND))
    # No --in-process-runs, no --debug: Dask workers and waitress, as `make run` starts it.
    srv = start_server(cwd, "--samples", "--instance", str(cwd / "instance"), "--plugin", str(plugin),
                       "--worker-memory", "1GiB")
    yield srv
    stop_server(srv)


def wait(srv, rid: str, timeout: float = 240) -> dict:
    end = time.time() + timeout
    run: dict = {}
    while time.time() < end:
        reply = srv.request("GET", f"/api/runs/{rid}")
        assert reply.status == 200, reply.body
        run = reply.json()
        if run["status"] in ("done", "failed", "cancelled", "interrupted"):
            return run
        time.sleep(0.1)
    raise AssertionError(f"run {rid} did not end: {run}")


def test_the_server_starts_with_the_plugin_backend_listed(server):
    backends = server.request("GET", "/api/backends").json()
    names = {b["name"]: b for b in backends["backends"]}
    assert {"default", "conv_bn", "conv_bn_relu", "tensorrt", PLUGIN_BACKEND} <= set(names)
    assert names[PLUGIN_BACKEND]["plugin"] is True and backends["plugin_errors"] == {}


@pytest.mark.parametrize("case", list(CASES))
def test_every_backend_runs_to_done_matching_onnxruntime(server, case):
    model, fields = CASES[case]
    reply = server.request("POST", "/api/runs", {"model": model, **fields})
    assert reply.status == 202, reply.body
    run = wait(server, reply.json()["id"])
    assert run["status"] == "done", run
    assert run["worker"].startswith("tls://127.0.0.1:"), run   # ran on a Dask worker, over TLS
    comparison = run["result"]["comparison"]
    assert comparison["backend"] == fields["backend"]
    # The oracle: onnxruntime on the whole model, the same inputs; every output of the
    # partitioned graph within the run's tolerance of it.
    assert comparison["outputs"], comparison
    for name, per_run in comparison["outputs"].items():
        assert per_run["partitioned"]["match"] is True, (name, per_run)
    assert comparison["ok"] is True, comparison
    # ... and the backend did partition something (each case's model has a subgraph to find)
    assert comparison["subgraphs"], comparison


def test_no_run_row_is_left_queued(server):
    runs = server.request("GET", "/api/runs").json()["runs"]
    assert runs and all(r["status"] not in ("queued", "running") for r in runs), \
        [(r["backend"], r["status"], r["message"]) for r in runs]


@pytest.mark.parametrize("case", [c for c in CASES if c != "plugin"])
def test_the_run_spec_is_plain_data_that_pickles_and_rebuilds_its_backend(case, monkeypatch):
    """What crosses to a worker: plain pickle (no cloudpickle) round-trips it, and a fresh
    registry on the other side builds the same backend from it."""
    import pickle

    import types

    from app import api
    from app.run_spec import make_spec, properties
    from partition.backends import builtin_registry
    _, fields = CASES[case]
    registry = builtin_registry()
    monkeypatch.setattr(api, "lens", lambda: types.SimpleNamespace(registry=registry))  # selection()'s registry
    chosen = api.selection(dict(fields))
    spec = make_spec(chosen, id="r", label="m", device="cpu", subgraph_runtime="auto", host_runtime="ours",
                     repeat=1, run_inputs=None)
    again = pickle.loads(pickle.dumps(spec))
    assert again == spec
    built = properties(again.selection, builtin_registry())
    assert built and [type(p) for p in built] == [type(p) for p in properties(spec.selection, registry)]
