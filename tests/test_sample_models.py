"""Tests for sample_models: the generated sample ONNX models and the synthetic DAGs."""
from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Iterator

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx.reference import ReferenceEvaluator

from sample_models.generate import (BUILDERS, CONTROL_FLOW_MODELS, build_all, random_feeds,
                                    write_all)
from sample_models.synthetic import UNSUPPORTED_OPS, random_dag_model, synthetic_model

REPO = Path(__file__).resolve().parents[1]
EXPECTED_FILES = {
    "resnet_small.onnx", "mlp.onnx", "conv_bn_relu_chain.onnx", "trt_cycle.onnx",
    "transformer_block.onnx", "if_model.onnx", "loop_model.onnx", "scan_rnn.onnx",
    "cnn_dynamic.onnx", "transformer_dynamic.onnx",
}
MAX_BYTES = 2 * 1024 * 1024


@pytest.fixture(scope="module")
def models() -> dict[str, onnx.ModelProto]:
    return build_all()


def _all_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """Nodes of ``graph`` and, recursively, of every subgraph attribute."""
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _all_nodes(attr.g)
            for sub in attr.graphs:
                yield from _all_nodes(sub)


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _compare_with_reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray],
                            conditioned: bool = False) -> None:
    """onnxruntime against onnx's reference evaluator.

    ``conditioned``: random arithmetic DAGs can cancel catastrophically, so two
    correct float32 evaluations in different op orders legitimately differ. The
    reference is then run a second time on inputs moved by a few float32 ulps, and
    the spread between its two answers widens the tolerance where the output is
    that sensitive; well-conditioned outputs keep rtol 1e-4.
    """
    got = _session(model).run(None, feeds)
    reference = ReferenceEvaluator(model)
    want = reference.run(None, feeds)
    spread = [np.zeros_like(np.asarray(w, dtype=np.float64)) for w in want]
    if conditioned:
        nudged = {k: (v * np.float32(1 + 4e-7)).astype(v.dtype) for k, v in feeds.items()}
        spread = [np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))
                  for a, b in zip(want, reference.run(None, nudged))]
    assert len(got) == len(want) == len(model.graph.output)
    for g, w, sp, out in zip(got, want, spread, model.graph.output):
        assert g.shape == np.asarray(w).shape, out.name
        allowed = 1e-5 + 1e-4 * np.abs(np.asarray(w, np.float64)) + 10 * sp
        finite = np.isfinite(np.asarray(w, np.float64))
        np.testing.assert_array_equal(np.isfinite(g), finite, err_msg=out.name)
        np.testing.assert_array_equal(np.asarray(g)[~finite], np.asarray(w)[~finite], err_msg=out.name)
        excess = np.abs(np.asarray(g, np.float64)[finite] - np.asarray(w, np.float64)[finite]) - allowed[finite]
        assert not (excess > 0).any(), f"{out.name}: {g} vs {w} (allowed {allowed})"


def _producer(model: onnx.ModelProto) -> dict[str, onnx.NodeProto]:
    return {o: n for n in model.graph.node for o in n.output}


def test_build_all_has_exactly_the_expected_files(models: dict[str, onnx.ModelProto]) -> None:
    assert set(models) == EXPECTED_FILES
    assert CONTROL_FLOW_MODELS <= EXPECTED_FILES


@pytest.mark.parametrize("name", sorted(EXPECTED_FILES))
def test_model_is_valid_opset17_ir8_and_small(models: dict[str, onnx.ModelProto],
                                              name: str) -> None:
    model = models[name]
    onnx.checker.check_model(model, full_check=True)
    default = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    assert default == [17]
    assert all(o.domain in ("", "ai.onnx") for o in model.opset_import)
    assert model.ir_version == 8
    assert model.ByteSize() < MAX_BYTES


@pytest.mark.parametrize("name", sorted(EXPECTED_FILES))
def test_node_and_tensor_names_are_unique_and_readable(models: dict[str, onnx.ModelProto],
                                                       name: str) -> None:
    nodes = list(_all_nodes(models[name].graph))
    names = [n.name for n in nodes]
    assert all(names), "every node needs a name"
    assert len(set(names)) == len(names), Counter(names).most_common(3)
    outputs = [o for n in nodes for o in n.output if o]
    assert len(set(outputs)) == len(outputs), "a tensor is produced twice"
    if name != "trt_cycle.onnx":  # trt_cycle keeps the TensorRT integration design's bare A/B/C/D names
        assert all("/" in n for n in names), [n for n in names if "/" not in n]


@pytest.mark.parametrize("name", sorted(EXPECTED_FILES))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_runs_in_onnxruntime_and_matches_reference(models: dict[str, onnx.ModelProto],
                                                   name: str, seed: int) -> None:
    # Control-flow models included: onnx.reference runs If, Loop and Scan.
    model = models[name]
    _compare_with_reference(model, random_feeds(model, seed=100 + seed))


def test_declared_static_output_shapes_hold(models: dict[str, onnx.ModelProto]) -> None:
    for name, model in models.items():
        got = _session(model).run(None, random_feeds(model, seed=7, symbolic_dim=3))
        for arr, out in zip(got, model.graph.output):
            dims = out.type.tensor_type.shape.dim
            assert arr.ndim == len(dims), (name, out.name)
            for size, dim in zip(arr.shape, dims):
                if dim.HasField("dim_value"):
                    assert size == dim.dim_value, (name, out.name, arr.shape)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_if_model_both_branches_match_reference(models: dict[str, onnx.ModelProto],
                                                sign: float) -> None:
    model = models["if_model.onnx"]
    x = sign * np.abs(random_feeds(model, seed=3)["input"]) + sign * 0.01
    _compare_with_reference(model, {"input": x.astype(np.float32)})


def test_if_branches_read_outer_scope(models: dict[str, onnx.ModelProto]) -> None:
    (if_node,) = [n for n in models["if_model.onnx"].graph.node if n.op_type == "If"]
    for attr in if_node.attribute:
        sub_inputs = {i for n in attr.g.node for i in n.input}
        local = {o for n in attr.g.node for o in n.output}
        assert sub_inputs - local, f"{attr.name} reads nothing from outer scope"
        assert len(attr.g.node) >= 3


def test_loop_trip_count_follows_input(models: dict[str, onnx.ModelProto]) -> None:
    sess = _session(models["loop_model.onnx"])
    small = np.full(4, 0.1, dtype=np.float32)   # sum|x| = 0.4 -> clipped to 1 trip
    big = np.full(4, 1.2, dtype=np.float32)     # sum|x| = 4.8 -> 4 trips
    assert sess.run(None, {"input": small})[1].shape == (1, 4)
    assert sess.run(None, {"input": big})[1].shape == (4, 4)


def test_scan_rnn_sequence_length_is_symbolic(models: dict[str, onnx.ModelProto]) -> None:
    model = models["scan_rnn.onnx"]
    x = np.random.default_rng(0).standard_normal([5, 1, 4]).astype(np.float32)
    _compare_with_reference(model, {"input": x})
    assert _session(model).run(None, {"input": x})[1].shape == (5, 1, 8)


def test_trt_cycle_matches_seed_004(models: dict[str, onnx.ModelProto]) -> None:
    model = models["trt_cycle.onnx"]
    by_name = {n.name: n for n in model.graph.node}
    assert set(by_name) == {"A", "B", "C", "D"}
    assert by_name["D"].op_type == "Det"
    prod = _producer(model)
    edges = {(prod[i].name, n.name) for n in model.graph.node for i in n.input if i in prod}
    assert edges == {("A", "B"), ("A", "D"), ("B", "C"), ("D", "C")}


def test_conv_bn_relu_chain_has_positive_and_negative_cases(
        models: dict[str, onnx.ModelProto]) -> None:
    model = models["conv_bn_relu_chain.onnx"]
    prod = _producer(model)
    consumers = Counter(i for n in model.graph.node for i in n.input)
    full, conv_bn_only, conv_relu = 0, 0, 0
    for n in model.graph.node:
        src = prod.get(n.input[0]) if n.input else None
        if n.op_type == "Relu" and src is not None and src.op_type == "BatchNormalization":
            conv = prod.get(src.input[0])
            if conv is not None and conv.op_type == "Conv" and consumers[conv.output[0]] == 1:
                full += 1
        if n.op_type == "BatchNormalization" and consumers[n.output[0]] == 1:
            conv_bn_only += int(prod[n.output[0]].name.endswith("no_relu/bn"))
        if n.op_type == "Relu" and src is not None and src.op_type == "Conv":
            conv_relu += 1
    assert (full, conv_bn_only, conv_relu) == (4, 1, 1)
    shared = [n for n in model.graph.node if n.op_type == "Conv" and consumers[n.output[0]] > 1]
    assert [n.name for n in shared] == ["shared/conv"]


def test_transformer_has_computed_and_constant_reshape(
        models: dict[str, onnx.ModelProto]) -> None:
    model = models["transformer_block.onnx"]
    prod = _producer(model)
    inits = {t.name for t in model.graph.initializer}
    reshapes = [n for n in model.graph.node if n.op_type == "Reshape"]
    computed = [n for n in reshapes if n.input[1] in prod and prod[n.input[1]].op_type == "Concat"]
    constant = [n for n in reshapes if n.input[1] in inits]
    assert computed and constant
    ops = Counter(n.op_type for n in model.graph.node)
    assert ops["LayerNormalization"] == 2 and ops["Softmax"] == 1 and ops["Erf"] == 1
    assert {"Shape", "Gather", "Concat"} <= set(ops)


def test_generation_is_deterministic(models: dict[str, onnx.ModelProto]) -> None:
    again = build_all()
    for name in EXPECTED_FILES:
        assert again[name].SerializeToString() == models[name].SerializeToString(), name


def test_write_all_writes_loadable_files(tmp_path: Path) -> None:
    paths = write_all(tmp_path)
    assert {p.name for p in paths} == EXPECTED_FILES == set(BUILDERS)
    for p in paths:
        assert 0 < p.stat().st_size < MAX_BYTES
        onnx.checker.check_model(str(p), full_check=True)


def test_generate_cli(tmp_path: Path) -> None:
    out = tmp_path / "models"
    proc = subprocess.run([sys.executable, "-m", "sample_models.generate", "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert {p.name for p in out.glob("*.onnx")} == EXPECTED_FILES


# --- synthetic models -------------------------------------------------------------

def test_synthetic_200_runs_and_matches_reference() -> None:
    model = synthetic_model(200, unsupported_fraction=0.2, skip_every=4, seed=0)
    onnx.checker.check_model(model, full_check=True)
    assert model.ir_version == 8 and model.opset_import[0].version == 17
    for seed in range(3):
        _compare_with_reference(model, random_feeds(model, seed=seed))


def test_synthetic_structure() -> None:
    n, k = 200, 4
    model = synthetic_model(n, unsupported_fraction=0.2, skip_every=k, seed=1)
    nodes = list(model.graph.node)
    assert len(nodes) == n and len({x.name for x in nodes}) == n
    assert sum(x.op_type in UNSUPPORTED_OPS for x in nodes) == 40
    prod_index = {x.output[0]: i for i, x in enumerate(nodes)}
    skips = [(i, x) for i, x in enumerate(nodes) if x.op_type == "Add"]
    assert [i for i, _ in skips] == list(range(2 * k - 1, n, k))
    for i, x in skips:
        assert prod_index.get(x.input[0], -1) == i - 1       # current value
        assert prod_index.get(x.input[1], -1) == i - 1 - k    # value k steps back
    for i, x in enumerate(nodes[1:], start=1):
        assert prod_index[x.input[0]] == i - 1              # it is a chain
    assert all(x.name.startswith("stage0/block") for x in nodes)


def test_synthetic_is_seeded() -> None:
    a = synthetic_model(300, seed=5).SerializeToString()
    assert a == synthetic_model(300, seed=5).SerializeToString()
    assert a != synthetic_model(300, seed=6).SerializeToString()


def test_synthetic_unsupported_fraction_extremes() -> None:
    none = synthetic_model(50, unsupported_fraction=0.0)
    assert not any(x.op_type in UNSUPPORTED_OPS for x in none.graph.node)
    full = synthetic_model(50, unsupported_fraction=1.0, skip_every=0)
    assert all(x.op_type in UNSUPPORTED_OPS for x in full.graph.node)
    with pytest.raises(ValueError):
        synthetic_model(0)


def test_synthetic_20000_node_count() -> None:
    model = synthetic_model(20_000)
    assert len(model.graph.node) == 20_000
    assert model.graph.output[0].name == model.graph.node[-1].output[0] == "output"


def test_synthetic_cli(tmp_path: Path) -> None:
    out = tmp_path / "s.onnx"
    proc = subprocess.run([sys.executable, "-m", "sample_models.synthetic", "64", str(out),
                           "--unsupported", "0.25", "--seed", "3", "--check"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    model = onnx.load(str(out))
    assert len(model.graph.node) == 64
    assert sum(x.op_type in UNSUPPORTED_OPS for x in model.graph.node) == 16


def _check_random_dag(model: onnx.ModelProto, n_nodes: int) -> None:
    onnx.checker.check_model(model, full_check=True)
    nodes = list(model.graph.node)
    assert len(nodes) == n_nodes
    seen = {i.name for i in model.graph.input}
    consumed: set[str] = set()
    for x in nodes:
        assert 1 <= len(x.input) <= 3
        assert set(x.input) <= seen, "input must come from an earlier tensor"
        consumed.update(x.input)
        seen.add(x.output[0])
    unused = [x.output[0] for x in nodes if x.output[0] not in consumed]
    assert [o.name for o in model.graph.output] == unused


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 40), seed=st.integers(0, 2**16))
def test_random_dag_property(n: int, seed: int) -> None:
    model = random_dag_model(n, seed)
    _check_random_dag(model, n)
    with np.errstate(all="ignore"):  # Mul chains may legitimately overflow to inf
        _compare_with_reference(model, random_feeds(model, seed=seed), conditioned=True)


def test_random_dag_custom_ops_and_arity() -> None:
    model = random_dag_model(30, seed=2, ops=("Relu", "Max"), max_inputs=1)
    assert all(len(x.input) == 1 for x in model.graph.node)
    with pytest.raises(ValueError):
        random_dag_model(5, ops=("Add",), max_inputs=1)
    with pytest.raises(ValueError):
        random_dag_model(5, ops=("NotAnOp",))
