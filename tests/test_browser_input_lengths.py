"""The Runs tab's form keeps an input's lengths in step with the input they measure
(``engine/input_spec.py``'s ``length_links``, ``static/model/runs.js``): onnx-asr's front ends
take ``waveforms [batch, N]`` and ``waveforms_lens [batch]``. In a real browser on a real server:
the lengths follow N as the user sets it, a run on them compares the real features, and lengths
the user types stay theirs. Screenshot: ``test-artifacts/input_lengths.png``."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

import pytest
from onnx import TensorProto, helper, numpy_helper
import numpy as np

from browser_harness import ARTIFACTS, checked_page, chromium, open_runs_tab, playwright_or_skip, serving
from conftest import make_model

pytestmark = pytest.mark.browser

sync_api = playwright_or_skip()


def _front_end() -> bytes:
    """Features of the first ``waveforms_lens`` samples: each sample times 2 where its index is
    below the length, else 0 (what a speech front end's mask does)."""
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    nodes = [helper.make_node("Shape", ["waveforms"], ["shape"]),
             helper.make_node("Gather", ["shape", "one"], ["n"], axis=0),
             helper.make_node("Range", ["zero", "n", "one"], ["index"]),
             helper.make_node("Unsqueeze", ["waveforms_lens", "one_axis"], ["lens_col"]),
             helper.make_node("Less", ["index", "lens_col"], ["inside"]),
             helper.make_node("Mul", ["waveforms", "two"], ["doubled"]),
             helper.make_node("Where", ["inside", "doubled", "zero_f"], ["features"])]
    inits = [numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([1], np.int64), "one_axis"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             numpy_helper.from_array(np.array(0.0, np.float32), "zero_f")]
    model = make_model(nodes, [helper.make_tensor_value_info("waveforms", f, ["batch_size", "N"]),
                               helper.make_tensor_value_info("waveforms_lens", i64, ["batch_size"])],
                       [helper.make_tensor_value_info("features", f, None)], initializers=inits)
    return model.SerializeToString()

LENS = 'fieldset[data-input="waveforms_lens"] input.value'
SAMPLES = 'input.dim[data-input="waveforms"][data-axis="1"]'


@contextmanager
def _runs_tab(tmp_path) -> Iterator[Any]:
    """A page on a real server, the front end uploaded and its Runs tab open."""
    from app import create_app
    path = tmp_path / "front_end.onnx"
    path.write_bytes(_front_end())
    app = create_app({"SGLENS_INSTANCE": str(tmp_path / "inst")})
    with serving(app) as url, chromium(sync_api) as browser, checked_page(browser, 1400, 900, 60000) as page:
        open_runs_tab(page, url, path)
        yield page


def test_the_lengths_follow_the_samples_until_the_user_sets_them(tmp_path):
    with _runs_tab(tmp_path) as page:
        assert page.input_value('fieldset[data-input="waveforms_lens"] select.fill') == "constant"
        assert page.input_value(LENS) == page.input_value(SAMPLES)
        page.fill(SAMPLES, "16000")
        assert page.input_value(LENS) == "16000"
        page.click("#run-go")
        page.wait_for_selector("#run-plots .run-summary", timeout=120000)
        text = page.inner_text("#run-plots")
        assert "outputs match onnxruntime" in text, text[:1500]
        assert "waveforms_lens" in page.inner_text("#run-plots .run-inputs-used")
        page.screenshot(path=str(ARTIFACTS / "input_lengths.png"), full_page=True)
        page.fill(LENS, "8000")            # the user's own lengths stay when N changes again
        page.fill(SAMPLES, "32000")
        assert page.input_value(LENS) == "8000"


def test_what_the_user_types_while_a_run_ends_is_not_undone(tmp_path):
    # When a run ended the form was fetched again and re-rendered (the shapes just used as the
    # prefill): a user typing as the report appeared lost it when the answer came. Any such
    # fetch is held back here (1.5 s); the user types lengths of their own right after the
    # report shows, and the form is still theirs, run after run.
    with _runs_tab(tmp_path) as page:
        page.fill(SAMPLES, "4000")
        page.evaluate("""() => {
            const api = SG.api;
            window.heldFetches = 0;
            SG.api = async (method, url, ...rest) => {
                if (method === "GET" && url.endsWith("/inputs")) {
                    window.heldFetches++;
                    await new Promise(r => setTimeout(r, 1500));
                }
                return api(method, url, ...rest);
            };
        }""")
        page.click("#run-go")
        page.wait_for_selector("#run-plots .run-summary", timeout=120000)
        page.fill(LENS, "1000")
        page.wait_for_timeout(2500)  # past the held fetch, had one started
        assert page.input_value(LENS) == "1000"
        page.fill(SAMPLES, "6000")   # and they are the user's own now: they no longer follow
        assert page.input_value(LENS) == "1000" and page.input_value(SAMPLES) == "6000"
        # A second run on them: the form stays as the user left it (nothing fetched over it).
        page.click("#run-go")
        page.wait_for_selector("#run-plots .run-summary", timeout=120000)
        page.wait_for_timeout(2000)
        assert page.input_value(SAMPLES) == "6000" and page.input_value(LENS) == "1000"
        assert page.evaluate("window.heldFetches") == 0
        assert "waveforms_lens" in page.inner_text("#run-plots .run-inputs-used")
