"""What supporting an op would gain (``sglens gains``, ``--assume-supported``), checked against partitions
made through the public API and the JSON report (``describe``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from partition import load_model, partition
from partition.report import describe
from partition.tensorrt.gains import rank_gains

ROOT = Path(__file__).resolve().parents[1]
TRANSFORMER = ROOT / "sample_models" / "transformer_block.onnx"


def _figures(result):
    d = describe(result)
    return {"subgraphs": len(d["subgraphs"]), "covered": sum(s["node_count"] for s in d["subgraphs"]),
            "boundary_bytes": sum(s["boundary_bytes"] for s in d["subgraphs"]),
            "boundary_unknown": len({t for s in d["subgraphs"] for t in s["boundary_unknown"]})}


def test_op_gains_equal_the_partitions_they_describe():
    graph = load_model(str(TRANSFORMER))
    report = rank_gains(graph, {"trt_version": "8.5"})
    base = _figures(partition(graph, "tensorrt", trt_version="8.5"))
    assert report["base"] == base
    assert [row["op_type"] for row in report["op_types"]] == ["LayerNormalization"]
    row = report["op_types"][0]
    after = _figures(partition(graph, "tensorrt", trt_version="8.5", assume_supported=["LayerNormalization"]))
    assert row["after"] == after
    assert row["gain"] == {"subgraphs_merged": base["subgraphs"] - after["subgraphs"],
                           "nodes_covered": after["covered"] - base["covered"],
                           "boundary_bytes_saved": base["boundary_bytes"] - after["boundary_bytes"]}
    assert row["gain"]["subgraphs_merged"] == 1 and row["gain"]["nodes_covered"] == 2
    # single nodes: the one between the two engines merges them, the other only adds itself
    by_node = {r["node"]: r["gain"] for r in report["nodes"]}
    assert by_node["ffn/ln"]["subgraphs_merged"] == 1 and by_node["attn/ln"]["subgraphs_merged"] == 0
    assert report["nodes"][0]["node"] == "ffn/ln"


def _dla_chain(blocks: int):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])
    nodes, t = [], "x"
    for i in range(blocks):
        nodes += [helper.make_node("Conv", [t, "k"], [f"c{i}"], name=f"conv{i}", pads=[1, 1, 1, 1]),
                  helper.make_node("Elu", [f"c{i}"], [f"l{i}"], name=f"elu{i}")]
        t = f"l{i}"
    graph = helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info(t, TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.ones((8, 8, 3, 3), np.float32), "k")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def test_dla_loadables_saved_by_supporting_the_op_that_falls_back():
    graph = load_model(_dla_chain(17).SerializeToString())
    report = rank_gains(graph, {"trt_target": "dla", "trt_version": "8.6"})
    assert report["base"]["subgraphs"] == 17 and report["target"] == "dla"
    elu = report["op_types"][0]
    assert elu["op_type"] == "Elu" and elu["reason"].startswith("GPU fallback: Elu")
    assert elu["gain"]["subgraphs_merged"] == 16 and elu["after"]["subgraphs"] == 1
    fixed = partition(graph, "tensorrt", trt_target="dla", trt_version="8.6", assume_supported=["Elu"])
    assert fixed.summary["dla"]["loadables"] == 1 and fixed.summary["dla"]["error"] is None


def test_cli_gains_json_and_assume_supported(tmp_path):
    path = tmp_path / "chain.onnx"
    path.write_bytes(_dla_chain(3).SerializeToString())
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "sglens", "gains", str(path), "--backend", "tensorrt",
                          "--trt-target", "dla", "--json"], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["op_types"][0]["op_type"] == "Elu" and report["op_types"][0]["gain"]["subgraphs_merged"] == 2
    out = subprocess.run([sys.executable, "-m", "sglens", "partition", str(path), "--backend", "tensorrt",
                          "--trt-target", "dla", "--assume-supported", "Elu", "--json"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert json.loads(out.stdout)["summary"]["dla"]["loadables"] == 1
    # tensorrt is the backend gains ranks, so it is the default: no --backend gives the same report
    out = subprocess.run([sys.executable, "-m", "sglens", "gains", str(path), "--trt-target", "dla", "--json"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == report
    out = subprocess.run([sys.executable, "-m", "sglens", "gains", str(path), "--backend", "default", "--ops", "Conv"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 2 and "add --backend tensorrt" in out.stderr


def test_symbolic_boundaries_are_counted_apart_never_as_zero_bytes():
    """cnn_dynamic's activations have symbolic dims: the base figures say how many boundary
    tensors have no size (the web panel shows them as unknown, not 0 B)."""
    graph = load_model(str(ROOT / "sample_models" / "cnn_dynamic.onnx"))
    report = rank_gains(graph, {})
    base = _figures(partition(graph, "tensorrt"))
    assert report["base"] == base and base["boundary_unknown"] > 0


def test_the_command_line_says_how_many_boundary_tensors_have_no_size(tmp_path):
    """The printed base line names the symbolic-shape boundary tensors beside the bytes, as the
    web panel does: "0 boundary bytes" alone read as no traffic at all."""
    graph = load_model(str(ROOT / "sample_models" / "cnn_dynamic.onnx"))
    unknown = _figures(partition(graph, "tensorrt"))["boundary_unknown"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "sglens", "gains", str(ROOT / "sample_models" / "cnn_dynamic.onnx")],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert f"and {unknown} boundary tensor(s) of unknown size" in out.stdout.splitlines()[0]
