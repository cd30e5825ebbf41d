"""The run memory budget (issue 9): a run is refused before it allocates, naming the node."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.budget import (MemoryBudgetError, check_memory_budget, estimate_memory, parse_size,
                           tensor_sizes)
from engine.executor import Executor
from engine.run_errors import RunError
from partition import load_model
from tests.conftest import IR_VERSION, OPSET

F = TensorProto.FLOAT


def model_of(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
    m.ir_version = IR_VERSION
    return m


def bomb() -> onnx.ModelProto:
    """ConstantOfShape [10000, 10000] then Cos: 381 MiB each, 763 MiB at the Cos."""
    shape = numpy_helper.from_array(np.array([10000, 10000], np.int64))
    nodes = [helper.make_node("Constant", [], ["s"], value=shape),
             helper.make_node("ConstantOfShape", ["s"], ["big"], name="fill"),
             helper.make_node("Cos", ["big"], ["y"], name="cos")]
    return model_of(nodes, [], [helper.make_tensor_value_info("y", F, None)])


def test_bomb_is_refused_before_anything_is_allocated() -> None:
    data = bomb().SerializeToString()
    assert len(data) < 200
    graph = load_model(data)
    tracemalloc.start()
    try:
        with pytest.raises(MemoryBudgetError) as err:
            check_memory_budget(graph, {}, parse_size("512M"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20  # the check itself allocates next to nothing
    e = err.value
    assert isinstance(e, RunError) and e.node == "cos" and e.tensor == "y"
    assert str(e).startswith("node 'cos' would allocate 381 MiB for 'y' (peak 763 MiB), over the run "
                             "memory limit of 512 MiB")
    # 's', a Constant, is folded into a weight: it stays, as do values of weights (engine/memo.py)
    assert e.tensor_bytes == 4 * 10**8 and e.peak_bytes == 8 * 10**8 + 16
    with pytest.raises(MemoryBudgetError, match="node 'fill' would allocate 381 MiB"):
        check_memory_budget(graph, {}, parse_size("256M"))
    assert check_memory_budget(graph, {}, None) is None           # no limit: nothing checked
    assert check_memory_budget(graph, {}, parse_size("1G")).peak_bytes == 8 * 10**8 + 16


def sglens(*args: str) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).parent / "sglens"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "sglens"]
    return subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1])))


@pytest.mark.parametrize("command", ["run", "compare"])
def test_cli_refuses_the_bomb_in_one_line(tmp_path, command) -> None:
    path = tmp_path / "bomb.onnx"
    onnx.save_model(bomb(), str(path))
    extra = ["--ops", "Cos"] if command == "compare" else []
    t0 = time.perf_counter()
    done = sglens(command, str(path), "--memory-limit", "512M", *extra)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "node 'cos' would allocate 381 MiB for 'y' (peak 763 MiB)" in lines[0]
    assert lines[0].endswith("raise --memory-limit or use smaller inputs")
    assert time.perf_counter() - t0 < 60  # not a timing test: a run of the bomb is what must not happen
    done = sglens(command, str(path), "--memory-limit", "lots")
    assert done.returncode == 2 and "expected a number with an optional unit" in done.stderr


def test_sizes_parse() -> None:
    assert parse_size("512M") == 512 << 20 and parse_size("2G") == 2 << 30
    assert parse_size("1.5GiB") == 3 << 29 and parse_size("4096") == 4096 and parse_size("64kb") == 65536
    for bad in ("", "-1G", "0", "12 parsecs", "G"):
        with pytest.raises(RunError):
            parse_size(bad)


def shape_model() -> onnx.ModelProto:
    """Shapes computed from the input's shape and from small weights: Shape/Gather/Concat/Reshape/
    ConstantOfShape/Expand/Tile, a MatMul and a Transpose."""
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    nodes = [helper.make_node("Shape", ["x"], ["xs"]),
             helper.make_node("Gather", ["xs", "one"], ["n1"], axis=0),
             helper.make_node("Concat", ["n1", "two", "n1"], ["s3"], axis=0),
             helper.make_node("ConstantOfShape", ["s3"], ["c"], name="cos",
                              value=numpy_helper.from_array(np.array([0.5], np.float32))),
             helper.make_node("Reshape", ["x", "flat"], ["xf"], name="reshape"),
             helper.make_node("Expand", ["xf", "wide"], ["xe"], name="expand"),
             helper.make_node("Tile", ["x", "reps"], ["xt"], name="tile"),
             helper.make_node("Transpose", ["xt"], ["xtt"], name="tt"),
             helper.make_node("MatMul", ["x", "xtt"], ["mm"], name="mm"),
             helper.make_node("Transpose", ["c"], ["ct"], perm=[2, 1, 0], name="tr"),
             helper.make_node("ReduceSum", ["ct"], ["r"], keepdims=0, name="rs")]
    inits = [i64("one", [1]), i64("two", [2]), i64("flat", [-1, 1]), i64("wide", [1, 3]), i64("reps", [2, 1])]
    outs = [helper.make_tensor_value_info(n, F, None) for n in ("xe", "mm", "r")]
    return model_of(nodes, [helper.make_tensor_value_info("x", F, ["N", "M"])], outs, inits)


def test_sizes_match_onnxruntime(rng) -> None:
    """Every tensor's estimated size is what onnxruntime actually makes (fresh random shapes)."""
    model = shape_model()
    graph = load_model(model.SerializeToString())
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    names = [t for n in model.graph.node for t in n.output]
    for t in names:
        if t not in {o.name for o in probe.graph.output}:
            probe.graph.output.append(onnx.ValueInfoProto(name=t))
    session = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    for _ in range(3):
        n, m = (int(v) for v in rng.integers(1, 9, size=2))
        x = rng.standard_normal((n, m)).astype(np.float32)
        actual = dict(zip([o.name for o in session.get_outputs()], session.run(None, {"x": x})))
        sizes = tensor_sizes(graph, {"x": x})
        for t in names:
            assert sizes[t] == actual[t].nbytes, (t, n, m)


def test_peak_follows_the_executor_order_and_frees() -> None:
    """x -> a=Relu(x) -> b=Relu(a) -> c=Relu(b) -> y=Add(a, c): at the Add, x, a, c and y are live
    (b was dropped after its last reader)."""
    vi = lambda n: helper.make_tensor_value_info(n, F, ["N", 1000])  # noqa: E731
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r1"), helper.make_node("Relu", ["a"], ["b"], name="r2"),
             helper.make_node("Relu", ["b"], ["c"], name="r3"), helper.make_node("Add", ["a", "c"], ["y"], name="add")]
    graph = load_model(model_of(nodes, [vi("x")], [vi("y")]).SerializeToString())
    one = 64 * 1000 * 4
    est = estimate_memory(graph, {"x": (64, 1000)})
    assert est.peak_bytes == 4 * one and not est.partial   # r3: x, a, b, c; add: x, a, c, y
    with pytest.raises(MemoryBudgetError, match=r"node 'r3' would allocate 250 KiB for 'c' \(peak 1000 KiB\)"):
        check_memory_budget(graph, {"x": np.zeros((64, 1000), np.float32)}, 4 * one - 1)
    # Our executor's own measured peak (inputs dropped after use) never passes the estimate.
    with Executor(graph, engine_name="naive") as ex:
        result = ex.run({"x": np.ones((64, 1000), np.float32)})
    assert 0 < result.peak_bytes <= est.peak_bytes


def test_a_value_of_weights_alone_stays_live_for_the_whole_run() -> None:
    """fill = ConstantOfShape(w_shape), a weight's shape; a = x + fill; b = Relu(a); y = Neg(b).
    The executor keeps fill to hand out again on the next run (engine/memo.py), so at the Relu x,
    fill, a and b are live -- dropping fill after the Add would estimate one tensor short."""
    vi = lambda n: helper.make_tensor_value_info(n, F, [256, 1000])  # noqa: E731
    nodes = [helper.make_node("ConstantOfShape", ["w_shape"], ["fill"], name="fill"),
             helper.make_node("Add", ["x", "fill"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["b"], name="relu"), helper.make_node("Neg", ["b"], ["y"], name="neg")]
    inits = [numpy_helper.from_array(np.array([256, 1000], np.int64), "w_shape")]
    graph = load_model(model_of(nodes, [vi("x")], [vi("y")], inits).SerializeToString())
    one = 256 * 1000 * 4
    est = estimate_memory(graph, {"x": (256, 1000)})
    assert est.peak_bytes == 4 * one and est.peak_node == "relu"
    with pytest.raises(MemoryBudgetError, match="node 'relu'"):
        check_memory_budget(graph, {"x": (256, 1000)}, 4 * one - 1)
    with Executor(graph, engine_name="naive") as ex:
        x = np.ones((256, 1000), np.float32)
        first = ex.run({"x": x})
        assert ex.run({"x": x}).values.get("fill") is None  # not handed out: kept inside the memo
    assert 0 < first.peak_bytes <= est.peak_bytes


def test_unknown_sizes_count_zero_and_say_so() -> None:
    """NonZero's output size depends on values: counted 0, the message says the estimate is partial."""
    vi = lambda n, shape=None: helper.make_tensor_value_info(n, F, shape)  # noqa: E731
    nodes = [helper.make_node("NonZero", ["x"], ["nz"], name="nz"),
             helper.make_node("Cast", ["nz"], ["nzf"], to=F, name="cast"),
             helper.make_node("Relu", ["x"], ["y"], name="relu")]
    graph = load_model(model_of(nodes, [vi("x", [1000, 1000])], [vi("y"), vi("nzf")]).SerializeToString())
    est = estimate_memory(graph, {"x": (1000, 1000)})
    assert est.partial and "nz" in est.unknown and est.peak_bytes == 8 * 10**6
    with pytest.raises(MemoryBudgetError, match="estimate partial: 2 tensor"):
        check_memory_budget(graph, {"x": (1000, 1000)}, 5 * 10**6)


def test_loop_body_counts_on_top_of_live_tensors() -> None:
    """A Loop whose body makes a [2000, 2000] tensor: refused at the body node, path named."""
    shape = numpy_helper.from_array(np.array([2000, 2000], np.int64))
    body = helper.make_graph(
        [helper.make_node("Constant", [], ["s"], value=shape),
         helper.make_node("ConstantOfShape", ["s"], ["big"], name="inner_fill"),
         helper.make_node("ReduceSum", ["big"], ["tot"], keepdims=0, name="inner_sum"),
         helper.make_node("Add", ["acc", "tot"], ["acc_out"], name="inner_add"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc", F, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", F, [])])
    trip = numpy_helper.from_array(np.array(3, np.int64), "n")
    zero = numpy_helper.from_array(np.array(0, np.float32), "z")
    loop = helper.make_node("Loop", ["n", "", "z"], ["y"], body=body, name="loop")
    graph = load_model(model_of([loop], [], [helper.make_tensor_value_info("y", F, [])], [trip, zero])
                       .SerializeToString())
    with pytest.raises(MemoryBudgetError, match=r"node 'loop > inner_fill' would allocate 15 MiB"):
        check_memory_budget(graph, {}, 8 << 20)
    assert estimate_memory(graph, {}).peak_bytes >= 16 * 10**6


def test_compare_checks_the_budget_before_onnxruntime_runs(monkeypatch) -> None:
    """The web run path calls compare(); the reference session must never be made for the bomb."""
    import engine.compare as cmp
    model = bomb()
    graph = load_model(model.SerializeToString())
    made: list[int] = []
    monkeypatch.setattr(cmp, "reference_session", lambda *a, **k: made.append(1))
    with pytest.raises(MemoryBudgetError, match=r"node 'cos'.*; raise --run-memory-limit or use smaller"):
        cmp.compare(graph, model, {}, memory_limit=512 << 20,
                    memory_hint="raise --run-memory-limit or use smaller inputs")
    assert made == []


def test_inputs_file_is_sized_from_its_headers_before_loading(tmp_path) -> None:
    """A compressed .npz of zeros that expands to 381 MiB is refused without being expanded."""
    vi = helper.make_tensor_value_info
    model = model_of([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                     [vi("x", F, ["N", 10000])], [vi("y", F, ["N", 10000])])
    path = tmp_path / "m.onnx"
    onnx.save_model(model, str(path))
    write_zeros_npz(tmp_path / "in.npz", "x", (10000, 10000))
    assert (tmp_path / "in.npz").stat().st_size < 2 << 20
    done = sglens("run", str(path), "--inputs", str(tmp_path / "in.npz"), "--memory-limit", "256M")
    assert done.returncode == 2 and "node 'relu' would allocate 381 MiB for 'y' (peak 763 MiB)" in done.stderr
    from engine.inputs import input_file_shapes
    graph = load_model(path)
    tracemalloc.start()
    try:
        assert input_file_shapes(tmp_path / "in.npz", graph) == {"x": (10000, 10000)}
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20


def write_zeros_npz(path: Path, name: str, shape: tuple[int, ...]) -> None:
    """A compressed .npz holding float32 zeros of ``shape``, written in 1 MiB chunks (the test
    itself never holds the array)."""
    import zipfile
    total = int(np.prod(shape)) * 4
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        with zf.open(name + ".npy", "w", force_zip64=True) as f:
            np.lib.format.write_array_header_1_0(
                f, {"descr": "<f4", "fortran_order": False, "shape": shape})
            chunk = bytes(1 << 20)
            for start in range(0, total, len(chunk)):
                f.write(chunk[: min(len(chunk), total - start)])
