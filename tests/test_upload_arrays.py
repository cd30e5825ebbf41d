"""Uploaded run inputs are checked from their .npy headers before their data is read (issue 21)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from onnx import TensorProto, helper
from werkzeug.datastructures import FileStorage

from app.errors import ApiError
from partition.errors import LensError
from app.run_inputs import read_arrays
from partition.onnx_io import load_model

from conftest import make_model


@pytest.fixture
def graph():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])
    return load_model(make_model([helper.make_node("Relu", ["x"], ["y"], name="r")], [x], [y]).SerializeToString())


def _file(array: np.ndarray, npz: bool, name: str = "x") -> FileStorage:
    buf = io.BytesIO()
    if npz:
        np.savez_compressed(buf, **{name: array})
    else:
        np.save(buf, array)
    buf.seek(0)
    return FileStorage(buf, filename="v.npz" if npz else "v.npy")


@pytest.mark.parametrize("npz", [True, False])
def test_arrays_within_the_budget_are_read(graph, npz, rng):
    value = rng.standard_normal(1000).astype(np.float32)
    got = read_arrays({"input:x": _file(value, npz)}, graph, budget=4000)
    assert np.array_equal(got["x"], value)


@pytest.mark.parametrize("npz", [True, False])
def test_arrays_over_the_budget_are_refused_from_the_header(graph, npz):
    with pytest.raises(ApiError, match=r"input 'x' holds 4004 bytes .*run memory limit of 4000 bytes"):
        read_arrays({"input:x": _file(np.zeros(1001, np.float32), npz)}, graph, budget=4000)


def test_a_lossy_dtype_or_rank_is_refused_from_the_header(graph):
    with pytest.raises(LensError, match=r"dtype float64.*without loss"):
        read_arrays({"input:x": _file(np.zeros(4), True)}, graph)
    with pytest.raises(LensError, match=r"shape \[2, 2\].*rank 1"):
        read_arrays({"input:x": _file(np.zeros((2, 2), np.float32), False)}, graph)
    with pytest.raises(ApiError, match="not a graph input"):
        read_arrays({"input:z": _file(np.zeros(2, np.float32), False)}, graph)
    with pytest.raises(ApiError, match="without pickle"):
        read_arrays({"input:x": FileStorage(io.BytesIO(b"junk"), filename="j.npy")}, graph)
