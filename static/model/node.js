/* The Node tab: a node's op, attributes, inputs and outputs, links to its neighbours and bodies. */
"use strict";
(function () {
  const M = SG.M, S = M.S, $ = M.$, h = SG.h;

  M.onNodeClick = async function (id, item) {
    if (!item) return;
    if (item.kind === "group") { await M.openGroup(id).catch(SG.error); return; }
    if (item.kind !== "node") return;
    S.selected = id; M.view.setSelected(id);
    const q = new URLSearchParams({ name: id }); if (S.body) q.set("body", S.body);
    try {
      const n = await SG.api("GET", M.api("/node?" + q));
      renderNode(n);
      M.showTab("node");
    } catch (e) { SG.error(e); }
  };

  function gotoLink(name) {
    return h("span", { class: "clickable", "data-goto": name, onclick: () => {
      M.expandTo(name).then(() => { M.view.center(name); M.view.setState({ focus: [name] }); M.onNodeClick(name, M.view.items.get(M.view.unit(name))); }).catch(SG.error);
    } }, name);
  }
  function tensorRows(list, dir) {
    return list.map(x => SG.row([h("code", null, x.name || "(omitted)"), x.weight ? [" ", h("span", { class: "chip" }, "weight")] : null],
      x.dtype || "?", SG.shape(x),
      dir === "in" ? (x.producer ? gotoLink(x.producer) : "") : (x.consumers || []).map((c, k) => [k ? ", " : null, gotoLink(c)])));
  }
  function partLine(n) {
    if (!S.result || S.body) return null;
    const sg = S.result.subgraphs.find(s => s.nodes.includes(n.name));
    const ex = S.result.excluded.find(e => e.node === n.name);
    return h("p", null, sg ? ["in subgraph ", h("b", null, String(sg.id)), " (" + sg.property + ")"] : ex ? "left out: " + ex.reason : "");
  }

  function renderNode(n) {
    const named = n.attr_dtypes || {};   // a data-type enum with its name: "6 (INT32)"
    const attrs = Object.entries(n.attrs).map(([k, v]) => SG.row(k, [h("code", null, JSON.stringify(v).slice(0, 400)),
      named[k] ? h("span", { class: "muted attr-dtype" }, " (" + named[k] + ")") : null]))
      // left out by the node: ONNX's schema default, which every backend (and a rule) reads
      .concat(Object.entries(n.attr_defaults || {}).map(([k, v]) => SG.row(h("span", { class: "muted" }, k),
        [h("code", { class: "muted" }, JSON.stringify(v).slice(0, 400)), h("span", { class: "muted attr-default" }, " (default)")])));
    const bodies = Object.entries(n.bodies).map(([k, b]) => h("button", { "data-body": n.name + ":" + k, onclick: () => {
      S.body = S.body ? S.body + "|" + n.name + ":" + k : n.name + ":" + k; S.expanded.clear(); M.reload();
    } }, "open " + k + " (" + b.nodes + " nodes)"));
    const groupsBtn = h("button", { id: "node-groups", hidden: !!S.body, onclick: () => M.showGroups(n.name) }, "incompatibility groups");
    // the selector steps over the top-level graph: a node inside a body breaks at the node holding it
    const first = S.body ? S.body.split("|")[0] : "";
    const target = S.body ? first.slice(0, first.lastIndexOf(":")) : n.name;
    const breakBtn = h("button", { id: "node-break", "data-target": target, onclick: () => { $("bp-type").value = "node"; M.syncBp(); $("bp-value").value = target; M.showTab("debug"); } },
      S.body ? "break at " + target + " (holds this body)" : "break at this node");
    SG.fill($("tab-node"),
      h("h3", { id: "node-title" }, n.op_type + " ", h("code", null, n.name)),
      n.domain ? h("p", null, "domain " + n.domain) : null,
      partLine(n),
      bodies.length ? h("div", { class: "row" }, bodies) : null,
      h("div", { class: "row" }, groupsBtn, breakBtn),
      h("h3", null, "attributes"), h("table", { class: "kv" }, attrs.length ? attrs : h("tr", null, h("td", { class: "muted" }, "none"))),
      h("h3", null, "inputs"), h("table", { class: "grid" }, SG.headRow("tensor", "dtype", "shape", "from"), tensorRows(n.inputs, "in")),
      h("h3", null, "outputs"), h("table", { class: "grid" }, SG.headRow("tensor", "dtype", "shape", "to"), tensorRows(n.outputs, "out")));
  }
})();
