/* The TensorRT tab: partition with TensorRT, unsupported ops, nodes left out, incompatibility
   groups, the cycle checks of the trace, subgraphs and downloads. */
"use strict";
(function () {
  const M = SG.M, S = M.S, $ = M.$, h = SG.h;

  M.trt = async function () {
    const out = $("trt-out"); SG.fill(out, h("p", { class: "muted" }, "partitioning…"));
    try {
      $("backend").value = "tensorrt"; M.syncBackendUi();
      const r = await M.doPartition({ backend: "tensorrt" });
      const s = r.summary; const q = M.query({ backend: "tensorrt" }).toString();
      const unsupported = (s.unsupported || []).map(u => SG.row(u.op_type, String(u.count), Object.keys(u.reasons).join("; ")));
      const left = r.excluded.map(e => h("li", null, h("span", { class: "clickable", "data-groups": e.node, onclick: () => M.showGroups(e.node) }, e.node), " — " + e.reason));
      const subs = r.subgraphs.map(sg => SG.row(String(sg.id), String(sg.node_count), SG.bytes(sg.boundary_bytes),
        h("a", { href: M.api("/subgraphs/" + encodeURIComponent(sg.id) + ".onnx?" + q), download: true }, "ONNX")));
      SG.fill(out,
        h("h3", null, "Summary"),
        h("table", { class: "kv", id: "trt-summary" },
          SG.row("coverage", [h("b", null, (100 * s.coverage).toFixed(1) + "%"), " (" + s.nodes_covered + " of " + s.nodes + " nodes)"]),
          SG.row("partitions", s.partitions + " (sizes " + s.partition_sizes.min + "–" + s.partition_sizes.max + ")"),
          SG.row("cycles avoided", String(s.cycles_avoided))),
        h("h3", null, "Unsupported op types"),
        h("table", { class: "grid" }, SG.headRow("op", "nodes", "reason"),
          unsupported.length ? unsupported : h("tr", null, h("td", { colspan: 3, class: "muted" }, "none"))),
        h("h3", null, "Nodes left out ", h("span", { class: "muted" }, "(click for incompatibility groups)")),
        h("ul", { id: "trt-excluded" }, left.length ? left : h("li", { class: "muted" }, "none")),
        h("div", { id: "trt-groups" }),
        h("h3", null, "Cycle checks"), h("div", { id: "trt-cycles", class: "muted" }, "reading the trace…"),
        h("h3", null, "Subgraphs"), h("table", { class: "grid" }, SG.headRow("#", "nodes", "boundary", ""), subs),
        h("p", null, h("a", { class: "button", href: M.api("/partitioned.onnx?" + q), download: true }, "Download the partitioned ONNX")));
      cycleChecks(r);
    } catch (e) { SG.fill(out, SG.errorBox(e)); }
  };

  function pathLink(names, label) {
    return h("span", { class: "clickable", "data-path": names.join("|"), onclick: () => { S.groups = null; M.view.setState({ path: names }); M.legend(); } }, label);
  }

  async function cycleChecks(r) {
    const box = $("trt-cycles");
    try {
      const st = await SG.api("POST", "/api/sessions", { model: M.MID, backend: "tensorrt" });
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
      for (const c of r.cycles || []) kids.push(h("div", { class: "muted" }, "recorded: seed " + c.seed + ", path " + (c.path || []).join(" → ") + ", excluded " + c.excluded));
      box.className = ""; SG.fill(box, kids);
    } catch (e) { SG.fill(box, SG.errorBox(e)); }
  }

  M.showGroups = async function (node) {
    try {
      const g = await SG.api("GET", M.api("/groups?node=" + encodeURIComponent(node)));
      S.groups = g;
      if (S.body) { S.body = ""; await M.loadLayout(); }
      M.view.setState({ path: [node], anc: g.ancestors, desc: g.descendants });
      M.view.center(node);
      M.legend();
      const list = xs => xs.length ? xs.map((x, k) => [k ? ", " : null, h("code", null, x)]) : h("span", { class: "muted" }, "none");
      const panel = h("div", { class: "panel", id: "groups-panel" },
        h("h3", null, "Incompatibility groups of ", h("code", null, node), " (" + g.op_type + ")"),
        h("p", null, g.compatible ? "compatible with TensorRT" : [h("b", null, "incompatible:"), " " + g.reason]),
        h("p", null, h("span", { class: "sw anc" }), " ", h("b", null, "ancestors"), " (" + g.ancestor_count + "): ", list(g.ancestors)),
        h("p", null, h("span", { class: "sw desc" }), " ", h("b", null, "descendants"), " (" + g.descendant_count + "): ", list(g.descendants)),
        h("p", { class: "muted" }, g.note));
      if ($("trt-groups")) { SG.fill($("trt-groups"), panel); M.showTab("trt"); } else { $("tab-node").prepend(panel); }
    } catch (e) { SG.error(e); }
  };
})();
