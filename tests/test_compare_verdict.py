"""Verdicts that explain themselves (issue 20): a match on a reference that is mostly below atol
says it proves little, a difference inside the partitioned graph is never printed as "first
subgraph introducing a difference" under a match, and the relative error is taken only where
the reference is well above atol. Reference values come from onnxruntime on fresh random inputs."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from engine.compare import compare
from engine.tolerance import REL_FLOOR_FACTOR, WEAK_FRACTION, Tolerance, compare_arrays
from partition import load_model
from partition.runner import partition
from sglens.cli import main

from conftest import make_model
from test_executor import KERNELS, vi


def _scaled_model(scale: float, add_x: bool):
    """x -> Relu -> a; y = a * scale (+ x): a small scale squashes any error in ``a``."""
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Mul", ["a", "scale"], ["m" if add_x else "y"], name="mul")]
    if add_x:
        nodes.append(helper.make_node("Add", ["m", "x"], ["y"], name="add"))
    init = [numpy_helper.from_array(np.array(scale, dtype=np.float32), "scale")]
    return make_model(nodes, [vi("x", [8, 16])], [vi("y", [8, 16])], initializers=init)


def _kernels(wrong_relu: bool):
    def find(node, opset):
        if wrong_relu and node.op_type == "Relu":
            return lambda xp, a, **_: (xp.maximum(a, 0) + 0.5,)
        return KERNELS.get(node.op_type)
    return find


def _run(model, feeds, wrong_relu=False, tolerance=None):
    g = load_model(model.SerializeToString())
    part = partition(g, "default", ops=["Relu"])          # the Relu alone is the subgraph
    return compare(g, model, feeds, partitioned=part, executor="engine", kernels=_kernels(wrong_relu),
                   repeat=1, warmup=0, tolerance=tolerance)


def _ort(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


def test_a_match_on_a_reference_mostly_below_atol_says_it_proves_little(rng):
    model = _scaled_model(1e-6, add_x=False)
    feeds = {"x": rng.standard_normal((8, 16)).astype(np.float32)}
    c = _run(model, feeds)
    ref = _ort(model, feeds)
    below = float(np.mean(np.abs(ref.astype(np.float64)) <= 1e-4))
    assert below >= WEAK_FRACTION                           # the oracle agrees the check is vacuous
    assert c.ok
    v = c.verdict
    assert v.status == "weak"
    assert "proves little" in v.headline and f"{100 * below:.1f}%" in v.headline
    assert c.to_json()["verdict"]["status"] == "weak"
    assert "proves little" in c.text()
    e = c.outputs["y"]["partitioned"]
    assert e["weak"] and e["ref_max_abs"] == pytest.approx(float(np.abs(ref).max()), rel=1e-6)
    # the same model with outputs of real size is a plain match
    big = _scaled_model(1.0, add_x=False)
    plain = _run(big, feeds)
    assert plain.ok and plain.verdict.status == "match"
    assert "proves little" not in plain.text() and plain.verdict.headline == "✔ outputs match onnxruntime"


def test_a_weak_match_names_an_atol_under_which_a_wrong_kernel_shows(rng, capsys):
    """The weak verdict's suggested atol (a thousandth of the largest |ref|, from onnxruntime's
    output) turns the vacuous check into one that catches a Relu off by 0.5 -- which the default
    atol passes, scaled by 1e-6 on the way out -- and still passes the right kernel."""
    model = _scaled_model(1e-6, add_x=False)
    feeds = {"x": rng.standard_normal((8, 16)).astype(np.float32)}
    peak = float(np.abs(_ort(model, feeds)).max())
    wrong = _run(model, feeds, wrong_relu=True)
    assert wrong.ok and wrong.verdict.status == "weak"      # the default tolerance hides the bug
    atol = wrong.verdict.suggested_atol
    assert atol == pytest.approx(peak / 1000, rel=0.5) and f"{atol:g}" in " ".join(wrong.verdict.details)
    assert wrong.to_json()["verdict"]["suggested_atol"] == atol     # what the web card's button reads
    assert f"--atol {atol:g}" in wrong.text()
    tight = Tolerance(atol=atol, rtol=1e-3)
    caught = _run(model, feeds, wrong_relu=True, tolerance=tight)
    assert not caught.ok and caught.verdict.status == "differ"
    right = _run(model, feeds, tolerance=tight)
    assert right.ok and right.verdict.status == "match" and right.verdict.suggested_atol is None
    # an all-zero output: no atol makes its check mean something, so none is named
    zero = _run(_scaled_model(0.0, add_x=False), feeds)
    assert zero.verdict.status == "weak" and zero.verdict.suggested_atol is None


def test_no_difference_is_printed_under_a_match(rng):
    """A wrong Relu kernel: the boundary ``a`` is 0.5 off, the output y = a*1e-6 + x is not."""
    model = _scaled_model(1e-6, add_x=True)
    feeds = {"x": rng.standard_normal((8, 16)).astype(np.float32)}
    c = _run(model, feeds, wrong_relu=True)
    ref = _ort(model, feeds)
    assert np.allclose(ref, feeds["x"] + np.maximum(feeds["x"], 0) * np.float32(1e-6), atol=1e-6)
    assert c.ok                                             # 5e-7 off: inside tolerance
    (sg,) = c.subgraphs
    assert sg["introduces_difference"]                      # the boundary itself does differ
    assert c.first_divergent is None and c.to_json()["first_divergent"] is None
    v = c.verdict
    assert v.status == "match" and v.headline.startswith("✔")
    assert v.inner_difference == f"#{sg['id']} {sg['node']}"
    assert any("does not reach" in d for d in v.details)
    assert not any("rounding" in d for d in v.details)       # 0.5 off at values of ~3: a real difference
    assert "first subgraph introducing a difference" not in c.text()
    # when the difference reaches the output, the subgraph is named under a ✘
    loud = _run(_scaled_model(1.0, add_x=True), feeds, wrong_relu=True)
    assert not loud.ok and loud.verdict.status == "differ" and loud.verdict.headline.startswith("✘")
    assert loud.first_divergent == f"#{loud.subgraphs[0]['id']} {loud.subgraphs[0]['node']}"
    assert "first subgraph introducing a difference" in loud.text()


def test_relative_error_is_taken_only_where_the_reference_is_well_above_atol(rng):
    x = rng.standard_normal(4096).astype(np.float32)
    x[::7] *= 1e-9                                          # some near-zero references
    model = make_model([helper.make_node("Identity", ["x"], ["y"])], [vi("x", [4096])], [vi("y", [4096])])
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0].astype(np.float64)
    ours = ref + 1e-8
    tol = Tolerance()
    e = compare_arrays(ours, ref, tol)
    keep = np.abs(ref) > REL_FLOOR_FACTOR * tol.atol
    assert e["max_rel"] == pytest.approx(float((1e-8 / np.abs(ref[keep])).max()), rel=1e-3)
    assert e["max_rel"] < 1e-3                              # the all-element ratio would be ~1e+1 here
    assert float((1e-8 / np.abs(ref)).max()) > 1.0
    assert e["rel_elements"] == int(keep.sum()) and "near zero" in e["rel_note"]
    # a matching run says it once, in the match rule; no bullet under the verdict
    g = load_model(model.SerializeToString())
    c = compare(g, model, {"x": x}, partitioned=partition(g, "default", ops=["Identity"]),
                executor="engine", repeat=1, warmup=0)
    assert c.ok and c.outputs["y"]["engine"].get("rel_note")
    assert not any(d.startswith("max rel of") for d in c.verdict.details), c.verdict.details
    # every reference tiny: no relative error at all, and the reason
    tiny = compare_arrays(ref * 1e-9 + 1e-12, ref * 1e-9, tol)
    assert tiny["max_rel"] is None and "divide by near-zero" in tiny["rel_note"] and tiny["weak"]


def test_cli_compare_prints_the_same_verdict(tmp_path, capsys, rng):
    path = tmp_path / "tiny.onnx"
    path.write_bytes(_scaled_model(1e-6, add_x=False).SerializeToString())
    assert main(["compare", str(path), "--ops", "Relu", "--repeat", "1", "--warmup", "0"]) == 0
    out = capsys.readouterr().out
    assert "proves little" in out and "at or below atol 0.0001" in out


def test_a_boundary_difference_at_float32_rounding_level_is_called_rounding(rng):
    """ppocr_det's case: a subgraph whose values reach ~600 differs by 7e-4 at one element
    whose reference is near zero -- beyond atol, yet 1e-6 of the tensor's scale. Here a Relu
    off by 2e-6 of its largest value (its zeros become that, as a cancellation leaves)."""
    model = _scaled_model(1e-6, add_x=True)
    feeds = {"x": (rng.standard_normal((8, 16)) * 1000).astype(np.float32)}
    top = float(np.maximum(feeds["x"], 0).max())

    def find(node, opset):
        if node.op_type == "Relu":
            return lambda xp, a, **_: (xp.maximum(a, 0) + np.float32(2e-6 * top),)
        return KERNELS.get(node.op_type)
    g = load_model(model.SerializeToString())
    c = compare(g, model, feeds, partitioned=partition(g, "default", ops=["Relu"]), executor="engine",
                kernels=find, repeat=1, warmup=0)
    (sg,) = c.subgraphs
    assert c.ok and sg["introduces_difference"]
    assert sg["difference_scale"] == pytest.approx(2e-6, rel=0.05)
    assert any("float32 rounding" in d for d in c.verdict.details), c.verdict.details


def _fraction_model():
    """y = x * 1e4 - Floor(x * 1e4): the fractional part, which a rounding-level change of x
    moves by ~5e-3 everywhere and by ~1 where it wraps -- a model that amplifies rounding."""
    big = numpy_helper.from_array(np.array(1e4, dtype=np.float32), "big")
    nodes = [helper.make_node("Mul", ["x", "big"], ["m"], name="mul"),
             helper.make_node("Floor", ["m"], ["f"], name="floor"),
             helper.make_node("Sub", ["m", "f"], ["y"], name="frac")]
    return make_model(nodes, [vi("x", [32, 32])], [vi("y", [32, 32])], initializers=[big])


def _nudged_mul(scale: float):
    def find(node, opset):
        if node.op_type == "Mul":
            return lambda xp, a, b, **_: ((a * b) * np.float32(scale),)
        return KERNELS.get(node.op_type)
    return find


def test_a_difference_is_set_beside_onnxruntimes_own_sensitivity(rng):
    """A model that amplifies rounding (the quantized OCR's re-quantizations; here a fractional
    part) differs from onnxruntime under any rounding-level change, onnxruntime's own included:
    the verdict says ours moved no more than onnxruntime's output does when its inputs move by a
    few ulp. A wrong kernel on a tame model is said to be more than rounding explains."""
    model = _fraction_model()
    feeds = {"x": rng.uniform(0.2, 0.8, (32, 32)).astype(np.float32)}
    g = load_model(model.SerializeToString())
    c = compare(g, model, feeds, executor="engine", kernels=_nudged_mul(1 + 4e-7), repeat=1)
    e = c.outputs["y"]["engine"]
    assert not e["match"] and e["max_abs"] <= e["ref_sensitivity"] * 2
    # the oracle: onnxruntime itself on inputs moved by the same few ulp
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    moved = (feeds["x"] * (1 + 8 * np.finfo(np.float32).eps)).astype(np.float32)
    own = np.max(np.abs(sess.run(None, {"x": moved})[0] - sess.run(None, feeds)[0]))
    assert e["ref_sensitivity"] == pytest.approx(float(own))
    detail = next(d for d in c.verdict.details if "own y moves" in d)
    assert "rounding-level differences" in detail and "more than rounding" not in detail
    tame, tame_feeds = _scaled_model(1.0, True), {"x": rng.standard_normal((8, 16)).astype(np.float32)}
    wrong = compare(load_model(tame.SerializeToString()), tame, tame_feeds, executor="engine",
                    kernels=_kernels(True), repeat=1)
    assert any("more than rounding explains" in d for d in wrong.verdict.details)
    right = compare(load_model(tame.SerializeToString()), tame, tame_feeds, executor="engine",
                    kernels=_kernels(False), repeat=1)
    assert right.ok and "ref_sensitivity" not in right.outputs["y"]["engine"]   # measured only for a difference


def _float16_fraction_model():
    """The fractional-part model computing in float16 behind a float32 input and output (as
    onnxruntime's float16 converter leaves a model's interface): y = f - Floor(f), f = x16 * 64."""
    from onnx import TensorProto
    big = numpy_helper.from_array(np.array(64.0, dtype=np.float16), "big")
    nodes = [helper.make_node("Cast", ["x"], ["x16"], name="to16", to=TensorProto.FLOAT16),
             helper.make_node("Mul", ["x16", "big"], ["m"], name="mul"),
             helper.make_node("Floor", ["m"], ["f"], name="floor"),
             helper.make_node("Sub", ["m", "f"], ["y16"], name="frac"),
             helper.make_node("Cast", ["y16"], ["y"], name="to32", to=TensorProto.FLOAT)]
    return make_model(nodes, [vi("x", [32, 32])], [vi("y", [32, 32])], initializers=[big])


def test_a_float16_models_sensitivity_is_probed_at_float16s_last_place(rng):
    """A model that casts its float32 input to float16 rounds a float32 ulp away: probed at float32's
    last place, onnxruntime's output did not move at all and the verdict said ours was "more than
    rounding explains" on that. Probed at float16's, onnxruntime's own output moves, measured
    against onnxruntime itself on inputs moved by as many float16 ulps; a probe that moves nothing
    says nothing."""
    from engine.verdict import judge
    model = _float16_fraction_model()
    feeds = {"x": rng.uniform(0.2, 0.8, (32, 32)).astype(np.float32)}
    g = load_model(model.SerializeToString())
    from engine.options import find_kernel

    def nudged(node, opset):   # the float16 rounding steps are the engine's own host nodes
        kernel = find_kernel(node, opset)
        return (lambda xp, a, b, **_: ((a * b) * np.float32(1 + 2e-3),)) if node.op_type == "Mul" else kernel
    c = compare(g, model, feeds, executor="engine", kernels=nudged, repeat=1)
    e = c.outputs["y"]["engine"]
    assert not e["match"] and e["ref_sensitivity"] > 0
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    moved = (feeds["x"] * (1 + 8 * np.finfo(np.float16).eps)).astype(np.float32)
    own = np.max(np.abs(sess.run(None, {"x": moved})[0] - sess.run(None, feeds)[0]))
    assert own > 0 and e["ref_sensitivity"] == pytest.approx(float(own))
    still = {"y": {"engine": {**e, "ref_sensitivity": 0.0}}}
    assert not any("moves by up to" in d for d in judge(still, [], c.tolerance, None).details)
    # where every node out of tolerance was checked alone (carried), a probe of the inputs alone
    # does not contradict it with "more than rounding explains"
    small = {"y": {"engine": {**e, "ref_sensitivity": e["max_abs"] / 10}}}
    assert any("more than rounding explains" in d for d in judge(small, [], c.tolerance, None).details)
    carried = {"differing": 1, "checked": 1, "departing": [], "n_departing": 0, "unchecked": [],
               "n_unchecked": 0, "complete": True}
    v = judge(small, [], c.tolerance, carried)
    assert v.status == "rounding" and not any("more than rounding explains" in d for d in v.details)


def test_each_max_rel_note_is_said_of_its_own_outputs():
    """One output with no element far from zero, another with some: two lines, each naming its own."""
    from engine.verdict import judge
    none_far = {"match": False, "max_abs": 0.1, "rel_note": "no element has |ref| > 0.001"}
    some_far = {"match": False, "max_abs": 0.1, "rel_note": "max rel over the 3 of 9 elements"}
    details = judge({"a": {"engine": none_far}, "b": {"engine": some_far}}, [], Tolerance(), None).details
    assert "max rel of a: no element has |ref| > 0.001" in details
    assert "max rel of b: max rel over the 3 of 9 elements" in details


def _light_model_path():
    """A model-zoo SqueezeNet as the onnx wheel ships it for its own test suite (opset 9, IR 3):
    every conv weight a ConstantOfShape filled with 0.02 -- a third-party file every user of
    this project has installed."""
    import onnx
    from pathlib import Path
    path = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_squeezenet.onnx"
    if not path.is_file():
        pytest.skip(f"this onnx wheel ships no {path.name}")
    return path


def test_a_model_whose_outputs_ignore_the_inputs_gets_a_weak_verdict(rng):
    path = _light_model_path()
    model = __import__("onnx").load(str(path))
    g = load_model(path.read_bytes())
    (name,) = g.inputs
    draw = lambda: {name: rng.uniform(0, 1, (1, 3, 224, 224)).astype(np.float32)}  # noqa: E731
    first, second = draw(), draw()
    # the oracle: onnxruntime itself gives the same output for two independent images
    assert np.array_equal(_ort(model, first), _ort(model, second))
    c = compare(g, model, first, repeat=1, warmup=0)
    v = c.verdict
    assert c.ok and v.status == "weak"
    assert "no output changes with the inputs" in v.headline
    assert any("every output bit for bit again on other inputs" in d for d in v.details)
    assert c.to_json()["verdict"]["status"] == "weak"       # the web card reads the same verdict


def test_only_the_outputs_that_ignore_the_inputs_are_named(rng):
    """y depends on x; z = x * 0 + c does not. The run is a match, not weak, and the detail
    names z alone; each claim is checked against onnxruntime on other inputs."""
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu"),
             helper.make_node("Mul", ["x", "zero"], ["m"], name="mul"),
             helper.make_node("Add", ["m", "c"], ["z"], name="add")]
    init = [numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero"),
            numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "c")]
    model = make_model(nodes, [vi("x", [8, 16])], [vi("y", [8, 16]), vi("z", [8, 16])], initializers=init)
    feeds = {"x": rng.standard_normal((8, 16)).astype(np.float32)}
    other = {"x": rng.standard_normal((8, 16)).astype(np.float32)}
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (y1, z1), (y2, z2) = sess.run(None, feeds), sess.run(None, other)
    assert np.array_equal(z1, z2) and not np.array_equal(y1, y2)   # the oracle's view
    c = compare(load_model(model.SerializeToString()), model, feeds, kernels=_kernels(False),
                repeat=1, warmup=0)
    v = c.verdict
    assert c.ok and v.status == "match"
    (line,) = [d for d in v.details if "bit for bit again" in d]
    assert line.startswith("onnxruntime gave z bit for bit again") and "it does not depend" in line
    assert c.outputs["z"]["engine"].get("inputs_independent") and \
        not c.outputs["y"]["engine"].get("inputs_independent")


def test_inputs_holding_one_value_are_not_redrawn_and_the_check_says_so(rng):
    """An input of one value (a sample rate, a zero state) keeps it: redrawing it would leave the
    model's domain. With no other input the check cannot be made, and the notes say so."""
    from engine.compare import resampled
    feeds = {"sr": np.array(16000, np.int64), "state": np.zeros((2, 4), np.float32),
             "x": rng.standard_normal((3, 5)).astype(np.float32)}
    other = resampled(feeds)
    assert other["sr"] is feeds["sr"] and np.array_equal(other["state"], feeds["state"])
    assert not np.array_equal(other["x"], feeds["x"]) and set(other["x"].ravel()) <= set(feeds["x"].ravel())
    assert resampled({"sr": feeds["sr"], "state": feeds["state"]}) is None
    model = _scaled_model(2.0, add_x=False)
    c = compare(load_model(model.SerializeToString()), model, {"x": np.full((8, 16), 0.5, np.float32)},
                kernels=_kernels(False), repeat=1, warmup=0)
    assert any("depend on the inputs was not checked" in n for n in c.notes)
    assert c.verdict.status == "match"


def test_the_cli_marks_an_output_that_ignores_the_inputs(tmp_path, capsys):
    path = _light_model_path()
    assert main(["compare", str(path), "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "the check proves little: no output changes with the inputs" in out
    assert "<- the same for other inputs" in out
