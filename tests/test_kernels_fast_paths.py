"""Fast paths of the softmax and LayerNormalization kernels against onnxruntime, each
test twice: through the compiled rows (engine/kernels/native.py) and through the
numpy paths (one shift for all rows, row statistics as BLAS products), on tensors
large enough to take them and on the inputs that must leave them (masks, wide
ranges, NaN)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from engine.kernels import kernel_for, native

T = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE}


@pytest.fixture(params=["compiled", "numpy"], autouse=True)
def _path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.param == "numpy":
        monkeypatch.setattr(native, "_lib", None)
    elif not native.available():
        pytest.skip("the compiled module was not built")


def _ort(op: str, feeds: dict, dtype, out_types: tuple = (), **attrs) -> list:
    names = list(feeds)
    out_types = out_types or (dtype,)
    outs = [f"y{i}" for i in range(len(out_types))]
    g = helper.make_graph([helper.make_node(op, names, outs, **attrs)], "g",
                          [helper.make_tensor_value_info(n, T[dtype], None) for n in names],
                          [helper.make_tensor_value_info(o, T[t], None)
                           for o, t in zip(outs, out_types)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", ["plain", "masked", "wide", "nan", "axis1"])
def test_softmax_matches_onnxruntime(dtype, case: str, rng: np.random.Generator) -> None:
    x = (rng.standard_normal((1, 4, 64, 96)) * 3).astype(dtype)
    axis = -1
    if case == "masked":
        x[..., rng.integers(0, 96, 10)] = -np.inf
    elif case == "wide":
        x[0, 0, 0, 0] = 900.0
    elif case == "nan":
        x[0, 1, 2, 3] = np.nan
    elif case == "axis1":
        axis = 1
    # onnxruntime's double LogSoftmax leaves a NaN row finite but for the NaN itself
    # (its float kernel and ours make the whole row NaN): not compared there.
    ops = ("Softmax",) if case == "nan" and dtype == np.float64 else ("Softmax", "LogSoftmax")
    for op in ops:
        got = kernel_for(op, "", {"": 17})(np, x, axis=axis)[0]
        want = _ort(op, {"x": x}, dtype, axis=axis)[0]
        assert got.dtype == dtype
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True, err_msg=op)


@pytest.mark.parametrize("shape,axis", [((1, 128, 256), -1), ((4, 6, 32), 1), ((3, 50), 0),
                                        ((2, 3, 4, 40), -2)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layer_norm_matches_onnxruntime(shape, axis: int, dtype, rng: np.random.Generator) -> None:
    x = (rng.standard_normal(shape) * 4 + 3).astype(dtype)
    norm = shape[axis % len(shape):]
    scale = rng.standard_normal(norm).astype(dtype)
    bias = rng.standard_normal(norm).astype(dtype)
    got = kernel_for("LayerNormalization", "", {"": 17})(np, x, scale, bias, axis=axis,
                                                          epsilon=1e-5)
    want = _ort("LayerNormalization", {"x": x, "s": scale, "b": bias}, dtype,
                (dtype, np.float32, np.float32), axis=axis, epsilon=1e-5)  # stats: float
    for g, w, name in zip(got, want, ("Y", "Mean", "InvStdDev")):
        assert g.shape == w.shape, name
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=name)
