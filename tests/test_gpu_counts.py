"""What a device run costs on the host, counted on the strict fake cupy (tests/fake_cupy.py).

After a warm-up run, a run of each bench model (``bench/real_models.py``, small shapes) and of a
built model with shape arithmetic (Shape -> Gather -> Concat -> Reshape, Resize to computed
sizes, an If on a computed condition, the patterns of PP-OCR and Magika) must:

* read nothing back from the device (0 syncs: the test copies the outputs out itself, after),
  and block the host at most once per segment (the end-of-run barrier; timing events add none);
* upload nothing but its graph inputs (weights, constants and preprocessed forms are resident);
* report its launches per node (the count is the same run after run).

Results are checked against onnxruntime on fresh random inputs. No timings.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.executor import Executor
from engine.gpu_plan import device_read_notes
from fake_cupy import FakeArray, install
from partition import load_model
from sglens.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from real_models import REAL_MODELS  # noqa: E402

#: The bench models at shapes that keep this file to seconds on the numpy-backed fake.
SMALL = {
    "resnet18": {},
    "transformer2": {"seq": 16, "d": 32, "heads": 2, "ffn": 64, "vocab": 50},
    "lstm_tagger": {"seq": 5, "emb": 8, "hidden": 8, "tags": 4, "vocab": 20},
    "vad_stream": {"chunk": 512, "hidden": 16},
}


def _bench_model(name, rng):
    model, feeds = REAL_MODELS[name](rng, **SMALL[name])
    if name == "resnet18":  # its convolutions take any spatial size: 32x32 keeps it fast
        feeds = {"input": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)}
        for dim in model.graph.input[0].type.tensor_type.shape.dim[2:]:
            dim.dim_value = 32
    return model, feeds


def _shape_math_model(rng):
    """Shapes computed in the graph, as exporters write them: the values are host facts."""
    w = numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), "w")
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    consts = [i64("zero", [0]), i64("one", [1]), i64("minus1", [-1]), i64("two", [2]),
              i64("hw_idx", [2, 3]), i64("thresh", 3), w]
    nodes = [
        helper.make_node("Shape", ["x"], ["shp"]),
        helper.make_node("Gather", ["shp", "zero"], ["n"], axis=0),
        helper.make_node("Concat", ["n", "minus1"], ["flat_shape"], axis=0),
        helper.make_node("Reshape", ["x", "flat_shape"], ["flat"]),
        helper.make_node("Gather", ["shp", "hw_idx"], ["hw"], axis=0),
        helper.make_node("Mul", ["hw", "two"], ["hw2"]),
        helper.make_node("Slice", ["shp", "zero", "two"], ["nc"]),
        helper.make_node("Concat", ["nc", "hw2"], ["sizes"], axis=0),
        helper.make_node("Resize", ["x", "", "", "sizes"], ["up"], mode="linear"),
        helper.make_node("Shape", ["up"], ["up_shape"]),
        helper.make_node("Gather", ["up_shape", "one"], ["c"], axis=0),
        helper.make_node("Squeeze", ["c"], ["c0"]),
        helper.make_node("Greater", ["c0", "thresh"], ["wide"]),
        helper.make_node("If", ["wide"], ["picked"],
                         then_branch=_branch("then", "Relu"), else_branch=_branch("else", "Neg")),
        helper.make_node("ReduceMean", ["picked"], ["pooled"], axes=[2, 3], keepdims=0),
        helper.make_node("MatMul", ["pooled", "w"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "shape_math", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 5, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("flat", TensorProto.FLOAT, None)], consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, {"x": rng.standard_normal((2, 4, 5, 6)).astype(np.float32)}


def _branch(tag, op):
    return helper.make_graph([helper.make_node(op, ["up"], [f"{tag}_out"])], tag, [],
                             [helper.make_tensor_value_info(f"{tag}_out", TensorProto.FLOAT, None)])


def _reference(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def _counted_run(fake, ex, feeds):
    with fake.counting() as counts:
        res = ex.run(feeds)
    return res, counts


@pytest.mark.parametrize("name", [*SMALL, "shape_math"])
def test_a_warm_run_syncs_nothing_and_uploads_only_its_inputs(monkeypatch, rng, name, record_property):
    fake = install(monkeypatch)
    model, feeds = _shape_math_model(rng) if name == "shape_math" else _bench_model(name, rng)
    graph = load_model(model.SerializeToString())
    with Executor(graph, device="gpu") as ex:
        ex.run(feeds)  # warm-up: bind-time and first-run preparations are allowed to upload
        _, first = _counted_run(fake, ex, feeds)
        res, counts = _counted_run(fake, ex, feeds)
        n_nodes, n_segments = len(ex._steps), len(ex._ops)
        plan = getattr(ex, "device_plan", None)
    assert counts.syncs == 0, f"device->host reads inside a run: {counts.sync_calls}"
    # Host waits (no data read): the end-of-run barrier's, one per segment; per-node CUDA-event
    # timing (on by default) is read after them without a wait of its own.
    assert counts.waits <= n_segments, f"{counts.waits} host waits for {n_segments} segments"
    assert counts.h2d <= len(feeds), f"uploads beyond the {len(feeds)} graph inputs: {counts.h2d_calls}"
    assert counts.launches == first.launches > 0  # the same work every run
    record_property("launches_per_node", round(counts.launches / n_nodes, 2))
    assert all(isinstance(v, FakeArray) for v in res.outputs.values())  # outputs stay on the device
    want = _reference(model, feeds)
    for k, v in res.outputs.items():
        np.testing.assert_allclose(v.get(), want[k], rtol=1e-4, atol=1e-4)
    if name == "shape_math":  # the shape arithmetic ran on the host, and the plan says so
        assert {"shp", "hw2", "sizes", "wide"} <= plan.host_tensors
        assert plan.host_reads == ()


def test_sglens_run_names_the_device_reads(monkeypatch, rng, tmp_path, capsys):
    install(monkeypatch)
    path = tmp_path / "data_if.onnx"
    path.write_bytes(_data_if_model().SerializeToString())
    assert main(["run", str(path), "--device", "gpu", "--repeat", "1"]) == 0
    err = capsys.readouterr().err
    assert "node 'branch' (If): its condition 'pos' is computed on the device" in err


def _data_if_model():
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0, name="sum"),
             helper.make_node("Greater", ["s", "zero"], ["pos"], name="positive"),
             helper.make_node("If", ["pos"], ["y"], name="branch", then_branch=_branch_of("x", "Relu", "t"),
                              else_branch=_branch_of("x", "Neg", "e"))]
    graph = helper.make_graph(nodes, "data_if", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.array(0, np.float32), "zero")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_the_plan_names_an_op_that_must_read_the_device(monkeypatch, rng):
    """A condition computed from device data cannot be known on the host: the If reads it,
    once per run, and the plan says so before the run."""
    fake = install(monkeypatch)
    model = _data_if_model()
    feeds = {"x": rng.standard_normal(3).astype(np.float32)}
    with Executor(load_model(model.SerializeToString()), device="gpu") as ex:
        ex.run(feeds)
        res, counts = _counted_run(fake, ex, feeds)
        plan = getattr(ex, "device_plan", None)
    assert counts.syncs == 1 and counts.h2d == 1
    assert [r.node for r in plan.host_reads] == ["branch"]
    assert "condition" in plan.host_reads[0].why
    np.testing.assert_allclose(res.outputs["y"].get(), _reference(model, feeds)["y"], rtol=1e-5, atol=1e-6)


def _branch_of(src, op, tag):
    return helper.make_graph([helper.make_node(op, [src], [f"{tag}_out"])], tag, [],
                             [helper.make_tensor_value_info(f"{tag}_out", TensorProto.FLOAT, None)])


def _gru_model(rng):
    hid, inp, seq = 6, 5, 7
    inits = [numpy_helper.from_array((rng.standard_normal((2, 3 * hid, inp)) * 0.4).astype(np.float32), "w"),
             numpy_helper.from_array((rng.standard_normal((2, 3 * hid, hid)) * 0.4).astype(np.float32), "r")]
    node = helper.make_node("GRU", ["x", "w", "r"], ["y"], hidden_size=hid, direction="bidirectional")
    graph = helper.make_graph([node], "gru", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, 1, inp])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, {"x": rng.standard_normal((seq, 1, inp)).astype(np.float32)}


def _pad_conv_bn_model(rng):
    """MobileNetV2's strided block as transformers exports it: a lopsided zero Pad, a
    depthwise Conv, BatchNormalization, Relu6."""
    c = 4
    f = lambda name, v: numpy_helper.from_array(np.asarray(v, np.float32), name)  # noqa: E731
    inits = [f("w", rng.standard_normal((c, 1, 3, 3)) * 0.4), numpy_helper.from_array(
        np.array([0, 0, 0, 0, 0, 0, 1, 1], np.int64), "amounts"), f("zero", 0.0),
        f("scale", rng.uniform(0.5, 2, c)), f("bias", rng.standard_normal(c)),
        f("mean", rng.standard_normal(c)), f("var", rng.uniform(0.5, 2, c)), f("six", 6.0)]
    nodes = [helper.make_node("Pad", ["x", "amounts", "zero"], ["p"]),
             helper.make_node("Conv", ["p", "w"], ["c"], group=c, strides=[2, 2], pads=[0, 0, 0, 0]),
             helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["n"]),
             helper.make_node("Clip", ["n", "zero", "six"], ["y"])]
    graph = helper.make_graph(nodes, "pad_conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 9, 9])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, {"x": rng.standard_normal((1, c, 9, 9)).astype(np.float32)}


@pytest.mark.parametrize("build", [_gru_model, _pad_conv_bn_model], ids=["gru", "pad_conv_bn"])
def test_real_model_patterns_upload_and_read_nothing_inside_a_run(build, monkeypatch, rng):
    """Found on the benchmark's real models on this fake: a GRU uploaded a mask every step
    (400 a run), a folded BatchNormalization its epsilon every call, and a lopsided Pad
    folded into a conv read its amounts back from the device (10 syncs in MobileNetV2)."""
    fake = install(monkeypatch)
    model, feeds = build(rng)
    with Executor(load_model(model.SerializeToString()), device="gpu") as ex:
        ex.run(feeds)
        res, counts = _counted_run(fake, ex, feeds)
    assert counts.syncs == 0, counts.sync_calls
    assert counts.h2d <= len(feeds), counts.h2d_calls
    want = _reference(model, feeds)
    for k, v in res.outputs.items():
        np.testing.assert_allclose(v.get(), want[k], rtol=1e-4, atol=1e-4)


def test_worker_streams_wait_for_the_feeds_copied_on_the_callers_stream(monkeypatch, rng):
    """The feeds are copied on the caller's stream and the nodes run on the workers'
    non-blocking streams, which nothing orders after it: each must wait for an event
    recorded after the copies before its first work of the run (a real GPU could read a
    feed before its copy landed; seen with set_weight on an H200)."""
    fake = install(monkeypatch)
    model, feeds = _bench_model("resnet18", rng)
    with Executor(load_model(model.SerializeToString()), device="gpu") as ex:
        ex.run(feeds)
        start = len(fake.cuda.log)
        ex.run(feeds)
        log = fake.cuda.log[start:]
    caller = fake.cuda.get_current_stream().ptr
    ready = [eid for kind, ptr, eid in log if kind == "record" and ptr == caller]
    assert ready, "no event recorded on the caller's stream after the feeds' copies"
    first_work = {}
    for i, (kind, ptr, _eid) in enumerate(log):
        if kind == "record" and ptr != caller:
            first_work.setdefault(ptr, i)
    waits = {ptr: i for i, (kind, ptr, eid) in enumerate(log) if kind == "wait_event" and eid == ready[0]}
    assert first_work, "no worker stream recorded anything"
    for ptr, i in first_work.items():
        assert ptr in waits and waits[ptr] < i, f"stream {ptr} worked before waiting for the feeds"


def _outer_pads_model(pads):
    """An If on a host fact whose branch pads with amounts from an enclosing initializer
    (silero-VAD's opset-18 export reads its Pad amounts this way)."""
    then = helper.make_graph([helper.make_node("Pad", ["x", "pads"], ["padded"], name="pad", mode="reflect")],
                             "then", [], [helper.make_tensor_value_info("padded", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["same"])], "else", [],
                              [helper.make_tensor_value_info("same", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("Shape", ["x"], ["shp"]), helper.make_node("Size", ["shp"], ["rank"]),
             helper.make_node("Greater", ["rank", "one"], ["wide"]),
             helper.make_node("If", ["wide"], ["y"], then_branch=then, else_branch=other, name="branch")]
    graph = helper.make_graph(nodes, "outer_pads", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.array(pads, np.int64), "pads"),
                               numpy_helper.from_array(np.array(1, np.int64), "one")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_a_body_reads_an_enclosing_initializer_as_a_host_fact(monkeypatch, rng):
    fake = install(monkeypatch)
    model = _outer_pads_model([0, 2, 0, 3])
    x = rng.standard_normal((1, 8)).astype(np.float32)
    with Executor(load_model(model.SerializeToString()), device="gpu") as ex:
        ex.run({"x": x})
        assert device_read_notes(ex) == []            # the body's Pad amounts: a host copy
        res, counts = _counted_run(fake, ex, {"x": x})
        assert counts.syncs == 0
        np.testing.assert_allclose(res.outputs["y"].get(), _reference(model, {"x": x})["y"])
        ex.set_weight("pads", np.array([0, 1, 0, 1], np.int64))   # the body's host copy follows
        got = ex.run({"x": x}).outputs["y"].get()
    np.testing.assert_allclose(got, _reference(_outer_pads_model([0, 1, 0, 1]), {"x": x})["y"])


def _gru_step_contract(wx, hr, rb, hs, h, y):
    """``kernels/device.py:gru_step``'s contract in numpy (the CUDA source runs on a GPU:
    tests/test_executor_gpu.py): the fake has no ElementwiseKernel."""
    assert all(v._a.flags.c_contiguous for v in (wx, hr, rb, h, y)), "the kernel indexes flat buffers"
    a, hh, bias = wx._a, hr._a + rb._a, h._a
    z = 1 / (1 + np.exp(-(a[:, :hs] + hh[:, :hs])))
    r = 1 / (1 + np.exp(-(a[:, hs:2 * hs] + hh[:, hs:2 * hs])))
    n = np.tanh(a[:, 2 * hs:] + r * hh[:, 2 * hs:])
    v = (1 - z) * n + z * bias
    bias[...] = v
    y._a[...] = v


@pytest.mark.parametrize("lbr,lens", [(1, None), (0, None), (1, [9, 4, 9])])
def test_the_one_kernel_gru_step_is_handed_the_right_arrays(monkeypatch, rng, lbr, lens):
    from engine.kernels import device
    from test_executor_gpu import _gru_model
    install(monkeypatch)
    calls = []

    def gru_step(xp, dtype):
        calls.append(dtype)
        return _gru_step_contract
    monkeypatch.setattr(device, "gru_step", gru_step)
    model = _gru_model(9, 3, 5, 16, lbr, rng)
    if lens is not None:   # a sequence ends early: the general, masked step
        model.graph.node[0].input[:] = ["x", "w", "r", "b", "lens"]
        model.graph.initializer.append(numpy_helper.from_array(np.array(lens, np.int32), "lens"))
    feeds = {"x": rng.standard_normal((9, 3, 5)).astype(np.float32)}
    with Executor(load_model(model.SerializeToString()), device="gpu") as ex:
        got = ex.run(feeds).outputs
        want = _reference(model, feeds)
        for k in want:
            np.testing.assert_allclose(got[k].get(), want[k], rtol=1e-4, atol=1e-5)
    assert bool(calls) == (lbr == 1 and lens is None)


def test_a_gru_step_that_does_not_compile_falls_back_once_and_says_so(monkeypatch, rng):
    from engine.kernels import device
    from test_executor_gpu import _gru_model
    fake = install(monkeypatch)
    made = []

    def elementwise_kernel(*spec):   # a cupy whose NVRTC rejects the source, at the first call
        made.append(spec)

        def call(*args, **kw):
            raise RuntimeError("NVRTC_ERROR_COMPILATION: stand-in")
        return call
    monkeypatch.setattr(fake, "ElementwiseKernel", elementwise_kernel, raising=False)
    monkeypatch.setattr(device, "_made", {})
    model = _gru_model(6, 2, 5, 8, 1, rng)
    feeds = {"x": rng.standard_normal((6, 2, 5)).astype(np.float32)}
    want = _reference(model, feeds)
    with Executor(load_model(model.SerializeToString()), device="gpu") as ex:
        with pytest.warns(RuntimeWarning, match="sglens_gru_step did not compile.*NVRTC"):
            got = ex.run(feeds).outputs
        for k in want:
            np.testing.assert_allclose(got[k].get(), want[k], rtol=1e-4, atol=1e-5)
        got = ex.run(feeds).outputs   # no second try, no second warning
        np.testing.assert_allclose(got["y"].get(), want["y"], rtol=1e-4, atol=1e-5)
    assert len(made) == 1


def _names(ex, step: str) -> list[str]:
    fused = ex._fused.get(step)
    return [p.name for p in fused.parts] if fused else [step]


def test_a_timed_node_on_a_stream_costs_one_event(monkeypatch, rng):
    """Consecutive nodes share their boundary event, and the inputs a node frees wait on
    its end event: about one event per node (there were two for timing plus one per
    freed tensor), with every node still timed."""
    fake = install(monkeypatch)
    model, feeds = _bench_model("resnet18", rng)
    with Executor(load_model(model.SerializeToString()), device="gpu") as ex:
        stream = fake.cuda.Stream(non_blocking=True)
        ex.run_inline(feeds, {}, stream)
        start = len(fake.cuda.log)
        res = ex.run_inline(feeds, {}, stream)
        records = sum(1 for kind, ptr, _ in fake.cuda.log[start:] if kind == "record" and ptr == stream.ptr)
        nodes = len(ex._steps)
    # every node timed, by the graph's own names (a fused step's time shared by its nodes)
    assert set(res.node_seconds) == {n for s in ex._steps for n in _names(ex, s.node.name)}
    assert records <= nodes + 1, (records, nodes)


def _layer_norm_rows_contract(x, scale, bias, y, mean, inv, n, eps):
    """``kernels/device.py``'s LayerNormalization kernel contract in numpy (its CUDA source
    runs on a GPU: the engine benchmark's transformers against onnxruntime)."""
    assert all(a._a.flags.c_contiguous for a in (x, scale, y, mean, inv)), "the kernel reads flat rows"
    rows = x._a.reshape(-1, n)
    m = rows.mean(axis=1)
    d = rows - m[:, None]
    iv = 1 / np.sqrt((d * d).mean(axis=1) + np.float32(eps))
    y._a.reshape(-1, n)[...] = d * iv[:, None] * scale._a.reshape(-1) + (0 if bias is None else bias._a.reshape(-1))
    mean._a.reshape(-1)[...] = m
    inv._a.reshape(-1)[...] = iv


@pytest.mark.parametrize("axis,with_bias", [(-1, True), (1, False), (2, True)])
def test_the_one_kernel_layer_norm_is_handed_flat_rows_and_answers_every_output(monkeypatch, rng, axis, with_bias):
    from engine.kernels import device
    install(monkeypatch)
    calls = []
    monkeypatch.setattr(device, "_layer_norm_rows", lambda xp: calls.append(1) or _layer_norm_rows_contract)
    shape = [2, 3, 4, 5]
    norm_shape = shape[axis:]
    inits = [numpy_helper.from_array(rng.standard_normal(norm_shape).astype(np.float32), "scale")]
    if with_bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(norm_shape).astype(np.float32), "bias"))
    node = helper.make_node("LayerNormalization", ["x", "scale"] + (["bias"] if with_bias else []),
                            ["y", "mean", "inv"], axis=axis, epsilon=1e-3, name="ln")
    graph = helper.make_graph([node], "ln", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info(t, TensorProto.FLOAT, None) for t in ("y", "mean", "inv")],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    feeds = {"x": rng.standard_normal(shape).astype(np.float32)}
    with Executor(load_model(model.SerializeToString()), device="gpu") as ex:
        got = ex.run(feeds).outputs
    for k, want in _reference(model, feeds).items():
        np.testing.assert_allclose(got[k].get(), want, rtol=1e-4, atol=1e-5, err_msg=k)
    assert calls, "the one-kernel path did not run"


def _softmax_rows_contract(x, y, n):
    """``kernels/device.py``'s softmax kernel contract in numpy (NaN-propagating row max)."""
    assert x._a.flags.c_contiguous and y._a.flags.c_contiguous, "the kernel reads flat rows"
    rows = x._a.reshape(-1, n)
    with np.errstate(invalid="ignore"):
        e = np.exp(rows - rows.max(axis=1, keepdims=True))
        y._a.reshape(-1, n)[...] = e / e.sum(axis=1, keepdims=True)


def test_the_one_kernel_softmax_takes_the_last_axis_only(monkeypatch, rng):
    from engine.kernels import device
    install(monkeypatch)
    calls = []
    monkeypatch.setattr(device, "_softmax_rows", lambda xp: calls.append(1) or _softmax_rows_contract)
    for axis in (-1, 1):
        node = helper.make_node("Softmax", ["x"], ["y"], axis=axis)
        graph = helper.make_graph([node], "sm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 5])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        x = rng.standard_normal((2, 3, 5)).astype(np.float32)
        x[0, 0, :] = -np.inf   # a fully masked row: NaN, as onnxruntime answers
        calls.clear()
        with Executor(load_model(model.SerializeToString()), device="gpu") as ex:
            got = ex.run({"x": x}).outputs["y"].get()
        want = _reference(model, {"x": x})["y"]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)
        assert bool(calls) == (axis == -1)


def test_row_kernels_that_do_not_compile_leave_layer_norm_and_softmax_to_their_general_form(monkeypatch, rng):
    from engine.kernels import device
    fake = install(monkeypatch)

    def raw_kernel(source, name):   # a cupy whose NVRTC rejects the source, at the first launch
        def launch(*args, **kw):
            raise RuntimeError(f"NVRTC_ERROR_COMPILATION: {name}")
        return launch
    monkeypatch.setattr(fake, "RawKernel", raw_kernel, raising=False)
    monkeypatch.setattr(device, "_made", {})
    nodes = [helper.make_node("LayerNormalization", ["x", "scale"], ["ln"], axis=-1),
             helper.make_node("Softmax", ["ln"], ["y"], axis=-1)]
    graph = helper.make_graph(nodes, "ln_sm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "scale")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    feeds = {"x": rng.standard_normal((3, 8)).astype(np.float32)}
    with Executor(load_model(model.SerializeToString()), device="gpu") as ex:
        with pytest.warns(RuntimeWarning, match="did not compile"):
            got = ex.run(feeds).outputs["y"].get()
    np.testing.assert_allclose(got, _reference(model, feeds)["y"], rtol=1e-5, atol=1e-6)
    assert device._made[(id(fake), "sglens_layer_norm_f32")] is False
    assert device._made[(id(fake), "sglens_softmax_last_f32")] is False


def test_a_0d_host_fact_goes_up_with_its_shape(monkeypatch):
    """``resident`` once made a 0-d index 1-d (``ascontiguousarray`` does): a Gather by it
    then returned an extra axis (silero-VAD's LSTM state, partitioned)."""
    from engine.kernels.device import resident
    fake = install(monkeypatch)
    for host in (np.array(1, np.int64), np.array([1], np.int64), np.zeros((2, 0), np.float32)):
        up = resident(fake, host)
        assert up.shape == host.shape and up.dtype == host.dtype
        np.testing.assert_array_equal(up.get(), host)


def _cut_shape_math_model(rng):
    """A Slice whose bounds are Unsqueezes of constants, and a Gather by a 0-d index: with
    Unsqueeze and Gather taken into subgraphs (as the TensorRT rules cut silero-VAD), the
    bounds and the index come out of subgraph operators."""
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    nodes = [helper.make_node("Constant", [], ["c_start"], value=helper.make_tensor("v", TensorProto.INT64, [], [1])),
             helper.make_node("Unsqueeze", ["c_start", "ax0"], ["start"]),
             helper.make_node("Unsqueeze", ["c_end", "ax0"], ["end"]),
             helper.make_node("Slice", ["x", "start", "end", "one_axis"], ["sliced"]),
             helper.make_node("Gather", ["table", "idx"], ["row"], axis=0),
             helper.make_node("Add", ["sliced", "row"], ["y"])]
    inits = [i64("ax0", [0]), i64("c_end", 7), i64("one_axis", [1]), i64("idx", 1),
             numpy_helper.from_array(rng.standard_normal((3, 6)).astype(np.float32), "table")]
    graph = helper.make_graph(nodes, "cut", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 9])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model, {"x": rng.standard_normal((2, 9)).astype(np.float32)}


def test_host_facts_made_inside_one_subgraph_stay_host_facts_for_the_graph_around_it(monkeypatch, rng):
    """Subgraphs on our engine: the Slice's bounds computed inside them are read by the
    graph around without a sync (they were 11 syncs a run in partitioned silero-VAD op15)."""
    from partition.runner import partition
    fake = install(monkeypatch)
    model, feeds = _cut_shape_math_model(rng)
    part = partition(load_model(model.SerializeToString()), "default", ops=["Unsqueeze", "Constant", "Gather"])
    assert any(n.is_subgraph for n in part.graph.nodes)
    with Executor(part.graph, device="gpu", subgraph_runtime="engine") as ex:
        ex.run(feeds)
        assert device_read_notes(ex) == []
        res, counts = _counted_run(fake, ex, feeds)
    np.testing.assert_allclose(res.outputs["y"].get(), _reference(model, feeds)["y"], rtol=1e-6)
    assert counts.syncs == 0, counts.sync_calls


@pytest.mark.parametrize("name,sr", [("silero_vad_16k_op15", 16000), ("silero_vad_op18_ifless", 16000),
                                     ("silero_vad_op18_ifless", 8000)])
def test_silero_vad_cut_by_the_tensorrt_rules_reads_nothing_back_and_is_captured(monkeypatch, name, sr):
    """Partitioned by the TensorRT rules, every subgraph on our engine: no value read back
    (op15 read 11, op18 18 a run: Slice bounds, Pad amounts and a Reshape's shape made in
    or fed to a subgraph), the whole graph capturable, both sample-rate branches right."""
    from conftest import wheel_model
    from engine.gpu_graphs import GraphReplay
    from partition.runner import partition
    data, feeds = wheel_model(name)
    fake = install(monkeypatch)
    if sr == 8000:
        feeds.update(input=feeds["input"][:, :288], sr=np.array(8000, np.int64))
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    part = partition(load_model(data), "tensorrt").graph
    with Executor(part, device="gpu", subgraph_runtime="engine") as ex:
        ex.run(feeds)
        res, counts = _counted_run(fake, ex, feeds)
        decision = GraphReplay(ex).decision
    for k, v in want.items():
        np.testing.assert_allclose(res.outputs[k].get(), v, rtol=1e-4, atol=1e-5)
    assert counts.syncs == 0, counts.sync_calls
    assert decision.captured, decision.eager_nodes


def test_a_host_fact_the_body_kept_on_the_device_is_read_back_once_and_stays_right(monkeypatch, rng):
    """Where the enclosing plan's estimate of a body's host outputs is wrong (forced here: a
    Relu's output called a host fact), the subgraph operator reads the value back -- one
    sync a run -- and the host node after it computes the right thing."""
    from engine import gpu_plan
    from partition.runner import partition
    fake = install(monkeypatch)
    monkeypatch.setattr(gpu_plan, "_body_host_outputs", lambda body, host, weight_on_host: set(body.outputs))
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "one"], ["a"]),
             helper.make_node("Neg", ["a"], ["y"])]
    graph = helper.make_graph(nodes, "miss", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.array([1.0], np.float32), "one")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    part = partition(load_model(model.SerializeToString()), "default", ops=["Relu"])
    feeds = {"x": rng.standard_normal((2, 3)).astype(np.float32)}
    with Executor(part.graph, device="gpu", subgraph_runtime="engine") as ex:
        assert "r" in ex.device_plan.host_tensors   # the (forced) estimate
        ex.run(feeds)
        res, counts = _counted_run(fake, ex, feeds)
    np.testing.assert_allclose(res.outputs["y"].get(), _reference(model, feeds)["y"], rtol=1e-6)
    assert counts.sync_calls == {"get": 1}, counts.sync_calls
