"""A conv's epilogue: per output channel ``* s + t`` (a folded BatchNormalization, the GEMM's
bias folded into ``t``), ``+ residual``, then the activation (Relu, a Clip's bounds, a hard
swish, a LeakyRelu and bounds after it), in place on the conv's own output -- in one compiled pass over a float32 numpy output
(``native.epilogue_plan``), else numpy's or cupy's passes through ``xp``. ``nn.conv_fused`` and
its plans (``nn.conv_fused_plan``) apply it; ``engine/fuse.py``'s conv chains choose it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from . import native
from .activations import leaky_relu_of


@dataclass(frozen=True)
class HardSwishAct:
    """A hard swish as a conv chain's activation (``engine/fuse.py``): ``y * clip(y * a + b,
    lo, hi)``, then ``/ c`` (post ``Div``), ``* c`` (post ``Mul``) or nothing (post ``""``).
    ONNX's HardSwish is ``a = 1/6, b = 1/2`` on ``[0, 1]``; Paddle writes ``x * clip(x + 3,
    0, 6) / 6``: ``a = 1, b = 3`` on ``[0, 6]``, post ``Div``, ``c = 6`` -- the graph's
    operations in its order (``y * 1`` is exact)."""

    a: float
    b: float
    lo: float
    hi: float
    post: str = ""
    c: float = 1.0

    def compiled(self) -> tuple | None:
        """The compiled epilogue's parameters; None for a NaN bound (numpy's passes then)."""
        if math.isnan(self.lo) or math.isnan(self.hi):
            return None
        return (self.a, self.b, self.lo, self.hi, _POST[self.post], self.c)

    def apply(self, xp: Any, y: Any) -> Any:
        """In place on ``y`` (the conv's own output)."""
        t = y * y.dtype.type(self.a) if self.a != 1 else y.copy()
        t += y.dtype.type(self.b)
        xp.clip(t, y.dtype.type(self.lo), y.dtype.type(self.hi), out=t)
        xp.multiply(y, t, out=y)
        if self.post == "Div":
            y /= y.dtype.type(self.c)
        elif self.post == "Mul":
            y *= y.dtype.type(self.c)
        return y


@dataclass(frozen=True, eq=False)
class LeakyReluAct:
    """A LeakyRelu as a conv chain's activation (``engine/fuse.py``), ``y < 0 ? y * alpha : y``,
    then clamped to ``[lo, hi]`` (either None for none) as a Max or Min against a scalar
    constant or a Clip after it computes: tf2onnx writes Keras' ``maximum(leaky_relu(conv),
    c)`` so (openWakeWord's embedding model, 19 times). The bounds are as the graph gives them
    (0-d arrays on a device, read there without a sync)."""

    alpha: float
    lo: Any = None
    hi: Any = None

    def apply(self, xp: Any, y: Any) -> Any:
        """In place on ``y`` (the conv's own output): the LeakyRelu kernel's numbers."""
        leaky_relu_of(xp, y, y * self.alpha, self.alpha, out=y)
        return activation(xp, y, (self.lo, self.hi))


@dataclass(frozen=True, eq=False)
class AffineAfter:
    """An activation, then ``y * scale + shift`` per output channel (``scale``, ``shift``: one
    value per channel, of the output's dtype): a conv chain's per-channel Mul / Add by constants,
    or a BatchNormalization, after its activation (PP-OCRv4's learnable scale and shift after
    each hard swish, ``engine/fuse.py``), in the same pass."""

    act: Any
    scale: Any
    shift: Any


#: ``HardSwishAct.post`` as the compiled epilogue numbers it.
_POST = {"": 0, "Div": 1, "Mul": 2}


def epilogue(xp: Any, y: Any, residual: Any, relu: Any, affine: Any = None) -> Any:
    """``y`` (a conv's own output) through the epilogue in numpy's or cupy's passes."""
    if affine is not None:  # per output channel (axis 1): a BatchNormalization's scale and shift
        per_channel = (1, -1) + (1,) * (y.ndim - 2)
        xp.multiply(y, affine[0].reshape(per_channel), out=y)
        xp.add(y, affine[1].reshape(per_channel), out=y)
    if residual is not None:
        xp.add(y, residual, out=y)  # y is this call's own array (a matmul's, or its cast)
    return activation(xp, y, relu)


def activation(xp: Any, y: Any, act: Any) -> Any:
    """``conv_fused``'s activation, in place: True Relu, ``(lo, hi)`` Clip (as ONNX's
    Clip computes it, ``min(max(y, lo), hi)``, so ``lo > hi`` gives ``hi``), a
    ``HardSwishAct`` or a ``LeakyReluAct``, else none."""
    if isinstance(act, AffineAfter):
        activation(xp, y, act.act)
        per_channel = (1, -1) + (1,) * (y.ndim - 2)
        xp.multiply(y, act.scale.reshape(per_channel), out=y)
        xp.add(y, act.shift.reshape(per_channel), out=y)
    elif act is True:
        xp.maximum(y, 0, out=y)
    elif isinstance(act, (HardSwishAct, LeakyReluAct)):
        act.apply(xp, y)
    elif isinstance(act, tuple):
        lo, hi = act
        if lo is not None:
            xp.maximum(y, lo, out=y)
        if hi is not None:
            xp.minimum(y, hi, out=y)
    return y


def epilogue_compiled(y: np.ndarray, bias: Any, residual: Any, relu: Any, affine: Any) -> np.ndarray:
    """The compiled conv's epilogue in one pass over ``y`` (``epilogue_plan``); numpy's passes
    where that does not apply (a NaN bound)."""
    plan = epilogue_plan(y.shape, bias, relu, affine)
    if plan is not None and plan(y, residual):
        return y
    if bias is not None:
        y += bias.reshape((1, -1) + (1,) * (y.ndim - 2))
    return epilogue(np, y, residual, relu, affine)


def epilogue_plan(y_shape: tuple, bias: Any, act: Any, affine: Any) -> Callable[[np.ndarray, Any], bool] | None:
    """The compiled epilogue (``native.epilogue_plan``) of a conv's own float32 output of shape
    ``y_shape``, decided once: ``apply(y, residual)``. The ``bias`` its GEMM left out is folded
    into the per-channel shift, ``(y + b) * s + t == y * s + (b * s + t)``. None where it does not
    apply (a NaN bound: numpy's passes)."""
    bounds = clip_bounds(act)
    if bounds is None:
        return None
    post = (act.scale, act.shift) if isinstance(act, AffineAfter) else None
    act = act.act if isinstance(act, AffineAfter) else act
    swish = act.compiled() if isinstance(act, HardSwishAct) else None
    leaky = float(act.alpha) if isinstance(act, LeakyReluAct) else None
    scale, shift = affine if affine is not None else (None, None)
    if bias is not None:
        shift = bias if scale is None else bias * scale + shift
    compiled = native.epilogue_plan(y_shape, scale, shift, *bounds, swish, leaky, post)
    if scale is None and shift is None and swish is None and leaky is None and post is None \
            and bounds == (-math.inf, math.inf):
        # nothing per channel and no clamp: a pass over y only for a residual to add
        return lambda y, residual: residual is None or (compiled is not None and compiled(y, residual))
    return compiled


def clip_bounds(act: Any) -> tuple[float, float] | None:
    """``activation``'s ``act`` as the ``[lo, hi]`` it clamps to; None for a NaN bound (a hard
    swish clamps nothing: its own bounds go to the epilogue with it, ``HardSwishAct.compiled``)."""
    if isinstance(act, AffineAfter):
        return clip_bounds(act.act)
    if act is True:
        return 0.0, math.inf
    if isinstance(act, HardSwishAct):
        return None if act.compiled() is None else (-math.inf, math.inf)
    if isinstance(act, LeakyReluAct):
        act = (act.lo, act.hi)
    if not isinstance(act, tuple):
        return -math.inf, math.inf
    lo, hi = (-math.inf if act[0] is None else float(act[0]), math.inf if act[1] is None else float(act[1]))
    return None if math.isnan(lo) or math.isnan(hi) else (lo, hi)
