"""The library seam of the device kernels (engine/kernels/device.py), on the strict fake cupy.

No GPU and no cuDNN here: a stand-in ``cudnn.convolution_forward`` (computing with our own
numpy Conv kernel, writing into the output it is given, as cuDNN does) checks only the
dispatch: which convolutions go to the library, with what pads/strides/dilations/groups, the
1-D case through a unit axis, the bias and the fused epilogue, and the fallback when the
library is missing or fails. Results against onnxruntime on fresh random inputs.
Whether cuDNN itself is faster is unverified (no GPU lent).
"""

from __future__ import annotations

import types

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.executor import Executor
from engine.kernels import nn
from fake_cupy import install
from partition import load_model


def _stand_in(fake, calls, fail=False):
    def convolution_forward(x, W, b, y, pad, stride, dilation, groups, *, auto_tune, tensor_core):
        calls.append({"x": x.shape, "pad": pad, "stride": stride, "dilation": dilation, "groups": groups})
        if fail:
            raise RuntimeError("CUDNN_STATUS_NOT_SUPPORTED")
        k = len(pad)
        out = nn.conv(np, x._a, W._a, None if b is None else b._a, pads=[*pad, *pad], strides=list(stride),
                      dilations=list(dilation), group=groups, kernel_shape=list(W.shape[2:2 + k]))
        y[...] = out  # the library writes the output it is given
    fake.cudnn = types.SimpleNamespace(convolution_forward=convolution_forward)


def _conv_model(rng, shape, wshape, **attrs):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    inits = [numpy_helper.from_array(rng.standard_normal(wshape).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(wshape[0]).astype(np.float32), "b")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], **attrs),
             helper.make_node("Relu", ["c"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "conv", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, {"x": rng.standard_normal(shape).astype(np.float32)}


def _run(model, feeds):
    with Executor(load_model(model.SerializeToString()), device="gpu") as ex:
        got = ex.run(feeds).outputs["y"].get()
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(got, sess.run(None, feeds)[0], rtol=1e-4, atol=1e-4)


CASES = {  # name -> (input shape, weight shape, attributes, what the library is given)
    "2d_strided": ((1, 3, 9, 9), (4, 3, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]},
                   {"pad": (1, 1), "stride": (2, 2), "dilation": (1, 1), "groups": 1}),
    "depthwise_dilated": ((2, 4, 8, 8), (4, 1, 3, 3), {"group": 4, "dilations": [2, 2], "pads": [2, 2, 2, 2]},
                          {"pad": (2, 2), "stride": (1, 1), "dilation": (2, 2), "groups": 4}),
    # (larger than the streaming regime engine/specialize.py plans as one gather + matmul)
    "1d": ((1, 4, 1200), (3, 4, 5), {"pads": [2, 2], "strides": [3]},
           {"pad": (2, 0), "stride": (3, 1), "dilation": (1, 1), "groups": 1}),
}


@pytest.mark.parametrize("case", CASES)
def test_convolutions_go_to_the_library_with_their_geometry(monkeypatch, rng, case):
    fake = install(monkeypatch)
    calls: list[dict] = []
    _stand_in(fake, calls)
    shape, wshape, attrs, expect = CASES[case]
    model, feeds = _conv_model(rng, shape, wshape, **attrs)
    _run(model, feeds)
    assert calls and all({k: c[k] for k in expect} == expect for c in calls)


def test_asymmetric_pads_fall_back(monkeypatch, rng):
    fake = install(monkeypatch)
    calls: list[dict] = []
    _stand_in(fake, calls)
    _run(*_conv_model(rng, (1, 3, 8, 8), (2, 3, 3, 3), pads=[0, 1, 1, 0]))
    assert calls == []  # cuDNN takes one pad per axis: our own path ran


def test_a_failing_library_is_tried_once_then_left(monkeypatch, rng):
    fake = install(monkeypatch)
    calls: list[dict] = []
    _stand_in(fake, calls, fail=True)
    for _ in range(2):
        _run(*_conv_model(rng, (1, 3, 8, 8), (2, 3, 3, 3), pads=[1, 1, 1, 1]))
    assert len(calls) == 1  # tried once, our own path answered, and not tried again


def test_without_the_library_the_own_path_runs(monkeypatch, rng):
    install(monkeypatch)  # the fake has no cudnn, as cupy >= 14 or a cupy without cuDNN
    _run(*_conv_model(rng, (1, 3, 8, 8), (2, 3, 3, 3), pads=[1, 1, 1, 1]))


def test_gelu_is_one_elementwise_kernel_where_cupy_has_them(monkeypatch, rng):
    """The BERT-export GELU chain (engine/fuse.py) on the device: one ``ElementwiseKernel``
    launch (a stand-in here, computing the same formula with numpy), else the xp form."""
    import math  # noqa: PLC0415

    fake = install(monkeypatch)
    made, launched = [], []

    class ElementwiseKernel:  # the stand-in: cupy.ElementwiseKernel(in_params, out_params, operation, name)
        def __init__(self, in_params, out_params, operation, name):
            if name != "sglens_gelu":   # the elementwise chains' kernels: tests/test_fuse_elementwise.py
                raise AttributeError(name)
            made.append((in_params, out_params, operation, name))

        def __call__(self, x, div, one, half):
            launched.append(type(div))
            erf = np.vectorize(math.erf)
            return fake.asarray((half * x._a * (one + erf(x._a / div))).astype(x.dtype))
    fake.ElementwiseKernel = ElementwiseKernel
    from test_gpu_counts import REAL_MODELS  # noqa: PLC0415 - it puts bench/ on the path

    build_transformer2 = REAL_MODELS["transformer2"]

    model, feeds = build_transformer2(rng, seq=8, d=16, heads=2, ffn=32, vocab=30)
    with Executor(load_model(model.SerializeToString()), device="gpu") as ex:
        got = ex.run(feeds).outputs["hidden"].get()
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(got, sess.run(None, feeds)[0], rtol=1e-4, atol=1e-4)
    assert len(made) == 1 and made[0][2] == "y = half * x * (one + erf(x / div))"
    assert launched == [np.float32, np.float32]  # both layers' GELU, scalars in the input's dtype
