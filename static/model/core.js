/* A model's page, shared part: page state, the backend selection, tabs, the graph view and its
   layout, colouring, legend and search. Each tab lives in its own file (node.js, debug.js, trt.js,
   runs.js, rule.js, summary.js) and registers its functions on SG.M; main.js wires the page.
   Every string from the model is put into the page as text (SG.h / SG.fill), never as markup. */
"use strict";
(function () {
  const root = document.getElementById("app");
  const $ = id => document.getElementById(id);
  const h = SG.h;
  const M = SG.M = {
    root, $, MID: root.dataset.model, params: new URLSearchParams(location.search),
    S: { body: "", expanded: new Set(), partitioned: null, result: null, layout: null, summary: null,
      session: null, index: -1, known: 0, done: false, playing: null, busy: false, log: new Map(), dbgSubgraphs: [],
      rule: null, groups: null, lastRun: null, colour: "op", selected: null, layers: null },
  };
  const S = M.S;
  M.api = path => "/api/models/" + encodeURIComponent(M.MID) + path;
  M.collapseScope = async function (key) {
    for (const k of [...S.expanded]) if (k === key || k.startsWith(key + "/")) S.expanded.delete(k);
    try { await M.loadLayout({ keep: true }); M.view.center(key, { keepZoom: true }); } catch (e) { SG.error(e); }
  };
  /* Open a group where it was clicked: the zoom kept, its frame (or first member) centred. */
  M.openGroup = async function (id) {
    S.expanded.add(id);
    await M.loadLayout({ keep: true });
    const box = (S.layout.scopes || []).find(b => "scope:" + b.id === id);
    if (!box) return;
    const half = M.view._size().h / 2 / M.view.s;   // a frame taller than the view shows its top
    M.view.centerPoint(box.x + box.w / 2, box.y + Math.min(box.h / 2, half - 20 / M.view.s));
  };
  M.view = new SG.GraphView($("graph"), { onClick: (id, item) => M.onNodeClick(id, item), onScope: key => M.collapseScope(key) });

  /* ---------------- selection (backend + options) ---------------- */
  /* The options form is generated from the backend's option schema (GET /api/backends: name, type,
     default, help, choices, minimum). Only values that differ from the defaults are sent, as
     ``options``; the server refuses unknown or bad ones with a message, shown as it comes. */
  M.schemas = {};
  const optId = name => name === "ops" ? "ops" : "opt-" + name;
  M.optionInput = function (o, idPrefix) {
    const id = (idPrefix || "") + optId(o.name);
    const title = o.help + (o.minimum != null ? " (at least " + o.minimum + ")" : "");
    let input;
    if (o.choices) {
      input = h("select", { id, "data-opt": o.name, "data-type": o.type, title },
        o.default == null ? h("option", { value: "" }, o.name === "trt_version" ? "newest" : "default") : null,
        o.choices.map(c => h("option", { value: c }, String(c))));
      if (o.default != null) input.value = String(o.default);
    } else if (o.type === "bool") {
      input = h("input", { id, type: "checkbox", "data-opt": o.name, "data-type": o.type, title });
      input.checked = !!o.default;
    } else {
      const num = o.type === "int" || o.type === "float";
      input = h("input", { id, "data-opt": o.name, "data-type": o.type, title, type: num ? "number" : "text",
        size: num ? 5 : (o.name === "ops" ? 28 : 16), step: o.type === "float" ? "any" : null, min: o.minimum,
        placeholder: o.type === "str_list" ? "comma-separated" : "" });
      input.value = o.default == null ? "" : (Array.isArray(o.default) ? o.default.join(",") : String(o.default));
    }
    return h("label", { class: o.type === "bool" ? "opt-bool" : null }, o.type === "bool" ? [input, " " + o.name] : [o.name + " ", input]);
  };
  /* {name: value} of the inputs under ``box`` whose value is not the schema default. */
  M.readOptions = function (box, schema) {
    const out = {};
    for (const o of schema) {
      const el = box.querySelector('[data-opt="' + CSS.escape(o.name) + '"]'); if (!el) continue;
      let v;
      if (o.type === "bool") v = el.checked;
      else if (o.type === "str_list") v = el.value.split(",").map(x => x.trim()).filter(Boolean);
      else if (el.value === "") v = null;
      else if (o.type === "int") v = Number.isInteger(Number(el.value)) ? Number(el.value) : el.value;
      else if (o.type === "float") v = Number.isFinite(Number(el.value)) ? Number(el.value) : el.value;
      else v = el.value;
      if (JSON.stringify(v) !== JSON.stringify(o.default == null ? (o.type === "str_list" ? [] : null) : o.default)) out[o.name] = v;
    }
    return out;
  };
  /* Put option values into the inputs under ``box`` (the TensorRT tab's choice shown in the toolbar). */
  M.setOptions = function (box, values) {
    for (const [name, v] of Object.entries(values || {})) {
      const el = box.querySelector('[data-opt="' + CSS.escape(name) + '"]'); if (!el) continue;
      if (el.type === "checkbox") el.checked = !!v; else el.value = Array.isArray(v) ? v.join(",") : (v == null ? "" : String(v));
    }
  };
  M.renderOptions = function () {
    const b = $("backend").value; const schema = M.schemas[b] || [];
    const keep = $("ops") ? $("ops").value : null;
    SG.fill($("opts"), schema.map(o => M.optionInput(o)));
    if (keep != null && $("ops")) $("ops").value = keep;
  };
  M.selection = function () {
    const backend = $("backend").value;
    const sel = { backend };
    if (backend === "rule") {
      if (!S.rule) throw new Error("make a rule first: press 'Edit rule…'");
      sel.rule = S.rule;
      return sel;
    }
    const opts = M.readOptions($("opts"), M.schemas[backend] || []);
    if (opts.ops) { sel.ops = opts.ops; delete opts.ops; }
    if (Object.keys(opts).length) sel.options = opts;
    return sel;
  };
  M.query = function (sel) {
    const q = new URLSearchParams();
    if (!sel) return q;
    q.set("backend", sel.backend);
    if (sel.ops && sel.ops.length) q.set("ops", sel.ops.join(","));
    if (sel.rule) q.set("rule", JSON.stringify(sel.rule));
    if (sel.options && Object.keys(sel.options).length) q.set("options", JSON.stringify(sel.options));
    return q;
  };
  M.syncBackendUi = function () {
    const b = $("backend").value;
    $("rule-edit").hidden = b !== "rule";
    M.renderOptions();
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
  M.loadLayout = async function (opts) {
    const q = M.query(S.body ? null : S.partitioned);
    if (S.body) q.set("body", S.body);
    if (S.expanded.size) q.set("expand", [...S.expanded].join(","));
    if (S.layers != null) q.set("collapse", S.layers ? "1" : "0");
    if ($("grp").checked && S.partitioned && !S.body) q.set("group", "partition");
    const t0 = performance.now();
    const layout = await SG.api("GET", M.api("/layout?" + q.toString()));
    S.layout = layout;
    M.view.render(layout, opts);
    const g = $("graph");
    g.dataset.mode = layout.mode; g.dataset.nodes = layout.nodes.length; g.dataset.ms = Math.round(performance.now() - t0);
    renderCrumbs();
    $("grp-wrap").hidden = !(layout.mode === "collapsed" && S.partitioned && !S.body);
    M.applyColour();
    if (S.session && !S.body) M.applyStep(S.lastState);
    else if (S.groups && !S.body) M.view.setState({ path: [S.groups.node], anc: S.groups.ancestors, desc: S.groups.descendants });
    if (S.selected) M.view.setSelected(S.selected);
    M.legend();
    document.body.dataset.ready = "1";
  };
  M.reload = () => M.loadLayout().catch(SG.error);

  /* Open the groups holding a node until the node itself is drawn (one level per layout). */
  M.expandTo = async function (name) {
    for (let k = 0; k < 12; k++) {
      const unit = M.view.unit(name);
      if (!unit || unit === name || !S.layout || S.layout.mode !== "collapsed" || S.expanded.has(unit)) return !!unit;
      S.expanded.add(unit);
      await M.loadLayout({ keep: true });
    }
    return true;
  };

  function renderCrumbs() {
    const parts = [];
    parts.push(h("a", { onclick: () => { S.body = ""; S.expanded.clear(); M.reload(); } }, M.root.dataset.name));
    if (S.body) {
      const steps = S.body.split("|");
      steps.forEach((st, k) => parts.push(" › ", h("a", { onclick: () => { S.body = steps.slice(0, k + 1).join("|"); S.expanded.clear(); M.reload(); } }, st)));
    }
    if (S.expanded.size) parts.push(" ", h("a", { title: "collapse every group", onclick: () => { S.expanded.clear(); M.reload(); } }, "⊟ collapse all"));
    // each open name scope can be closed again on its own (with the scopes opened inside it)
    const open = [...S.expanded].filter(k => k.startsWith("scope:")).sort();
    for (const key of open.slice(0, 8)) {
      parts.push(" ", h("a", { class: "chip", "data-collapse": key, title: "collapse " + key.slice(6), onclick: () => M.collapseScope(key) }, "⊟ " + key.slice(6)));
    }
    if (open.length > 8) parts.push(h("span", { class: "muted" }, " +" + (open.length - 8) + " open"));
    const L = S.layout;
    if (L && L.layers && !S.body) {   // the model's own hierarchy (name scopes) as layers
      const on = L.mode === "collapsed";
      parts.push(" ", h("a", { id: "layers-toggle", title: on ? "draw every node" : "collapse by name scope (layers)",
        onclick: () => { S.layers = !on; S.expanded.clear(); M.reload(); } }, on ? "⊡ all nodes" : "⊞ layers"));
    }
    if (L && L.mode === "collapsed") parts.push(" ", h("span", { class: "muted" }, L.node_count + " nodes, grouped by name scope"));
    SG.fill($("view-crumbs"), parts);
  }

  /* Nodes left out of TensorRT subgraphs, in three colours (graph fills, list swatches and legend
     share this one table): not supported; supported but left out only because its subgraph was below
     --min-size; supported but cut off from its neighbours (an incompatibility group, a cycle, a
     refusal), possibly then also below --min-size. */
  M.LEFT = {
    unsupported: { colour: "#fca5a5", label: "unsupported" },
    min_size: { colour: "#fde68a", label: "left out only for --min-size" },
    isolated: { colour: "#c4b5fd", label: "supported but isolated" },
    gpu_fallback: { colour: "#93c5fd", label: "DLA target: runs on the GPU (fallback)" },
  };
  M.COVERED = "#bbf7d0";
  M.leftCategory = function (e) {
    if (e.kind === "unsupported" && M.gpuFallback().has(e.node)) return "gpu_fallback";
    if (["unsupported", "not_selected", "filtered"].includes(e.kind)) return "unsupported";
    if (e.kind === "below_min_size" && !(e.data && e.data.earlier)) return "min_size";
    return "isolated";
  };
  /* tensorrt --trt-target dla: the nodes the parser takes but the DLA does not (they run on the GPU). */
  M.gpuFallback = function () {
    const r = S.result; const d = r && r.summary && r.summary.dla;
    if (!d) return new Set();
    if (!r.gpuFallbackSet) r.gpuFallbackSet = new Set(Object.keys(d.gpu_fallback || {}));
    return r.gpuFallbackSet;
  };
  M.swatch = function (colour, cls) {
    const el = h("span", { class: "sw lo " + (cls || "") }); el.style.background = colour; el.style.borderColor = "#64748b";
    return el;
  };

  M.legend = function () {
    const sw = (cls, text) => [h("span", { class: "sw " + cls }), text + " "];
    let kids;
    if (S.session) kids = [sw("current", "current"), sw("neighbour", "neighbour"), sw("candidate", "candidates"), sw("path", "cycle path"), sw("sg", "subgraph made")];
    else if (S.groups) kids = [sw("path", "incompatible node"), sw("anc", "ancestors"), sw("desc", "descendants")];
    else if ($("colour").value === "supported" && S.result) {
      kids = [M.swatch(M.COVERED, "lo-covered"), " in a subgraph "];
      for (const k in M.LEFT) kids.push(M.swatch(M.LEFT[k].colour, "lo-" + k), " " + M.LEFT[k].label + " ");
    } else kids = ["colour: " + $("colour").selectedOptions[0].textContent + (S.partitioned ? " · partitions drawn as clusters" : "") + " · drag or wheel to move, ctrl+wheel or + − to zoom"];
    SG.fill($("legend"), kids);
  };

  /* ---------------- colouring ---------------- */
  M.applyColour = function () {
    const mode = $("colour").value; const fills = {};
    const L = S.layout; if (!L) return;
    const assign = {};
    const subs = S.session ? S.dbgSubgraphs : (S.result ? S.result.subgraphs : []);
    for (const sg of subs) for (const n of sg.nodes) assign[n] = sg.id;
    const left = new Map(S.result ? S.result.excluded.map(e => [e.node, M.leftCategory(e)]) : []);
    const secs = (S.lastRun && S.lastRun.result) ? S.lastRun.result.original_node_seconds || {} : {};
    const maxT = Math.max(1e-12, ...Object.values(secs));
    const metrics = L.metrics || {};
    const maxB = Math.max(1, ...Object.values(metrics).map(m => m.out_bytes));
    for (const n of L.nodes) {
      if (n.kind !== "node") continue;
      if (mode === "op") fills[n.id] = SG.opColour(n.op);
      else if (mode === "subgraph") { const sid = assign[n.id] != null ? assign[n.id] : n.sg; if (sid != null) fills[n.id] = SG.palette[sid % SG.palette.length]; }
      else if (mode === "supported" && S.result) fills[n.id] = left.has(n.id) ? M.LEFT[left.get(n.id)].colour : M.COVERED;
      else if (mode === "time" && secs[n.id] != null) fills[n.id] = SG.heat(secs[n.id] / maxT);
      else if (mode === "memory" && metrics[n.id]) fills[n.id] = SG.heat(metrics[n.id].out_bytes / maxB);
    }
    for (const n of L.nodes) if (n.kind === "group" && mode === "subgraph" && n.sg != null) fills[n.id] = SG.palette[n.sg % SG.palette.length];
    if (mode === "supported" && S.result) {   // a closed group: the worst category among its members
      const rank = { unsupported: 4, gpu_fallback: 3, isolated: 2, min_size: 1 }; const worst = {};
      for (const [name, cat] of left) {
        const u = (L.units || {})[name];
        if (u && (!worst[u] || rank[cat] > rank[worst[u]])) worst[u] = cat;
      }
      for (const n of L.nodes) if (n.kind === "group") fills[n.id] = worst[n.id] ? M.LEFT[worst[n.id]].colour : M.COVERED;
    }
    M.view.setFill(fills);
    if (mode === "supported" && !S.result) SG.error("partition first to colour by supported or not");
    if (mode === "time" && !Object.keys(secs).length) SG.error("run a comparison first (Runs tab) to colour by time");
    M.legend();
  };

  /* ---------------- search: node names, op types, tensor names; Enter goes to the next hit ---------------- */
  S.hits = []; S.hit = -1;
  M.search = function (q) {
    q = q.trim().toLowerCase();
    S.hits = []; S.hit = -1;
    if (!q || !S.layout) { $("search-count").textContent = ""; M.view.setState({}); if (S.lastState) M.applyStep(S.lastState); return; }
    const index = S.layout.search || S.layout.nodes.filter(n => n.kind === "node").map(n => [n.id, n.op, []]);
    for (const [name, op, outs] of index) {
      if (name.toLowerCase().includes(q) || op.toLowerCase() === q || outs.some(t => t.toLowerCase().includes(q))) S.hits.push(name);
    }
    for (const n of S.layout.nodes) if (n.kind !== "node" && String(n.label).toLowerCase().includes(q)) S.hits.push(n.id);
    $("search-count").textContent = S.hits.length ? "" : "no match";
    M.view.setState({ match: S.hits });
    if (S.hits.length) M.nextHit(1);
  };
  M.nextHit = async function (dir) {
    if (!S.hits.length) return;
    S.hit = (S.hit + dir + S.hits.length) % S.hits.length;
    const name = S.hits[S.hit];
    $("search-count").textContent = (S.hit + 1) + "/" + S.hits.length;
    try { await M.expandTo(name); } catch (e) { SG.error(e); }
    M.view.setState({ match: S.hits, focus: [name] });
    M.view.center(name);
    $("graph").dataset.hit = name;
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
