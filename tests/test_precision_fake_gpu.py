"""The emulation on ``--device gpu``, run on the strict cupy stand-in (tests/fake_cupy.py): the
same rounding, counts and search answer as on numpy (no GPU is lent to this project)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from engine.precision import PrecisionRunner
from engine.precision_report import PrecisionRequest, investigate
from fake_cupy import install
from partition.onnx_io import load_model
from sample_models.builders_fp16 import build_fp16_trouble_transformer, fp16_trouble_inputs


@pytest.fixture
def graph(tmp_path):
    path = tmp_path / "trouble.onnx"
    onnx.save(build_fp16_trouble_transformer(), path)
    return load_model(str(path))


@pytest.mark.parametrize("target", ["fp16", "bf16"])
def test_device_run_equals_numpy_run(graph, monkeypatch, target, rng):
    feeds = fp16_trouble_inputs(seed=int(rng.integers(1 << 30)))
    with PrecisionRunner(graph, target) as cpu:
        reduced = cpu.candidates[::2]
        want, want_counts = cpu.run(feeds, reduced, stats=True)
    fake = install(monkeypatch)
    with PrecisionRunner(graph, target, device="gpu") as gpu:
        assert gpu.xp is fake
        got, got_counts = gpu.run(feeds, reduced, stats=True)
    np.testing.assert_array_equal(got["output"], want["output"])
    assert {k: (c.overflow, c.underflow) for k, c in got_counts.items()} == \
        {k: (c.overflow, c.underflow) for k, c in want_counts.items()}


def test_device_search_finds_the_same_pins(graph, monkeypatch):
    request = PrecisionRequest(atol=1e-2, rtol=1e-2)
    want = investigate(graph, fp16_trouble_inputs(), request)
    install(monkeypatch)
    got = investigate(graph, fp16_trouble_inputs(), request, device="gpu")
    assert got["pins"] == want["pins"] and got["runs"] == want["runs"]
