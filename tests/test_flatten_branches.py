"""An If replaced by the branch it took (``engine/flatten_branches.py``), and what that gives the
comparison's local check: a difference made inside an If (a float16 silero-VAD keeps its whole
network in one) is checked node by node instead of leaving the If unchecked. Real onnxruntime,
fresh random inputs; the rounding case is the QDQ boundary model of test_compare_rounding inside
two nested Ifs."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.compare import compare
from engine.executor import Executor
from engine.flatten_branches import flatten_taken_branches
from partition import load_model
from partition.ir import Node
from partition.onnx_io import to_model_proto

from conftest import make_model
from test_compare_rounding import _boundary_model, _nudged_convs

C = 4   # _boundary_model's channels


def _branch(name: str, nodes: list, outputs: list[str], inits: list | None = None) -> onnx.GraphProto:
    return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
                                               for o in outputs], inits or [])


def _nested_boundary_model() -> onnx.ModelProto:
    """``if gate: (if inner: QDQ -> identity Conv -> QDQ) else: x * 2``, the Conv's weights and the
    quantization parameters inside the branches. Fed half-integers, the Conv gives them exactly and
    the last QuantizeLinear rounds each half to even: a rounding-level change of the Conv moves
    every even one a whole step (test_compare_rounding's boundary model)."""
    boundary = _boundary_model().graph   # x -> ... -> y, C channels; its y is the branch's q here
    last = onnx.NodeProto()
    last.CopyFrom(boundary.node[-1])
    last.output[0] = "q"
    inner_then = _branch("inner_then", [*boundary.node[:-1], last], ["q"], list(boundary.initializer))
    inner_else = _branch("inner_else", [helper.make_node("Neg", ["x"], ["n"], name="neg")], ["n"])
    outer_then = _branch("outer_then", [
        helper.make_node("If", ["inner"], ["r"], name="inner_if", then_branch=inner_then, else_branch=inner_else),
        helper.make_node("Relu", ["r"], ["t"], name="relu")], ["t"])
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    outer_else = _branch("outer_else", [helper.make_node("Mul", ["x", "two"], ["e"], name="double")], ["e"], [two])
    nodes = [helper.make_node("If", ["gate"], ["y"], name="gate_if", then_branch=outer_then, else_branch=outer_else)]
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, 8, 8]),
                              helper.make_tensor_value_info("gate", TensorProto.BOOL, []),
                              helper.make_tensor_value_info("inner", TensorProto.BOOL, [])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, C, 8, 8])])


def _feeds(rng, gate: bool = True, inner: bool = True) -> dict[str, np.ndarray]:
    return {"x": (rng.integers(-40, 40, (1, C, 8, 8)) + 0.5).astype(np.float32),
            "gate": np.array(gate), "inner": np.array(inner)}


def test_the_taken_branch_replaces_the_if_and_computes_the_same(rng):
    """Both branches of both Ifs, flattened round by round on the conditions' values: the graph
    has no If left, its nodes carry the If's name, and onnxruntime gives the original's outputs."""
    model = _nested_boundary_model()
    graph = load_model(model.SerializeToString())
    for gate, inner in ((True, True), (True, False), (False, True)):
        feeds = _feeds(rng, gate, inner)
        flat, first = flatten_taken_branches(graph, feeds)
        assert first == ["gate_if"]
        flat, second = flatten_taken_branches(flat, feeds)
        assert second == (["gate_if/inner_if"] if gate else [])
        assert not any(n.op_type == "If" for n in flat.nodes)
        names = {n.name for n in flat.nodes}
        assert ("gate_if/inner_if/conv" in names) == (gate and inner)
        assert ("gate_if/double" in names) == (not gate)
        want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
        got = ort.InferenceSession(to_model_proto(flat).SerializeToString(),
                                   providers=["CPUExecutionProvider"]).run(None, feeds)
        np.testing.assert_array_equal(got[0], want[0])
        with Executor(flat) as ex:
            np.testing.assert_array_equal(ex.run(feeds).numpy_outputs()["y"], want[0])


def test_an_unknown_condition_or_a_branch_that_redefines_a_name_stays():
    """No condition value: nothing changes. A branch whose node writes a name the graph already has
    (ONNX's scoping forbids it; such a file is left as it is rather than made ambiguous)."""
    graph = load_model(_nested_boundary_model().SerializeToString())
    assert flatten_taken_branches(graph, {}) == (graph, [])
    gate_if = graph.nodes[0]
    then = gate_if.subgraphs["then_branch"]
    relu = then.nodes[1]
    clash = then.replace(nodes=[then.nodes[0], Node.trusted(relu.name, "Relu", relu.inputs, ("gate",), "", {}, {})],
                         outputs=("gate",))
    node = Node.trusted(gate_if.name, "If", gate_if.inputs, gate_if.outputs, "", gate_if.attrs,
                        {**gate_if.subgraphs, "then_branch": clash})
    graph = graph.replace(nodes=[node])
    assert flatten_taken_branches(graph, {"gate": np.array(True)}) == (graph, [])
    assert flatten_taken_branches(graph, {"gate": np.array(False)})[1] == ["gate_if"]


def test_a_difference_carried_inside_nested_ifs_is_rounding(rng):
    """Our Conv a rounding-level 1e-6 off, two Ifs deep: without flattening the If is one node
    that cannot be run alone and the verdict stays ``differ``; flattened, each node out of
    tolerance gives onnxruntime's output alone: ``rounding``, and the detail names the Ifs."""
    model = _nested_boundary_model()
    graph = load_model(model.SerializeToString())
    feeds = _feeds(rng)
    c = compare(graph, model, feeds, executor="engine", kernels=_nudged_convs(1 + 1e-6), repeat=1, warmup=0)
    assert not c.outputs["y"]["engine"]["match"]          # the premise: whole steps moved
    local = c.local_check
    assert local["flattened"] == ["gate_if", "gate_if/inner_if"]
    assert local["complete"] and local["n_unchecked"] == 0 and local["checked"] == local["differing"] > 0
    assert c.first_divergent_node["node"].startswith("gate_if/inner_if/")
    assert c.first_divergent_node["inside"] == "gate_if"     # what the page links to: a node of the graph
    v = c.verdict
    assert v.status == "rounding", v.details
    assert any("replaced by the branch it took" in d and "gate_if" in d for d in v.details), v.details


def test_without_flattening_the_if_is_unchecked_and_the_verdict_differs(rng, monkeypatch):
    import engine.compare
    monkeypatch.setattr(engine.compare, "FLATTEN_ROUNDS", 0)
    model = _nested_boundary_model()
    graph = load_model(model.SerializeToString())
    c = compare(graph, model, _feeds(rng), executor="engine", kernels=_nudged_convs(1 + 1e-6), repeat=1, warmup=0)
    assert c.local_check["unchecked"] == ["gate_if"] and "flattened" not in c.local_check
    assert c.verdict.status == "differ"


def test_a_flattened_graph_that_computes_otherwise_is_not_believed(rng, monkeypatch):
    """The check stands for the run with the Ifs only where the flattened run gives its outputs: a
    flattening that took the wrong branch (forced here) parts from it, and the verdict stays
    ``differ`` with the outputs named."""
    import engine.compare
    real = engine.compare.flatten_taken_branches
    flipped = {"gate": np.array(True), "inner": np.array(False)}
    monkeypatch.setattr(engine.compare, "flatten_taken_branches", lambda g, values: real(g, {**values, **flipped}))
    model = _nested_boundary_model()
    graph = load_model(model.SerializeToString())
    c = compare(graph, model, _feeds(rng), executor="engine", kernels=_nudged_convs(1 + 1e-6), repeat=1, warmup=0)
    assert c.local_check["flattened_differs"] == ["y"] and not c.local_check["complete"]
    assert c.verdict.status == "differ"
    assert any("part from the run with the If" in d for d in c.verdict.details), c.verdict.details


def test_a_kernel_that_departs_inside_an_if_is_named(rng):
    """The same model with the Conv 1% off: flattened, the Conv inside still differs alone on
    onnxruntime's inputs; the verdict is ``differ`` and names it by its If."""
    model = _nested_boundary_model()
    graph = load_model(model.SerializeToString())
    c = compare(graph, model, _feeds(rng), executor="engine", kernels=_nudged_convs(1.01), repeat=1, warmup=0)
    local = c.local_check
    assert not local["complete"] and local["departing"] == ["gate_if/inner_if/conv"]
    assert c.verdict.status == "differ"
    assert any("still differ" in d and "gate_if/inner_if/conv" in d for d in c.verdict.details)


def test_the_float16_silero_vad_users_convert_is_judged_inside_its_ifs(rng):
    """silero-VAD's op18 file from its PyPI wheel, converted to float16 with onnxruntime's own
    converter as a user converts it for a GPU: it was refused outright ("the model cannot take these
    input shapes": an element type the converter left on an annotation, which onnxruntime runs
    past), and where it differs (about one input in four: float16 rounding carried through the
    LSTM's state), the verdict stayed "differ" with its If unchecked. Now every node out of
    tolerance inside the If is checked, and none departs."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    from conftest import wheel_model
    from engine.input_spec import check_with_inference
    from engine.tolerance import compare_arrays, default_tolerance
    data, _ = wheel_model("silero_vad_op18_ifless")
    model = convert_float_to_float16(onnx.load_from_string(data), keep_io_types=True)
    model.ir_version = min(model.ir_version, 8)
    graph = load_model(model.SerializeToString())
    tol = default_tolerance(True)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with Executor(graph) as ex:
        for _ in range(60):   # what `sglens compare --shape input=1x512` and the web form draw
            feeds = {"input": rng.uniform(-1, 1, (1, 512)).astype(np.float32),
                     "state": rng.uniform(-1, 1, (2, 1, 128)).astype(np.float32), "sr": np.array(16000, np.int64)}
            ours, ref = ex.run(feeds).numpy_outputs(), session.run(None, feeds)
            if all(compare_arrays(ours[o.name], r, tol)["match"] for o, r in zip(session.get_outputs(), ref)):
                continue
            check_with_inference(model, feeds)                       # refused before
            c = compare(graph, model, feeds, executor="engine", repeat=1, warmup=0)
            assert not c.ok
            local = c.local_check
            assert local["n_unchecked"] == 0, local   # whatever differs is judged, and is rounding
            assert c.verdict.status == "rounding", c.verdict.details
            if local.get("flattened"):   # (a rare draw first differs outside the If: no branch to open)
                break
        else:
            pytest.fail("none of 60 draws differs from onnxruntime inside the If: the premise is gone")
