"""Values that are not one tensor at a graph's edge: a sequence fed and returned, an absent optional
fed as None. The executor uploaded every feed with ``asarray``, which stacked a sequence of equal
shapes into one tensor and refused one of unequal shapes (ONNX's backend suite found it once it
ran on the executor). Oracle: ONNX's reference evaluator, on fresh random inputs."""

from __future__ import annotations

import numpy as np
import pytest
import onnx
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from engine.executor import Executor
from partition import load_model

from conftest import make_model


def _sequence_model() -> onnx.ModelProto:
    """seq (a sequence of float tensors), x -> SequenceInsert(seq, x) at the front -> out, and the
    sequence's length."""
    seq = helper.make_tensor_sequence_value_info("seq", TensorProto.FLOAT, None)
    out = helper.make_tensor_sequence_value_info("out", TensorProto.FLOAT, None)
    nodes = [helper.make_node("Constant", [], ["front"], value=helper.make_tensor("f", TensorProto.INT64, [], [0])),
             helper.make_node("SequenceInsert", ["seq", "x", "front"], ["out"], name="insert"),
             helper.make_node("SequenceLength", ["out"], ["n"], name="length")]
    return make_model(nodes, [seq, helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                      [out, helper.make_tensor_value_info("n", TensorProto.INT64, [])])


def test_a_sequence_is_fed_and_returned_element_by_element(rng):
    model = _sequence_model()
    for shapes in ([(2, 3), (2, 3)], [(4,), (1, 5), (2, 2, 2)]):   # equal shapes were stacked, unequal refused
        seq = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        x = rng.standard_normal((3,)).astype(np.float32)
        want_seq, want_n = ReferenceEvaluator(model).run(None, {"seq": seq, "x": x})
        with Executor(load_model(model.SerializeToString())) as ex:
            got = ex.run({"seq": seq, "x": x}).numpy_outputs()
        assert isinstance(got["out"], list) and len(got["out"]) == len(want_seq) == len(shapes) + 1
        for a, b in zip(got["out"], want_seq):
            np.testing.assert_array_equal(a, b)
        assert int(got["n"]) == int(want_n)


def test_an_absent_optional_is_fed_as_none(rng):
    opt = helper.make_value_info("o", helper.make_optional_type_proto(
        helper.make_tensor_type_proto(TensorProto.FLOAT, [2])))
    model = make_model([helper.make_node("OptionalHasElement", ["o"], ["has"], name="has")], [opt],
                       [helper.make_tensor_value_info("has", TensorProto.BOOL, [])], opset=18)
    graph = load_model(model.SerializeToString())
    for value in (None, rng.standard_normal(2).astype(np.float32)):
        (want,) = ReferenceEvaluator(model).run(None, {"o": value})
        with Executor(graph) as ex:
            got = ex.run({"o": value}).numpy_outputs()["has"]
        assert bool(got) == bool(want) == (value is not None)


def _split_model(sizes: list[int]) -> onnx.ModelProto:
    """x (4, 3) -> SplitToSequence by ``sizes`` on axis 0 -> seq (a sequence output)."""
    nodes = [helper.make_node("SplitToSequence", ["x", "sizes"], ["seq"], name="split", axis=0)]
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3])],
                      [helper.make_tensor_sequence_value_info("seq", TensorProto.FLOAT, None)],
                      initializers=[onnx.numpy_helper.from_array(np.array(sizes, np.int64), "sizes")])


def test_sglens_run_and_compare_take_a_sequence_output(tmp_path, capsys):
    """``sglens run`` described every output by ``.size`` and crashed on a sequence; ``compare``
    stacked one and crashed where its elements' shapes differ (here 1 and 3 rows)."""
    from sglens.cli import main
    path = tmp_path / "split.onnx"
    onnx.save(_split_model([1, 3]), path)
    assert main(["run", str(path), "--save-outputs", str(tmp_path / "out.npz")]) == 0
    text = capsys.readouterr().out
    assert "seq: sequence of 2 tensor(s): [1, 3] float32, [3, 3] float32" in text
    saved = np.load(tmp_path / "out.npz")
    assert sorted(saved.files) == ["seq[0]", "seq[1]"] and saved["seq[1]"].shape == (3, 3)
    assert main(["compare", str(path), "--repeat", "1", "--warmup", "0"]) == 0
    assert "->  OK" in capsys.readouterr().out


def test_sequences_of_other_shapes_differ():
    from engine.compare import errors
    a, b = np.ones((1, 3), np.float32), np.ones((3, 3), np.float32)
    assert errors([a, b], [a, b])["match"]
    e = errors([a, b], [b, a])
    assert not e["match"] and e["note"] == "sequences or maps differ in length, keys or element shapes"
    assert not errors([a], [a, b])["match"]
    near = errors([a, b], [a, b + np.float32(1e-2)])
    assert not near["match"] and near["max_abs"] == pytest.approx(1e-2, rel=1e-3)
