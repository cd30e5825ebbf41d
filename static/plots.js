/* Run plots with plotly (served from the installed python package, loaded on first use). */
"use strict";
(function () {
  let loading = null;
  SG.loadPlotly = function () {
    if (window.Plotly) return Promise.resolve(window.Plotly);
    if (!loading) {
      loading = new Promise((resolve, reject) => {
        const s = document.createElement("script");
        s.src = "/vendor/plotly.min.js";
        s.onload = () => resolve(window.Plotly);
        s.onerror = () => reject(new Error("plotly.min.js could not be loaded"));
        document.head.appendChild(s);
      });
    }
    return loading;
  };

  const CFG = { displaylogo: false, responsive: true };
  const base = (title, extra) => Object.assign({ title: { text: title, font: { size: 13 } },
    margin: { l: 60, r: 12, t: 32, b: 40 }, font: { size: 11 }, showlegend: false }, extra || {});

  function tag(parent, cls, ...kids) { const d = SG.h("div", { class: cls || null }, kids); parent.appendChild(d); return d; }
  /* plotly reads a few tags and entities in labels (<b>, <br>, &lt;): model strings are escaped so
     plotly shows them as the literal text they are. */
  const pt = v => String(v == null ? "" : v).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");

  SG.runSummary = function (run) {
    const h = SG.h;
    const r = run.result; const c = r.comparison;
    const rows = Object.entries(c.timings).map(([k, v]) => SG.row(k, SG.ms(v.seconds), SG.bytes(v.peak_bytes)));
    const sum = r.partition.summary || {};
    return h("div", { class: "run-summary" },
      h("b", null, c.ok ? "✔ outputs match onnxruntime" : "✘ outputs differ from onnxruntime"),
      c.first_divergent ? [" — first subgraph introducing a difference: ", h("code", null, c.first_divergent)] : null,
      h("div", { class: "muted" }, "backend " + run.backend + " · executor " + c.executor + " · device " + c.device + " · " +
        (sum.partitions != null ? sum.partitions + " partitions, coverage " + (100 * sum.coverage).toFixed(0) + "%" : "")),
      h("table", { class: "grid" }, SG.headRow("run", "median", "peak memory"), rows),
      (r.notes || []).map(n => h("div", { class: "muted" }, "note: " + n)));
  };

  SG.renderRun = async function (box, run, opts) {
    opts = opts || {};
    box.replaceChildren();
    if (!run.result) { box.appendChild(SG.errorBox(run.error || ("run " + run.status))); return; }
    box.appendChild(SG.runSummary(run));
    if (!opts.noLinks) {
      const rid = encodeURIComponent(run.id);
      tag(box, "row", SG.h("a", { class: "button", href: "/api/runs/" + rid + "/trace.json", download: true }, "Chrome trace"),
        SG.h("a", { class: "button", href: "/api/runs/" + rid + "/partitioned.onnx", download: true }, "partitioned ONNX"),
        SG.h("span", { class: "muted" }, "open the trace in ui.perfetto.dev or chrome://tracing"));
    }
    let Plotly;
    try { Plotly = await SG.loadPlotly(); } catch (e) { tag(box, "error", e.message); return; }
    const r = run.result;
    const sub = r.subgraph_times || [];
    const p1 = tag(box, "plot plot-subgraph-time");
    Plotly.newPlot(p1, [{ type: "bar", x: sub.map(s => pt(s.node)), y: sub.map(s => (s.seconds || 0) * 1e3),
      text: sub.map(s => pt(s.executor)), marker: { color: "#60a5fa" } }],
    base("time per subgraph (ms, median)", { yaxis: { title: "ms" } }), CFG);
    const tl = (r.timeline || []).filter(x => !x.skipped);
    const p2 = tag(box, "plot plot-timeline");
    const workers = [...new Set(tl.map(x => x.worker || "?"))];
    p2.style.height = (130 + 30 * workers.length) + "px";
    Plotly.newPlot(p2, [{ type: "bar", orientation: "h", y: tl.map(x => pt(x.worker || "?")), x: tl.map(x => Math.max(x.dur_us, 0.5)),
      base: tl.map(x => x.start_us), text: tl.map(x => pt(x.name)), hovertemplate: "%{text}<br>start %{base:.1f} µs<br>%{x:.1f} µs<extra></extra>",
      marker: { color: tl.map(x => SG.palette[Math.abs(hash(x.name)) % SG.palette.length]), line: { width: 0.5, color: "#334155" } } }],
    base("engine timeline (a row per worker)", { margin: { l: 150, r: 12, t: 32, b: 40 }, xaxis: { title: "µs" }, yaxis: { categoryarray: workers.map(pt) }, height: 120 + 26 * workers.length, barmode: "overlay" }), CFG);
    const mem = r.memory || { t_us: [], bytes: [] };
    const p3 = tag(box, "plot plot-memory");
    Plotly.newPlot(p3, [
      { type: "scatter", mode: "lines", line: { shape: "hv", color: "#10b981" }, x: mem.t_us, y: mem.bytes.map(b => b / 1024), fill: "tozeroy" },
      { type: "scatter", mode: "markers+text", x: [mem.peak_t_us], y: [mem.peak_bytes / 1024], text: ["peak " + SG.bytes(mem.peak_bytes)],
        textposition: "top right", marker: { color: "#ef4444", size: 10 } }],
    base("memory over time (live activations, KiB)", { xaxis: { title: "µs" }, yaxis: { title: "KiB" } }), CFG);
    const outs = r.comparison.outputs; const names = Object.keys(outs);
    const runs = [...new Set(names.flatMap(n => Object.keys(outs[n])))];
    const tiny = 1e-12;
    const p4 = tag(box, "plot plot-output-diff");
    Plotly.newPlot(p4, runs.map((rn, k) => ({ type: "bar", name: pt(rn), x: names.map(pt), y: names.map(n => Math.max(tiny, (outs[n][rn] || {}).max_rel || 0)),
      marker: { color: ["#a78bfa", "#f59e0b"][k % 2] } })),
    base("relative error per output vs onnxruntime (0 drawn at 1e-12)", { yaxis: { type: "log", title: "max rel" }, barmode: "group", showlegend: true }), CFG);
    const bx = [], by = [], bc = [];
    for (const s of r.comparison.subgraphs || []) {
      for (const kind of ["inputs", "outputs"]) for (const t in s[kind]) {
        bx.push(pt("#" + s.id + " " + kind.slice(0, -1) + " " + t)); by.push(Math.max(tiny, s[kind][t].max_rel || 0));
        bc.push(s[kind][t].match ? "#34d399" : "#ef4444");
      }
    }
    const p5 = tag(box, "plot plot-boundary-diff");
    Plotly.newPlot(p5, [{ type: "bar", x: bx, y: by, marker: { color: bc } }],
      base("relative error per subgraph boundary tensor (green: matches)", { yaxis: { type: "log", title: "max rel" } }), CFG);
  };
  function hash(s) { let h = 0; for (let i = 0; i < s.length; i++) h = (h * 31 + s.charCodeAt(i)) | 0; return h; }
})();
