"""Linear algebra kernels: MatMul, Gemm, Einsum, Det (MatMulInteger: ``integer.py``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .elementwise import same
from .gemm import matmul as product
from .registry import register


def _matmul(xp: Any, a: Any, b: Any) -> Any:
    """``xp.matmul``: on numpy, BLAS spreads a large one over its threads (blas.py).
    A stack of rows times one matrix (a Linear layer on (batch, H, W, C), ConvNeXt's
    pointwise convs) is one 2-D product: numpy calls BLAS once per stacked matrix
    otherwise (56 products of 56 rows for a 56x56 map: 4.1 against 3.2 ms)."""
    if b.ndim == 2 and a.ndim > 2 and a.size and a.flags.c_contiguous and a.shape[-1] == b.shape[0]:
        return product(xp, a.reshape(-1, a.shape[-1]), b).reshape(a.shape[:-1] + b.shape[1:])
    return product(xp, a, b)


@register("MatMul")
def matmul(xp: Any, a: Any, b: Any) -> Any:
    return same(xp, _matmul(xp, a, b), a)


@register("Gemm")
def gemm(xp: Any, a: Any, b: Any, c: Any = None, *, alpha: float = 1.0, beta: float = 1.0,
         transA: int = 0, transB: int = 0, broadcast: int = 0) -> Any:
    a = a.T if transA else a
    b = b.T if transB else b
    y = _matmul(xp, a, b)
    if alpha != 1.0:
        y = y * alpha
    if c is not None and beta != 0:
        y = y + (c * beta if beta != 1.0 else c)
    return same(xp, y, a)


@register("Einsum", since=12)
def einsum(xp: Any, *xs: Any, equation: str) -> Any:
    eq = equation.replace(" ", "")
    if np.dtype(xs[0].dtype).kind not in "fciub":
        # bfloat16 and friends: numpy's einsum has no loop for them; compute in float32.
        return same(xp, xp.einsum(eq, *(x.astype(np.float32) for x in xs)), xs[0])
    return same(xp, xp.einsum(eq, *xs), xs[0])


@register("Det", since=11)
def det(xp: Any, x: Any) -> Any:
    return same(xp, xp.linalg.det(x), x)
