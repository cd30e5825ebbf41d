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

  /* The selection (backend + options) and its two editors live in selection.js. */

  /* ---------------- tabs ---------------- */
  M.showTab = function (name) {
    document.querySelectorAll(".tabs button").forEach(b => b.classList.toggle("active", b.dataset.tab === name));
    document.querySelectorAll(".tab").forEach(t => { t.hidden = t.id !== "tab-" + name; });
    const side = document.querySelector(".side"); const wide = name === "runs";
    if (side.classList.contains("wide") !== wide) {
      // The graph's pane changes size: its ResizeObserver redoes the automatic view (readable from
      // the top, or the whole graph after Fit) or keeps the user's. Fitting the whole graph here made
      // a tall model a thin unreadable strip beside the run card.
      side.classList.toggle("wide", wide);
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
    if (S.constants) q.set("constants", "1");
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
      const unit = M.view.unit(name); const item = unit && M.view.items.get(unit);
      // drawn itself, or inside a node's box (a folded Constant): nothing to open
      if (!unit || unit === name || !item || item.kind !== "group" || !S.layout || S.layout.mode !== "collapsed" || S.expanded.has(unit)) return !!unit;
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
    if (L && (L.folded_count || S.constants)) {   // Constant nodes folded into their consumers, or shown
      parts.push(" ", h("a", { id: "constants-toggle", title: S.constants ? "fold constant nodes (Constant, Identity of a weight) into their consumers" : "draw the constant nodes (Constant, Identity of a weight)",
        onclick: () => { S.constants = !S.constants; M.reload(); } }, S.constants ? "⊟ fold constants" : "⊞ " + L.folded_count + " constant nodes folded"));
    }
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
    } else if (S.scale && ["time", "memory"].includes($("colour").value)) {   // the heat scale's ends
      kids = ["colour: " + $("colour").value + " ", M.swatch(SG.heat(0)), " 0 → ", M.swatch(SG.heat(1)), " " + S.scale +
        " (largest box; a group: the sum of its members)"];
    } else kids = ["colour: " + $("colour").selectedOptions[0].textContent + (S.partitioned ? " · partitions drawn as clusters" : "") + " · drag or wheel to move, ctrl+wheel or + − to zoom"];
    SG.fill($("legend"), kids);
  };

  /* ---------------- colouring ---------------- */
  /* Original node names per closed group of the drawn layout (``units`` maps a member to its box). */
  M.groupMembers = function (L) {
    const out = {};
    for (const [name, unit] of Object.entries(L.units || {})) (out[unit] = out[unit] || []).push(name);
    return out;
  };
  /* A closed group's badge when colouring by supported or not: its members' share per category as a
     bar, and "13/15 in subgraphs" (a box with 2 unsupported nodes of 15 is not drawn all red). */
  function coverageBadge(names, left) {
    const counts = { covered: 0 }; for (const k in M.LEFT) counts[k] = 0;
    for (const name of names) counts[left.has(name) ? left.get(name) : "covered"] += 1;
    const total = names.length || 1;
    const parts = [[counts.covered / total, M.COVERED]];
    for (const k in M.LEFT) parts.push([counts[k] / total, M.LEFT[k].colour]);
    const fill = counts.covered === names.length ? M.COVERED : (counts.covered === 0 && counts.unsupported === names.length ? M.LEFT.unsupported.colour : "#ffffff");
    return { fill, badge: { parts, text: counts.covered + "/" + names.length + " in subgraphs" } };
  }
  const fmtBytes = b => SG.bytes(b);
  const fmtSecs = t => t >= 1 ? t.toFixed(2) + " s" : t >= 1e-3 ? (t * 1e3).toFixed(2) + " ms" : (t * 1e6).toFixed(1) + " µs";

  M.applyColour = function () {
    const mode = $("colour").value; const fills = {}; const badges = {};
    const L = S.layout; if (!L) return;
    const assign = {};
    const subs = S.session ? S.dbgSubgraphs : (S.result ? S.result.subgraphs : []);
    for (const sg of subs) for (const n of sg.nodes) assign[n] = sg.id;
    const left = new Map(S.result ? S.result.excluded.map(e => [e.node, M.leftCategory(e)]) : []);
    const secs = (S.lastRun && S.lastRun.result) ? S.lastRun.result.original_node_seconds || {} : {};
    const metrics = L.metrics || {};
    const members = M.groupMembers(L);
    /* time and memory: a closed group counts the sum over its members, and every drawn box (node or
       group) is shaded against the largest drawn one */
    const amount = mode === "time" ? (name => secs[name]) : mode === "memory" ? (name => metrics[name] ? metrics[name].out_bytes : undefined) : null;
    const totals = {};
    if (amount) {
      for (const n of L.nodes) {
        if (n.kind === "node" && amount(n.id) != null) totals[n.id] = amount(n.id);
        if (n.kind === "group") {
          const known = (members[n.id] || []).filter(name => amount(name) != null);
          if (known.length) totals[n.id] = known.reduce((t, name) => t + amount(name), 0);
        }
      }
      const top = Math.max(mode === "time" ? 1e-12 : 1, ...Object.values(totals));
      S.scale = Object.keys(totals).length ? (mode === "time" ? fmtSecs(top) : fmtBytes(top)) : null;
      for (const id in totals) fills[id] = SG.heat(totals[id] / top);
      for (const n of L.nodes) {
        if (n.kind !== "group" || totals[n.id] == null) continue;
        const k = (members[n.id] || []).length;
        badges[n.id] = { text: (mode === "time" ? fmtSecs(totals[n.id]) : fmtBytes(totals[n.id])) + " in " + k + " nodes" };
      }
    }
    for (const n of L.nodes) {
      if (n.kind === "node") {
        if (mode === "op") fills[n.id] = SG.opColour(n.op);
        else if (mode === "subgraph") { const sid = assign[n.id] != null ? assign[n.id] : n.sg; if (sid != null) fills[n.id] = SG.palette[sid % SG.palette.length]; }
        else if (mode === "supported" && S.result) fills[n.id] = left.has(n.id) ? M.LEFT[left.get(n.id)].colour : M.COVERED;
      } else if (n.kind === "group") {
        if (mode === "subgraph" && n.sg != null) fills[n.id] = SG.palette[n.sg % SG.palette.length];
        else if (mode === "supported" && S.result) {
          const c = coverageBadge(members[n.id] || [], left);
          fills[n.id] = c.fill; badges[n.id] = c.badge;
        }
      }
    }
    M.view.setFill(fills);
    M.view.setBadges(badges);
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
    $("search-count").textContent = (S.hit + 1) + "/" + S.hits.length;   // which hit is current, of how many
    $("search-count").title = "hit " + (S.hit + 1) + " of " + S.hits.length + ": " + name;
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
