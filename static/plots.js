/* A run's report: honest numbers (errors against onnxruntime under the stated match rule, timing
   spread, memory with what each figure includes, fallback nodes) and plotly charts with units on
   every axis. Plotly is served from the installed python package and loaded on first use. */
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
  const MiB = 1024 * 1024;
  /* Layout defaults: the title on the left and plotly's toolbar standing up at the right edge (lying
     along the top it covered long titles); axes with automargin, so tick labels are never cut. */
  const base = (title, extra) => Object.assign({ title: { text: title, font: { size: 13 }, x: 0, xanchor: "left", xref: "container", pad: { l: 10 } },
    margin: { l: 64, r: 40, t: 36, b: 48 }, font: { size: 11 }, showlegend: false, modebar: { orientation: "v" } }, extra || {});
  const axis = (title, extra) => Object.assign({ title: { text: title }, automargin: true }, extra || {});
  /* A category axis of model names: every name a category (hover shows it whole), the tick shows its
     end ("…/cv3.2.1/conv/Conv_output_0"), which is where scoped names differ. */
  const TICK_CHARS = 28;
  const shortTick = v => {   // a boundary tensor's "#3 input " prefix is kept
    v = String(v); const head = (/^#\d+ \w+ /.exec(v) || [""])[0]; const rest = v.slice(head.length);
    return rest.length > TICK_CHARS ? head + "…" + rest.slice(rest.length - TICK_CHARS + 1) : v;
  };
  const MAX_TICKS = 24;   // more names than this: every k-th is labelled (all are in the hover)
  const catAxis = (title, values, extra) => {
    const every = Math.ceil(values.length / MAX_TICKS) || 1;
    const shown = values.filter((_, i) => i % every === 0);
    return axis(title, Object.assign({ type: "category", tickvals: shown, ticktext: shown.map(shortTick),
      tickangle: values.some(v => String(v).length > 8) ? -35 : "auto" }, extra || {}));
  };

  function tag(parent, cls, ...kids) { const d = SG.h("div", { class: cls || null }, kids); parent.appendChild(d); return d; }
  /* plotly reads a few tags and entities in labels (<b>, <br>, &lt;): model strings are escaped so
     plotly shows them as the literal text they are. */
  const pt = v => String(v == null ? "" : v).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  SG.plotText = pt;

  /* The run card's text part (verdict, tables, links) is SG.runSummary in runcard.js. */

  /* The y range every chart of one kind should share (the compare page passes both runs'). */
  SG.runRanges = function (runs) {
    const max = (f) => Math.max(0, ...runs.filter(r => r && r.result).map(f));
    return {
      subgraph_ms: max(r => Math.max(0, ...(r.result.subgraph_times || []).map(s => (s.seconds || 0) * 1e3))),
      timing_ms: max(r => Math.max(0, ...Object.values(r.result.comparison.timings).flatMap(t => (t.all_seconds || [t.seconds || 0]).map(x => x * 1e3)))),
      memory_mib: max(r => ((r.result.memory || {}).peak_bytes || 0) / MiB),
      timeline_ms: max(r => Math.max(0, ...(r.result.timeline || []).map(x => (x.start_us + x.dur_us) / 1e3))),
    };
  };
  const pad = v => (v > 0 ? [0, v * 1.1] : undefined);

  SG.renderRun = async function (box, run, opts) {
    opts = opts || {};
    box.replaceChildren();
    if (run.model_present === false) {
      const note = tag(box, "notice model-gone", "The model of this run (" + (run.model_name || "?") + ", id " + run.model_id +
        ") is no longer loaded on this server; the stored numbers are shown, but the graph, downloads of the partitioned model and Repeat need the model again.");
      Object.assign(note.style, { background: "#fffbeb", border: "1px solid #fcd34d", borderRadius: "6px", padding: "6px 10px", margin: "6px 0" });
    }
    if (!run.result) { box.appendChild(SG.errorBox(run.error || ("run " + run.status))); return; }
    box.appendChild(SG.runSummary(run, opts));
    if (!opts.noLinks) {
      const rid = encodeURIComponent(run.id);
      tag(box, "row", SG.h("a", { class: "button", href: "/api/runs/" + rid + "/trace.json", download: true }, "Chrome trace"),
        run.model_present === false ? null : SG.h("a", { class: "button", href: "/api/runs/" + rid + "/partitioned.onnx", download: true }, "partitioned ONNX"),
        SG.h("span", { class: "muted" }, "open the trace in ui.perfetto.dev or chrome://tracing"));
    }
    let Plotly;
    try { Plotly = await SG.loadPlotly(); } catch (e) { tag(box, "error", e.message); return; }
    const ranges = opts.ranges || SG.runRanges([run]);
    const r = run.result;
    const c = r.comparison;
    // timings of every measured repeat: the spread as a box per run
    const tnames = Object.keys(c.timings);
    const p0 = tag(box, "plot plot-timing-spread");
    Plotly.newPlot(p0, tnames.map(k => ({ type: "box", name: pt(k), boxpoints: "all", jitter: 0.4, pointpos: 0,
      y: (c.timings[k].all_seconds || [c.timings[k].seconds]).map(x => x * 1e3) })),
    base("wall time of each measured run (warm-ups excluded)", { yaxis: axis("ms", { range: pad(ranges.timing_ms), rangemode: "tozero" }), xaxis: axis("run") }), CFG);
    const sub = r.subgraph_times || [];
    const p1 = tag(box, "plot plot-subgraph-time");
    Plotly.newPlot(p1, [{ type: "bar", x: sub.map(s => pt(s.node)), y: sub.map(s => (s.seconds || 0) * 1e3),
      text: sub.map(s => pt(s.executor + (s.property === "host" ? " (rest of the graph)" : ""))), marker: { color: "#60a5fa" } }],
    base("time per subgraph (median of the measured runs)", { yaxis: axis("ms", { range: pad(ranges.subgraph_ms) }), xaxis: catAxis("subgraph", sub.map(s => pt(s.node))) }), CFG);
    const tl = (r.timeline || []).filter(x => !x.skipped);
    const p2 = tag(box, "plot plot-timeline");
    const workers = [...new Set(tl.map(x => x.worker || "?"))];
    p2.style.height = (150 + 30 * workers.length) + "px";
    Plotly.newPlot(p2, [{ type: "bar", orientation: "h", y: tl.map(x => pt(x.worker || "?")), x: tl.map(x => Math.max(x.dur_us, 0.5) / 1e3),
      base: tl.map(x => x.start_us / 1e3), text: tl.map(x => pt(x.name)), hovertemplate: "%{text}<br>start %{base:.3f} ms<br>%{x:.3f} ms<extra></extra>",
      // a name only on a bar wide enough for it (uniformtext below hides the rest): with every node
      // outside the subgraphs on the timeline, small nodes' names overprinted each other
      textposition: "inside", insidetextanchor: "middle", textangle: 0,
      marker: { color: tl.map(x => SG.palette[Math.abs(hash(x.name)) % SG.palette.length]), line: { width: 0.5, color: "#334155" } } }],
    base("engine timeline, last measured run (a row per worker)", { margin: { l: 150, r: 40, t: 36, b: 48 }, xaxis: axis("ms", { range: pad(ranges.timeline_ms) }),
      yaxis: axis("worker", { categoryarray: workers.map(pt) }), height: 140 + 26 * workers.length, barmode: "overlay",
      uniformtext: { mode: "hide", minsize: 9 } }), CFG);
    const mem = r.memory || { t_us: [], bytes: [] };
    const p3 = tag(box, "plot plot-memory");
    Plotly.newPlot(p3, [
      { type: "scatter", mode: "lines", line: { shape: "hv", color: "#10b981" }, x: mem.t_us.map(t => t / 1e3), y: mem.bytes.map(b => b / MiB), fill: "tozeroy" },
      { type: "scatter", mode: "markers+text", x: [mem.peak_t_us / 1e3], y: [mem.peak_bytes / MiB], text: ["peak " + SG.bytes(mem.peak_bytes)],
        textposition: "top right", marker: { color: "#ef4444", size: 10 } }],
    base("live activations over one run (from tensor shapes; weights and onnxruntime not included)",
      { xaxis: axis("ms", { range: pad(ranges.timeline_ms) }), yaxis: axis("MiB", { range: pad(ranges.memory_mib) }) }), CFG);
    const outs = c.outputs; const names = Object.keys(outs);
    const runs = [...new Set(names.flatMap(n => Object.keys(outs[n])))];
    const tiny = 1e-12;
    const p4 = tag(box, "plot plot-output-diff");
    Plotly.newPlot(p4, runs.map((rn, k) => ({ type: "bar", name: pt(rn), x: names.map(pt), y: names.map(n => Math.max(tiny, (outs[n][rn] || {}).max_abs || 0)),
      marker: { color: ["#a78bfa", "#f59e0b"][k % 2] } })),
    base("max abs error per output vs onnxruntime (0 drawn at 1e-12; tolerance line dashed)", {
      yaxis: axis("max |ours − ref|", { type: "log", range: [-12.5, 1] }), xaxis: catAxis("output", names.map(pt)), barmode: "group", showlegend: true,
      shapes: [{ type: "line", xref: "paper", x0: 0, x1: 1, y0: (c.tolerance || {}).atol || 1e-4, y1: (c.tolerance || {}).atol || 1e-4, line: { dash: "dash", color: "#ef4444" } }] }), CFG);
    const bx = [], by = [], bc = [];
    for (const s of c.subgraphs || []) {
      for (const kind of ["inputs", "outputs"]) for (const t in s[kind]) {
        bx.push(pt("#" + s.id + " " + kind.slice(0, -1) + " " + t)); by.push(Math.max(tiny, s[kind][t].max_abs || 0));
        bc.push(s[kind][t].match ? "#34d399" : "#ef4444");
      }
    }
    const p5 = tag(box, "plot plot-boundary-diff");
    p5.style.height = "380px";   // room for the slanted tensor names under the bars
    Plotly.newPlot(p5, [{ type: "bar", x: bx, y: by, marker: { color: bc } }],
      base("max abs error per subgraph boundary tensor (green: within tolerance)", { yaxis: axis("max |ours − ref|", { type: "log", range: [-12.5, 1] }), xaxis: catAxis("boundary tensor", bx) }), CFG);
  };

  function hash(s) { let h = 0; for (let i = 0; i < s.length; i++) h = (h * 31 + s.charCodeAt(i)) | 0; return h; }
})();
