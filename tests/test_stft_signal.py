"""STFT over a [batch, samples] signal, as onnx-asr's preprocessors (written with onnxscript)
pass a waveform: onnxruntime reads it as real samples where ONNX's text asks for [batch, samples,
1]. Our kernel reads it so too; the input-shape check does not refuse such a model on ONNX's
shape inference, which counts a two-sided spectrum for it; and where onnxruntime's own STFT
departs (its float32 DFT of a size not a power of two), the reference evaluator, fed the
signal in its specified form, says whose kernel is right."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from engine.executor import Executor
from engine.input_spec import check_with_inference
from partition.onnx_io import from_model_proto
from sglens.cli import main

sys.path.insert(0, str(Path(__file__).parent / "acceptance"))
import wheel_models  # noqa: E402


def _stft_model(n_fft: int, tail: str = "") -> onnx.ModelProto:
    """waveform [batch, samples] -> STFT (Hann window of ``n_fft``, hop 160) -> ``tail``: "" (the
    spectrum), "log" (log power), or "mel" (power @ a [n_fft/2 + 1, 8] matrix, as the
    preprocessors' mel banks)."""
    window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)).astype(np.float32)
    inits = [numpy_helper.from_array(window, "window"), numpy_helper.from_array(np.array(160, np.int64), "step")]
    nodes = [helper.make_node("STFT", ["waveform", "step", "window"], ["spec"], name="stft")]
    last = "spec"
    if tail:
        nodes.append(helper.make_node("ReduceSumSquare", ["spec"], ["power"], name="power", axes=[-1], keepdims=0))
        last = "power"
    if tail == "log":
        nodes.append(helper.make_node("Log", ["power"], ["y"], name="log"))
        last = "y"
    if tail == "mel":
        mel = np.abs(np.random.default_rng(0).standard_normal((n_fft // 2 + 1, 8))).astype(np.float32)
        inits.append(numpy_helper.from_array(mel, "mel"))
        nodes.append(helper.make_node("MatMul", ["power", "mel"], ["y"], name="mel_bank"))
        last = "y"
    graph = helper.make_graph(nodes, "stft", [helper.make_tensor_value_info("waveform", TensorProto.FLOAT,
                                                                            ["batch", "samples"])],
                              [helper.make_tensor_value_info(last, TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_a_two_dimensional_signal_is_real_samples_as_onnxruntime_reads_it(rng):
    """A power-of-two frame (onnxruntime's FFT, accurate): ours matches it, and matches ONNX's
    reference evaluator fed the same samples as [batch, samples, 1]."""
    model = _stft_model(256)
    x = (0.1 * rng.standard_normal((2, 4000))).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"waveform": x})[0]
    with Executor(from_model_proto(model)) as ex:
        got = ex.run({"waveform": x}).numpy_outputs()["spec"]
    assert got.shape == want.shape == (2, 24, 129, 2)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    reference = onnx.ModelProto()
    reference.CopyFrom(model)
    del reference.graph.input[0].type.tensor_type.shape.dim[:]   # rank 3 now, as the text has it
    (spec,) = ReferenceEvaluator(reference).run(None, {"waveform": x[..., None]})
    np.testing.assert_allclose(got, spec, rtol=1e-4, atol=1e-5)


def test_the_input_check_does_not_refuse_what_onnxruntime_runs(rng):
    """ONNX's strict shape inference refuses the mel MatMul after such an STFT (it counts 400
    bins for a 400-point window, not 201); onnxruntime runs the model, and so do we."""
    model = _stft_model(400, "mel")
    x = (0.1 * rng.standard_normal((1, 16000))).astype(np.float32)
    strict = onnx.ModelProto()
    strict.CopyFrom(model)
    strict.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1
    strict.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 16000
    with pytest.raises(onnx.shape_inference.InferenceError, match="MatMul"):
        onnx.shape_inference.infer_shapes(strict, check_type=True, strict_mode=True)
    check_with_inference(model, {"waveform": x})   # no InputError
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"waveform": x})[0]
    with Executor(from_model_proto(model)) as ex:
        got = ex.run({"waveform": x}).numpy_outputs()["y"]
    assert got.shape == want.shape == (1, 98, 8)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)


def test_where_onnxruntimes_stft_departs_the_reference_says_so(tmp_path, capsys):
    """A 400-point frame: onnxruntime's naive float32 DFT is ~1e-4 off (ours ~1e-7, against a
    float64 transform); the log of the power makes that visible. Run alone, the STFT still
    differs, and ONNX's reference evaluator, fed the signal as [batch, samples, 1], agrees with
    ours: the verdict puts the departure on onnxruntime's kernel."""
    path = tmp_path / "stft_log.onnx"
    path.write_bytes(_stft_model(400, "log").SerializeToString())
    assert main(["compare", str(path), "--shape", "waveform=1x16000", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["verdict"]["status"] == "differ"
    local = report["local_check"]
    assert local["departing"] == ["stft"] and local["n_theirs"] == 1, local
    assert "onnxruntime's kernel departs" in " ".join(report["verdict"]["details"])


@pytest.mark.parametrize("name, verdict", [("asr_kaldi_fbank", "ok"), ("asr_whisper128_mel", "theirs")])
def test_onnx_asr_feature_extractors_as_a_user_compares_them(name, verdict, capsys):
    """The real files, from the onnx-asr wheel: its Kaldi fbank (refused by the input check before)
    matches; its 128-bin Whisper log-mel differs where onnxruntime's 400-point STFT departs."""
    try:
        path = wheel_models.fetch(name)
    except wheel_models.Unavailable as exc:
        pytest.skip(str(exc))
    rc = main(["compare", str(path), "--shape", "waveforms=1x16000", "--const", "waveforms_lens=16000",
               "--repeat", "1", "--json"])
    assert rc == 0
    report = json.loads(capsys.readouterr().out)
    if verdict == "ok":
        assert report["ok"] is True, report["verdict"]
    else:
        assert report["verdict"]["status"] == "differ"
        assert report["local_check"]["departing"] and \
            report["local_check"]["n_theirs"] == len(report["local_check"]["departing"]), report["local_check"]
