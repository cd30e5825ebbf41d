"""An integer input that holds lengths (onnx-asr's ``waveforms_lens``, NeMo's ``length``) is filled
with its partner input's length, not random 0..3 (engine/input_spec.py ``fill_lengths``)."""

from __future__ import annotations


import numpy as np
from onnx import TensorProto, helper

from conftest import make_model
from engine.input_spec import materialize, specs_from_options, suggest_specs
from partition import load_model
from sglens.cli import main

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _graph(inputs: list[tuple[str, int, list]]):
    """A model summing its float inputs and counting with its integer ones (each input is read)."""
    vis = [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs]
    nodes, outs = [], []
    for n, t, _ in inputs:
        op = "ReduceSum" if t == F else "ReduceMax"
        nodes.append(helper.make_node(op, [n], [f"{n}_out"], keepdims=0))
        outs.append(helper.make_tensor_value_info(f"{n}_out", t, None))
    return load_model(make_model(nodes, vis, outs).SerializeToString())


def _by_name(specs):
    return {s.name: s for s in specs}


def test_a_waveforms_length_follows_its_samples():
    g = _graph([("waveforms", F, ["batch_size", "N"]), ("waveforms_lens", I64, ["batch_size"])])
    lens = _by_name(suggest_specs(g))["waveforms_lens"]
    assert (lens.fill, lens.value) == ("constant", 1.0)   # N is suggested as 1: its length too
    notes: list[str] = []
    specs = _by_name(specs_from_options(g, dims={"N": 16000, "batch_size": 2}, notes=notes))
    assert specs["waveforms_lens"].shape == [2] and specs["waveforms_lens"].value == 16000.0
    assert any("'waveforms_lens': 16000, the size of 'waveforms' axis 1" in n for n in notes), notes
    assert not any("by its name" in n for n in notes), notes
    feeds = materialize(g, list(specs.values()))
    np.testing.assert_array_equal(feeds["waveforms_lens"], [16000, 16000])
    given = _by_name(specs_from_options(g, dims={"N": 16000}, constants={"waveforms_lens": 8000}, notes=notes))
    assert given["waveforms_lens"].value == 8000.0


def test_the_variable_axis_is_the_length_and_a_fixed_one_is_not():
    # NeMo's encoder: audio_signal [batch, 80 mel bins, time], length [batch]
    g = _graph([("audio_signal", F, ["B", 80, "T"]), ("length", I64, ["B"])])
    specs = _by_name(specs_from_options(g, dims={"T": 300}))
    assert specs["length"].fill == "constant" and specs["length"].value == 300.0


def test_an_unclear_partner_leaves_the_lengths_random():
    two = _graph([("left", F, ["B", "T"]), ("right", F, ["B", "S"]), ("seq_lens", I64, ["B"])])
    assert _by_name(suggest_specs(two))["seq_lens"].fill == "random"
    named = _graph([("x", F, ["B", "T"]), ("speaker", F, ["B", "E"]), ("x_lens", I64, ["B"])])
    assert _by_name(specs_from_options(named, dims={"T": 50}))["x_lens"].value == 50.0   # named after x
    not_lengths = _graph([("x", F, ["B", "T"]), ("ids", I64, ["B"])])
    assert _by_name(suggest_specs(not_lengths))["ids"].fill == "random"
    other_batch = _graph([("x", F, [2, "T"]), ("x_len", I64, [3])])
    assert _by_name(suggest_specs(other_batch))["x_len"].fill == "random"
    user_fill = _graph([("x", F, ["B", "T"]), ("x_len", I64, ["B"])])
    assert _by_name(specs_from_options(user_fill, fill="zeros"))["x_len"].fill == "zeros"


def test_the_cli_says_what_it_filled(tmp_path, capsys):
    """``sglens run`` on a model whose output is the lengths it was given: the note and the value."""
    model = make_model([helper.make_node("Identity", ["x_lens"], ["y"])],
                       [helper.make_tensor_value_info("x", F, ["B", "T"]),
                        helper.make_tensor_value_info("x_lens", I64, ["B"])],
                       [helper.make_tensor_value_info("y", I64, None)])
    path = tmp_path / "lens.onnx"
    path.write_bytes(model.SerializeToString())
    out = tmp_path / "out.npz"
    assert main(["run", str(path), "--dim", "T=77", "--save-outputs", str(out)]) == 0
    captured = capsys.readouterr()
    assert "'x_lens': 77, the size of 'x' axis 1" in captured.out + captured.err
    with np.load(out) as saved:
        np.testing.assert_array_equal(saved["y"], [77])
