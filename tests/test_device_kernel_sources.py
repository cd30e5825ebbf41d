"""The generated device kernels' CUDA sources, run: compiled as C on the host
(``tests/host_cuda.py``) behind the strict fake cupy, through the executor, against
onnxruntime on fresh random inputs. Without this the sources are checked only where a GPU
is lent (tests/test_executor_gpu.py); the fake alone has no ``ElementwiseKernel`` and runs
every op's general form."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from fake_cupy import install
from onnx import TensorProto, helper, numpy_helper
from conftest import wheel_model
from host_cuda import install_kernels, refusing_kernel
from test_executor_gpu import _gru_model
from test_rnn_paths import _lstm_model

from engine.compare import errors
from engine.executor import Executor
from partition import load_model

pytestmark = pytest.mark.cpu_only(reason="installs its own fake cupy with host-compiled kernels")


def _reference(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def _run_counted(fake, model, feeds, runs=2):
    """Outputs of the last of ``runs`` runs on the fake GPU, and that run's launch table."""
    with Executor(load_model(model.SerializeToString()), device="gpu") as ex:
        for _ in range(runs - 1):
            ex.run(feeds)
        with fake.counting() as counts:
            res = ex.run(feeds)
        return {k: v.get() for k, v in res.outputs.items()}, counts


def _check(got, want, rtol=1e-4, atol=1e-5):
    assert set(want) <= set(got)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=rtol, atol=atol, err_msg=k)


def test_the_host_compiled_kernel_is_the_source_run_per_index(monkeypatch, rng):
    """The emulation itself: a raw and an elementwise parameter, a scalar by value, an
    output allocated in the broadcast shape, one launch counted."""
    fake = install(monkeypatch)
    install_kernels(monkeypatch, fake)
    k = fake.ElementwiseKernel("T x, raw T t, int32 n", "T y", "y = x * t[i % n] + exp(x)", "probe")
    x = rng.standard_normal((3, 4)).astype(np.float32)
    t = rng.standard_normal(4).astype(np.float32)
    with fake.counting() as counts:
        y = k(fake.asarray(x), fake.asarray(t), np.int32(4))
    want = x.astype(np.float64) * t[np.arange(12).reshape(3, 4) % 4] + np.exp(x.astype(np.float64))
    np.testing.assert_allclose(y.get(), want, rtol=1e-5, atol=1e-6)   # float32 roundings, a sum may cancel
    assert y.dtype == np.float32 and counts.launch_calls == {"ElementwiseKernel:probe": 1}
    with pytest.raises(TypeError, match="numpy array"):
        k(x, fake.asarray(t), np.int32(4))   # cupy refuses host arrays


@pytest.mark.parametrize("seq,batch", [(7, 3), (1, 2)])
def test_the_gru_step_source_matches_onnxruntime(monkeypatch, rng, seq, batch):
    fake = install(monkeypatch)
    install_kernels(monkeypatch, fake)
    model = _gru_model(seq, batch, 5, 8, 1, rng)
    feeds = {"x": rng.standard_normal((seq, batch, 5)).astype(np.float32)}
    got, counts = _run_counted(fake, model, feeds)
    _check(got, _reference(model, feeds))
    assert counts.launch_calls["ElementwiseKernel:sglens_gru_step"] == 2 * seq   # a step, a direction


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("with_state", [True, False])
def test_the_lstm_step_source_matches_onnxruntime(monkeypatch, rng, direction, with_state):
    """The common LSTM on a device: the recurrent GEMM and one kernel a step, per direction."""
    fake = install(monkeypatch)
    install_kernels(monkeypatch, fake)
    seq, batch = int(rng.integers(5, 12)), int(rng.integers(1, 4))
    model, feeds = _lstm_model(rng, seq, batch, int(rng.integers(3, 9)), int(rng.integers(4, 17)),
                               direction, with_state, False)
    got, counts = _run_counted(fake, model, feeds)
    _check(dict(zip(["Y", "Y_h", "Y_c"], [got["Y"], got["Y_h"], got["Y_c"]])), _reference(model, feeds))
    dirs = 2 if direction == "bidirectional" else 1
    assert counts.launch_calls["ElementwiseKernel:sglens_lstm_step"] == dirs * seq
    # Without the kernel the same run is ten launches a step: at least seven more a step.
    from engine.kernels import device  # noqa: PLC0415
    monkeypatch.delattr(fake, "ElementwiseKernel")
    monkeypatch.setattr(device, "_made", {})
    _, general = _run_counted(fake, model, feeds)
    assert general.launches - counts.launches >= 7 * dirs * seq


def test_the_streaming_lstm_step_source_matches_onnxruntime(monkeypatch, rng):
    """A VAD's call: one time step, one direction, its state given -- the stacked-weight
    step, whose bias the kernel reads as one row for every batch entry."""
    fake = install(monkeypatch)
    install_kernels(monkeypatch, fake)
    model, feeds = _lstm_model(rng, 1, 2, 6, 12, "forward", True, False)
    got, counts = _run_counted(fake, model, feeds, runs=3)
    _check(got, _reference(model, feeds))
    assert counts.launch_calls["ElementwiseKernel:sglens_lstm_step"] == 1


def test_an_lstm_step_that_does_not_compile_leaves_the_general_step(monkeypatch, rng):
    fake = install(monkeypatch)
    install_kernels(monkeypatch, fake)
    monkeypatch.setattr(fake, "ElementwiseKernel", refusing_kernel)
    for seq, state in ((6, False), (1, True)):   # the sequence loop, then the streaming step
        model, feeds = _lstm_model(rng, seq, 2, 4, 8, "forward", state, False)
        with Executor(load_model(model.SerializeToString()), device="gpu") as ex:
            want = _reference(model, feeds)
            if seq == 6:
                with pytest.warns(RuntimeWarning, match="sglens_lstm_step did not compile"):
                    got = ex.run(feeds).outputs
            else:
                got = ex.run(feeds).outputs   # told once already: no second try
            _check({k: v.get() for k, v in got.items()}, want)


def test_the_gelu_source_matches_onnxruntime(monkeypatch, rng):
    fake = install(monkeypatch)
    install_kernels(monkeypatch, fake)
    from test_gpu_counts import REAL_MODELS  # noqa: PLC0415 - it puts bench/ on the path
    model, feeds = REAL_MODELS["transformer2"](rng, seq=8, d=16, heads=2, ffn=32, vocab=30)
    got, counts = _run_counted(fake, model, feeds)
    _check(got, _reference(model, feeds), atol=1e-4)
    assert counts.launch_calls["ElementwiseKernel:sglens_gelu"] == 2   # one per layer


#: Real models with the generated kernels in play: elementwise chains (all), GELU-free
#: attention and chains (ppocr_rec), the streaming LSTM inside an If (silero), a
#: sequence LSTM (silero_vad_16k_sequence).
WHEEL_MODELS = ["magika", "ppocr_rec", "silero_vad", "silero_vad_16k_sequence"]


@pytest.mark.parametrize("name", WHEEL_MODELS)
def test_real_models_with_the_generated_kernels_match_onnxruntime(monkeypatch, name):
    data, feeds = wheel_model(name)
    fake = install(monkeypatch)
    install_kernels(monkeypatch, fake)
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    with Executor(load_model(data), device="gpu") as ex:
        with fake.counting() as counts:
            got = {k: v.get() if hasattr(v, "get") else v for k, v in ex.run(feeds).outputs.items()}
    for k, v in want.items():
        e = errors(got[k], v)
        assert e["match"], f"{name}: {k} max rel error {e['max_rel']}"
    assert any(k.startswith("ElementwiseKernel:") for k in counts.launch_calls), counts.launch_calls


def _one_node(op, inputs, outputs, inits, **attrs):
    node = helper.make_node(op, [n for n, _ in inputs] + [n for n, _ in inits], outputs, **attrs)
    g = helper.make_graph([node], op, [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
                          [numpy_helper.from_array(v, n) for n, v in inits])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("n", [5, 256, 257, 700])
def test_the_layer_norm_source_matches_onnxruntime(monkeypatch, rng, n):
    """Row lengths under, at, just over and several times the 256-thread block."""
    fake = install(monkeypatch)
    install_kernels(monkeypatch, fake)
    model = _one_node("LayerNormalization", [("x", [3, 2, n])], ["y", "mean", "inv"],
                      [("scale", rng.standard_normal(n).astype(np.float32)),
                       ("bias", rng.standard_normal(n).astype(np.float32))], axis=-1, epsilon=1e-5)
    feeds = {"x": (rng.standard_normal((3, 2, n)) * 3 + 1).astype(np.float32)}
    got, counts = _run_counted(fake, model, feeds)
    _check(got, _reference(model, feeds), rtol=1e-4, atol=1e-5)
    assert counts.launch_calls.get("RawKernel:sglens_layer_norm_f32") == 1


@pytest.mark.parametrize("n", [3, 256, 300])
def test_the_softmax_source_matches_onnxruntime_with_infinities_and_nan(monkeypatch, rng, n):
    """The last-axis softmax's fixed source (its -inf start value): rows of large values, a
    row with -inf entries, a row with a NaN (NaN out, as onnxruntime answers), a row far
    below zero."""
    fake = install(monkeypatch)
    install_kernels(monkeypatch, fake)
    model = _one_node("Softmax", [("x", [4, n])], ["y"], [], axis=-1)
    x = (rng.standard_normal((4, n)) * 30).astype(np.float32)
    x[1, ::2] = -np.inf
    x[2, n // 2] = np.nan
    x[3] = -np.abs(x[3]) - 200   # every entry far below 0: the running max must start at -inf
    feeds = {"x": x}
    got, counts = _run_counted(fake, model, feeds)
    want = _reference(model, feeds)["y"]
    np.testing.assert_allclose(got["y"], want, rtol=1e-5, atol=1e-7, equal_nan=True)
    assert np.isnan(got["y"][2]).all() == np.isnan(want[2]).all()
    assert counts.launch_calls.get("RawKernel:sglens_softmax_last_f32") == 1


# Convolutions on a device: the columns (tests/test_fuse_conv.py's geometries, and 1-D) in one
# generated kernel, the epilogue (bias, BatchNormalization, residual, Relu / Clip) in another.
CONV_GEOMETRIES = [
    # (x shape, w shape, strides, pads, dilations, group)
    ((2, 6, 33, 31), (16, 6, 3, 3), [2, 2], [1, 0, 2, 1], [1, 1], 1),      # stride 2, odd pads, N=2
    ((1, 3, 40, 40), (16, 3, 7, 7), [2, 2], [3, 3, 3, 3], [1, 1], 1),      # the 7x7 stem
    ((1, 4, 21, 19), (8, 4, 3, 3), [1, 1], [2, 2, 2, 2], [2, 2], 1),       # dilated
    ((1, 8, 20, 20), (8, 4, 3, 3), [1, 1], [1, 1, 1, 1], [1, 1], 2),       # groups
    ((1, 8, 20, 20), (8, 1, 3, 3), [2, 2], [1, 1, 1, 1], [1, 1], 8),       # depthwise
    ((1, 3, 50), (5, 3, 4), [3], [2, 1], [2], 1),                          # 1-D, strided, dilated
    ((1, 16, 12, 12), (32, 16, 1, 1), [2, 2], [0, 0, 0, 0], [1, 1], 1),    # 1x1: no columns to build
]


def _conv_launches(counts):
    return {k.split(":")[1].split("_epilogue")[0]: n for k, n in counts.launch_calls.items()
            if k.startswith("ElementwiseKernel:sglens_im2col") or "conv_epilogue" in k}


@pytest.mark.parametrize("chain", ["relu", "add_relu", "add", ""])
@pytest.mark.parametrize("geom", CONV_GEOMETRIES)
def test_conv_columns_and_epilogue_sources_match_onnxruntime(monkeypatch, rng, chain, geom):
    from test_fuse_conv import _model
    fake = install(monkeypatch)
    install_kernels(monkeypatch, fake)
    xs, ws, strides, pads, dil, group = geom
    nd = len(ws) - 2
    sp = [(xs[2 + i] + pads[i] + pads[i + nd] - (ws[2 + i] - 1) * dil[i] - 1) // strides[i] + 1 for i in range(nd)]
    for bias in (True, False):
        model, feeds = _model(xs, ws, chain, bias=bias, res_shape=(xs[0], ws[0], *sp), rng=rng,
                              strides=strides, pads=pads, dilations=dil, group=group)
        got, counts = _run_counted(fake, model, feeds)
        _check(got, _reference(model, feeds), rtol=1e-4, atol=1e-4)
        launches = _conv_launches(counts)
        if max(ws[2:]) > 1:   # a 1x1 conv's columns are its input (or a strided view of it)
            assert launches.get("sglens_im2col") == 1, counts.launch_calls
        if nd == 2 and chain:   # a fused chain (a 1-D conv or a lone small one: engine/specialize.py)
            assert launches.get("sglens_conv") == 1, counts.launch_calls


@pytest.mark.parametrize("after", ["", "relu", "add_relu", "clip"])
def test_conv_epilogue_source_with_a_batch_normalization_matches_onnxruntime(monkeypatch, rng, after):
    from test_fuse_conv import _bn_model
    fake = install(monkeypatch)
    install_kernels(monkeypatch, fake)
    model, feeds = _bn_model(after, rng)
    got, counts = _run_counted(fake, model, feeds)
    _check(got, _reference(model, feeds), rtol=1e-4, atol=1e-4)
    assert _conv_launches(counts) == {"sglens_im2col": 1, "sglens_conv": 1}, counts.launch_calls


@pytest.mark.parametrize("bounds", [(0.0, 6.0), (-0.5, None), (None, 0.25), (1.0, -1.0)],
                         ids=["relu6", "min-only", "max-only", "min-over-max"])
def test_conv_clip_epilogue_source_matches_onnxruntime(monkeypatch, rng, bounds):
    """Clip's bounds stay device scalars (no read back); min over max gives max."""
    from test_fuse_conv import _clip_model
    fake = install(monkeypatch)
    install_kernels(monkeypatch, fake)
    model, feeds = _clip_model(bounds, rng=rng)
    got, counts = _run_counted(fake, model, feeds)
    want = _reference(model, feeds)["y"]
    np.testing.assert_allclose(got["y"], want, rtol=1e-4, atol=1e-4)
    assert counts.syncs == 0 and _conv_launches(counts) == {"sglens_im2col": 1, "sglens_conv": 1}


POOLS = [
    # (op, x shape, attributes)
    ("MaxPool", (1, 4, 17, 17), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),   # ResNet's
    ("MaxPool", (2, 3, 10, 9), dict(kernel_shape=[2, 3], strides=[2, 1], pads=[0, 1, 1, 0], dilations=[2, 1])),
    ("MaxPool", (1, 3, 9, 9), dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)),
    ("MaxPool", (1, 2, 30), dict(kernel_shape=[4], strides=[3], pads=[2, 1])),
    ("AveragePool", (1, 4, 12, 20), dict(kernel_shape=[2, 2], strides=[2, 2])),                # PP-OCR rec's
    ("AveragePool", (1, 3, 9, 8), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("AveragePool", (1, 3, 9, 8), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1)),
    ("AveragePool", (1, 2, 7, 7), dict(kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 1, 1], ceil_mode=1)),
]


@pytest.mark.parametrize("op,shape,attrs", POOLS)
def test_pool_sources_match_onnxruntime(monkeypatch, rng, op, shape, attrs):
    fake = install(monkeypatch)
    install_kernels(monkeypatch, fake)
    model = _one_node(op, [("x", list(shape))], ["y"], [], **attrs)
    feeds = {"x": rng.standard_normal(shape).astype(np.float32)}
    got, counts = _run_counted(fake, model, feeds)
    _check(got, _reference(model, feeds), rtol=1e-5, atol=1e-6)
    name = "sglens_avg_pool" if op == "AveragePool" else "sglens_max_pool"
    assert counts.launch_calls == {f"ElementwiseKernel:{name}": 1}, counts.launch_calls


@pytest.mark.parametrize("last", ["div", "mul", "none"])
def test_the_hard_swish_source_matches_onnxruntime(monkeypatch, rng, last):
    """PP-OCR's HardSwish (engine/fuse.py) as one generated kernel, NaN and infinities included."""
    from test_fuse_hard_swish import _feeds, _model
    fake = install(monkeypatch)
    install_kernels(monkeypatch, fake)
    model, feeds = _model(last), _feeds(rng)
    got, counts = _run_counted(fake, model, feeds)
    want = _reference(model, feeds)
    for k, v in want.items():
        np.testing.assert_allclose(got[k], v, rtol=1e-6, atol=1e-6, err_msg=k)
    name = "sglens_hard_swish" + {"div": "div", "mul": "mul", "none": ""}[last]
    assert counts.launch_calls == {f"ElementwiseKernel:{name}": 1}, counts.launch_calls
