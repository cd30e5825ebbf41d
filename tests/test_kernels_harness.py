"""Shared helpers for the kernel tests: one-node models checked against ONNX's ReferenceEvaluator."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from engine.interpreter import run_graph
from fake_cupy import FakeCupy
from partition.onnx_io import from_model_proto

OPSET = 17
IR_VERSION = 8


def _array_modules() -> list[Any]:
    mods: list[Any] = [np, FAKE_CUPY]
    try:
        import cupy  # type: ignore[import-not-found]
        if cupy.cuda.runtime.getDeviceCount() > 0:
            mods.append(cupy)
    except Exception:  # noqa: BLE001 - no cupy or no GPU: numpy and the strict fake only
        pass
    return mods


#: The strict cupy stand-in (tests/fake_cupy.py): every kernel test runs on it too, so a
#: kernel that mixes host and device arrays or calls a numpy-only function fails here.
FAKE_CUPY = FakeCupy()
XPS = _array_modules()
xp_param = pytest.mark.parametrize("xp", XPS, ids=lambda m: getattr(m, "__name__", str(m)))


def node_model(op: str, inputs: dict[str, np.ndarray | None], n_outputs: int = 1, opset: int = OPSET,
               **attrs: Any) -> onnx.ModelProto:
    """A one-node model pinned to opset 17 / IR 8; ``None`` inputs become omitted ("")."""
    names = [name if value is not None else "" for name, value in inputs.items()]
    outs = [f"y{i}" for i in range(n_outputs)]
    node = helper.make_node(op, names, outs, name=f"{op.lower()}_node", **attrs)
    vis = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
           for n, v in inputs.items() if v is not None]
    graph = helper.make_graph([node], "t", vis, [helper.make_empty_tensor_value_info(o) for o in outs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = IR_VERSION
    return model


def to_numpy(value: Any) -> Any:
    if isinstance(value, list):
        return [to_numpy(v) for v in value]
    return np.asarray(value.get() if hasattr(value, "get") and not isinstance(value, np.ndarray) else value)


def run_ours(model: onnx.ModelProto, feeds: dict[str, np.ndarray], xp: Any = np) -> list[Any]:
    graph = from_model_proto(model)
    # String tensors stay on the host (cupy has no object dtype), as the interpreter keeps them.
    out = run_graph(graph, {k: v if v.dtype == object else xp.asarray(v) for k, v in feeds.items()}, xp=xp)
    return [to_numpy(out[name]) for name in graph.outputs]


def check(op: str, inputs: dict[str, np.ndarray | None], *, xp: Any = np, n_outputs: int = 1,
          rtol: float = 1e-5, atol: float = 1e-6, opset: int = OPSET, oracle: str = "reference",
          **attrs: Any) -> list[Any]:
    """Run ``op`` on ours and on an oracle (ReferenceEvaluator, or onnxruntime where the
    reference lacks an old opset's semantics); assert same dtypes, shapes and values."""
    model = node_model(op, inputs, n_outputs, opset, **attrs)
    feeds = {k: v for k, v in inputs.items() if v is not None}
    if oracle == "onnxruntime":
        import onnxruntime as ort  # noqa: PLC0415
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        expected = sess.run(None, feeds)
    else:
        expected = ReferenceEvaluator(model).run(None, feeds)
    got = run_ours(model, feeds, xp)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert_same(g, np.asarray(e), rtol, atol, op)
    return got


def assert_same(got: np.ndarray, expected: np.ndarray, rtol: float, atol: float, what: str) -> None:
    assert got.dtype == expected.dtype, f"{what}: dtype {got.dtype} != {expected.dtype}"
    assert got.shape == expected.shape, f"{what}: shape {got.shape} != {expected.shape}"
    if expected.dtype.kind in "fc":
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol, err_msg=what)
    else:
        np.testing.assert_array_equal(got, expected, err_msg=what)


def rand_shape(rng: np.random.Generator, rank: int, lo: int = 1, hi: int = 5) -> tuple[int, ...]:
    return tuple(int(d) for d in rng.integers(lo, hi + 1, size=rank))
