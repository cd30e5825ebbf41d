"""Attention as a pattern (engine/fuse_attention.py, kernels/attention.py): MatMul(Q, Kᵀ),
a scale, an additive mask or a Where fill, Softmax, MatMul(·, V) -- the ways BERT,
DistilBERT and GPT-2 exports write it -- fused into one step, against onnxruntime on
fresh random inputs, with and without masks, over several head counts; and the cases
that must not fuse or must fall back to the nodes as written."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine import fuse_attention
from engine.executor import Executor
from engine.kernels.attention import attention
from fake_cupy import FakeCupy
from partition import load_model

F = TensorProto.FLOAT


def _attention_model(batch: int, heads: int, seq: int, d: int, mask: str, scale: str,
                     extra_output: str = "", cast: bool = False) -> tuple[bytes, dict]:
    """Q, K, V (batch, heads, seq, d) as inputs; K transposed by a node; ``scale``
    "div", "mul" or "" (on the scores); ``mask`` "add" (an additive (batch, 1, 1, seq)
    input), "where" (a boolean causal (1, 1, seq, seq) constant and a fill), "both",
    "wide" (an additive mask wider than the scores: broadcasts them larger) or ""."""
    rng = np.random.default_rng()
    shape = [batch, heads, seq, d]
    inputs = [helper.make_tensor_value_info(n, F, shape) for n in ("q", "k", "v")]
    feeds = {n: rng.standard_normal(shape).astype(np.float32) for n in ("q", "k", "v")}
    inits = []
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2], name="kt"),
             helper.make_node("MatMul", ["q", "kt"], ["s0"], name="qk")]
    s = "s0"
    if scale:
        value = np.float32(np.sqrt(d)) if scale == "div" else np.float32(1 / np.sqrt(d))
        inits.append(numpy_helper.from_array(np.array(value), "scale"))
        nodes.append(helper.make_node(scale.capitalize(), [s, "scale"], ["s1"], name="scale"))
        s = "s1"
    if mask in ("where", "both"):
        causal = np.tril(np.ones((seq, seq), bool))[None, None]
        inits += [numpy_helper.from_array(causal, "causal"),
                  numpy_helper.from_array(np.array(np.finfo(np.float32).min), "fill")]
        nodes.append(helper.make_node("Where", ["causal", s, "fill"], ["s2"], name="causal"))
        s = "s2"
    if mask in ("add", "both", "wide"):
        mshape = [batch, 1, 1, seq] if mask != "wide" else [2, batch, 1, 1, seq]
        inputs.append(helper.make_tensor_value_info("mask", F, mshape))
        keep = rng.random(mshape) < 0.8
        keep[..., 0] = True  # every row keeps one key
        feeds["mask"] = np.where(keep, 0.0, -10000.0).astype(np.float32)
        nodes.append(helper.make_node("Add", [s, "mask"], ["s3"], name="mask"))
        s = "s3"
    nodes.append(helper.make_node("Softmax", [s], ["p"], axis=-1, name="softmax"))
    if cast:  # as GPT-2's exports write it: the probabilities cast to their own type
        nodes.append(helper.make_node("Cast", ["p"], ["pc"], to=F, name="cast"))
    nodes.append(helper.make_node("MatMul", ["pc" if cast else "p", "v"], ["y"], name="pv"))
    outputs = [helper.make_tensor_value_info("y", F, None)]
    if extra_output:
        outputs.append(helper.make_tensor_value_info(extra_output, F, None))
    g = helper.make_graph(nodes, "attention", inputs, outputs, inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model.SerializeToString(), feeds


@pytest.fixture()
def as_written(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the fused steps that fell back to the nodes as written."""
    calls: list[int] = []
    real = fuse_attention.as_written
    monkeypatch.setattr(fuse_attention, "as_written",
                        lambda *a: (calls.append(1), real(*a))[1])
    return calls


def _run_both(data: bytes, feeds: dict) -> tuple[dict, list, list]:
    ref = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    with Executor(load_model(data)) as ex:
        got = ex(feeds)
        fused = [f.node.op_type for f in ex._fused.values()]
    return got, ref, fused


@pytest.mark.parametrize("heads", [1, 2, 4, 12])
@pytest.mark.parametrize("mask,scale", [("", "div"), ("add", "div"), ("where", "div"),
                                        ("both", "mul"), ("add", "")])
def test_fused_attention_matches_onnxruntime(heads: int, mask: str, scale: str,
                                             as_written: list[int]) -> None:
    data, feeds = _attention_model(2, heads, 9, 8, mask, scale)
    got, ref, fused = _run_both(data, feeds)
    assert fused == ["Attention"] and not as_written
    np.testing.assert_allclose(got["y"], ref[0], rtol=1e-5, atol=1e-5)


def test_gpt2s_cast_probabilities_fuse(as_written: list[int]) -> None:
    data, feeds = _attention_model(1, 4, 7, 8, "both", "mul", cast=True)
    got, ref, fused = _run_both(data, feeds)
    assert fused == ["Attention"] and not as_written
    np.testing.assert_allclose(got["y"], ref[0], rtol=1e-5, atol=1e-5)


def test_a_mask_that_broadcasts_the_scores_larger_runs_as_written(as_written: list[int]) -> None:
    """A 5-D additive mask makes the scores 5-D: no in-place add, the nodes as written."""
    data, feeds = _attention_model(1, 2, 5, 4, "wide", "div")
    got, ref, fused = _run_both(data, feeds)
    assert fused == ["Attention"] and as_written
    assert got["y"].shape == ref[0].shape == (2, 1, 2, 5, 4)
    np.testing.assert_allclose(got["y"], ref[0], rtol=1e-5, atol=1e-5)


def test_the_debugger_still_sees_every_tensor() -> None:
    """A run that keeps intermediates runs the fused nodes as written: each is there."""
    data, feeds = _attention_model(1, 2, 6, 4, "both", "div")
    ref = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    with Executor(load_model(data)) as ex:
        assert [f.node.op_type for f in ex._fused.values()] == ["Attention"]
        kept = ex.run(feeds, keep_intermediates=True)
        lean = ex.run(feeds)
    assert {"s0", "s1", "s2", "s3", "p"} <= set(kept.values)
    assert not {"s0", "s1", "s2", "s3", "p"} & set(lean.values)
    for res in (kept, lean):
        np.testing.assert_allclose(res.outputs["y"], ref[0], rtol=1e-5, atol=1e-5)


def test_scores_read_elsewhere_are_not_fused() -> None:
    """An intermediate that is a graph output cannot disappear inside a fused step."""
    data, feeds = _attention_model(1, 2, 5, 4, "add", "div", extra_output="s1")
    got, ref, fused = _run_both(data, feeds)
    assert fused == []
    np.testing.assert_allclose(got["y"], ref[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["s1"], ref[1], rtol=1e-5, atol=1e-5)


def test_a_failing_step_is_named_as_written(rng: np.random.Generator) -> None:
    """Q and K whose inner sizes disagree: the error names the first MatMul, as unfused."""
    data, feeds = _attention_model(1, 2, 5, 4, "add", "div")
    feeds["q"] = rng.standard_normal((1, 2, 5, 3)).astype(np.float32)
    with Executor(load_model(data)) as ex, pytest.raises(Exception, match="'qk' \\(MatMul\\)"):
        ex(feeds)


def test_the_kernel_runs_on_the_fake_device(rng: np.random.Generator) -> None:
    """Written against ``xp``: the strict cupy stand-in runs it, mask and Where included."""
    fake = FakeCupy()
    q, k, v = (rng.standard_normal((2, 3, 6, 4)).astype(np.float32) for _ in range(3))
    kt = np.swapaxes(k, -1, -2)
    mask = np.where(rng.random((2, 1, 1, 6)) < 0.7, 0, -1e4).astype(np.float32)
    causal = np.tril(np.ones((6, 6), bool))[None, None]
    fill = np.array(-1e9, np.float32)
    scale = np.array(0.5, np.float32)

    def softmax(x):
        e = x - x.max(axis=-1, keepdims=True)
        e = fake.exp(e) if not isinstance(e, np.ndarray) else np.exp(e)
        return e / e.sum(axis=-1, keepdims=True)
    steps = [("Mul", (3,), 0), ("Where", (4, 5), 1), ("Add", (6,), 0)]
    args = [q, kt, v, scale, causal, fill, mask]
    got = attention(fake, [fake.asarray(a) for a in args], steps, softmax).get()
    s = np.where(causal, (q @ kt) * scale, fill) + mask
    want = softmax(s) @ v
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
