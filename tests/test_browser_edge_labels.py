"""Shape labels on the graph's edges stay readable where edges meet (Magika's activation blocks:
one tensor read by a chain of Muls and the Add closing it). Before, each label went to its edge's
middle point with only boxes avoided, so labels of edges meeting at a node were drawn on top of
one another; and an exporter's placeholder axis ("unk__7") was spelled out on every edge.

In a real chromium against a real server: every pair of drawn labels is disjoint (measured with
the browser's own text boxes), placeholders read "?", and a label left out for want of room is
still in its edge's tooltip.
"""

from __future__ import annotations

import pytest

from browser_harness import checked_page, chromium, playwright_or_skip, save_screenshot, serving_with_model
from ui_models import converging_edges_model

pytestmark = pytest.mark.browser

sync_api = playwright_or_skip()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from app import create_app
    app = create_app({"SGLENS_INSTANCE": str(tmp_path_factory.mktemp("inst"))})
    with serving_with_model(app, converging_edges_model(), "converging.onnx") as served:
        yield served


def _overlaps(boxes: list[dict]) -> list[tuple[str, str]]:
    bad = []
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            if (a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"]
                    and a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"]):
                bad.append((f'{a["t"]}@{a["x"]:.0f},{a["y"]:.0f}', f'{b["t"]}@{b["x"]:.0f},{b["y"]:.0f}'))
    return bad


def test_edge_shape_labels_do_not_overlap_where_edges_meet(server):
    base, mid = server
    with chromium(sync_api) as browser, checked_page(browser, 1440, 900, 30000) as pg:
        pg.goto(f"{base}/models/{mid}")
        pg.wait_for_selector("body[data-ready='1']")
        pg.wait_for_selector("#graph svg g.node")
        boxes = pg.eval_on_selector_all(
            "#graph .edge text.shape",
            "ts => ts.map(t => { const b = t.getBBox(); return {t: t.textContent, x: b.x, y: b.y, w: b.width, h: b.height}; })")
        save_screenshot(pg, "edge_labels_converging")
        edges = pg.locator("#graph .edge").count()
        assert len(boxes) >= 5, f"only {len(boxes)} of {edges} edges labelled"
        assert not _overlaps(boxes), _overlaps(boxes)[:5]
        assert {b["t"] for b in boxes} == {"?×2048×64"}, {b["t"] for b in boxes}
        tips = pg.eval_on_selector_all("#graph .edge title", "ts => ts.map(t => t.textContent)")
        assert tips and all("unk__7×2048×64" in t for t in tips if "×" in t), tips[:3]


def test_a_chosen_axis_name_stays_and_a_long_one_reads_as_a_question_mark(tmp_path_factory):
    from onnx import TensorProto
    from onnx import helper as oh

    from app import create_app
    shape = ["batch_size", "p2o.DynamicDimension.0", 4]
    g = oh.make_graph([oh.make_node("Relu", ["x"], ["a"], name="relu"),
                       oh.make_node("Sigmoid", ["a"], ["y"], name="sigmoid")], "named",
                      [oh.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                      [oh.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    model = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)
    app = create_app({"SGLENS_INSTANCE": str(tmp_path_factory.mktemp("named"))})
    with serving_with_model(app, model, "named.onnx") as (base, mid), chromium(sync_api) as browser, \
            checked_page(browser, 1440, 900, 30000) as pg:
        pg.goto(f"{base}/models/{mid}")
        pg.wait_for_selector("#graph svg g.node")
        labels = set(pg.eval_on_selector_all("#graph .edge text.shape", "ts => ts.map(t => t.textContent)"))
        assert labels == {"batch_size×?×4"}, labels
        tips = pg.eval_on_selector_all("#graph .edge title", "ts => ts.map(t => t.textContent)")
        assert any("p2o.DynamicDimension.0" in t for t in tips), tips
