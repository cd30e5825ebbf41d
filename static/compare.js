/* Two stored runs side by side. */
"use strict";
(function () {
  const params = new URLSearchParams(location.search);
  const label = r => r.model_name + " · " + r.backend + " · " + r.executor + "/" + r.device + " · " + r.status +
    " · " + new Date(r.created * 1000).toLocaleString() + " (" + r.id + ")";
  async function init() {
    const data = await SG.api("GET", "/api/runs");
    const runs = data.runs.filter(r => r.status === "done");
    for (const id of ["run-a", "run-b"]) {
      const sel = document.getElementById(id);
      SG.fill(sel, runs.map(r => SG.h("option", { value: r.id }, label(r))));
    }
    if (params.get("a")) document.getElementById("run-a").value = params.get("a");
    if (params.get("b")) document.getElementById("run-b").value = params.get("b");
    else if (runs.length > 1) document.getElementById("run-b").value = runs[1].id;
    if (runs.length < 2) SG.fill(document.getElementById("compare-out"), SG.h("p", { class: "muted" }, "Finish two runs (Runs tab of a model) to compare them."));
    if (params.get("a") && params.get("b")) go();
  }
  function diffTable(a, b) {
    const ta = a.result.comparison.timings, tb = b.result.comparison.timings;
    const rows = [...new Set([...Object.keys(ta), ...Object.keys(tb)])].map(k => {
      const x = (ta[k] || {}).seconds, y = (tb[k] || {}).seconds;
      return SG.row(k, SG.ms(x), SG.ms(y), x && y ? (y / x).toFixed(2) + "×" : "n/a");
    });
    const ok = r => r.result.comparison.ok ? "match" : "differ";
    const panel = SG.h("div", { class: "panel", id: "compare-diff" }, SG.h("h2", null, "A vs B"),
      SG.h("table", { class: "grid" }, SG.headRow("run", "A median", "B median", "B / A"), rows,
        SG.row("outputs vs onnxruntime", ok(a), ok(b), "")));
    panel.style.gridColumn = "1 / -1";
    return panel;
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
    if (runs.length === 2 && runs[0].result && runs[1].result) out.appendChild(diffTable(runs[0], runs[1]));
    cols.forEach(c => out.appendChild(c));
    for (let k = 0; k < runs.length; k++) {
      cols[k].appendChild(SG.h("h2", null, (k ? "B: " : "A: ") + label(runs[k])));
      const box = SG.el("div"); cols[k].appendChild(box); await SG.renderRun(box, runs[k]);
    }
  }
  document.getElementById("compare-go").onclick = go;
  init().catch(SG.error);
})();
