"""GPU runs (cupy kernels, CUDA events, TensorRT subgraphs); skipped without cupy and a CUDA GPU."""

from __future__ import annotations

import warnings

import onnxruntime as ort
import pytest

from engine import gpu
from engine.compare import errors
from engine.executor import Executor, missing_ops
from engine.inputs import random_inputs
from engine.subgraph_ops import tensorrt_available
from partition import load_model
from partition.runner import partition
from sample_models.generate import build_all

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(gpu.device_count() == 0, reason="needs cupy and a CUDA GPU")]

MODELS = build_all()


def _setup(name):
    model = MODELS[name]
    graph = load_model(model.SerializeToString())
    feeds = random_inputs(graph, {}, seed=1, default_dim=2)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return graph, feeds, dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


@pytest.mark.parametrize("name", ["mlp.onnx", "resnet_small.onnx", "transformer_block.onnx"])
def test_gpu_matches_onnxruntime_and_times_with_events(name):
    graph, feeds, ref = _setup(name)
    if missing_ops(graph):
        pytest.fail(f"no kernel for {missing_ops(graph)}")
    with Executor(graph, device="gpu") as ex:
        res = ex.run(feeds)
    for k, want in ref.items():
        assert errors(res.numpy_outputs()[k], want)["match"]
    assert res.node_seconds and all(s >= 0 for s in res.node_seconds.values())
    assert res.pool_peak_bytes is not None


def test_the_capture_path_calls_cublas_as_numpy_multiplies():
    """``kernels/gemm.py``'s ctypes cuBLAS call (used inside captures), here uncaptured."""
    import cupy
    import numpy as np

    from engine.kernels import gemm
    rng = np.random.default_rng(5)
    for a_shape, b_shape in [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((2, 1, 3, 4), (5, 4, 2)), ((4,), (4, 5)),
                             ((64, 300), (300, 129))]:
        for dtype in (np.float32, np.float64):
            a = rng.standard_normal(a_shape).astype(dtype)
            b = rng.standard_normal(b_shape).astype(dtype)
            stream = cupy.cuda.Stream(non_blocking=True)
            with stream, gemm.capturing_on(stream.ptr):
                got = gemm.matmul(cupy, cupy.asarray(a), cupy.asarray(b))
            stream.synchronize()
            np.testing.assert_allclose(got.get(), np.matmul(a, b), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["mlp.onnx", "resnet_small.onnx", "transformer_block.onnx", "if_model.onnx"])
def test_cuda_graph_replays_match_onnxruntime_on_fresh_inputs(name):
    """Captured once, replayed on new random inputs: each replay's outputs against
    onnxruntime (a replay that reused stale buffers or freed memory would differ)."""
    from engine.gpu_graphs import GraphReplay
    model = MODELS[name]
    graph = load_model(model.SerializeToString())
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with Executor(graph, device="gpu") as ex:
        replay = GraphReplay(ex)
        if not replay.decision.captured:
            pytest.skip(f"{name} runs eagerly: {replay.decision.eager_nodes}")
        for seed in (11, 12, 13):
            feeds = random_inputs(graph, {}, seed=seed, default_dim=2)
            outs = {k: v.get() for k, v in replay.run(feeds).items()}
            for k, want in zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)):
                assert errors(outs[k], want)["match"], (name, seed, k)
        assert replay.report()["signatures_captured"] == 1 and replay.replays == 3


@pytest.mark.skipif(not tensorrt_available()[0], reason="tensorrt does not import")
def test_tensorrt_subgraphs_and_plan_cache(tmp_path):
    graph, feeds, ref = _setup("resnet_small.onnx")
    part = partition(graph, "tensorrt")
    for round_ in range(2):  # the second executor finds the plans on disk
        with Executor(part.graph, device="gpu", executor="tensorrt", plan_cache_dir=str(tmp_path)) as ex:
            res = ex.run(feeds)
        for k, want in ref.items():
            assert errors(res.numpy_outputs()[k], want)["max_rel"] < 1e-3
        assert all(r.executor == "tensorrt" for r in res.subgraphs)
        assert all(r.extra["plan_cached"] == (round_ == 1) for r in res.subgraphs)
    assert list(tmp_path.glob("*.plan"))


def _gru_model(seq, batch, inp, hidden, lbr, rng):
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    w = rng.standard_normal((2, 3 * hidden, inp)).astype(np.float32) * 0.3
    r = rng.standard_normal((2, 3 * hidden, hidden)).astype(np.float32) * 0.3
    b = rng.standard_normal((2, 6 * hidden)).astype(np.float32) * 0.3
    node = helper.make_node("GRU", ["x", "w", "r", "b"], ["y", "y_h"], hidden_size=hidden,
                            direction="bidirectional", linear_before_reset=lbr, name="gru")
    graph = helper.make_graph([node], "gru", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, batch, inp])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("y_h", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(r, "r"),
                               numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("lbr", [1, 0])
def test_a_gru_on_the_gpu_matches_onnxruntime_with_its_one_kernel_step(monkeypatch, lbr):
    """PyTorch's GRU form (linear_before_reset) runs one kernel per step (kernels/device.py);
    the other form the general step. Both against onnxruntime, eager and replayed."""
    import numpy as np

    from engine.gpu_graphs import GraphReplay
    from engine.kernels import device
    made = []
    real = device.gru_step
    monkeypatch.setattr(device, "gru_step", lambda xp, dtype: made.append(dtype) or real(xp, dtype))
    rng = np.random.default_rng(7)
    model = _gru_model(9, 3, 5, 16, lbr, rng)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with Executor(load_model(model.SerializeToString()), device="gpu") as ex:
        replay = GraphReplay(ex)
        for seed in (1, 2):
            x = np.random.default_rng(seed).standard_normal((9, 3, 5)).astype(np.float32)
            want = dict(zip(["y", "y_h"], sess.run(None, {"x": x})))
            eager = ex.run({"x": x}).numpy_outputs()
            replayed = {k: v.get() for k, v in replay.run({"x": x}).items()}
            for k in want:
                np.testing.assert_allclose(eager[k], want[k], rtol=1e-4, atol=1e-5)
                np.testing.assert_allclose(replayed[k], want[k], rtol=1e-4, atol=1e-5)
    assert bool(made) == bool(lbr)


@pytest.mark.parametrize("seq,direction", [(12, "bidirectional"), (1, "forward")])
def test_an_lstm_on_the_gpu_matches_onnxruntime_with_its_one_kernel_step(seq, direction):
    """The common LSTM's one-kernel step (kernels/device.py), compiled by NVRTC: the
    sequence loop and the streaming step (one step, its state given), eager and replayed;
    the kernel must have compiled (no fallback warning)."""
    import numpy as np
    from test_rnn_paths import _lstm_model

    from engine.gpu_graphs import GraphReplay
    from engine.kernels import device
    rng = np.random.default_rng(seq)
    model, feeds = _lstm_model(rng, seq, 3, 7, 32, direction, True, False)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)   # a kernel that did not compile fails here
        with Executor(load_model(model.SerializeToString()), device="gpu") as ex:
            replay = GraphReplay(ex)
            for _ in range(2):
                feeds = {k: rng.standard_normal(v.shape).astype(np.float32) for k, v in feeds.items()}
                want = dict(zip(["Y", "Y_h", "Y_c"], sess.run(None, feeds)))
                eager = ex.run(feeds).numpy_outputs()
                replayed = {k: v.get() for k, v in replay.run(feeds).items()}
                for k in want:
                    np.testing.assert_allclose(eager[k], want[k], rtol=1e-4, atol=1e-5)
                    np.testing.assert_allclose(replayed[k], want[k], rtol=1e-4, atol=1e-5)
            assert device._made.get((id(ex.xp), "sglens_lstm_step")) not in (None, False)


def test_elementwise_chains_on_the_gpu_are_generated_kernels_that_match_onnxruntime():
    """engine/fuse_elementwise.py's sources compiled by NVRTC (every op it writes, float32
    and float64), eager and replayed, against onnxruntime; a source NVRTC rejects fails here."""
    import numpy as np
    from test_fuse_elementwise import CHAINS, D, F, _chain_model

    from engine.gpu_graphs import GraphReplay
    rng = np.random.default_rng(11)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for dtype in (F, D):
            for name, (ops, others) in CHAINS.items():
                ops = [op for op in ops if not (dtype == D and op[0] == "Erf")]  # no float64 Erf in onnxruntime
                model, feeds = _chain_model(ops, others, dtype, rng)
                sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
                want = sess.run(None, feeds)[0]
                with Executor(load_model(model.SerializeToString()), device="gpu") as ex:
                    assert len(ex._steps) == 1, (name, [s.node.op_type for s in ex._steps])
                    eager = ex.run(feeds).numpy_outputs()["y"]
                    replayed = GraphReplay(ex).run(feeds)["y"].get()
                tol = 2e-5 if dtype == F else 1e-12
                np.testing.assert_allclose(eager, want, rtol=tol, atol=1e-6, err_msg=name)
                np.testing.assert_allclose(replayed, want, rtol=tol, atol=1e-6, err_msg=name)


def test_conv_columns_and_epilogues_on_the_gpu_are_generated_kernels_that_match_onnxruntime():
    """kernels/device.py's im2col and conv epilogue compiled by NVRTC, over the geometries
    of tests/test_device_kernel_sources.py (1-D and 2-D, strides, pads, dilations, groups),
    eager and replayed, against onnxruntime; a source NVRTC rejects fails here."""
    import numpy as np
    from test_device_kernel_sources import CONV_GEOMETRIES
    from test_fuse_conv import _model

    from engine.gpu_graphs import GraphReplay
    rng = np.random.default_rng(5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for xs, ws, strides, pads, dil, group in CONV_GEOMETRIES:
            nd = len(ws) - 2
            sp = [(xs[2 + i] + pads[i] + pads[i + nd] - (ws[2 + i] - 1) * dil[i] - 1) // strides[i] + 1
                  for i in range(nd)]
            model, feeds = _model(xs, ws, "add_relu", res_shape=(xs[0], ws[0], *sp), rng=rng, strides=strides,
                                  pads=pads, dilations=dil, group=group)
            want = ort.InferenceSession(model.SerializeToString(),
                                        providers=["CPUExecutionProvider"]).run(None, feeds)[0]
            with Executor(load_model(model.SerializeToString()), device="gpu") as ex:
                eager = ex.run(feeds).numpy_outputs()["y"]
                replayed = GraphReplay(ex).run(feeds)["y"].get()
            np.testing.assert_allclose(eager, want, rtol=1e-4, atol=1e-4)
            np.testing.assert_allclose(replayed, want, rtol=1e-4, atol=1e-4)


def test_pools_on_the_gpu_are_generated_kernels_that_match_onnxruntime():
    """kernels/device.py's max and average pools compiled by NVRTC over the geometries of
    tests/test_device_kernel_sources.py (pads, dilations, ceil_mode, count_include_pad, 1-D)."""
    import numpy as np
    from test_device_kernel_sources import POOLS, _one_node

    rng = np.random.default_rng(9)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for op, shape, attrs in POOLS:
            model = _one_node(op, [("x", list(shape))], ["y"], [], **attrs)
            feeds = {"x": rng.standard_normal(shape).astype(np.float32)}
            want = ort.InferenceSession(model.SerializeToString(),
                                        providers=["CPUExecutionProvider"]).run(None, feeds)[0]
            with Executor(load_model(model.SerializeToString()), device="gpu") as ex:
                got = ex.run(feeds).numpy_outputs()["y"]
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"{op} {attrs}")


@pytest.mark.parametrize("last", ["div", "mul", "none"])
def test_hard_swish_on_the_gpu_is_one_generated_kernel_that_matches_onnxruntime(last):
    import numpy as np
    from test_fuse_hard_swish import _feeds, _model

    model, feeds = _model(last), _feeds(np.random.default_rng(3))
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with Executor(load_model(model.SerializeToString()), device="gpu") as ex:
            got = ex.run(feeds).numpy_outputs()[model.graph.output[0].name]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("n", [64, 257, 1000])
def test_a_layer_norm_on_the_gpu_is_one_kernel_and_matches_onnxruntime(monkeypatch, n):
    """kernels/device.py's generated LayerNormalization (row lengths around its 256-thread
    block: fewer, not a multiple, several per thread), every output against onnxruntime."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from engine.kernels import device
    used = []
    real = device._layer_norm_rows
    monkeypatch.setattr(device, "_layer_norm_rows", lambda xp: used.append(1) or real(xp))
    rng = np.random.default_rng(n)
    node = helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["y", "mean", "inv"], axis=-1,
                            epsilon=1e-5)
    graph = helper.make_graph([node], "ln", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 7, n])],
                              [helper.make_tensor_value_info(t, TensorProto.FLOAT, None) for t in ("y", "mean", "inv")],
                              [numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "scale"),
                               numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "bias")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = (rng.standard_normal((3, 7, n)) * 3 + 1).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)   # a kernel that did not compile warns and falls back
        with Executor(load_model(model.SerializeToString()), device="gpu") as ex:
            got = ex.run({"x": x}).numpy_outputs()
    for k, want in zip(["y", "mean", "inv"], sess.run(None, {"x": x})):
        np.testing.assert_allclose(got[k], want, rtol=1e-4, atol=1e-5, err_msg=k)
    assert used


@pytest.mark.parametrize("n", [5, 128, 1000])
def test_a_softmax_on_the_gpu_is_one_kernel_and_matches_onnxruntime(monkeypatch, n):
    """kernels/device.py's generated last-axis softmax, a masked (-inf) row and a NaN included."""
    import numpy as np
    from onnx import TensorProto, helper

    from engine.kernels import device
    used = []
    real = device._softmax_rows
    monkeypatch.setattr(device, "_softmax_rows", lambda xp: used.append(1) or real(xp))
    node = helper.make_node("Softmax", ["x"], ["y"], axis=-1)
    graph = helper.make_graph([node], "sm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6, n])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    x = (np.random.default_rng(n).standard_normal((4, 6, n)) * 4).astype(np.float32)
    x[0, 0, :] = -np.inf
    x[1, 2, n // 2] = np.nan
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)   # a kernel that did not compile warns and falls back
        with Executor(load_model(model.SerializeToString()), device="gpu") as ex:
            got = ex.run({"x": x}).numpy_outputs()["y"]
    np.testing.assert_allclose(got, sess.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6, equal_nan=True)
    assert used and device._made.get((id(ex.xp), "sglens_softmax_last_f32")) is not False
