"""Input specs: prefilled shapes, exact repeatability, checks before anything runs."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.executor import Executor
from engine.input_spec import (METADATA_KEY, InputSpec, check_with_inference, materialize,
                               specs_from_options, suggest_specs)
from engine.run_errors import InputError
from partition import load_model

from conftest import make_model


def _cnn(rng: np.random.Generator):
    """Conv + Relu + GlobalAveragePool on [batch, 3, height, width]."""
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["image", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["y"], name="gap")]
    x = helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, "height", "width"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4, 1, 1])
    return make_model(nodes, [x], [y], initializers=[w])


def _tokens():
    """Gather from an embedding table on [batch, sequence] int64 ids, then a fixed Reshape."""
    table = numpy_helper.from_array(np.arange(40, dtype=np.float32).reshape(10, 4), "table")
    shape = numpy_helper.from_array(np.array([1, 12], dtype=np.int64), "shape")
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"], name="embed"),
             helper.make_node("Reshape", ["e", "shape"], ["y"], name="flat")]
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "sequence"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 12])
    return make_model(nodes, [ids], [y], initializers=[table, shape])


def test_suggestions_name_the_dims_and_use_sensible_sizes(rng):
    g = load_model(_cnn(rng).SerializeToString())
    (spec,) = suggest_specs(g)
    assert spec.name == "image" and spec.dtype == "FLOAT"
    assert spec.shape == [1, 3, 224, 224] and spec.dim_names == ["batch", None, "height", "width"]
    (tok,) = suggest_specs(load_model(_tokens().SerializeToString()))
    assert tok.shape == [1, 128] and (tok.low, tok.high) == (0.0, 4.0)


def test_model_metadata_and_remembered_shapes_win(rng):
    model = _cnn(rng)
    model.metadata_props.add(key=METADATA_KEY, value=json.dumps({"image": [2, 3, 64, 48]}))
    g = load_model(model.SerializeToString())
    assert suggest_specs(g)[0].shape == [2, 3, 64, 48]
    assert suggest_specs(g, remembered={"image": [1, 3, 32, 32]})[0].shape == [1, 3, 32, 32]
    assert suggest_specs(g, remembered={"image": [1, 3]})[0].shape == [2, 3, 64, 48]  # wrong rank ignored


def test_same_specs_give_the_same_arrays_and_respect_the_range(rng):
    g = load_model(_cnn(rng).SerializeToString())
    spec = InputSpec("image", [2, 3, 16, 20], "FLOAT", low=0.5, high=0.75, seed=7)
    a = materialize(g, [spec])["image"]
    b = materialize(g, [InputSpec.from_json(json.loads(json.dumps(spec.to_json())))])["image"]
    assert a.dtype == np.float32 and a.shape == (2, 3, 16, 20)
    assert np.array_equal(a, b) and a.min() >= 0.5 and a.max() < 0.75
    other = materialize(g, [InputSpec("image", [2, 3, 16, 20], "FLOAT", low=0.5, high=0.75, seed=8)])
    assert not np.array_equal(a, other["image"])
    zeros = materialize(g, [InputSpec("image", [1, 3, 4, 4], "FLOAT", fill="zeros")])["image"]
    assert not zeros.any()


def test_a_run_at_a_real_shape_matches_onnxruntime(rng):
    model = _cnn(rng)
    g = load_model(model.SerializeToString())
    feeds = materialize(g, [InputSpec("image", [2, 3, 40, 56], "FLOAT", seed=int(rng.integers(1 << 30)))])
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    with Executor(g) as ex:
        got = ex.run(feeds).numpy_outputs()["y"]
    assert got.shape == (2, 4, 1, 1)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def _waveform(dims):
    """A HuBERT-like front end: [batch, samples] -> Unsqueeze -> Conv1d (kernel 10, stride 5)."""
    w = numpy_helper.from_array(np.linspace(-1, 1, 40, dtype=np.float32).reshape(4, 1, 10), "w")
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    nodes = [helper.make_node("Unsqueeze", ["wave", "axes"], ["u"], name="unsqueeze"),
             helper.make_node("Conv", ["u", "w"], ["y"], name="conv", strides=[5])]
    x = helper.make_tensor_value_info("wave", TensorProto.FLOAT, dims)
    return make_model(nodes, [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                      initializers=[w, axes])


@pytest.mark.parametrize("dims, shape", [
    (["batch_size", "samples"], [1, 16000]),            # HuBERT / wav2vec2 exports
    (["batch", "num_samples"], [1, 16000]),
    (["batch_size_0", "encoder_sequence_length"], [1, 128]),   # optimum's prefixes and suffixes
    (["N", "sequence_length_out"], [1, 128]),
    (["batch", "xyz"], [1, 1]),                         # an unknown name: 1, as before
])
def test_named_dims_take_sizes_a_model_can_run_at(dims, shape, rng):
    model = _waveform(dims)
    g = load_model(model.SerializeToString())
    (spec,) = suggest_specs(g)
    assert spec.shape == shape and spec.dim_names == dims
    if shape[1] < 10:
        return   # shorter than the conv's window: nothing to run
    feeds = materialize(g, [spec])
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    with Executor(g) as ex:
        got = ex.run(feeds).numpy_outputs()["y"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_a_sample_rate_input_is_prefilled_as_16000(rng):
    """silero VAD's ``sr`` (an int64 scalar) drawn at random from 0..4 took none of the model's
    branches; named as a rate, it is the constant 16000, and materialises so."""
    add = helper.make_node("Add", ["x", "c"], ["y"], name="add")
    for name, constant in (("sr", True), ("Sample_Rate", True), ("step", False)):
        model = make_model([helper.make_node("Cast", [name], ["c"], name="cast", to=TensorProto.FLOAT), add],
                           [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
                            helper.make_tensor_value_info(name, TensorProto.INT64, [])],
                           [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
        g = load_model(model.SerializeToString())
        specs = {s.name: s for s in suggest_specs(g)}
        assert specs["x"].fill == "random"
        feeds = materialize(g, list(specs.values()))
        assert (specs[name].fill == "constant") == constant
        assert (int(feeds[name]) == 16000) == constant and feeds[name].dtype == np.int64


def test_the_command_line_keeps_a_prefill_by_name_unless_told_otherwise():
    """`sglens compare silero_vad.onnx --shape input=1,512` drew `sr` at random again (the CLI's
    default --fill overwrote the prefill) and ran the 8 kHz branch into an LSTM error."""
    model = make_model([helper.make_node("Cast", ["sr"], ["c"], name="cast", to=TensorProto.FLOAT),
                        helper.make_node("Add", ["x", "c"], ["y"], name="add")],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
                        helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    g = load_model(model.SerializeToString())
    notes: list[str] = []
    specs = {s.name: s for s in specs_from_options(g, notes=notes)}
    assert (specs["sr"].fill, specs["sr"].value, specs["x"].fill) == ("constant", 16000.0, "random")
    assert any("'sr': the constant 16000, by its name" in n for n in notes), notes
    told = {s.name: s for s in specs_from_options(g, fill="zeros")}
    assert told["sr"].fill == told["x"].fill == "zeros"


def _bert_inputs():
    """BERT's three inputs: ids into a 10-row table, token types into a 2-row one, and a mask
    turned into an additive bias as exporters write it, (1 - mask) * -10000."""
    tables = [numpy_helper.from_array(np.arange(40, dtype=np.float32).reshape(10, 4), "words"),
              numpy_helper.from_array(np.array([[0.5] * 4, [-0.5] * 4], np.float32), "types"),
              numpy_helper.from_array(np.array(1.0, np.float32), "one"),
              numpy_helper.from_array(np.array(-10000.0, np.float32), "big")]
    nodes = [helper.make_node("Gather", ["words", "input_ids"], ["w"], name="words"),
             helper.make_node("Gather", ["types", "token_type_ids"], ["t"], name="types"),
             helper.make_node("Cast", ["attention_mask"], ["m"], name="cast", to=TensorProto.FLOAT),
             helper.make_node("Sub", ["one", "m"], ["inv"], name="invert"),
             helper.make_node("Mul", ["inv", "big"], ["bias"], name="bias"),
             helper.make_node("Add", ["w", "t"], ["y"], name="sum")]
    ins = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"])
           for n in ("input_ids", "token_type_ids", "attention_mask")]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "bias")]
    return make_model(nodes, ins, outs, initializers=tables)


def test_masks_and_token_types_are_prefilled_with_values_the_model_takes(rng):
    """Random 0..3 made BERT's token types index past its 2-row table (onnxruntime refused
    the run) and a mask of 2s and 3s a huge positive bias; ids stay random."""
    model = _bert_inputs()
    g = load_model(model.SerializeToString())
    specs = {s.name: s for s in suggest_specs(g)}
    assert [specs[n].fill for n in ("input_ids", "token_type_ids", "attention_mask")] == \
        ["random", "zeros", "ones"]
    feeds = materialize(g, list(specs.values()))
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    assert not want[1].any()                       # no position masked: no bias
    with Executor(g) as ex:
        got = ex.run(feeds).numpy_outputs()
    np.testing.assert_allclose(got["y"], want[0], rtol=1e-6)


@pytest.mark.parametrize("spec, message", [
    (InputSpec("image", [1, 3, 8], "FLOAT"), "rank 3"),
    (InputSpec("image", [1, 4, 8, 8], "FLOAT"), "fixes it to 3"),
    (InputSpec("image", [1, 3, 8, 8], "FLOAT", fill="noise"), "fill 'noise'"),
    (InputSpec("image", [1, 3, 8, 8], "FLOAT", low=1, high=1), "low < high"),
    (InputSpec("image", [1, 3, 8, -8], "FLOAT"), "negative"),
    (InputSpec("image", [64, 3, 4096, 4096], "FLOAT"), "elements"),
    (InputSpec("image", [1, 3, 8, 8], "INT64"), "declares FLOAT"),
    (InputSpec("image", [1, 3, 8, 8], "FLOAT", fill="file"), "no array was uploaded"),
    (InputSpec("picture", [1, 3, 8, 8], "FLOAT"), "missing"),
])
def test_bad_specs_are_refused_with_the_input_named(rng, spec, message):
    g = load_model(_cnn(rng).SerializeToString())
    with pytest.raises(InputError, match=message):
        materialize(g, [spec])


def test_uploaded_values_are_used_and_cast_only_losslessly(rng):
    g = load_model(_tokens().SerializeToString())
    ids = np.array([[1, 2, 3]], dtype=np.int32)
    feeds = materialize(g, [InputSpec("ids", [], "INT64", fill="file")], {"ids": ids})
    assert feeds["ids"].dtype == np.int64 and feeds["ids"].tolist() == [[1, 2, 3]]
    with pytest.raises(InputError, match="cannot be cast"):
        materialize(g, [InputSpec("ids", [], "INT64", fill="file")], {"ids": ids.astype(np.float64)})


def test_uploaded_values_that_arrive_unaligned_run_on_the_compiled_conv(rng):
    """Issue 20: arrays that crossed to a Dask worker may lie unaligned in its receive buffer; the
    run then failed in the Conv kernel ('x: expected a 4-D float32 array'). Fed as an aligned copy."""
    model = _cnn(rng)
    image = rng.uniform(-1, 1, (1, 3, 8, 8)).astype(np.float32)
    raw = bytearray(image.nbytes + 1)
    unaligned = np.frombuffer(raw, np.float32, count=image.size, offset=1).reshape(image.shape)
    unaligned[...] = image
    assert not unaligned.flags.aligned
    g = load_model(model.SerializeToString())
    feeds = materialize(g, [InputSpec("image", [1, 3, 8, 8], "FLOAT", fill="file")], {"image": unaligned})
    assert feeds["image"].flags.aligned and feeds["image"].flags.c_contiguous
    with Executor(g) as ex:
        got = ex.run(feeds).numpy_outputs()["y"]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"image": image})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_shape_inference_refuses_a_shape_the_model_cannot_take(rng):
    """x[batch, features] @ W[16, 8]: any 'features' but 16 cannot work."""
    w = numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "features"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], [x], [y], [w])
    g = load_model(model.SerializeToString())
    check_with_inference(model, materialize(g, [InputSpec("x", [2, 16], "FLOAT")]))
    with pytest.raises(InputError, match="cannot take these input shapes"):
        check_with_inference(model, materialize(g, [InputSpec("x", [2, 15], "FLOAT")]))


def test_a_negative_size_in_the_models_annotations_is_unknown_not_a_refusal(rng):
    """Paddle writes -1 for the batch, and onnxruntime's quantizer copies it into the value_info
    of every tensor it annotates (229 of them in PP-OCR's classifier): strict inference refused
    every real batch against it. -1 means unknown; a shape the model cannot take is still refused."""
    w = numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, "features"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, 8])
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"), helper.make_node("Relu", ["m"], ["y"], name="relu")]
    model = make_model(nodes, [x], [y], [w])
    model.graph.value_info.append(helper.make_tensor_value_info("m", TensorProto.FLOAT, [-1, 8]))
    g = load_model(model.SerializeToString())
    check_with_inference(model, materialize(g, [InputSpec("x", [3, 16], "FLOAT")]))
    with pytest.raises(InputError, match="cannot take these input shapes"):
        check_with_inference(model, materialize(g, [InputSpec("x", [3, 15], "FLOAT")]))


def test_an_annotations_element_type_is_not_an_input_shape_refusal(rng):
    """onnxruntime's float16 converter leaves element types on annotations that strict inference
    disagrees with, and onnxruntime runs the model (the wheel's silero-VAD in float16:
    tests/test_flatten_branches.py): no input shape causes that or cures it, so the check does not
    refuse the inputs over it; a size the model cannot take is still refused."""
    w = numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"), helper.make_node("Relu", ["m"], ["y"], name="relu")]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "features"])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])], [w])
    model.graph.value_info.append(helper.make_tensor_value_info("m", TensorProto.FLOAT16, ["batch", 8]))
    g = load_model(model.SerializeToString())
    check_with_inference(model, materialize(g, [InputSpec("x", [3, 16], "FLOAT")]))
    model.graph.value_info[0].type.tensor_type.elem_type = TensorProto.FLOAT
    with pytest.raises(InputError, match="cannot take these input shapes"):
        check_with_inference(model, materialize(g, [InputSpec("x", [3, 15], "FLOAT")]))


@pytest.mark.parametrize("builder, shapes", [
    ("cnn_dynamic", [[1, 3, 96, 128], [2, 3, 64, 40]]),
    ("transformer_dynamic", [[1, 32], [3, 7]]),
])
def test_dynamic_samples_run_at_several_real_shapes(rng, builder, shapes):
    from sample_models import builders_dynamic
    model = getattr(builders_dynamic, f"build_{builder}")()
    g = load_model(model.SerializeToString())
    (suggested,) = suggest_specs(g)
    assert suggested.shape == shapes[0]             # the example shape the model carries
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for shape in shapes:
        spec = InputSpec(suggested.name, shape, suggested.dtype, low=suggested.low,
                         high=suggested.high, seed=int(rng.integers(1 << 30)))
        feeds = materialize(g, [spec])
        check_with_inference(model, feeds)
        want = session.run(None, feeds)[0]
        with Executor(g) as ex:
            got = ex.run(feeds).numpy_outputs()[session.get_outputs()[0].name]
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)


def _sglens(*args: str):
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-m", "sglens", *args], capture_output=True, text=True,
                          timeout=240)


def test_cli_takes_shapes_fills_and_ranges(tmp_path):
    from sample_models.builders_dynamic import build_cnn_dynamic
    path = tmp_path / "cnn.onnx"
    path.write_bytes(build_cnn_dynamic().SerializeToString())
    done = _sglens("compare", str(path), "--ops", "Conv", "--shape", "images=2x3x32x40",
                   "--range", "0,1", "--repeat", "1", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["ok"] and data["outputs"]["scores"]["engine"]["shape"] == [2, 10]
    bad = _sglens("run", str(path), "--shape", "images=1x4x32x32")
    assert bad.returncode == 2 and "fixes it to 3" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    for args, message in ((["--shape", "pixels=1x3x8x8"], "not graph inputs"),
                          (["--shape", "images=1xthreex8"], "integers"),
                          (["--range", "1"], "LOW,HIGH"), (["--range", "2,1"], "low < high")):
        bad = _sglens("run", str(path), *args)
        assert bad.returncode == 2 and message in bad.stderr, (args, bad.stderr)


def test_scalar_inputs_are_arrays_for_every_fill():
    from sample_models._common import tensor_info
    x = tensor_info("flag", [], TensorProto.BOOL)
    y = tensor_info("y", [], TensorProto.BOOL)
    g = load_model(make_model([helper.make_node("Not", ["flag"], ["y"], name="not")], [x], [y]).SerializeToString())
    for fill in ("random", "zeros", "ones"):
        value = materialize(g, [InputSpec("flag", [], "BOOL", fill=fill)])["flag"]
        assert isinstance(value, np.ndarray) and value.shape == () and value.dtype == np.bool_
