"""The DLA target (``--trt-target dla``): per-layer limits from NvInfer.h, GPU fallback with its reason,
the loadable count against the 16-per-core limit, and the citations re-read in NVIDIA/TensorRT's source."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from partition import check_partition, load_model, partition
from partition.tensorrt.dla import LOADABLES_PER_CORE, DLARules, dla_table, matrix_of
from partition.tensorrt.table import DATA_DIR

F, I32 = TensorProto.FLOAT, TensorProto.INT32
ROOT = Path(__file__).resolve().parents[1]


def vi(name, shape, t=F):
    return helper.make_tensor_value_info(name, t, shape)


def w(name, values, dtype=np.float32):
    return numpy_helper.from_array(np.asarray(values, dtype=dtype), name)


def model(nodes, ins, outs, inits=(), opset=13):
    m = helper.make_model(helper.make_graph(nodes, "t", ins, outs, list(inits)),
                          opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return load_model(m.SerializeToString())


def one(op, inputs, ins, inits=(), opset=13, **attrs):
    return model([helper.make_node(op, inputs, ["y"], name="n", **attrs)], ins, [vi("y", None)], inits, opset)


X = [vi("x", [1, 8, 16, 16])]
K3 = [w("k", np.ones((8, 8, 3, 3)))]


def dla_verdict(graph, version="10.1"):
    rules = DLARules(version=version)
    why = rules.compat(graph).get("n")
    return why, rules.cite("n"), rules


CASES = [
    ("conv 3x3", lambda: one("Conv", ["x", "k"], X, K3, pads=[1, 1, 1, 1]), None),
    ("conv kernel 33", lambda: one("Conv", ["x", "k"], [vi("x", [1, 8, 40, 40])], [w("k", np.ones((8, 8, 33, 33)))]),
     ("kernel", "conv_kernel")),
    ("conv stride 9", lambda: one("Conv", ["x", "k"], X, K3, strides=[9, 9]), ("stride", "conv_stride")),
    ("conv padding >= kernel", lambda: one("Conv", ["x", "k"], X, K3, pads=[3, 3, 3, 3]), ("padding", "conv_padding")),
    ("conv 3-D", lambda: one("Conv", ["x", "k"], [vi("x", [1, 8, 4, 4, 4])], [w("k", np.ones((8, 8, 3, 3, 3)))]),
     ("2-D only", "conv_kernel")),
    ("deconv groups 2", lambda: one("ConvTranspose", ["x", "k"], X, [w("k", np.ones((8, 4, 2, 2)))], group=2,
                                    strides=[2, 2]), ("groups", "deconv_groups")),
    ("deconv padding", lambda: one("ConvTranspose", ["x", "k"], X, [w("k", np.ones((8, 8, 3, 3)))], pads=[1, 1, 1, 1]),
     ("padding", "deconv_padding")),
    ("max pool window 9", lambda: one("MaxPool", ["x"], X, kernel_shape=[9, 9]), ("window", "pool_window")),
    ("max pool 2x2", lambda: one("MaxPool", ["x"], X, kernel_shape=[2, 2], strides=[2, 2]), None),
    ("GlobalAveragePool: not through TensorRT on Orin", lambda: one("GlobalAveragePool", ["x"], X),
     ("request for enhancement", "matrix:GlobalAveragePool")),
    ("LeakyRelu: native on Orin", lambda: one("LeakyRelu", ["x"], X), None),
    ("Elu: not on the DLA", lambda: one("Elu", ["x"], X), ("request for enhancement", "matrix:Elu")),
    ("Relu", lambda: one("Relu", ["x"], X), None),
    ("Neg: a reconstruction, not native", lambda: one("Neg", ["x"], X), ("Reconstruction", "matrix:Neg")),
    ("HardSwish: an op the matrix does not list as native", lambda: one("HardSwish", ["x"], X, opset=14),
     ("request for enhancement", "matrix:HardSwish")),
    ("MatMul with constant weights (fully connected)",
     lambda: one("MatMul", ["x", "m"], [vi("x", [1, 8, 16, 16])], [w("m", np.ones((16, 4)))]), None),
    ("MatMul of two tensors", lambda: one("MatMul", ["x", "z"], [vi("x", [1, 8, 16, 16]), vi("z", [1, 8, 16, 4])]),
     ("constant weights", "matrix:MatMul")),
    ("Concat on H", lambda: model([helper.make_node("Concat", ["x", "x"], ["y"], name="n", axis=2)], X,
                                  [vi("y", None)]), ("along C", "concat_axis")),
    ("Concat on C", lambda: model([helper.make_node("Concat", ["x", "x"], ["y"], name="n", axis=1)], X,
                                  [vi("y", None)]), None),
    ("Softmax over the batch axis", lambda: one("Softmax", ["x"], X, axis=0), ("batch axis", "softmax_axis")),
    ("Resize nearest x2 constant scales", lambda: one("Resize", ["x", "", "s"], X, [w("s", [1, 1, 2, 2])]), None),
    ("Resize linear x8", lambda: one("Resize", ["x", "", "s"], X, [w("s", [1, 1, 8, 8])], mode="linear"),
     ("[1, 4]", "resize_range")),
    ("PRelu with computed slopes", lambda: one("PRelu", ["x", "s"], X + [vi("s", [8, 1, 1])]),
     ("slopes", "prelu_slopes")),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_dla_layer_rules(case):
    _, factory, expected = case
    why, cite, rules = dla_verdict(factory())
    if expected is None:
        assert why is None, why
        return
    phrase, rule = expected
    assert why.startswith("GPU fallback: ") and phrase in why, why
    if rule.startswith("matrix:"):
        assert cite == matrix_of("10.1")[rule[len("matrix:"):]]["cite"]
    else:
        assert cite == dla_table()["releases"]["10.1"][rule]
    assert "n" in rules.gpu_fallback


def test_general_limits_dynamic_dims_types_and_parser_refusals():
    why, cite, _ = dla_verdict(one("Relu", ["x"], [vi("x", ["n", 8, 16, 16])]))
    assert "dynamic dimensions" in why and cite.endswith("#general-restrictions")
    why, _, _ = dla_verdict(one("Abs", ["x"], [vi("x", [1, 8, 4, 4], I32)]))
    assert "INT32" in why and "FP16 and INT8" in why
    why, _, _ = dla_verdict(one("Relu", ["x"], [vi("x", [1, 8, 16, 9000])]))
    assert "8192" in why
    # the parser refuses it: unsupported, not a GPU fallback
    why, cite, rules = dla_verdict(one("HannWindow", ["x"], [vi("x", [], TensorProto.INT64)], opset=17))
    assert not why.startswith("GPU fallback") and "n" not in rules.gpu_fallback and cite.startswith("10.1:")


def _chain(blocks: int):
    """Conv -> Elu repeated: every Elu falls back to the GPU (not on Orin's DLA) and splits the DLA regions."""
    nodes, inits, t = [], [w("k", np.ones((8, 8, 3, 3)) / 72)], "x"
    for i in range(blocks):
        nodes.append(helper.make_node("Conv", [t, "k"], [f"c{i}"], name=f"conv{i}", pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("Elu", [f"c{i}"], [f"l{i}"], name=f"elu{i}"))
        t = f"l{i}"
    return model(nodes, X, [vi(t, None)], inits)


def test_loadable_count_and_the_per_core_limit():
    ok = partition(_chain(LOADABLES_PER_CORE), "tensorrt", trt_target="dla")
    check_partition(ok)
    dla = ok.summary["dla"]
    assert dla["loadables"] == LOADABLES_PER_CORE == len(ok.subgraphs) and dla["error"] is None
    assert dla["gpu_fallback_count"] == LOADABLES_PER_CORE and ok.summary["tensorrt_target"] == "dla"
    too_many = partition(_chain(LOADABLES_PER_CORE + 1), "tensorrt", trt_target="dla")
    error = too_many.summary["dla"]["error"]
    assert error.startswith("17 DLA loadables; at most 16 can be loaded per DLA core")
    assert too_many.summary["tensorrt_warnings"][0] == "ERROR: " + error
    # on the GPU the same model is one TensorRT engine
    assert len(partition(_chain(LOADABLES_PER_CORE + 1), "tensorrt").subgraphs) == 1


def test_cli_takes_the_target_and_shows_the_loadable_error(tmp_path):
    import onnx
    from partition.onnx_io import to_model_proto
    path = tmp_path / "chain.onnx"
    onnx.save(to_model_proto(_chain(LOADABLES_PER_CORE + 1)), path)
    out = subprocess.run([os.sys.executable, "-m", "sglens", "partition", str(path), "--backend", "tensorrt",
                          "--trt-target", "dla", "--json"], capture_output=True, text=True, timeout=120,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)["summary"]
    assert summary["dla"]["loadables"] == 17 and summary["dla"]["error"]
    out = subprocess.run([os.sys.executable, "-m", "sglens", "partition", str(path), "--backend", "tensorrt",
                          "--trt-target", "dla"], capture_output=True, text=True, timeout=120,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    lines = out.stdout.splitlines()
    assert lines[1].startswith("DLA loadables: 17 (at most 16 per core)")
    assert lines[2].startswith("warning: ERROR: 17 DLA loadables; at most 16")


def _mirror() -> Path:
    candidates = [p / ".mirror" / "NVIDIA+TensorRT" / "repo" for p in ROOT.parents]
    return Path(os.environ.get("SGLENS_TENSORRT_MIRROR", next((c for c in candidates if c.exists()), candidates[0])))


#: the limit each rule's cited note states (on that line or the next)
LIMITS = {"conv_maps": "8192", "conv_groups": "8192", "conv_kernel": "[1,32]", "conv_stride": "[1,8]",
          "conv_padding": "[0,31]", "conv_dilation": "[1,32]", "deconv_maps": "8192", "deconv_groups": "one",
          "deconv_kernel": "[1,32]", "deconv_stride": "[1,32]", "deconv_padding": "0", "pool_window": "[1,8]",
          "pool_stride": "[1,16]", "pool_padding": "[0,7]", "lrn_window": "[3, 5, 7, 9]", "activation": "kCLIP",
          "concat_axis": "third to last", "softmax_axis": "channel or spatial", "softmax_size": "1024",
          "unary": "kABS", "slice_strides": "Strides are 1", "slice_first": "first dimension",
          "slice_rank": "four dimensions", "prelu_slopes": "build-time constant", "resize_scales": "exactly 4",
          "resize_range": "[1, 4]", "resize_modes": "following combinations", "elementwise_ops": "kSUB",
          "gpu_fallback": "cannot execute on DLA"}


@pytest.mark.skipif(not _mirror().exists(), reason="no NVIDIA/TensorRT git mirror here")
def test_every_dla_citation_states_its_limit_in_that_release():
    table = json.loads((DATA_DIR / "tensorrt_dla.json").read_text())
    for release, cites in table["releases"].items():
        assert set(cites) == set(LIMITS), release
        text = subprocess.run(["git", "-C", str(_mirror()), "show", f"release/{release}:include/NvInfer.h"],
                              capture_output=True, text=True, check=True).stdout.split("\n")
        for rule, cite in cites.items():
            m = re.fullmatch(rf"NVIDIA/TensorRT@release/{re.escape(release)}:include/NvInfer.h:(\d+)", cite)
            assert m, cite
            line = int(m.group(1))
            assert LIMITS[rule] in text[line - 1] + text[line], (release, rule, text[line - 1])


def test_groups_report_and_trace_speak_for_the_dla_target():
    from partition.tensorrt.node_report import groups_report
    graph = _chain(3)
    report = groups_report(graph, "elu1", trt_target="dla")
    assert report["reason"].startswith("GPU fallback: Elu") and not report["compatible"]
    assert report["reason_source"] == matrix_of("10.1")["Elu"]["cite"]
    assert report["incompatible_ancestors"] == ["elu0"] and report["incompatible_descendants"] == ["elu2"]
    assert groups_report(graph, "elu1")["compatible"]  # on the GPU it is imported
    result = partition(graph, "tensorrt", trt_target="dla")
    assert all(result.excluded[f"elu{i}"].startswith("GPU fallback: Elu") for i in range(3))
    assert [sg.nodes for sg in result.subgraphs] == [["conv0"], ["conv1"], ["conv2"]]  # one loadable each


def _dla_sw() -> Path:
    candidates = [p / ".mirror" / "NVIDIA+Deep-Learning-Accelerator-SW" / "repo" for p in ROOT.parents]
    return next((c for c in candidates if c.exists()), candidates[0])


@pytest.mark.skipif(not _dla_sw().exists(), reason="no NVIDIA/Deep-Learning-Accelerator-SW git mirror here")
@pytest.mark.parametrize("release", ["8.5", "8.6"])
def test_every_orin_matrix_citation_is_that_ops_row(release):
    matrix = matrix_of(release)
    assert {"Conv", "Relu", "LeakyRelu", "Elu", "MatMul"} <= set(matrix)
    commit = {"8.5": "1da860c", "8.6": "ea61780"}[release]
    for op, entry in matrix.items():
        assert f"@{commit}:" in entry["cite"], entry
        m = re.fullmatch(r"NVIDIA/Deep-Learning-Accelerator-SW@([0-9a-f]{7}):operators/README.md:(\d+)", entry["cite"])
        assert m, entry
        text = subprocess.run(["git", "-C", str(_dla_sw()), "show", f"{m.group(1)}:operators/README.md"],
                              capture_output=True, text=True, check=True).stdout.split("\n")
        row = [c.strip() for c in text[int(m.group(2)) - 1].split("|")]
        assert row[1] == op and (row[2] == entry["support"] or "RFE" in row[2]), (op, row)


@pytest.mark.skipif(not (_mirror().exists() and _dla_sw().exists()), reason="no NVIDIA git mirrors here")
def test_generator_reproduces_the_committed_dla_table():
    import importlib.util
    spec = importlib.util.spec_from_file_location("build_tables", ROOT / "scripts" / "build_tensorrt_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.build_dla(_mirror(), _dla_sw()) == json.loads((DATA_DIR / "tensorrt_dla.json").read_text())


# ------------------------------------------------------------ per release --
# Written from the sources, not from partition/data/tensorrt_dla.json: the Orin operator matrix of
# NVIDIA/Deep-Learning-Accelerator-SW at 1da860c ("TensorRT 8.5 supports ...", JetPack 5.1.1 / TensorRT
# 8.5.2) and at ea61780 (JetPack 6, TensorRT 8.6.2 .. 8.6.12), read row by row:
#   Div            1da860c:50 "See RFE"   ea61780:60 "Native (as of TensorRT 8.6.12)"
#   Cos            1da860c:47 "Native"    ea61780:55 "Native (as of TensorRT 8.6.12)"
#   GlobalMaxPool  1da860c:58 "See RFE"   ea61780:74 "Native (as of TensorRT 8.6.12)"
#   Split          (no row)               ea61780:138 "Native"
# "as of TensorRT 8.6.12" is a later 8.6 patch than the 8.6 GA parser: it counts from 10.0 on.
# The Resize combinations are IResizeLayer's DLA note (the same in NvInfer.h of release/8.5 .. 10.1)
# against the parser's attribute mapping (builtin_op_importers.cpp:3713-3816 in 8.5-GA).
SMALL = [vi("x", [1, 8, 4, 4])]
DLA, GPU = "DLA", "GPU fallback"
RELEASES = ("8.5", "8.6", "10.0", "10.1")
PER_RELEASE = [
    ("Div", lambda: one("Div", ["x", "x"], SMALL), {"8.5": GPU, "8.6": GPU, "10.0": DLA, "10.1": DLA}),
    ("Cos", lambda: one("Cos", ["x"], SMALL), {"8.5": DLA, "8.6": GPU, "10.0": DLA, "10.1": DLA}),
    ("GlobalMaxPool", lambda: one("GlobalMaxPool", ["x"], SMALL), {"8.5": GPU, "8.6": GPU, "10.0": DLA, "10.1": DLA}),
    ("Split", lambda: model([helper.make_node("Split", ["x"], ["y", "z"], name="n", axis=1)], SMALL,
                            [vi("y", None), vi("z", None)]), {"8.5": GPU, "8.6": DLA, "10.0": DLA, "10.1": DLA}),
    ("Add", lambda: one("Add", ["x", "x"], SMALL), dict.fromkeys(("8.5", "8.6", "10.0", "10.1"), DLA)),
    ("Resize nearest, asymmetric, round_prefer_floor",
     lambda: one("Resize", ["x", "", "s"], SMALL, [w("s", [1, 1, 2, 2])], coordinate_transformation_mode="asymmetric"),
     dict.fromkeys(("8.5", "8.6", "10.0", "10.1"), GPU)),
    ("Resize nearest, asymmetric, floor",
     lambda: one("Resize", ["x", "", "s"], SMALL, [w("s", [1, 1, 2, 2])], coordinate_transformation_mode="asymmetric",
                 nearest_mode="floor"), dict.fromkeys(("8.5", "8.6", "10.0", "10.1"), DLA)),
    ("Resize nearest, half_pixel, round_prefer_ceil",
     lambda: one("Resize", ["x", "", "s"], SMALL, [w("s", [1, 1, 2, 2])], nearest_mode="round_prefer_ceil"),
     dict.fromkeys(("8.5", "8.6", "10.0", "10.1"), DLA)),
    ("Resize nearest, tf_half_pixel_for_nn (rounding ceil)",
     lambda: one("Resize", ["x", "", "s"], SMALL, [w("s", [1, 1, 2, 2])],
                 coordinate_transformation_mode="tf_half_pixel_for_nn"), dict.fromkeys(RELEASES, GPU)),
    ("Resize linear, align_corners",
     lambda: one("Resize", ["x", "", "s"], SMALL, [w("s", [1, 1, 2, 2])], mode="linear",
                 coordinate_transformation_mode="align_corners"), dict.fromkeys(("8.5", "8.6", "10.0", "10.1"), GPU)),
    ("Resize linear, pytorch_half_pixel (upper selector)",
     lambda: one("Resize", ["x", "", "s"], SMALL, [w("s", [1, 1, 2, 2])], mode="linear",
                 coordinate_transformation_mode="pytorch_half_pixel"), dict.fromkeys(RELEASES, DLA)),
    ("Resize-10 linear (asymmetric)", lambda: one("Resize", ["x", "s"], SMALL, [w("s", [1, 1, 2, 2])], opset=10,
                                                  mode="linear"), dict.fromkeys(("8.5", "8.6", "10.0", "10.1"), GPU)),
]


@pytest.mark.parametrize("case", PER_RELEASE, ids=[c[0] for c in PER_RELEASE])
def test_dla_rules_differ_per_release_as_the_sources_say(case):
    name, factory, expected = case
    for release, where in expected.items():
        why, cite, rules = dla_verdict(factory(), release)
        if where == DLA:
            assert why is None, (release, why)
            continue
        assert why is not None and why.startswith("GPU fallback: "), (release, why)
        # the citation is of the same release: its matrix commit, its NvInfer.h branch, or (an op that the
        # release's matrix does not list and that has no DLA layer) the layer page
        assert not any(f"release/{other}:" in cite for other in expected if other != release), (release, cite)
        assert ("@1da860c:" not in cite or release == "8.5") and ("@ea61780:" not in cite or release != "8.5"), cite
        assert cite.startswith(("NVIDIA/", "https://docs.nvidia.com/")), cite


def test_cited_rows_say_what_the_per_release_cases_expect():
    """The rows the cases above were written from, re-read in the git mirror (where it exists)."""
    if not _dla_sw().exists():
        pytest.skip("no NVIDIA/Deep-Learning-Accelerator-SW mirror: the committed table's citations are checked "
                    "by test_every_orin_matrix_citation_is_that_ops_row where it exists")
    rows = {("1da860c", 50): ("Div", "RFE"), ("ea61780", 60): ("Div", "Native (as of TensorRT 8.6.12)"),
            ("1da860c", 47): ("Cos", "Native"), ("ea61780", 55): ("Cos", "Native (as of TensorRT 8.6.12)"),
            ("1da860c", 58): ("GlobalMaxPool", "RFE"),
            ("ea61780", 74): ("GlobalMaxPool", "Native (as of TensorRT 8.6.12)"),
            ("ea61780", 138): ("Split", "Native")}
    for (commit, line), (op, support) in rows.items():
        text = subprocess.run(["git", "-C", str(_dla_sw()), "show", f"{commit}:operators/README.md"],
                              capture_output=True, text=True, check=True).stdout.split("\n")
        cells = [c.strip() for c in text[line - 1].split("|")]
        assert cells[1] == op and support in cells[2], (commit, line, cells)


def test_the_summary_says_what_the_dla_rules_change_from_the_release_before():
    # from the matrix rows the per-release cases above were written from
    changes = {v: partition(_chain(1), "tensorrt", trt_target="dla", trt_version=v).summary["dla"]["release_changes"]
               for v in ("8.5", "8.6", "10.0")}
    assert changes["8.5"]["previous"] is None
    assert "Split" in changes["8.6"]["now_on_dla"] and "Cos" in changes["8.6"]["no_longer_on_dla"]
    assert {"Div", "GlobalMaxPool", "Cos"} <= set(changes["10.0"]["now_on_dla"])
    assert changes["10.0"]["previous"] == "8.6" and changes["10.0"]["no_longer_on_dla"] == []


def test_dynamic_network_inputs_get_advice_before_the_fallbacks():
    dynamic = model([helper.make_node("Conv", ["x", "k"], ["c"], name="conv", pads=[1, 1, 1, 1]),
                     helper.make_node("Relu", ["c"], ["y"], name="relu")],
                    [vi("x", ["n", 8, 16, 16])], [vi("y", None)], K3)
    result = partition(dynamic, "tensorrt", trt_target="dla")
    dla = result.summary["dla"]
    assert dla["dynamic_inputs"] == {"x": ["n", 8, 16, 16]} and dla["dynamic_fallback_count"] == 2
    assert result.summary["tensorrt_warnings"][0] == dla["dynamic_advice"]
    assert "x ['n', 8, 16, 16]" in dla["dynamic_advice"] and "override-input-shapes" in dla["dynamic_advice"]
    static = partition(_chain(2), "tensorrt", trt_target="dla").summary
    assert static["dla"]["dynamic_advice"] is None and static["dla"]["dynamic_fallback_count"] == 0
    assert not any("dynamic" in w for w in static["tensorrt_warnings"])


def _dynamic_cnn():
    """Conv -> Relu -> Shape-driven Reshape back to the same shape (a Shape -> Reshape chain shape inference
    must propagate), input with a dynamic batch and image size."""
    nodes = [helper.make_node("Conv", ["x", "k"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Shape", ["r"], ["s"], name="shape"),
             helper.make_node("Reshape", ["r", "s"], ["y"], name="reshape")]
    return model(nodes, [vi("x", ["n", 8, "h", "w"])], [vi("y", None)], K3)


def test_fixed_input_shapes_let_the_dla_take_a_dynamic_model():
    graph = _dynamic_cnn()
    free = partition(graph, "tensorrt", trt_target="dla")
    assert {"conv", "relu"} <= set(free.summary["dla"]["gpu_fallback"])        # dynamic: all on the GPU
    fixed = partition(graph, "tensorrt", trt_target="dla", trt_input_shapes=["x:1x8x32x32"])
    dla = fixed.summary["dla"]
    assert "conv" not in dla["gpu_fallback"] and "relu" not in dla["gpu_fallback"], dla["gpu_fallback"]
    assert dla["dynamic_inputs"] == {} and dla["dynamic_advice"] is None
    assert any({"conv", "relu"} <= set(sg.nodes) for sg in fixed.subgraphs)
    # the inferred shapes are the ones a 32x32 input gives (checked on the Resize-free chain: conv keeps 32x32)
    from partition.tensorrt.dla import fixed_shapes
    assert fixed_shapes(graph, {"x": (1, 8, 32, 32)})["c"] == (1, 8, 32, 32)
    # too big for the DLA once fixed: a non-batch dimension over 8192
    wide = partition(graph, "tensorrt", trt_target="dla", trt_input_shapes=["x:1x8x4x9000"])
    assert "8192" in wide.summary["dla"]["gpu_fallback"]["conv"]


@pytest.mark.parametrize("entries, message", [
    (["x:1x8xax32"], "must be NAME:D1xD2x"), (["1x8x32x32"], "must be NAME:D1xD2x"),
    (["y:1x8x32x32"], "'y', not a network input; the inputs are x"), (["x:1x8x32"], "3 dimensions; the input has 4"),
])
def test_bad_input_shapes_are_errors_naming_the_entry(entries, message):
    from partition.errors import BackendOptionError
    with pytest.raises(BackendOptionError, match=re.escape(message)):
        partition(_dynamic_cnn(), "tensorrt", trt_target="dla", trt_input_shapes=entries)


def test_cli_takes_fixed_input_shapes(tmp_path):
    import onnx
    from partition.onnx_io import to_model_proto
    path = tmp_path / "dyn.onnx"
    onnx.save(to_model_proto(_dynamic_cnn()), path)
    base = [os.sys.executable, "-m", "sglens", "partition", str(path), "--backend", "tensorrt", "--trt-target", "dla"]
    ok = subprocess.run(base + ["--trt-input-shape", "x:1x8x32x32", "--json"], capture_output=True, text=True,
                        timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert ok.returncode == 0, ok.stderr
    assert "conv" not in json.loads(ok.stdout)["summary"]["dla"]["gpu_fallback"]
    bad = subprocess.run(base + ["--trt-input-shape", "x:big"], capture_output=True, text=True, timeout=120,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert bad.returncode == 2 and "x:big" in bad.stderr and "Traceback" not in bad.stderr
