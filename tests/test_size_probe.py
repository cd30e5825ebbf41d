"""A run that fails on guessed sizes says which sizes onnxruntime runs (``engine/size_probe.py``):
the probe itself, the command line (exit 2, one line, the options to give; those options then
run), and the web's run (the failed run's error names the sizes)."""

from __future__ import annotations

import io
import subprocess
import sys
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import make_model
from engine.input_spec import suggest_specs
from engine.size_probe import LADDER, guessed_axes, probe_sizes
from partition import load_model


def _window_model(window: int, name: str = "x") -> onnx.ModelProto:
    """x [batch, samples] -> a Conv1d of ``window`` taps: needs at least ``window`` samples,
    like silero-VAD's STFT conv (and ``samples``' name default, 16000, is left out: the axis is
    named ``n_frames``, which no default knows, so it starts at 1)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((2, 1, window)).astype(np.float32), "w")
    shape = numpy_helper.from_array(np.array([0, 1, -1], np.int64), "shape3")
    nodes = [helper.make_node("Reshape", [name, "shape3"], ["x3"], name="to_channels"),
             helper.make_node("Conv", ["x3", "w"], ["y"], name="window_conv")]
    return make_model(nodes, [helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", "n_frames"])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w, shape])


def _fixed_size_model(elements: int) -> onnx.ModelProto:
    """x [1, n] reshaped to [elements]: runs at exactly n == elements."""
    shape = numpy_helper.from_array(np.array([elements], np.int64), "flat")
    nodes = [helper.make_node("Reshape", ["x", "flat"], ["y"], name="flatten_fixed")]
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "n"])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [shape])


def _probe(model: onnx.ModelProto, **kw):
    graph = load_model(model.SerializeToString())
    specs = suggest_specs(graph)
    return graph, specs, probe_sizes(model, graph, specs, guessed_axes(graph, specs), **kw)


@pytest.mark.parametrize("window", [12, 40, 300])
def test_the_probe_finds_the_nearest_size_onnxruntime_runs(window, rng):
    model = _window_model(window)
    graph, specs, probe = _probe(model)
    wanted = min(v for v in LADDER if v >= window)       # 1 is the guess: sizes grow from it
    assert not probe.as_given and probe.shapes == {"x": (1, wanted)}, probe
    assert [(a.label, a.size, new) for a, new in probe.changed] == [("n_frames", 1, wanted)]
    assert probe.options() == f"--dim n_frames={wanted}"
    # the batch axis stays; and the size found runs in our engine too, as onnxruntime computes it
    assert [a.label for a in guessed_axes(graph, specs)] == ["n_frames"]
    import onnxruntime as ort
    from engine.executor import Executor
    x = rng.standard_normal((1, wanted)).astype(np.float32)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    with Executor(graph) as ex:
        ours = ex.run({"x": x}).numpy_outputs()["y"]
    np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-4)


def test_sizes_onnxruntime_runs_as_given_are_said_not_to_be_the_cause():
    model = _fixed_size_model(1)                 # n = 1, the guess, is the one size it takes
    _, _, probe = _probe(model)
    assert probe.as_given and probe.shapes is None and probe.tried == 1
    assert "not the cause" in probe.sentence()


def test_a_model_no_size_of_the_ladder_fits_says_so_within_its_bounds():
    model = _fixed_size_model(77)               # 77 is on no rung of the ladder
    _, _, probe = _probe(model, max_trials=5)
    assert not probe.as_given and probe.shapes is None and probe.tried == 5
    assert "none of the 5 other sizes" in probe.sentence()
    # the input elements a trial may make bound it too: nothing past 4x the guess (or 65536)
    _, _, small = _probe(model, max_elements=8)
    assert small.tried == 4 and small.shapes is None   # 1 (as given), 2, 4, 8


def test_a_model_onnxruntime_cannot_load_is_not_probed():
    model = _window_model(12)
    model.graph.node[1].op_type = "NoSuchOp"
    graph = load_model(_window_model(12).SerializeToString())
    specs = suggest_specs(graph)
    assert probe_sizes(model, graph, specs, guessed_axes(graph, specs)) is None


def _sglens(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sglens", *args], capture_output=True, text=True, timeout=180)


def test_the_cli_names_the_sizes_and_those_options_run(tmp_path):
    path = tmp_path / "window.onnx"
    path.write_bytes(_window_model(40).SerializeToString())
    # ours fails first / onnxruntime refuses first / a subgraph's onnxruntime session fails (whose
    # own error log wrote three more lines, in colour, before its severity was fatal-only)
    # (and the default backend's guessed ops are said after a run, not beside the one error line)
    for command in (["run"], ["compare"], ["precision"],
                    ["run", "--backend", "default", "--ops", "Conv", "--subgraph-runtime", "onnxruntime"],
                    ["run", "--backend", "default"], ["compare", "--backend", "default"]):
        done = _sglens(*command, str(path))
        assert done.returncode == 2, done
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
        assert "n_frames=1 assumed" in lines[0] and "--dim n_frames=48" in lines[0], lines[0]
    again = _sglens("compare", str(path), "--dim", "n_frames=48")
    assert again.returncode == 0 and "outputs match onnxruntime" in again.stdout, again.stderr
    guessed = _sglens("run", str(path), "--dim", "n_frames=48", "--backend", "default")
    assert guessed.returncode == 0, guessed.stderr
    assert "note: backend 'default' without --ops: partitioning the model's most frequent compute op " \
           "types Conv" in guessed.stderr, guessed.stderr
    # a size the user set is not second-guessed: the refusal alone
    given = _sglens("run", str(path), "--dim", "n_frames=4")
    assert given.returncode == 2 and "onnxruntime runs the model with" not in given.stderr, given.stderr


def test_a_web_run_that_fails_names_the_sizes_onnxruntime_runs(tmp_path):
    from app import create_app
    app = create_app({"SGLENS_INSTANCE": str(tmp_path / "inst"), "SGLENS_RUN_REPEAT": 1})
    c = app.test_client()
    up = c.post("/api/models", data={"file": (io.BytesIO(_window_model(300).SerializeToString()), "w.onnx")},
                content_type="multipart/form-data")
    assert up.status_code in (200, 201), up.get_data(as_text=True)
    model_id = up.get_json()["id"]
    rid = c.post("/api/runs", json={"model": model_id, "backend": "default", "ops": ["Conv"]}).get_json()["id"]
    end = time.time() + 120
    while (run := c.get(f"/api/runs/{rid}").get_json())["status"] not in ("done", "failed", "cancelled"):
        assert time.time() < end, run
        time.sleep(0.05)
    assert run["status"] == "failed", run
    assert "refused these inputs at node 'window_conv' (Conv)" in run["error"], run["error"]
    assert "onnxruntime runs the model with n_frames = 320 (not 1), i.e. inputs 'x' [1, 320]" in run["error"]
    assert "set those sizes in the inputs form" in run["error"]
    assert run["hint"] == {"inputs": {"x": [1, 320]}}, run      # what the page offers to run with
    # kept with the run: a new server on the same folder still offers it
    again = create_app({"SGLENS_INSTANCE": str(tmp_path / "inst")}).test_client()
    assert again.get(f"/api/runs/{rid}").get_json()["hint"] == {"inputs": {"x": [1, 320]}}
    assert c.get("/api/health").get_json() == {"ok": True}


def test_a_precision_search_on_guessed_sizes_says_its_inputs_and_takes_the_last_runs(tmp_path):
    """The precision page has no size fields: a search that fails on the model's guessed sizes
    says which inputs it ran and how to give others; after a run on the Runs tab at a size that
    runs, the next search uses that size and finishes."""
    from app import create_app
    app = create_app({"SGLENS_INSTANCE": str(tmp_path / "inst"), "SGLENS_RUN_REPEAT": 1})
    c = app.test_client()
    up = c.post("/api/models", data={"file": (io.BytesIO(_window_model(40).SerializeToString()), "w.onnx")},
                content_type="multipart/form-data")
    mid = up.get_json()["id"]

    def search() -> dict:
        job = c.post(f"/api/models/{mid}/precision", json={"backend": "none", "target": "fp16"}).get_json()
        end = time.time() + 120
        while (st := c.get(f"/api/precision/{job['id']}").get_json())["status"] == "running":
            assert time.time() < end, st
            time.sleep(0.05)
        return st
    failed = search()
    assert failed["status"] == "failed", failed
    assert failed["inputs"] == "x [1, 1] (the model's own sizes, symbolic axes guessed)", failed["inputs"]
    assert "The inputs were x [1, 1]" in failed["error"] and "Runs tab" in failed["error"], failed["error"]
    run = c.post("/api/runs", json={"model": mid, "inputs": [{"name": "x", "shape": [1, 48]}]})
    assert run.status_code == 202, run.get_data(as_text=True)
    done = search()
    assert done["status"] == "done" and done["error"] is None, done
    assert done["inputs"] == "x [1, 48] (the sizes of this model's last run)", done["inputs"]
    assert c.get("/api/health").get_json() == {"ok": True}


@pytest.mark.browser
def test_the_run_page_runs_with_the_sizes_found_in_one_click(tmp_path):
    """In a real browser on a real server: the prefilled size fails, the error offers the size
    onnxruntime runs, one click sets it in the form and the run then compares."""
    import browser_harness as bh
    from app import create_app
    sync_api = bh.playwright_or_skip()
    path = tmp_path / "window.onnx"
    path.write_bytes(_window_model(40).SerializeToString())
    app = create_app({"SGLENS_INSTANCE": str(tmp_path / "inst")})
    frames = 'input.dim[data-input="x"][data-axis="1"]'
    with bh.serving(app) as url, bh.chromium(sync_api) as browser, bh.checked_page(browser, 1400, 900, 60000) as page:
        bh.open_runs_tab(page, url, path)
        assert page.input_value(frames) == "1"
        page.click("#run-go")
        page.wait_for_selector("#run-with-sizes", timeout=120000)
        assert page.inner_text("#run-with-sizes") == "Run with x [1, 48]"
        assert "n_frames = 48 (not 1)" in page.inner_text("#run-error")
        page.screenshot(path=str(bh.ARTIFACTS / "run_with_sizes.png"), full_page=True)
        page.click("#run-with-sizes")
        page.wait_for_selector("#run-plots .run-summary", timeout=120000)
        assert page.input_value(frames) == "48"
        assert "outputs match onnxruntime" in page.inner_text("#run-plots")
        assert page.is_hidden("#run-error")


def test_sizes_past_the_runs_memory_budget_are_not_tried():
    """A worker killed for memory would lose the run's own error: the probe keeps to the budget."""
    model = _window_model(300)
    _, _, roomy = _probe(model, memory_limit=1 << 20)
    assert roomy.shapes == {"x": (1, 320)}
    _, _, tight = _probe(model, memory_limit=600)     # [1, 320] float32 alone is 1,280 bytes
    assert tight.shapes is None, tight
    assert 0 < tight.tried < roomy.tried   # the small sizes were tried, the large ones never


def test_the_guessed_axes_leave_batches_out_and_share_named_dims():
    f = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("wave", f, ["N", "samples"]),           # N on axis 0: a batch
              helper.make_tensor_value_info("feats", f, ["batch_size", "samples", None]),
              helper.make_tensor_value_info("frames", f, ["time", "N"]),             # time on axis 0: not one
              helper.make_tensor_value_info("img", f, [None, 3, "?", None])]         # "?" is unnamed
    nodes = [helper.make_node("Identity", [i.name], [i.name + "_out"]) for i in inputs]
    outputs = [helper.make_tensor_value_info(i.name + "_out", f, None) for i in inputs]
    graph = load_model(make_model(nodes, inputs, outputs).SerializeToString())
    specs = suggest_specs(graph)
    axes = {a.label: (a.places, a.named) for a in guessed_axes(graph, specs)}
    # a named dim moves everywhere it appears (--dim sets them all): N is a batch on 'wave'
    # but not on 'frames', so both places move
    assert axes == {"N": ((("wave", 0), ("frames", 1)), True),
                    "samples": ((("wave", 1), ("feats", 1)), True),
                    "input 'feats' axis 2": ((("feats", 2),), False), "time": ((("frames", 0),), True),
                    "input 'img' axis 2": ((("img", 2),), False), "input 'img' axis 3": ((("img", 3),), False)}
    # what the user set stays set
    kept = guessed_axes(graph, specs, set_inputs=["img"], set_dims=["samples"])
    assert [a.label for a in kept] == ["N", "input 'feats' axis 2", "time"]


def _declared_then_fixed_model() -> onnx.ModelProto:
    """x [batch, k] -> Relu (its output declared [1, 4]) -> Reshape to [4]: ONNX shape inference
    refuses k = 1 (the prefill) at submission, and onnxruntime refuses it at run time."""
    flat = numpy_helper.from_array(np.array([4], np.int64), "four")
    model = make_model([helper.make_node("Relu", ["x"], ["a"], name="relu"),
                        helper.make_node("Reshape", ["a", "four"], ["y"], name="to_four")],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "k"])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [flat])
    model.graph.value_info.append(helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 4]))
    return model


def test_a_prefill_shape_inference_refuses_goes_to_the_worker_which_finds_sizes(tmp_path):
    """WeSpeaker's fbank at one sample: refused at submission with no size to try. A size the
    user typed is still refused there; the form's own guess runs, and the failure names sizes."""
    from app import create_app
    app = create_app({"SGLENS_INSTANCE": str(tmp_path / "inst"), "SGLENS_RUN_REPEAT": 1})
    c = app.test_client()
    up = c.post("/api/models", data={"file": (io.BytesIO(_declared_then_fixed_model().SerializeToString()), "d.onnx")},
                content_type="multipart/form-data")
    mid = up.get_json()["id"]
    assert c.get(f"/api/models/{mid}/inputs").get_json()["inputs"][0]["shape"] == [1, 1]
    typed = c.post("/api/runs", json={"model": mid, "backend": "default", "ops": ["Relu"],
                                      "inputs": [{"name": "x", "shape": [1, 3]}]})
    assert typed.status_code == 400 and "cannot take these input shapes" in typed.get_json()["error"]
    resp = c.post("/api/runs", json={"model": mid, "backend": "default", "ops": ["Relu"]})
    assert resp.status_code == 202, resp.get_json()
    rid = resp.get_json()["id"]
    end = time.time() + 120
    while (run := c.get(f"/api/runs/{rid}").get_json())["status"] not in ("done", "failed", "cancelled"):
        assert time.time() < end, run
        time.sleep(0.05)
    assert run["status"] == "failed" and run["hint"] == {"inputs": {"x": [1, 4]}}, run
    assert "k = 4 (not 1)" in run["error"], run["error"]


@pytest.mark.browser
def test_an_input_name_in_the_sizes_offered_is_text_never_markup(tmp_path):
    """The button and the error carry the model's input names: a name that is markup stays text."""
    import browser_harness as bh
    from app import create_app
    sync_api = bh.playwright_or_skip()
    name = 'x<img src=q onerror="window.pwned=1">'
    path = tmp_path / "named.onnx"
    path.write_bytes(_window_model(40, name).SerializeToString())
    app = create_app({"SGLENS_INSTANCE": str(tmp_path / "inst")})
    with bh.serving(app) as url, bh.chromium(sync_api) as browser, bh.checked_page(browser, 1400, 900, 60000) as page:
        bh.open_runs_tab(page, url, path)
        page.click("#run-go")
        page.wait_for_selector("#run-with-sizes", timeout=120000)
        assert page.inner_text("#run-with-sizes") == f"Run with {name} [1, 48]"
        assert page.locator("#run-error img").count() == 0
        page.click("#run-with-sizes")
        page.wait_for_selector("#run-plots .run-summary", timeout=120000)
        assert page.evaluate("window.pwned") is None
