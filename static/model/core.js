/* A model's page, shared part: page state, the backend selection, tabs, the graph view and its
   layout, colouring, legend and search. Each tab lives in its own file (node.js, debug.js, trt.js,
   runs.js, rule.js, summary.js) and registers its functions on SG.M; main.js wires the page.
   Every string from the model is put into the page as text (SG.h / SG.fill), never as markup. */
"use strict";
(function () {
  const root = document.getElementById("app");
  const $ = id => document.getElementById(id);
  const M = SG.M = {
    root, $, MID: root.dataset.model, params: new URLSearchParams(location.search),
    S: { body: "", expanded: new Set(), partitioned: null, result: null, layout: null, summary: null,
      session: null, index: -1, known: 0, done: false, playing: null, busy: false, log: new Map(), dbgSubgraphs: [],
      rule: null, groups: null, lastRun: null, colour: "op", selected: null },
  };
  const S = M.S;
  M.api = path => "/api/models/" + encodeURIComponent(M.MID) + path;
  M.view = new SG.GraphView($("graph"), { onClick: (id, item) => M.onNodeClick(id, item) });

  /* ---------------- selection (backend + options) ---------------- */
  M.selection = function () {
    const backend = $("backend").value;
    const sel = { backend };
    if (backend === "default") sel.ops = $("ops").value.split(",").map(x => x.trim()).filter(Boolean);
    if (backend === "rule") {
      if (!S.rule) throw new Error("make a rule first: press 'Edit rule…'");
      sel.rule = S.rule;
    }
    return sel;
  };
  M.query = function (sel) {
    const q = new URLSearchParams();
    if (!sel) return q;
    q.set("backend", sel.backend);
    if (sel.ops && sel.ops.length) q.set("ops", sel.ops.join(","));
    if (sel.rule) q.set("rule", JSON.stringify(sel.rule));
    return q;
  };
  M.syncBackendUi = function () {
    const b = $("backend").value;
    $("ops-wrap").hidden = b !== "default";
    $("rule-edit").hidden = b !== "rule";
  };

  /* ---------------- tabs ---------------- */
  M.showTab = function (name) {
    document.querySelectorAll(".tabs button").forEach(b => b.classList.toggle("active", b.dataset.tab === name));
    document.querySelectorAll(".tab").forEach(t => { t.hidden = t.id !== "tab-" + name; });
    const side = document.querySelector(".side"); const wide = name === "runs";
    if (side.classList.contains("wide") !== wide) {
      side.classList.toggle("wide", wide);
      M.view.fit();
      if (window.Plotly) document.querySelectorAll("#run-plots .plot").forEach(p => window.Plotly.Plots.resize(p));
    }
  };

  /* ---------------- layout ---------------- */
  M.loadLayout = async function () {
    const q = M.query(S.body ? null : S.partitioned);
    if (S.body) q.set("body", S.body);
    if (S.expanded.size) q.set("expand", [...S.expanded].join(","));
    if ($("grp").checked && S.partitioned && !S.body) q.set("group", "partition");
    const t0 = performance.now();
    const layout = await SG.api("GET", M.api("/layout?" + q.toString()));
    S.layout = layout;
    M.view.render(layout);
    const g = $("graph");
    g.dataset.mode = layout.mode; g.dataset.nodes = layout.nodes.length; g.dataset.ms = Math.round(performance.now() - t0);
    renderCrumbs();
    $("grp-wrap").hidden = !(layout.mode === "collapsed" && S.partitioned && !S.body);
    M.applyColour();
    if (S.session && !S.body) M.applyStep(S.lastState);
    M.legend();
    document.body.dataset.ready = "1";
  };
  M.reload = () => M.loadLayout().catch(SG.error);

  function renderCrumbs() {
    const h = SG.h; const parts = [];
    parts.push(h("a", { onclick: () => { S.body = ""; S.expanded.clear(); M.reload(); } }, M.root.dataset.name));
    if (S.body) {
      const steps = S.body.split("|");
      steps.forEach((st, k) => parts.push(" › ", h("a", { onclick: () => { S.body = steps.slice(0, k + 1).join("|"); S.expanded.clear(); M.reload(); } }, st)));
    }
    if (S.expanded.size) parts.push(" ", h("a", { title: "collapse every group", onclick: () => { S.expanded.clear(); M.reload(); } }, "⊟ collapse all"));
    if (S.layout && S.layout.mode === "collapsed") parts.push(" ", h("span", { class: "muted" }, S.layout.node_count + " nodes, grouped by name scope"));
    SG.fill($("view-crumbs"), parts);
  }

  M.legend = function () {
    const sw = (cls, text) => [SG.h("span", { class: "sw " + cls }), text + " "];
    let kids;
    if (S.session) kids = [sw("current", "current"), sw("neighbour", "neighbour"), sw("candidate", "candidates"), sw("path", "cycle path"), sw("sg", "subgraph made")];
    else if (S.groups) kids = [sw("path", "incompatible node"), sw("anc", "ancestors"), sw("desc", "descendants")];
    else kids = ["colour: " + $("colour").selectedOptions[0].textContent + (S.partitioned ? " · partitions drawn as clusters" : "") + " · drag to pan, wheel to zoom"];
    SG.fill($("legend"), kids);
  };

  /* ---------------- colouring ---------------- */
  M.applyColour = function () {
    const mode = $("colour").value; const fills = {};
    const L = S.layout; if (!L) return;
    const assign = {};
    const subs = S.session ? S.dbgSubgraphs : (S.result ? S.result.subgraphs : []);
    for (const sg of subs) for (const n of sg.nodes) assign[n] = sg.id;
    const excluded = new Set(S.result ? S.result.excluded.map(e => e.node) : []);
    const secs = (S.lastRun && S.lastRun.result) ? S.lastRun.result.original_node_seconds || {} : {};
    const maxT = Math.max(1e-12, ...Object.values(secs));
    const metrics = L.metrics || {};
    const maxB = Math.max(1, ...Object.values(metrics).map(m => m.out_bytes));
    for (const n of L.nodes) {
      if (n.kind !== "node") continue;
      if (mode === "op") fills[n.id] = SG.opColour(n.op);
      else if (mode === "subgraph") { const sid = assign[n.id] != null ? assign[n.id] : n.sg; if (sid != null) fills[n.id] = SG.palette[sid % SG.palette.length]; }
      else if (mode === "supported" && S.result) fills[n.id] = excluded.has(n.id) ? "#fecaca" : "#bbf7d0";
      else if (mode === "time" && secs[n.id] != null) fills[n.id] = SG.heat(secs[n.id] / maxT);
      else if (mode === "memory" && metrics[n.id]) fills[n.id] = SG.heat(metrics[n.id].out_bytes / maxB);
    }
    for (const n of L.nodes) if (n.kind === "group" && mode === "subgraph" && n.sg != null) fills[n.id] = SG.palette[n.sg % SG.palette.length];
    M.view.setFill(fills);
    if (mode === "supported" && !S.result) SG.error("partition first to colour by supported or not");
    if (mode === "time" && !Object.keys(secs).length) SG.error("run a comparison first (Runs tab) to colour by time");
    M.legend();
  };

  /* ---------------- search ---------------- */
  M.search = function (q) {
    q = q.trim().toLowerCase();
    if (!q || !S.layout) { M.view.setState({}); if (S.lastState) M.applyStep(S.lastState); return; }
    const hits = S.layout.nodes.filter(n => String(n.id).toLowerCase().includes(q) || (n.op || "").toLowerCase() === q).map(n => n.id);
    const unitHits = Object.keys(S.layout.units || {}).filter(n => n.toLowerCase().includes(q));
    M.view.setState({ match: hits.concat(unitHits) });
    if (hits.length || unitHits.length) M.view.center(hits[0] || unitHits[0]);
  };

  /* ---------------- partition (shared by the toolbar and the TensorRT tab) ---------------- */
  M.doPartition = async function (sel) {
    const result = await SG.api("POST", M.api("/partition"), sel);
    S.result = result; S.partitioned = sel; S.body = ""; S.expanded.clear();
    if (S.session) { SG.api("DELETE", "/api/sessions/" + encodeURIComponent(S.session)).catch(() => {}); S.session = null; M.stopPlay(); S.lastState = null; }
    await M.loadLayout();
    if ($("colour").value === "op") { $("colour").value = "subgraph"; M.applyColour(); }
    return result;
  };
})();
