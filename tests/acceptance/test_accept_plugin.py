"""Issue 20: a plugin backend on the default server. ``sglens serve --plugin FILE.py`` (runs on Dask
worker processes) runs a real model partitioned by the plugin's selector to ``done``, matching
onnxruntime (its own server: a plugin that breaks start-up must not take the other tests along)."""

from __future__ import annotations

from acceptance_harness import (PLUGIN, check_report, det_input, independent_check, real_model, run_real,
                                serve, stop_server, stuck_runs, upload)


def test_a_plugin_backend_runs_a_real_model_on_the_workers(tmp_path):
    det = real_model("ppocr_det")
    srv = serve(tmp_path, "--plugin", str(PLUGIN))
    try:
        backends = srv.request("GET", "/api/backends").json()
        assert "conv_act" in [b["name"] for b in backends["backends"]], backends
        mid = upload(srv, det)["id"]
        feeds = det_input(seed=1)
        run = run_real(srv, mid, "conv_act", {"x": [1, 3, 64, 64]}, feeds)
        check_report(run)
        subgraphs = run["result"]["partition"]["subgraphs"]
        assert subgraphs and all(sg["property"] == "conv_act" for sg in subgraphs), subgraphs[:3]
        independent_check(srv, run, det, feeds)
        assert stuck_runs(srv) == []
    finally:
        stop_server(srv)
