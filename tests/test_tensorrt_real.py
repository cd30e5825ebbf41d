"""The real-parser check (``--check-parser``): how it asks TensorRT per node and per subgraph.

TensorRT is not installed here, so the tests that parse with it are marked ``gpu`` and skip.
What runs everywhere: the one-node models the check hands the parser are valid models that
onnxruntime loads, and isolating a node that way keeps its verdict (our own rules, applied to
the one-node model, agree with our rules on the whole model -- the property the per-node
comparison rests on); the comparison finds disagreements both ways; and the options the
schema declares reach the rules the check compares (``trt_plugins``: issue 22's bug).
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from partition import load_model, partition
from partition import select
from partition.tensorrt import real_trt
from partition.tensorrt.rules import TRTRules



def rules_parser(**options) -> real_trt.Parse:
    """Our own rules as the 'parser' of a one-node model (no TensorRT here): ok when no node is refused."""
    def parse(data: bytes):
        graph = load_model(data)
        refused = TRTRules(exclude_data_dependent=False, **options).compat(graph)
        return not refused, [{"node": n, "op": "", "desc": why} for n, why in refused.items()]
    return parse


def _sample_models():
    from sample_models.generate import build_all
    return build_all()


def test_available_reports_without_raising():
    assert real_trt.available() in (True, False)
    if not real_trt.available():
        assert real_trt.version() is None
        with pytest.raises(RuntimeError, match="tensorrt is not installed"):
            real_trt.real_parser()


def test_one_node_models_load_in_onnxruntime_and_keep_constants_as_weights():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    nodes = [helper.make_node("Constant", [], ["axes"], name="c",
                              value=numpy_helper.from_array(np.array([1], np.int64))),
             helper.make_node("ReduceSum", ["x", "axes"], ["s"], name="sum"),
             helper.make_node("Relu", ["s"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    models = dict((n.name, data) for n, data in real_trt.one_node_models(load_model(proto.SerializeToString())))
    assert sorted(models) == ["relu", "sum"]  # Constants travel with their readers
    sum_model = onnx.load_from_string(models["sum"])
    assert [n.op_type for n in sum_model.graph.node] == ["Constant", "ReduceSum"]
    assert [i.name for i in sum_model.graph.input] == ["x"]
    out = ort.InferenceSession(models["sum"]).run(None, {"x": np.ones((2, 3), np.float32)})
    assert np.array_equal(out[0], np.full((2, 1), 3.0, np.float32))


def test_isolating_each_node_keeps_our_verdict_on_the_sample_models():
    for name, proto in _sample_models().items():
        graph = load_model(proto.SerializeToString())
        report = real_trt.check_parser(graph, TRTRules(exclude_data_dependent=False), rules_parser())
        assert report["disagreements"] == [], (name, report["disagreements"])


def test_disagreements_are_found_both_ways():
    # "ours" is the 10.1 table, the "parser" the 10.0 table: 10.0's checker refuses DeformConv,
    # 10.1 imports it; a node only a user plugin covers is refused by a parser without that plugin.
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in
           (("x", [1, 2, 5, 5]), ("w", [2, 2, 3, 3]), ("off", [1, 18, 3, 3]))]
    nodes = [helper.make_node("DeformConv", ["x", "w", "off"], ["d"], name="deform"),
             helper.make_node("MyOp", ["d"], ["y"], name="mine", domain="me")]
    graph = helper.make_graph(nodes, "g", ins, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19), helper.make_opsetid("me", 1)])
    proto.ir_version = 8
    g = load_model(proto.SerializeToString())
    report = real_trt.check_parser(g, TRTRules(version="10.1", plugins=["MyOp"], exclude_data_dependent=False),
                                   rules_parser(version="10.0"))
    kinds = {row["node"]: row["kind"] for row in report["disagreements"]}
    assert kinds == {"deform": "missed refusal", "mine": "missed refusal"}
    report = real_trt.check_parser(g, TRTRules(version="10.0", exclude_data_dependent=False),
                                   rules_parser(version="10.1", plugins=["MyOp"]))
    assert {row["node"]: row["kind"] for row in report["disagreements"]} == \
        {"deform": "wrong refusal", "mine": "wrong refusal"}


def test_check_parser_honours_every_parser_option_of_the_schema(tmp_path):
    """issue 22: ``--trt-plugins`` never reached the rules --check-parser compared (it read options["plugins"])."""
    from partition.tensorrt.options import TENSORRT_OPTIONS
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    nodes = [helper.make_node("MyOp", ["x"], ["a"], name="mine", domain="me"),
             helper.make_node("Relu", ["a"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("me", 1)])
    proto.ir_version = 8
    g = load_model(proto.SerializeToString())
    for plugins in (["MyOp"], "MyOp"):  # a list, or the string as typed: the selection validates both
        rules = real_trt.rules_for_check(select("tensorrt", trt_plugins=plugins, trt_version="10.0"))
        assert rules.user_plugins == {"MyOp"} and rules.version == "10.0"
    report = real_trt.run_check(g, select("tensorrt", trt_plugins=["MyOp"], min_size=1),
                                rules_parser(plugins=["MyOp"]), out_dir=tmp_path)
    assert report["disagreements"] == [] and report["subgraphs"] == [] and report["plugins"] == ["MyOp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tensorrt_0.onnx"]  # the subgraph was parsed too
    handled = {"trt_version", "trt_plugins"} | set(real_trt.IGNORED_OPTIONS)
    assert {o.name for o in TENSORRT_OPTIONS} == handled  # a new option must be decided on here


def test_check_parser_without_tensorrt_is_one_clear_line(tmp_path):
    if real_trt.available():
        pytest.skip("tensorrt imports here")
    name, proto = next(iter(_sample_models().items()))
    path = tmp_path / f"{name}.onnx"
    onnx.save(proto, path)
    out = subprocess.run([sys.executable, "-m", "sglens", "partition", str(path), "--backend", "tensorrt",
                          "--check-parser"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip().endswith("--check-parser needs TensorRT's Python package (tensorrt), which does not "
                                       "import here")


@pytest.mark.gpu
def test_real_parser_agrees_per_node_and_per_subgraph_on_sample_models(tmp_path):
    pytest.importorskip("tensorrt")
    parse = real_trt.real_parser()
    for name, proto in _sample_models().items():
        graph = load_model(proto.SerializeToString())
        result = partition(graph, "tensorrt", min_size=1, exclude_data_dependent=False)
        report = real_trt.check_parser(graph, TRTRules(exclude_data_dependent=False), parse, result,
                                       tmp_path / name)
        assert report["disagreements"] == [] and report["subgraphs"] == [], (name, report)
