/* The TensorRT tab: the options (rule table release, plugin ops, min size… from the backend's
   option schema), partition with TensorRT, which rule table decided and its warnings, unsupported
   ops, nodes left out grouped by reason kind (collapsible, coloured by category with a legend that
   uses the same colours), incompatibility groups, the cycle checks of the trace, downloads. */
"use strict";
(function () {
  const M = SG.M, S = M.S, $ = M.$, h = SG.h;
  let labels = {};

  /* The tab's option form is a second editor of the page's one selection (selection.js): an edit
     here selects tensorrt with those options in the toolbar too, and the toolbar's tensorrt options
     show here. Teaching mode is left to the toolbar (it gives the same result). */
  M.renderTrtOptions = function () {
    M.addEditor($("trt-opts"), { backend: "tensorrt", skip: ["mode"], idPrefix: "trt-" });
    M.onSelection(describe); describe(S.sel);
  };
  function describe(sel) {
    const opts = Object.entries(sel.options || {}).map(([k, v]) => k + "=" + (Array.isArray(v) ? v.join(",") : String(v)));
    SG.fill($("trt-selection"), sel.backend === "tensorrt"
      ? ["selection: ", h("b", null, "tensorrt"), opts.length ? " · " + opts.join(" · ") : " · default options", " (the toolbar's, the same state)"]
      : ["the toolbar selects ", h("b", null, sel.backend), "; partitioning here selects tensorrt with the options below"]);
  }
  /* The tensorrt selection: the page's when it is tensorrt, else tensorrt with the options last set for it. */
  M.trtSelection = function () {
    if (S.sel.backend !== "tensorrt") M.selectBackend("tensorrt");
    return M.selection();
  };

  M.trt = async function () {
    const out = $("trt-out"); SG.fill(out, h("p", { class: "muted" }, "partitioning…"));
    try {
      const sel = M.trtSelection();
      if (!Object.keys(labels).length) labels = (await SG.api("GET", "/api/kinds")).reason_labels || {};
      const r = await M.doPartition(sel);
      $("colour").value = "supported"; M.applyColour();
      render(out, r, sel);
    } catch (e) { SG.fill(out, SG.errorBox(e)); }
  };

  function render(out, r, sel) {
    const s = r.summary; const q = M.query(sel).toString();
    const unsupported = (s.unsupported || []).map(u => SG.row(u.op_type, String(u.count), Object.keys(u.reasons).join("; "),
      assumeToggle(u.op_type, false)));
    for (const op of assumed()) unsupported.push(SG.row(op, "—", "assumed supported (--assume-supported)", assumeToggle(op, true)));
    const subs = r.subgraphs.map(sg => SG.row(String(sg.id), String(sg.node_count), SG.boundaryBytes(sg),
      h("a", { href: M.api("/subgraphs/" + encodeURIComponent(sg.id) + ".onnx?" + q), download: true }, "ONNX")));
    const notes = Object.entries(s.tensorrt_notes || {});
    SG.fill(out,
      h("h3", null, "Summary"),
      h("table", { class: "kv", id: "trt-summary" },
        SG.row("coverage", [h("b", null, (100 * s.coverage).toFixed(1) + "%"), " (" + s.nodes_covered + " of " + s.nodes + " nodes)"]),
        SG.row("partitions", s.partitions + (s.partitions ? " (sizes " + s.partition_sizes.min + "–" + s.partition_sizes.max + ")" : "")),
        SG.row("cycles avoided", String(s.cycles_avoided)),
        SG.row("rule table", h("span", { id: "trt-rules" }, "TensorRT " + (s.tensorrt_rules || "?") + "'s ONNX parser")),
        releaseChanges(s.tensorrt_release_changes), dlaRow(s.dla)),
      (s.tensorrt_warnings || []).map(w => h("div", { class: "trt-warn" }, "⚠ " + w)),
      notes.length ? h("details", { id: "trt-notes" }, h("summary", null, "notes on " + (s.tensorrt_note_count || notes.length) + " node(s) accepted with a caveat"),
        h("ul", null, notes.map(([n, t]) => h("li", null, h("code", null, n), " — " + t)))) : null,
      h("h3", null, "Unsupported op types"),
      h("table", { class: "grid", id: "trt-unsupported" }, SG.headRow("op", "nodes", "reason", "what if"),
        unsupported.length ? unsupported : h("tr", null, h("td", { colspan: 4, class: "muted" }, "none"))),
      h("h3", null, "What to support first ", h("span", { class: "muted" }, "(each op assumed supported in turn, as a plugin would make it)")),
      h("div", { id: "trt-gains", class: "muted" }, "ranking…"),
      h("h3", null, "Nodes left out ", h("span", { class: "muted" }, "(" + r.excluded.length + "; click one for its incompatibility groups)")),
      leftLegend(), leftOut(r.excluded),
      h("h3", null, "Cycle checks"), h("div", { id: "trt-cycles", class: "muted" }, "reading the trace…"),
      h("h3", null, "Subgraphs"), h("table", { class: "grid" }, SG.headRow("#", "nodes", "boundary", ""), subs),
      h("p", null, h("a", { class: "button", href: M.api("/partitioned.onnx?" + q), download: true }, "Download the partitioned ONNX")));
    cycleChecks(r, sel);
    gains(sel, !!s.dla);
  }

  /* The ranking of `sglens gains` (GET /gains): per left-out op type what supporting it would gain,
     best first, each with the same "treat as supported (plugin)" box; the best single nodes below. */
  async function gains(sel, dla) {
    const box = $("trt-gains");
    try {
      const q = new URLSearchParams();
      if (sel.options) q.set("options", JSON.stringify(sel.options));
      const g = await SG.api("GET", M.api("/gains?" + q));
      if (box !== $("trt-gains")) return;   // the tab was re-rendered meanwhile
      const merged = dla ? "loadables saved" : "subgraphs merged";
      const best = Math.max(1, ...g.op_types.map(r => r.gain.nodes_covered));
      const bar = n => h("span", { class: "gain-bar", style: "width:" + Math.round(60 * Math.max(0, n) / best) + "px" });
      // symbolic-shape boundaries have no size: "unknown", never a saving of 0 B
      const savedBytes = r => (g.base.boundary_unknown || r.after.boundary_unknown) && !r.gain.boundary_bytes_saved
        ? "unknown" : SG.bytes(r.gain.boundary_bytes_saved);
      const rows = g.op_types.map((r, k) => h("tr", { "data-op": r.op_type, class: k === 0 ? "gain-best" : "",
        title: "after: " + r.after.subgraphs + (dla ? " loadable(s), " : " subgraph(s), ") + r.after.covered + " node(s) covered" },
        ...[r.op_type, String(r.nodes), String(r.gain.subgraphs_merged), [bar(r.gain.nodes_covered), " " + r.gain.nodes_covered],
          savedBytes(r), assumeToggle(r.op_type, false)].map(c => h("td", null, c))));
      const nodes = g.nodes.slice(0, 10).map(r => SG.row(h("code", null, r.node), r.op_type, String(r.gain.subgraphs_merged),
        String(r.gain.nodes_covered), savedBytes(r)));
      box.className = "";
      SG.fill(box,
        h("p", { class: "muted" }, "now: " + g.base.subgraphs + (dla ? " DLA loadable(s), " : " subgraph(s), ") + g.base.covered +
          " node(s) covered, " + (g.base.boundary_unknown
            ? (g.base.boundary_bytes ? SG.bytes(g.base.boundary_bytes) + " and " : "") + g.base.boundary_unknown + " symbolic-shape tensor(s) of unknown size"
            : SG.bytes(g.base.boundary_bytes)) + " crossing subgraph boundaries"),
        rows.length ? h("table", { class: "grid", id: "trt-gains-ops" },
          SG.headRow("op", "nodes", merged, "nodes covered", "boundary saved", "what if"), rows)
          : h("p", null, "nothing left out: nothing to gain"),
        nodes.length ? h("details", { id: "trt-gains-nodes" }, h("summary", null, "best single nodes (" + g.nodes_tried + " of " + g.nodes_refused + " tried)"),
          h("table", { class: "grid" }, SG.headRow("node", "op", merged, "nodes covered", "boundary saved"), nodes)) : null);
    } catch (e) { if (box === $("trt-gains")) SG.fill(box, SG.errorBox(e)); }
  }

  /* "Treat as supported (plugin)": the op goes into the assume_supported option and the tab re-runs,
     so the partition change shows at once (sglens gains ranks which op is worth it). */
  /* The ops assumed supported: an option of the one selection (selection.js), never a copy of it. */
  function assumed() {
    const v = S.sel.backend === "tensorrt" ? S.sel.options.assume_supported : null;
    return Array.isArray(v) ? v.slice() : [];
  }
  function assumeToggle(op, on) {
    const box = h("input", { type: "checkbox", class: "trt-assume", "data-op": op, checked: on });
    box.addEventListener("change", () => {
      const now = assumed().filter(x => x !== op);
      if (box.checked) now.push(op);
      const options = Object.assign({}, S.sel.backend === "tensorrt" ? S.sel.options : {});
      if (now.length) options.assume_supported = now; else delete options.assume_supported;
      M.setSelection({ backend: "tensorrt", options });
      M.trt();
    });
    return h("label", null, box, " treat as supported (plugin)");
  }

  /* What the chosen release's table changes from the release before (op names are data: text only). */
  function releaseChanges(c) {
    if (!c || !c.previous) return null;
    const part = (label, ops) => ops.length ? label + " " + ops.slice(0, 12).join(", ") + (ops.length > 12 ? "…" : "") + "; " : "";
    return SG.row("since " + c.previous, h("span", { id: "trt-release-changes" },
      part("supported now:", c.now_supported) + part("no longer:", c.no_longer_supported) +
      part("new rows:", c.added) + c.changed_count + " op(s) with changed checks"));
  }

  /* --trt-target dla: the loadable count against the per-core limit (an error before any build). */
  function dlaRow(d) {
    if (!d) return null;
    const c = d.release_changes || {};
    const list = ops => ops.length ? ops.join(", ") : "none";
    return [SG.row("DLA loadables", h("span", { id: "trt-dla", class: d.error ? "trt-warn" : "" },
      d.loadables + " of at most " + d.loadables_per_core + " per core; " + d.gpu_fallback_count +
      " node(s) fall back to the GPU" + (d.error ? " — " + d.error : ""))),
      c.previous ? SG.row("DLA since " + c.previous, h("span", { id: "trt-dla-changes" },
        "Orin matrix: on the DLA now: " + list(c.now_on_dla) + "; no longer: " + list(c.no_longer_on_dla))) : null];
  }

  function leftLegend() {
    const kids = [];
    for (const k in M.LEFT) kids.push(M.swatch(M.LEFT[k].colour, "lo-" + k), " " + M.LEFT[k].label + " ");
    return h("div", { class: "muted", id: "trt-legend" }, kids);
  }

  /* The left-out nodes grouped by reason kind (the typed reasons), with counts; each group opens. */
  function leftOut(excluded) {
    if (!excluded.length) return h("ul", { id: "trt-excluded" }, h("li", { class: "muted" }, "none"));
    const byKind = new Map();
    for (const e of excluded) { const k = e.kind || "other"; if (!byKind.has(k)) byKind.set(k, []); byKind.get(k).push(e); }
    const groups = [...byKind.entries()].sort((a, b) => b[1].length - a[1].length).map(([kind, list]) => {
      const cats = new Set(list.map(M.leftCategory));
      const items = list.map(e => {
        const cat = M.leftCategory(e);
        return h("li", { "data-category": cat }, M.swatch(M.LEFT[cat].colour, "lo-" + cat), " ",
          h("span", { class: "clickable", "data-groups": e.node, onclick: ev => M.showGroups(e.node, ev.target.closest("li")) }, e.node),
          " — " + e.reason);
      });
      return h("details", { open: byKind.size <= 3 || list.length <= 20, "data-kind": kind },
        h("summary", null, (labels[kind] || kind) + " ", h("span", { class: "muted" }, "(" + list.length + ")"),
          " ", [...cats].map(c => M.swatch(M.LEFT[c].colour, "lo-" + c))),
        h("ul", null, items));
    });
    return h("div", { id: "trt-excluded", class: "left-kinds" }, groups);
  }

  function pathLink(names, label) {
    return h("span", { class: "clickable", "data-path": names.join("|"), onclick: () => { S.groups = null; M.view.setState({ path: names }); M.view.center(names[0]); M.legend(); } }, label);
  }

  async function cycleChecks(r, sel) {
    const box = $("trt-cycles");
    try {
      const st = await SG.api("POST", "/api/sessions", Object.assign({ model: M.MID }, sel));
      const sid = encodeURIComponent(st.id);
      const ev = await SG.api("GET", "/api/sessions/" + sid + "/events?kinds=cycle,refuse");
      SG.api("DELETE", "/api/sessions/" + sid).catch(() => {});
      const cyc = ev.events.filter(e => e.kind === "cycle");
      const grp = ev.events.filter(e => e.kind === "refuse" && e.extra && e.extra.group);
      const kids = [];
      if (cyc.length) kids.push(h("ul", null, cyc.map(e => h("li", null, pathLink(e.path, e.path.join(" → ")), " — " + e.text))));
      else kids.push(h("p", null, "No contraction would have closed a cycle" + (grp.length ? ": the incompatibility groups kept these nodes apart first:" : ".")));
      if (grp.length) {
        kids.push(h("ul", null, grp.map(e => h("li", null, pathLink([e.node, e.neighbour, e.extra.incompatible], e.neighbour),
          " refused from " + e.node + ": " + e.reason))));
      }
      for (const c of r.cycles || []) kids.push(h("div", { class: "muted" }, "recorded from " + c.seed + ": path " + (c.path || []).join(" → ") + ", excluded " + c.excluded));
      box.className = ""; SG.fill(box, kids);
    } catch (e) { SG.fill(box, SG.errorBox(e)); }
  }

  /* A node's incompatibility groups: the node centred on the graph (its groups opened if it is inside
     a collapsed box) and the panel shown right under the clicked entry, scrolled into view. */
  M.showGroups = async function (node, anchor) {
    try {
      const sel = S.partitioned && S.partitioned.backend === "tensorrt" ? S.partitioned
        : (S.sel.backend === "tensorrt" ? M.selection() : { backend: "tensorrt" });
      const q = new URLSearchParams({ node });
      if (sel.options) q.set("options", JSON.stringify(sel.options));
      const g = await SG.api("GET", M.api("/groups?" + q));
      S.groups = Object.assign({ node }, g);
      if (S.body) { S.body = ""; await M.loadLayout(); }
      await M.expandTo(node);
      M.view.setState({ path: [node], anc: g.ancestors, desc: g.descendants });
      M.view.setSelected(node); S.selected = node;
      M.view.center(node);
      M.legend();
      const list = xs => xs.length ? [xs.slice(0, 60).map((x, k) => [k ? ", " : null, h("code", null, x)]),
        xs.length > 60 ? " … and " + (xs.length - 60) + " more" : null] : h("span", { class: "muted" }, "none");
      const panel = h("div", { class: "panel", id: "groups-panel" },
        h("h3", null, "Incompatibility groups of ", h("code", null, node), " (" + g.op_type + ")"),
        h("p", null, g.compatible ? "compatible with TensorRT" : [h("b", null, "incompatible:"), " " + g.reason]),
        h("p", null, h("span", { class: "sw anc" }), " ", h("b", null, "ancestors"), " (" + g.ancestor_count + "): ", list(g.ancestors)),
        h("p", null, h("span", { class: "sw desc" }), " ", h("b", null, "descendants"), " (" + g.descendant_count + "): ", list(g.descendants)),
        h("p", { class: "muted" }, g.note));
      const old = $("groups-panel"); if (old) old.remove();
      if (anchor && anchor.isConnected) { anchor.append(panel); M.showTab("trt"); }
      else if ($("trt-out") && $("trt-out").childElementCount) { $("trt-out").prepend(panel); M.showTab("trt"); }
      else $("tab-node").prepend(panel);
      panel.scrollIntoView({ block: "nearest" });
    } catch (e) { SG.error(e); }
  };
})();
