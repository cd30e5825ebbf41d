"""Every sample model on the real kernels, unpartitioned and partitioned, against onnxruntime.

The oracle is onnxruntime on the whole model, on fresh random inputs (no fixed
expected values); outputs must agree within 1e-4 relative to the reference's
magnitude (``engine.compare.errors``). A model whose ops have no kernel fails
the test with the missing ops named (a skip would hide a lost kernel).
"""

from __future__ import annotations

import onnxruntime as ort
import pytest

from engine.compare import errors
from engine.executor import Executor, missing_ops
from engine.inputs import random_inputs
from partition import load_model
from partition.runner import partition
from sample_models.generate import build_all

MODELS = build_all()
NAMES = list(MODELS)
BACKENDS = {"default": None, "conv_bn": {}, "tensorrt": {}}
RTOL = 1e-4


def _setup(name: str, seed: int):
    model = MODELS[name]
    graph = load_model(model.SerializeToString())
    feeds = random_inputs(graph, {}, seed=seed, default_dim=2)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    return graph, feeds, ref


def _check(outputs, ref):
    for name, want in ref.items():
        e = errors(outputs[name], want)
        assert e["match"], f"output {name}: max rel error {e['max_rel']} (abs {e['max_abs']})"


def _need_kernels(graph, skip_subgraph_nodes=False):
    missing = missing_ops(graph, skip_subgraph_nodes=skip_subgraph_nodes)
    if missing:
        pytest.fail(f"no kernel for {missing}: a sample model must run on our kernels")


@pytest.mark.parametrize("name", NAMES)
def test_unpartitioned_matches_onnxruntime(name, rng):
    graph, feeds, ref = _setup(name, int(rng.integers(1 << 30)))
    _need_kernels(graph)
    with Executor(graph) as ex:
        _check(ex(feeds), ref)


def _ops_for(graph, backend):
    if backend != "default":
        return {}
    # the default backend: every other op type, so subgraphs and plain nodes mix
    ops = sorted({n.op_type for n in graph.nodes})
    return {"ops": ops[::2] or ops}


@pytest.mark.parametrize("executor", ["engine", "onnxruntime"])
@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("name", NAMES)
def test_partitioned_matches_onnxruntime(name, backend, executor, rng):
    graph, feeds, ref = _setup(name, int(rng.integers(1 << 30)))
    result = partition(graph, backend, **_ops_for(graph, backend))
    _need_kernels(result.graph, skip_subgraph_nodes=executor != "engine")
    with Executor(result.graph, executor=executor) as ex:
        res = ex.run(feeds)
    _check(res.numpy_outputs(), ref)
    assert len(res.subgraphs) == len(result.subgraphs)
    assert all(r.executor == executor for r in res.subgraphs)
