"""Honest run numbers: the elementwise match rule, the first node out of tolerance,
timing spread and a memory figure that means the same for every run."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.compare import compare, errors
from engine.tolerance import Tolerance, compare_arrays
from partition import load_model

from conftest import make_model
from test_compare import _kernels, _model
from test_executor import vi


def test_tiny_outputs_with_tiny_errors_match(rng):
    """PP-OCR det: outputs near 1e-9, error 1.8e-9: the old max|d|/max|ref| rule said 'differ'."""
    ref = rng.uniform(0, 1e-9, size=(64,))
    ours = ref + 1.8e-9
    assert errors(ours, ref)["match"]
    e = errors(ours, ref)
    assert e["max_rel"] is None and e["rel_note"]    # near zero a ratio means nothing: not reported
    assert e["weak"] and e["ref_below_atol"] == 1.0  # and the match says it proves little


def test_a_real_error_still_differs(rng):
    ref = rng.standard_normal(1000)
    # 1% of an element near zero is inside atol (CI drew |ref[17]| < 0.011 once): the
    # element that goes wrong is given a size where 1% is ten times the tolerance.
    ref[17] = rng.choice([-1.0, 1.0]) * rng.uniform(1.0, 3.0)
    ours = ref.copy()
    ours[17] *= 1.01                                 # one element 1% off
    e = errors(ours, ref)
    assert not e["match"] and e["mismatched"] == 1
    assert e["max_abs"] == pytest.approx(abs(ref[17]) * 0.01)


def test_metrics_against_numpy(rng):
    ref = rng.standard_normal((5, 7))
    ours = ref + rng.normal(0, 1e-3, ref.shape)
    e = compare_arrays(ours, ref, Tolerance(atol=0.0, rtol=0.0))
    d = np.abs(ours - ref)
    assert e["max_abs"] == pytest.approx(d.max()) and e["mean_abs"] == pytest.approx(d.mean())
    cos = float((ours * ref).sum() / np.sqrt((ours ** 2).sum() * (ref ** 2).sum()))
    assert e["cosine"] == pytest.approx(cos)
    assert not e["match"]                            # zero tolerance: every element differs
    loose = compare_arrays(ours, ref, Tolerance(atol=1e-2, rtol=0.0))
    assert loose["match"] == bool(np.all(d <= 1e-2))
    assert np.allclose(ours, ref, atol=1e-4, rtol=1e-3) == errors(ours, ref)["match"]


def test_tolerance_is_validated():
    with pytest.raises(ValueError, match="atol"):
        Tolerance(atol=-1)
    with pytest.raises(ValueError, match="rtol"):
        Tolerance(rtol=float("nan"))


def test_integers_match_exactly_and_nan_only_with_nan():
    assert not errors(np.array([1, 2]), np.array([1, 3]))["match"]
    assert errors(np.array([np.nan, 1.0]), np.array([np.nan, 1.0]))["match"]
    assert not errors(np.array([np.nan, 1.0]), np.array([0.0, 1.0]))["match"]


def test_compare_names_the_first_node_out_of_tolerance(rng):
    model = _model()                                  # relu -> mul -> add
    g = load_model(model.SerializeToString())
    feeds = {"x": rng.standard_normal((4, 3)).astype(np.float32)}
    c = compare(g, model, feeds, executor="engine", kernels=_kernels(True), repeat=2)
    assert not c.ok
    d = c.first_divergent_node
    assert d is not None and d["node"] == "mul" and d["tensor"] == "b" and not d["match"]
    assert "first node out of tolerance" in c.text()
    good = compare(g, model, feeds, executor="engine", kernels=_kernels(False), repeat=2)
    assert good.ok and good.first_divergent_node is None


def test_timings_show_spread_and_count_warmups(rng):
    model = _model()
    g = load_model(model.SerializeToString())
    feeds = {"x": rng.standard_normal((4, 3)).astype(np.float32)}
    c = compare(g, model, feeds, executor="engine", kernels=_kernels(False), repeat=7, warmup=2)
    for run in ("onnxruntime", "engine"):
        t = c.timings[run]
        assert t["repeat"] == 7 and t["warmup"] == 2 and len(t["all_seconds"]) == 7
        assert min(t["all_seconds"]) <= t["p10"] <= t["seconds"] <= t["p90"] <= max(t["all_seconds"])
    assert c.to_json()["tolerance"] == {"atol": 1e-4, "rtol": 1e-3}


def _big_model(n: int):
    """y = x + zeros(n): a tensor of n float32 that both runtimes must allocate."""
    shape = numpy_helper.from_array(np.array([n], dtype=np.int64), "shape")
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["z"], name="zeros",
                              value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])),
             helper.make_node("Add", ["z", "x"], ["y"], name="add")]
    return make_model(nodes, [vi("x", [1])], [vi("y", [n])], initializers=[shape])


def test_peak_rss_counts_every_runtime_the_same_way():
    n = 16 << 20                                      # 64 MiB of float32
    model = _big_model(n)
    g = load_model(model.SerializeToString())
    c = compare(g, model, {"x": np.ones(1, np.float32)}, repeat=1, warmup=0)
    assert c.ok
    for run in ("onnxruntime", "engine"):
        assert c.timings[run]["rss_resettable"]
        assert c.timings[run]["rss_added_bytes"] >= 4 * n * 0.9, run   # onnxruntime's arena shows too


def test_peak_rss_context_sees_an_allocation():
    """In a fresh process: in a test worker that earlier tests left with freed but resident
    memory, the allocation can reuse those pages and the resident size never rises (seen once
    in a full run: added 0)."""
    import subprocess
    import sys
    code = ("import numpy as np; from engine.rss import PeakRSS\n"
            "with PeakRSS() as m:\n    a = np.ones(8 << 20)\n    del a\n"   # 64 MiB, touched
            "print(m.added_bytes, m.peak_bytes, m.start_bytes)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    added, peak, start = (int(v) for v in out.split())
    assert added >= (64 << 20) * 0.9 and peak >= start


def _reflect_pad_model() -> onnx.ModelProto:
    """x [1, N] reflect-padded by 2 on the last axis: onnxruntime refuses N < 3 at run time."""
    pads = numpy_helper.from_array(np.array([0, 2, 0, 2], np.int64), "pads")
    node = helper.make_node("Pad", ["x", "pads"], ["y"], name="stft_pad", mode="reflect")
    return make_model([node], [vi("x", [1, "n"])], [vi("y", [1, None])],
                      [pads])


def test_a_reference_refusing_the_inputs_says_where_and_what_was_given(rng):
    """Silero-VAD with the prefilled [1, 1] input: onnxruntime's run-time refusal came out raw
    ("InvalidArgument: [ONNXRuntimeError] : 2 : ...") and never said which inputs it refused."""
    from engine.run_errors import RunError
    model = _reflect_pad_model()
    g = load_model(model.SerializeToString())
    with pytest.raises(RunError) as err:
        compare(g, model, {"x": rng.standard_normal((1, 1)).astype(np.float32)}, executor="engine", repeat=1)
    said = str(err.value)
    assert "onnxruntime, the reference, refused these inputs at node 'stft_pad' (Pad)" in said
    assert "Inputs given: x [1, 1] float32" in said and "[ONNXRuntimeError]" not in said
    # inputs it takes still compare (the refusal is about these inputs, not the model)
    ok = compare(g, model, {"x": rng.standard_normal((1, 6)).astype(np.float32)}, executor="engine", repeat=1)
    assert ok.ok


def test_the_cli_says_the_refusal_in_one_line(tmp_path):
    import subprocess
    import sys
    path = tmp_path / "reflect.onnx"
    path.write_bytes(_reflect_pad_model().SerializeToString())
    done = subprocess.run([sys.executable, "-m", "sglens", "compare", str(path), "--backend", "tensorrt",
                           "--shape", "x=1x1"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "the reference, refused these inputs" in lines[0], done.stderr


def test_compare_without_a_backend_is_our_engine_against_onnxruntime(tmp_path):
    """``sglens compare model.onnx``, a user's first check, stopped with "backend 'default' needs
    the op types it supports": without --backend (or --ops) it now compares unpartitioned."""
    import json
    import subprocess
    import sys
    path = tmp_path / "reflect.onnx"
    path.write_bytes(_reflect_pad_model().SerializeToString())
    args = [sys.executable, "-m", "sglens", "compare", str(path), "--shape", "x=1x6", "--repeat", "1"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "unpartitioned (our engine against onnxruntime)" in done.stdout and "runtimes:" not in done.stdout
    data = json.loads(subprocess.run([*args, "--json"], capture_output=True, text=True, timeout=120).stdout)
    assert data["backend"] is None and data["subgraphs"] == [] and data["outputs"]["y"]["engine"]["match"]
    # --ops alone still means the default backend
    ops = subprocess.run([*args, "--ops", "Pad"], capture_output=True, text=True, timeout=120)
    assert ops.returncode == 0 and "backend default" in ops.stdout, ops.stderr


def _fork_model():
    """x -> Relu and x -> Neg, joined by Add: two branches, so the executor has a parallel
    plan and a serial function to try against each other."""
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Neg", ["x"], ["b"], name="neg"),
             helper.make_node("Add", ["a", "b"], ["y"], name="add")]
    return make_model(nodes, [vi("x", [4, 3])], [vi("y", [4, 3])])


def test_measured_runs_come_after_the_executor_settles(monkeypatch, rng):
    """Llama in `sglens compare --repeat 3`: the median held the executor's trial runs
    (parallel against serial, the first of each generating code) and read 2x its steady time."""
    import engine.executor as executor_module
    from engine.executor import Executor
    from engine.measure import measure
    from engine.plan import CALIBRATION_RUNS
    # every run counts as long enough to be worth trying both ways (real ones are > 1 ms)
    monkeypatch.setattr(executor_module, "SERIAL_BELOW_S", 0.0)
    model = _fork_model()
    g = load_model(model.SerializeToString())
    feeds = {"x": rng.standard_normal((4, 3)).astype(np.float32)}
    states: list[bool] = []
    with Executor(g, subgraph_runtime="engine") as ex:
        real_run = ex.run
        monkeypatch.setattr(ex, "run", lambda *a, **k: (states.append(ex.calibrating), real_run(*a, **k))[1])
        m = measure(ex, feeds, repeat=3, warmup=1)
    assert m.warmup == 2 * CALIBRATION_RUNS and len(states) == m.warmup + 3
    assert states[:m.warmup] == [True] * m.warmup and states[m.warmup:] == [False] * 3
    np.testing.assert_allclose(m.outputs["y"], np.maximum(feeds["x"], 0) - feeds["x"], rtol=1e-6)
    with Executor(g, subgraph_runtime="engine") as ex:   # no warm-up asked: the cold runs, as asked
        assert measure(ex, feeds, repeat=1, warmup=0).warmup == 0 and ex.calibrating
    c = compare(g, model, feeds, executor="engine", repeat=2, warmup=1)
    assert c.ok and c.timings["engine"]["warmup"] == 2 * CALIBRATION_RUNS
    assert c.timings["onnxruntime"]["warmup"] == 1
    assert any("engine: 4 warm-up runs, not 1" in n for n in c.notes), c.notes


def test_a_partitioned_run_is_measured_after_its_subgraph_settles(monkeypatch, rng):
    """A subgraph run on our engine is a nested executor with trials of its own (parallel
    against serial): the partitioned side's warm-up goes on past them, as the whole graph's."""
    import engine.executor as executor_module
    from engine.plan import CALIBRATION_RUNS
    from partition import partition
    monkeypatch.setattr(executor_module, "SERIAL_BELOW_S", 0.0)
    model = _fork_model()
    g = load_model(model.SerializeToString())
    feeds = {"x": rng.standard_normal((4, 3)).astype(np.float32)}
    part = partition(g, "default", ops=["Relu", "Neg", "Add"])   # the whole fork: one subgraph
    assert len(part.graph.nodes) == 1
    c = compare(g, model, feeds, partitioned=part, executor="engine", repeat=2, warmup=1)
    # the first warm-up keeps every tensor (the boundaries): the subgraph's first trial all the same
    assert c.ok and c.timings["partitioned"]["warmup"] == 2 * CALIBRATION_RUNS
    with executor_module.Executor(part.graph, subgraph_runtime="engine") as ex:
        assert not ex.calibrating            # nothing ran: no trial has begun anywhere
        ex.run(feeds)
        assert ex.calibrating and not ex._trials_pending(started=False)   # the subgraph's, not its own
        for _ in range(2 * CALIBRATION_RUNS - 1):
            ex.run(feeds)
        assert not ex.calibrating


def test_the_run_that_keeps_every_tensor_is_not_the_only_warm_up(monkeypatch, rng):
    """A run keeping every tensor (the boundaries a compare judges) takes the step loop, not the
    generated code: as the only warm-up it left code generation to the first measured run."""
    from engine.executor import Executor
    from engine.measure import measure
    g = load_model(_fork_model().SerializeToString())
    feeds = {"x": rng.standard_normal((4, 3)).astype(np.float32)}
    with Executor(g) as ex:
        keeps: list[bool] = []
        real_run = ex.run
        monkeypatch.setattr(ex, "run", lambda f, keep_intermediates=None, **k: (
            keeps.append(bool(keep_intermediates)), real_run(f, keep_intermediates=keep_intermediates, **k))[1])
        m = measure(ex, feeds, repeat=2, warmup=1, first_keeps=True)
    # one run keeps every tensor, first; at least one warm-up takes the measured runs' path (more
    # while the executor still tries parallel against serial); the kept run counts as a warm-up
    assert keeps[0] and not any(keeps[1:]) and len(keeps) == m.warmup + 2 and m.warmup >= 2
    assert {"a", "b", "y"} <= set(m.values)

