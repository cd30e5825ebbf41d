/* The Summary tab: the model's name, opsets, inputs and outputs, op counts and metadata. */
"use strict";
(function () {
  const M = SG.M, h = SG.h;
  M.renderSummary = function (m) {
    const io = list => list.map(t => SG.row(h("code", null, t.name), t.dtype || "?", SG.shape(t)));
    const opset = Object.entries(m.opset).map(([d, v]) => (d || "ai.onnx") + " " + v).join(", ");
    const meta = Object.entries(m.metadata || {});
    SG.fill(M.$("tab-summary"),
      h("h3", null, m.name),
      h("p", null, m.nodes + " nodes · opset " + opset + " · " + m.initializers + " weights"),
      m.graph_name ? h("p", { class: "muted" }, "graph " + m.graph_name) : null,
      h("h3", null, "inputs"), h("table", { class: "grid" }, io(m.inputs)),
      h("h3", null, "outputs"), h("table", { class: "grid" }, io(m.outputs)),
      h("h3", null, "op counts"), h("table", { class: "grid" }, Object.entries(m.op_counts).map(([o, n]) => SG.row(o, String(n)))),
      meta.length ? [h("h3", null, "metadata"), h("table", { class: "kv", id: "summary-meta" }, meta.map(([k, v]) => SG.row(k, v)))] : null);
  };
})();
