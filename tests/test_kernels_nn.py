"""Conv, pooling, normalisation, matmul, RNN, Resize and NMS kernels against ReferenceEvaluator."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from test_kernels_harness import check, xp_param

f32 = np.float32


def _x(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.standard_normal(shape).astype(f32)


@xp_param
@pytest.mark.parametrize("rank", [1, 2, 3])
def test_conv(rank: int, xp: Any, rng: np.random.Generator) -> None:
    group = int(rng.choice([1, 2]))
    c, m = 2 * group, 2 * group
    sp = tuple(int(d) for d in rng.integers(5, 9, rank))
    k = tuple(int(d) for d in rng.integers(1, 4, rank))
    attrs: dict[str, Any] = {"group": group, "strides": [int(s) for s in rng.integers(1, 3, rank)],
                             "dilations": [int(s) for s in rng.integers(1, 3, rank)]}
    if rng.random() < 0.5:
        attrs["pads"] = [int(p) for p in rng.integers(0, 2, 2 * rank)]
    else:
        attrs["auto_pad"] = str(rng.choice(["SAME_UPPER", "SAME_LOWER", "VALID"]))
        attrs.pop("dilations")
    w = _x(rng, (m, c // group) + k)
    check("Conv", {"x": _x(rng, (2, c) + sp), "w": w, "b": _x(rng, (m,))}, xp=xp, rtol=1e-4, atol=1e-5,
          **attrs)


@xp_param
def test_conv_transpose(xp: Any, rng: np.random.Generator) -> None:
    group = int(rng.choice([1, 2]))
    x = _x(rng, (1, 2 * group, 4, 5))
    w = _x(rng, (2 * group, 3, 3, 2))
    strides = [int(s) for s in rng.integers(1, 3, 2)]
    # ReferenceEvaluator cannot reshape some grouped weights; onnxruntime is the oracle here.
    check("ConvTranspose", {"x": x, "w": w, "b": _x(rng, (3 * group,))}, xp=xp, rtol=1e-4, atol=1e-5,
          oracle="onnxruntime",
          group=group, strides=strides, pads=[int(p) for p in rng.integers(0, 2, 4)],
          output_padding=[int(rng.integers(0, s)) for s in strides])
    check("ConvTranspose", {"x": x, "w": w}, xp=xp, rtol=1e-4, atol=1e-5, group=group, strides=strides,
          oracle="onnxruntime",
          output_shape=[x.shape[2] * strides[0], x.shape[3] * strides[1]], auto_pad="SAME_UPPER")


@xp_param
@pytest.mark.parametrize("kernel", [(2, 2), (3, 2), (1, 1), (2,)])
@pytest.mark.parametrize("group", [1, 2])
def test_conv_transpose_whose_kernel_is_its_stride(kernel: tuple, group: int, xp: Any,
                                                   rng: np.random.Generator) -> None:
    """An FPN's 2x2 / 2 upsampling and its kin (one tap per output: one GEMM, then the
    tiles in place), with pads, output_padding, a bias and groups, as onnxruntime."""
    sp = (3, 4)[:len(kernel)]
    x = _x(rng, (2, 2 * group) + sp)
    w = _x(rng, (2 * group, 3) + kernel)
    nsp = len(kernel)
    check("ConvTranspose", {"x": x, "w": w, "b": _x(rng, (3 * group,))}, xp=xp, rtol=1e-4, atol=1e-5,
          oracle="onnxruntime", group=group, strides=list(kernel),
          pads=[int(p) for p in rng.integers(0, 2, 2 * nsp)] if min(kernel) > 1 else [0] * (2 * nsp),
          output_padding=[int(rng.integers(0, k)) for k in kernel])


@xp_param
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "LpPool"])
def test_pool(op: str, xp: Any, rng: np.random.Generator) -> None:
    x = _x(rng, (2, 3, int(rng.integers(5, 10)), int(rng.integers(5, 10))))
    attrs: dict[str, Any] = {"kernel_shape": [int(k) for k in rng.integers(2, 4, 2)],
                             "strides": [int(s) for s in rng.integers(1, 3, 2)]}
    if rng.random() < 0.6:
        attrs["pads"] = [int(p) for p in rng.integers(0, 2, 4)]
        if op != "LpPool":
            attrs["ceil_mode"] = int(rng.integers(0, 2))
    else:
        attrs["auto_pad"] = str(rng.choice(["SAME_UPPER", "SAME_LOWER", "VALID"]))
    if op == "AveragePool":
        attrs["count_include_pad"] = int(rng.integers(0, 2))
    n_out = 2 if op == "MaxPool" else 1
    # ReferenceEvaluator's MaxPool mis-sizes asymmetric pads and SAME_LOWER; onnxruntime is the oracle.
    check(op, {"x": x}, xp=xp, n_outputs=n_out, rtol=1e-5, atol=1e-6,
          oracle="onnxruntime" if op == "MaxPool" else "reference", **attrs)


@xp_param
@pytest.mark.parametrize("spatial", [(7,), (7, 6), (3, 4, 5)])
def test_average_pool_whose_window_is_the_whole_plane(spatial: tuple, xp: Any, rng: np.random.Generator) -> None:
    """Caffe2's classifier head (a 7x7 AveragePool over a 7x7 map) taken as a mean; with pads or a
    smaller window, the window sums as before."""
    x = _x(rng, (2, 5) + spatial)
    for include in (0, 1):
        check("AveragePool", {"x": x}, xp=xp, rtol=1e-5, atol=1e-6, kernel_shape=list(spatial),
              count_include_pad=include)
        check("AveragePool", {"x": x}, xp=xp, rtol=1e-5, atol=1e-6, kernel_shape=list(spatial),
              count_include_pad=include, pads=[1] * (2 * len(spatial)))


@xp_param
def test_global_pool_and_norms(xp: Any, rng: np.random.Generator) -> None:
    x = _x(rng, (2, 3, 4, 5))
    check("GlobalAveragePool", {"x": x}, xp=xp)
    check("GlobalMaxPool", {"x": x}, xp=xp)
    c = x.shape[1]
    check("BatchNormalization", {"x": x, "s": _x(rng, (c,)), "b": _x(rng, (c,)), "m": _x(rng, (c,)),
                                 "v": rng.uniform(0.5, 2, c).astype(f32)}, xp=xp, rtol=1e-5, atol=1e-5)
    check("InstanceNormalization", {"x": x, "s": _x(rng, (c,)), "b": _x(rng, (c,))}, xp=xp,
          rtol=1e-4, atol=1e-5)
    axis = int(rng.integers(-3, 4))
    norm_shape = x.shape[axis % 4:]
    check("LayerNormalization", {"x": x, "s": _x(rng, norm_shape), "b": _x(rng, norm_shape)}, xp=xp,
          n_outputs=3, axis=axis, rtol=1e-4, atol=1e-5)
    # ReferenceEvaluator's LRN loops over the batch instead of the channels; ORT is the oracle.
    check("LRN", {"x": x}, xp=xp, size=3, rtol=1e-5, oracle="onnxruntime")


@xp_param
def test_matmul_gemm_einsum(xp: Any, rng: np.random.Generator) -> None:
    b, m, k, n = (int(v) for v in rng.integers(1, 6, 4))
    check("MatMul", {"a": _x(rng, (b, m, k)), "b": _x(rng, (k, n))}, xp=xp, rtol=1e-5, atol=1e-5)
    check("MatMul", {"a": _x(rng, (k,)), "b": _x(rng, (b, k, n))}, xp=xp, rtol=1e-5, atol=1e-5)
    # a 4-D stack of rows times one matrix: one 2-D product (ConvNeXt's pointwise convs),
    # also transposed (not contiguous: numpy's stacked products) and empty
    check("MatMul", {"a": _x(rng, (2, b, m, k)), "b": _x(rng, (k, n))}, xp=xp, rtol=1e-5, atol=1e-5)
    check("MatMul", {"a": _x(rng, (2, k, m, b)).transpose(0, 3, 2, 1), "b": _x(rng, (k, n))}, xp=xp,
          rtol=1e-5, atol=1e-5)
    check("MatMul", {"a": _x(rng, (2, 0, k)), "b": _x(rng, (k, n))}, xp=xp)
    ta, tb = int(rng.integers(0, 2)), int(rng.integers(0, 2))
    a = _x(rng, (k, m) if ta else (m, k))
    bb = _x(rng, (n, k) if tb else (k, n))
    check("Gemm", {"a": a, "b": bb, "c": _x(rng, (n,))}, xp=xp, transA=ta, transB=tb,
          alpha=float(rng.random()), beta=float(rng.random()), rtol=1e-5, atol=1e-5)
    check("Einsum", {"a": _x(rng, (b, m, k)), "b": _x(rng, (b, k, n))}, xp=xp, equation="bij,bjk->bik",
          rtol=1e-5, atol=1e-5)
    check("Einsum", {"a": _x(rng, (m, m))}, xp=xp, equation="ii->i")


@xp_param
@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_recurrent(op: str, direction: str, xp: Any, rng: np.random.Generator) -> None:
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    seq, batch, inp, hid = (int(v) for v in rng.integers(1, 5, 4))
    nd = 2 if direction == "bidirectional" else 1
    feeds = {"x": _x(rng, (seq, batch, inp)), "w": _x(rng, (nd, gates * hid, inp)) * f32(0.5),
             "r": _x(rng, (nd, gates * hid, hid)) * f32(0.5), "b": _x(rng, (nd, 2 * gates * hid)),
             "l": None, "h": _x(rng, (nd, batch, hid))}
    attrs: dict[str, Any] = {"hidden_size": hid, "direction": direction}
    if op == "LSTM":
        feeds["c"] = _x(rng, (nd, batch, hid))
    if op == "GRU":
        attrs["linear_before_reset"] = int(rng.integers(0, 2))
    check(op, feeds, xp=xp, n_outputs=3 if op == "LSTM" else 2, rtol=1e-4, atol=1e-5, **attrs)


@xp_param
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize(mode: str, xp: Any, rng: np.random.Generator) -> None:
    x = _x(rng, (1, 2, int(rng.integers(2, 7)), int(rng.integers(2, 7))))
    scales = np.array([1, 1, rng.choice([0.5, 0.75, 1.5, 2.0, 3.0]), rng.choice([0.6, 1.25, 2.0])], f32)
    ct = str(rng.choice(["half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel"]))
    check("Resize", {"x": x, "roi": None, "s": scales}, xp=xp, mode=mode, coordinate_transformation_mode=ct,
          rtol=1e-4, atol=1e-5)
    sizes = np.array([1, 2, int(rng.integers(1, 9)), int(rng.integers(1, 9))], np.int64)
    check("Resize", {"x": x, "roi": None, "s": None, "z": sizes}, xp=xp, mode=mode,
          exclude_outside=int(rng.integers(0, 2)), rtol=1e-4, atol=1e-5)


@xp_param
@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
@pytest.mark.parametrize("ct", ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"])
def test_resize_nearest_copies_input_values(nearest_mode: str, ct: str, xp: Any,
                                            rng: np.random.Generator) -> None:
    """Nearest mode copies values (no float64 round trip): every nearest rule and
    coordinate transformation, upsampling and downsampling, an integer input.
    (tf_crop_and_resize is left out: on some maps onnxruntime, ONNX's reference and we
    each round a window edge differently -- three answers, checked before and after.)"""
    x = _x(rng, (1, 2, int(rng.integers(2, 9)), int(rng.integers(2, 9))))
    roi = None
    for scales in ([1, 1, 2.0, 3.0], [1, 1, 0.5, 1.75]):
        check("Resize", {"x": x, "roi": roi, "s": np.array(scales, f32)}, xp=xp, mode="nearest",
              coordinate_transformation_mode=ct, nearest_mode=nearest_mode, extrapolation_value=-7.0)
    ints = (rng.integers(-100, 100, (1, 1, 5, 3))).astype(np.int8)
    check("Resize", {"x": ints, "roi": roi, "s": np.array([1, 1, 1.6, 2.4], f32)}, xp=xp, mode="nearest",
          coordinate_transformation_mode=ct, nearest_mode=nearest_mode)


@xp_param
def test_non_max_suppression(xp: Any, rng: np.random.Generator) -> None:
    n = int(rng.integers(3, 12))
    corners = rng.uniform(0, 10, (1, n, 2)).astype(f32)
    boxes = np.concatenate([corners, corners + rng.uniform(1, 5, (1, n, 2)).astype(f32)], -1)
    scores = rng.random((1, 2, n)).astype(f32)
    check("NonMaxSuppression", {"b": boxes, "s": scores, "m": np.array([int(rng.integers(1, n + 1))], np.int64),
                                "i": np.array([rng.uniform(0.1, 0.7)], f32),
                                "t": np.array([rng.uniform(0, 0.5)], f32)}, xp=xp)
