"""Elementwise, activation and Cast kernels against ReferenceEvaluator on fresh random inputs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto

from test_kernels_harness import check, rand_shape, xp_param

UNARY = ["Abs", "Neg", "Exp", "Floor", "Ceil", "Sign", "Sin", "Cos", "Tan", "Atan", "Sinh", "Cosh",
         "Asinh", "Tanh", "Erf", "Sigmoid", "Relu", "Softsign", "Softplus", "HardSwish", "Round",
         "Identity"]
POSITIVE = ["Log", "Sqrt", "Reciprocal", "Acosh"]
UNIT = ["Asin", "Acos", "Atanh"]


@xp_param
@pytest.mark.parametrize("op", UNARY + POSITIVE + UNIT)
def test_unary(op: str, xp: Any, rng: np.random.Generator) -> None:
    x = rng.standard_normal(rand_shape(rng, int(rng.integers(1, 4)))).astype(np.float32) * 3
    if op in POSITIVE:
        x = np.abs(x) + 1.1
    if op in UNIT:
        x = np.clip(x / 4, -0.95, 0.95).astype(np.float32)
    check(op, {"x": x}, xp=xp, rtol=1e-5, atol=1e-6)


def _broadcast_pair(rng: np.random.Generator) -> tuple[tuple[int, ...], tuple[int, ...]]:
    shape = rand_shape(rng, int(rng.integers(1, 4)))
    other = tuple(d if rng.random() < 0.6 else 1 for d in shape[int(rng.integers(0, len(shape))):])
    return (shape, other) if rng.random() < 0.5 else (other, shape)


@xp_param
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Mean", "Pow"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_binary_float(op: str, dtype: Any, xp: Any, rng: np.random.Generator) -> None:
    sa, sb = _broadcast_pair(rng)
    if op in ("Max", "Min", "Sum", "Mean"):
        sa = np.broadcast_shapes(sa, sb)  # ReferenceEvaluator's variadic ops broadcast into the first
    a = rng.standard_normal(sa).astype(dtype)
    b = rng.standard_normal(sb).astype(dtype)
    if op == "Pow":
        a = np.abs(a) + 0.5
    check(op, {"a": a, "b": b}, xp=xp, rtol=1e-5, atol=1e-6)


@xp_param
@pytest.mark.parametrize("exponent", [3.0, 2.0, 0.5, -1.0, 3.5])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pow_by_a_scalar_exponent(exponent: float, dtype: Any, xp: Any, rng: np.random.Generator) -> None:
    """The cube is two products (GPT-2's tanh GELU); signs, zeros and infinities as pow's."""
    a = (rng.standard_normal((4, 7)) * 3).astype(dtype)
    a[0, :4] = [0.0, -0.0, np.inf, -np.inf]
    if exponent % 1:
        a = np.abs(a)
    check("Pow", {"a": a, "b": np.array(exponent, dtype)}, xp=xp, rtol=1e-6, atol=1e-6)


@xp_param
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Mod", "Max", "Min", "BitwiseAnd", "BitwiseOr"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_binary_int(op: str, dtype: Any, xp: Any, rng: np.random.Generator) -> None:
    sa, sb = _broadcast_pair(rng)
    if op in ("Max", "Min"):
        sa = np.broadcast_shapes(sa, sb)
    a = rng.integers(-50, 50, sa).astype(dtype)
    b = rng.integers(1, 9, sb).astype(dtype) * rng.choice([-1, 1], sb).astype(dtype)
    check(op, {"a": a, "b": b}, xp=xp)


@xp_param
def test_mod_fmod(xp: Any, rng: np.random.Generator) -> None:
    a = (rng.standard_normal((3, 4)) * 10).astype(np.float32)
    b = (rng.uniform(1, 3, (3, 4)) * rng.choice([-1, 1], (3, 4))).astype(np.float32)
    check("Mod", {"a": a, "b": b}, xp=xp, fmod=1)


@xp_param
@pytest.mark.parametrize("op", ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"])
def test_compare(op: str, xp: Any, rng: np.random.Generator) -> None:
    sa, sb = _broadcast_pair(rng)
    check(op, {"a": rng.integers(0, 3, sa).astype(np.float32), "b": rng.integers(0, 3, sb).astype(np.float32)}, xp=xp)


@xp_param
@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logic(op: str, xp: Any, rng: np.random.Generator) -> None:
    sa, sb = _broadcast_pair(rng)
    check(op, {"a": rng.random(sa) < 0.5, "b": rng.random(sb) < 0.5}, xp=xp)
    check("Not", {"a": rng.random(sa) < 0.5}, xp=xp)


@xp_param
def test_where_clip(xp: Any, rng: np.random.Generator) -> None:
    sa, sb = _broadcast_pair(rng)
    cond = rng.random(sa) < 0.5
    check("Where", {"c": cond, "a": rng.standard_normal(sa).astype(np.float32),
                    "b": rng.standard_normal(sb).astype(np.float32)}, xp=xp)
    x = rng.standard_normal(sa).astype(np.float32)
    lo, hi = np.float32(-rng.random()), np.float32(rng.random())
    check("Clip", {"x": x, "lo": np.array(lo), "hi": np.array(hi)}, xp=xp)
    check("Clip", {"x": x, "lo": None, "hi": np.array(hi)}, xp=xp)


@xp_param
@pytest.mark.parametrize("to", [TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.INT32,
                                TensorProto.INT64, TensorProto.INT8, TensorProto.UINT8, TensorProto.BOOL])
def test_cast(to: int, xp: Any, rng: np.random.Generator) -> None:
    x = (rng.standard_normal(rand_shape(rng, 2)) * 20).astype(np.float32)
    if to == TensorProto.UINT8:
        x = np.abs(x)
    check("Cast", {"x": x}, xp=xp, to=to)
    check("CastLike", {"x": x.astype(np.float64), "like": np.zeros(1, np.float32)}, xp=xp)


@xp_param
@pytest.mark.parametrize("op,attrs", [
    ("LeakyRelu", {"alpha": 0.2}), ("Elu", {"alpha": 0.7}), ("Selu", {}), ("Celu", {"alpha": 1.3}),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}), ("ThresholdedRelu", {"alpha": 0.5}),
    ("Shrink", {"lambd": 0.6, "bias": 0.1}), ("IsInf", {}), ("IsNaN", {}),
])
def test_activation_attrs(op: str, attrs: dict, xp: Any, rng: np.random.Generator) -> None:
    x = rng.standard_normal(rand_shape(rng, 3)).astype(np.float32)
    if op in ("IsInf", "IsNaN"):
        x.ravel()[:: 3] = np.inf
        x.ravel()[1:: 4] = np.nan
    check(op, {"x": x}, xp=xp, **attrs)


@xp_param
def test_prelu(xp: Any, rng: np.random.Generator) -> None:
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    check("PRelu", {"x": x, "slope": rng.random((3, 1, 1)).astype(np.float32)}, xp=xp)


@xp_param
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset", [11, 17])
def test_softmax(op: str, opset: int, xp: Any, rng: np.random.Generator) -> None:
    x = rng.standard_normal(rand_shape(rng, 3, 2, 5)).astype(np.float32)
    axis = int(rng.integers(-3, 3))
    # ReferenceEvaluator has only the opset-13 single-axis semantics; opset 11 (input viewed
    # as 2-D around the axis) is checked against onnxruntime.
    check(op, {"x": x}, xp=xp, opset=opset, axis=axis,
          oracle="onnxruntime" if opset < 13 else "reference")


@pytest.mark.parametrize("dtype,rtol", [(np.float32, 1e-6), (np.float64, 1e-15)])
def test_erf_accuracy_against_math_erf(dtype, rtol, rng) -> None:
    import math
    from engine.kernels.elementwise import erf
    x = np.concatenate([rng.standard_normal(5000) * 3, rng.standard_normal(500) * 1e-6,
                        [0.0, 0.4999, 0.5, 5.9, -7.0, np.inf, -np.inf]]).astype(dtype)
    got = erf(np, x)
    assert got.dtype == dtype
    want = np.array([math.erf(float(v)) for v in x])
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=rtol, atol=0)
