"""``engine/kernels/gemm.py``: the matrix product a CUDA Graph capture records by calling
cuBLAS itself (cupy refuses cuBLAS while a stream captures).

Here the fake cupy's stand-in runs cublas{S,D}gemmStridedBatched's column-major semantics
on the exact arguments the real call gets, so the row-major -> column-major mapping, the
batch strides (0 for a shared matrix) and numpy's matmul rules (1-D operands, broadcast
batches) are checked against numpy; the ctypes call itself runs only on a GPU
(``tests/test_executor_gpu.py``, ``bench/gpu_session.sh``).
"""

from __future__ import annotations

import numpy as np
import pytest

from engine.kernels import gemm
from fake_cupy import install

SHAPES = [((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)),
          ((2, 3, 4), (4, 5)), ((3, 4), (2, 4, 5)), ((2, 1, 3, 4), (5, 4, 2)),
          ((1, 3, 4), (6, 4, 5)), ((2, 3, 0), (0, 5)), ((7, 1, 16), (7, 16, 1))]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("a_shape,b_shape", SHAPES)
def test_a_captured_product_is_numpys_matmul(monkeypatch, rng, a_shape, b_shape, dtype):
    fake = install(monkeypatch)
    a = rng.standard_normal(a_shape).astype(dtype)
    b = rng.standard_normal(b_shape).astype(dtype)
    with gemm.capturing_on(1234):
        got = gemm.matmul(fake, fake.asarray(a), fake.asarray(b))
    want = np.matmul(a, b)
    assert got.shape == want.shape
    np.testing.assert_allclose(got.get(), want, rtol=1e-5, atol=1e-5)


def test_a_captured_product_writes_into_out_and_views_are_read_as_laid_out(monkeypatch, rng):
    fake = install(monkeypatch)
    a = rng.standard_normal((6, 4)).astype(np.float32)
    b = rng.standard_normal((5, 4)).astype(np.float32)
    out = fake.empty((6, 5), np.float32)
    with gemm.capturing_on(1234):
        got = gemm.matmul(fake, fake.asarray(a), fake.asarray(b).T, out=out)  # a transposed view
    assert got is out
    np.testing.assert_allclose(out.get(), a @ b.T, rtol=1e-5, atol=1e-5)


def test_other_dtypes_say_they_cannot_be_captured(monkeypatch):
    fake = install(monkeypatch)
    a = fake.asarray(np.ones((2, 2), np.int32))
    with gemm.capturing_on(1234), pytest.raises(gemm.CaptureUnsupported, match="int32"):
        gemm.matmul(fake, a, a)


def test_outside_a_capture_it_is_xp_matmul(rng):
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    np.testing.assert_array_equal(gemm.matmul(np, a, b), a @ b)
