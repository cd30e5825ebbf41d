/* Two stored runs side by side: first every setting that differs between them (so a difference in
   numbers is never read without its cause), then timings, what ran each subgraph on each side, the
   per-node time heat map (node names on its axis) and both run cards. */
"use strict";
(function () {
  const h = SG.h;
  const params = new URLSearchParams(location.search);
  const verdictWord = r => SG.verdictWord(((r.summary || {}).verdict || {}).status) || r.status;
  const label = r => r.model_name + " · " + r.backend + " · " + r.executor + " + rest on " + SG.hostRuntimeName(SG.hostRuntime(r)) +
    "/" + r.device + " · " + verdictWord(r) +
    " · " + new Date(r.created * 1000).toLocaleString() + " (" + r.id + ")";
  async function init() {
    const data = await SG.api("GET", "/api/runs");
    const runs = data.runs.filter(r => r.status === "done");
    for (const id of ["run-a", "run-b"]) {
      const sel = document.getElementById(id);
      SG.fill(sel, runs.map(r => h("option", { value: r.id }, label(r))));
    }
    if (params.get("a")) document.getElementById("run-a").value = params.get("a");
    if (params.get("b")) document.getElementById("run-b").value = params.get("b");
    else if (params.get("a")) { const b = document.getElementById("run-b"); b.prepend(h("option", { value: "" }, "(none)")); b.value = ""; }
    else if (runs.length > 1) document.getElementById("run-b").value = runs[1].id;
    if (runs.length < 2) SG.fill(document.getElementById("compare-out"), h("p", { class: "muted" }, "Finish two runs (Runs tab of a model) to compare them."));
    if (params.get("a")) go();
  }

  /* A setting's value as short text: objects as "k=v" pairs, shapes as 1×3×224×224. */
  function show(v) {
    if (v == null) return "—";
    if (Array.isArray(v)) return v.every(x => typeof x === "number") ? "[" + v.join("×") + "]" : v.join(", ");
    if (typeof v === "object") {
      const parts = Object.entries(v).map(([k, x]) => k + " " + show(x));
      return parts.length ? parts.join("; ") : "(none)";
    }
    return String(v);
  }
  function settingsPanel(diff) {
    const panel = h("div", { class: "panel", id: "compare-settings" }, h("h2", null, "Settings that differ"));
    panel.style.gridColumn = "1 / -1";
    if (!diff.differences.length) {
      panel.appendChild(h("p", { class: "same-settings" }, "A and B used the same settings (model, backend, options, device, " +
        "subgraph runtimes, tolerance, input shapes and values, repeats): a difference below is the machine's, not the setup's."));
      return panel;
    }
    panel.appendChild(h("p", { class: "muted" }, "Read the numbers below with these in mind:"));
    panel.appendChild(h("table", { class: "grid settings-diff" }, SG.headRow("setting", "A", "B"),
      diff.differences.map(d => h("tr", { "data-setting": d.setting, class: "bad" },
        [h("td", null, h("b", null, d.setting)), h("td", null, show(d.a)), h("td", null, show(d.b))]))));
    return panel;
  }

  const band = t => (t && t.p10 != null ? " (p10–p90 " + (t.p10 * 1e3).toFixed(3) + "–" + (t.p90 * 1e3).toFixed(3) + ", n=" + t.repeat + ")" : "");
  function diffTable(a, b) {
    const ta = a.result.comparison.timings, tb = b.result.comparison.timings;
    const rows = [...new Set([...Object.keys(ta), ...Object.keys(tb)])].map(k => {
      const x = (ta[k] || {}).seconds, y = (tb[k] || {}).seconds;
      // the ratio of medians means little when the spreads overlap: say so
      const overlap = ta[k] && tb[k] && ta[k].p90 >= tb[k].p10 && tb[k].p90 >= ta[k].p10;
      return SG.row(k, SG.ms(x) + band(ta[k]), SG.ms(y) + band(tb[k]),
        x && y ? (y / x).toFixed(2) + "×" + (overlap ? " (spreads overlap)" : "") : "n/a");
    });
    const verdict = r => SG.runVerdict(r.result.comparison).headline;
    const panel = h("div", { class: "panel", id: "compare-diff" }, h("h2", null, "A vs B"),
      h("table", { class: "grid" }, SG.headRow("run", "A median", "B median", "B / A"), rows,
        SG.row("outputs vs onnxruntime", verdict(a), verdict(b), "")),
      subgraphTable(a, b));
    panel.style.gridColumn = "1 / -1";
    return panel;
  }

  /* Per subgraph (by node name): what ran it on each side and why, its time and peak memory. */
  function subgraphTable(a, b) {
    const sa = a.result.comparison.subgraphs || [], sb = b.result.comparison.subgraphs || [];
    const names = [...new Set([...sa, ...sb].map(s => s.node))];
    if (!names.length) return null;
    const find = (list, n) => list.find(s => s.node === n);
    // a reason shared by every subgraph of a run (65 times "auto: tensorrt does not import ...") is said once
    const common = { a: SG.sharedReason(sa), b: SG.sharedReason(sb) };
    const cell = (s, side) => (s ? [h("b", null, s.executor || "?"),
      s.reason && s.reason !== common[side] ? h("div", { class: "muted why" }, s.reason) : null] : "—");
    const cost = s => (s ? SG.ms(s.seconds) + (s.device_seconds != null ? " (GPU " + SG.ms(s.device_seconds) + ")" : "") + ", peak " + SG.bytes(s.peak_bytes) + SG.poolPeak(s) : "—");
    const said = ["a", "b"].filter(k => common[k]).map(k => h("p", { class: "muted why", "data-shared": k },
      (k === "a" ? "A" : "B") + ", every subgraph: " + common[k]));
    return [h("h3", null, "What ran each subgraph"), ...said,
      h("table", { class: "grid compare-subgraphs" }, SG.headRow("subgraph", "A ran on (why)", "A time, peak memory", "B ran on (why)", "B time, peak memory"),
        names.map(n => {
          const x = find(sa, n), y = find(sb, n);
          const differs = x && y && x.executor !== y.executor;
          return h("tr", { "data-subgraph": n, class: differs ? "bad" : null },
            [h("td", null, h("code", null, n)), h("td", { class: "a-runtime" }, cell(x, "a")), h("td", null, cost(x)),
              h("td", { class: "b-runtime" }, cell(y, "b")), h("td", null, cost(y))]);
        }))];
  }

  /* Per-node time of both runs as a heat map: nodes down the side with their names (the slowest
     ones when there are many), runs across, colour scale in ms. */
  const HEAT_ROWS = 60;
  async function nodeHeatmap(box, runs, labels) {
    const Plotly = await SG.loadPlotly();
    const per = runs.map(r => (r.result && r.result.original_node_seconds) || {});
    let nodes = [...new Set(per.flatMap(p => Object.keys(p)))];
    if (!nodes.length) return;
    const total = nodes.length;
    if (total > HEAT_ROWS) {
      const worst = n => Math.max(...per.map(p => p[n] || 0));
      const keep = new Set([...nodes].sort((x, y) => worst(y) - worst(x)).slice(0, HEAT_ROWS));
      nodes = nodes.filter(n => keep.has(n));   // graph order kept
    }
    const z = nodes.map(n => per.map(p => (p[n] == null ? null : p[n] * 1e3)));
    const longest = Math.max(...nodes.map(n => n.length));
    const div = h("div", { class: "plot plot-node-heatmap" });
    box.appendChild(div);
    if (total > HEAT_ROWS) box.appendChild(h("div", { class: "muted" }, "the " + HEAT_ROWS + " slowest of " + total + " nodes, in graph order"));
    div.style.height = Math.max(240, 90 + 16 * nodes.length) + "px";
    const pt = SG.plotText;
    Plotly.newPlot(div, [{ type: "heatmap", z, y: nodes.map(pt), x: labels.map(pt), colorscale: "YlOrRd", reversescale: true,
      colorbar: { title: { text: "ms" } }, hovertemplate: "%{x} · %{y}: %{z:.4f} ms<extra></extra>" }],
    { title: { text: "time per node, our engine unpartitioned (median)", font: { size: 13 } }, font: { size: 11 }, showlegend: false,
      xaxis: { title: { text: "run" } }, yaxis: { title: { text: "" }, automargin: true, autorange: "reversed", type: "category", dtick: 1 },
      margin: { l: Math.min(420, 20 + 6.5 * longest), r: 12, t: 40, b: 48 } }, { displaylogo: false, responsive: true });
  }

  /* Node names in a card link to the model page, that node selected. */
  function nodeHref(run) {
    return name => {
      const q = new URLSearchParams({ backend: run.backend });
      if (run.options && run.options.ops) q.set("ops", run.options.ops.join(","));
      q.set("node", name);
      return "/models/" + encodeURIComponent(run.model_id) + "?" + q.toString();
    };
  }

  async function go() {
    const out = document.getElementById("compare-out"); out.replaceChildren();
    const runs = [];
    const cols = [];
    for (const id of ["run-a", "run-b"]) {
      const rid = document.getElementById(id).value; if (!rid) continue;
      const col = SG.el("div", { class: "panel", id: "col-" + id });
      cols.push(col);
      try { const run = await SG.api("GET", "/api/runs/" + encodeURIComponent(rid)); runs.push(run); }
      catch (e) { SG.fill(col, SG.errorBox(e)); }
    }
    const both = runs.length === 2 && runs[0].result && runs[1].result;
    if (runs.length === 2) {
      try {
        const diff = await SG.api("GET", "/api/runs/diff?a=" + encodeURIComponent(runs[0].id) + "&b=" + encodeURIComponent(runs[1].id));
        out.appendChild(settingsPanel(diff));
      } catch (e) { out.appendChild(SG.errorBox(e)); }
    }
    if (both) out.appendChild(diffTable(runs[0], runs[1]));
    let heat = null;
    if (both) { heat = h("div", { class: "panel", id: "compare-heat" }); heat.style.gridColumn = "1 / -1"; out.appendChild(heat); }
    cols.forEach(c => out.appendChild(c));
    const ranges = SG.runRanges(runs);     // one y range per chart kind, shared by both sides
    for (let k = 0; k < runs.length; k++) {
      cols[k].appendChild(h("h2", null, (k ? "B: " : "A: ") + label(runs[k])));
      const box = SG.el("div"); cols[k].appendChild(box);
      await SG.renderRun(box, runs[k], { ranges, nodeHref: runs[k].model_present === false ? null : nodeHref(runs[k]) });
    }
    if (heat) await nodeHeatmap(heat, runs, ["A", "B"]);
  }
  document.getElementById("compare-go").onclick = go;
  init().catch(SG.error);
})();
