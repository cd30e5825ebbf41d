"""The fused GELU kernels (engine/fuse.py) against an exact erf, on both of their forms
(the model's constant 1 -- the sign-free form -- and any other constant), over a wide
range of inputs, in float32 and float16, on numpy and on the strict cupy stand-in."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine.fuse import gelu_kernel
from fake_cupy import FakeCupy


def _exact(x: np.ndarray, div: float, one: float, half: float) -> np.ndarray:
    erf = np.vectorize(math.erf)(x.astype(np.float64) / div)
    return half * x.astype(np.float64) * (one + erf)


@pytest.mark.parametrize("one,half", [(1.0, 0.5), (1.0, 0.25), (1.5, 0.5)])
@pytest.mark.parametrize("dtype,atol", [(np.float32, 2e-6), (np.float16, 2e-2)])
def test_fused_gelu_matches_the_exact_formula(one: float, half: float, dtype, atol: float,
                                              rng: np.random.Generator) -> None:
    div = math.sqrt(2)
    x = np.concatenate([rng.standard_normal(4000) * 3, rng.uniform(-30, 30, 500),
                        [0.0, -0.0, 1e-30, -1e-30, 88.0, -88.0]]).astype(dtype)
    got = gelu_kernel(div, one, half)(np, x)[0]
    assert got.dtype == dtype and got.shape == x.shape
    np.testing.assert_allclose(got.astype(np.float64), _exact(x, div, one, half),
                               rtol=1e-5 if dtype == np.float32 else 1e-2, atol=atol)


def test_fused_gelu_runs_on_the_fake_device(rng: np.random.Generator) -> None:
    fake = FakeCupy()
    x = (rng.standard_normal((3, 64)) * 4).astype(np.float32)
    for one in (1.0, 2.0):
        got = gelu_kernel(math.sqrt(2), one, 0.5)(fake, fake.asarray(x))[0].get()
        np.testing.assert_allclose(got, _exact(x, math.sqrt(2), one, 0.5), rtol=1e-5, atol=2e-6)
