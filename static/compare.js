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
      sel.innerHTML = runs.map(r => '<option value="' + r.id + '">' + SG.esc(label(r)) + "</option>").join("");
    }
    if (params.get("a")) document.getElementById("run-a").value = params.get("a");
    if (params.get("b")) document.getElementById("run-b").value = params.get("b");
    else if (runs.length > 1) document.getElementById("run-b").value = runs[1].id;
    if (runs.length < 2) document.getElementById("compare-out").innerHTML = '<p class="muted">Finish two runs (Runs tab of a model) to compare them.</p>';
    if (params.get("a") && params.get("b")) go();
  }
  function diffTable(a, b) {
    const ta = a.result.comparison.timings, tb = b.result.comparison.timings;
    const rows = [...new Set([...Object.keys(ta), ...Object.keys(tb)])].map(k => {
      const x = (ta[k] || {}).seconds, y = (tb[k] || {}).seconds;
      const ratio = x && y ? (y / x).toFixed(2) + "×" : "n/a";
      return "<tr><td>" + SG.esc(k) + "</td><td>" + SG.ms(x) + "</td><td>" + SG.ms(y) + "</td><td>" + ratio + "</td></tr>";
    }).join("");
    const ok = r => r.result.comparison.ok ? "match" : "differ";
    return '<div class="panel" id="compare-diff" style="grid-column: 1 / -1"><h2>A vs B</h2><table class="grid"><tr><th>run</th><th>A median</th><th>B median</th><th>B / A</th></tr>' + rows +
      "<tr><td>outputs vs onnxruntime</td><td>" + ok(a) + "</td><td>" + ok(b) + "</td><td></td></tr></table></div>";
  }
  async function go() {
    const out = document.getElementById("compare-out"); out.innerHTML = "";
    const runs = [];
    const cols = [];
    for (const id of ["run-a", "run-b"]) {
      const rid = document.getElementById(id).value; if (!rid) continue;
      const col = SG.el("div", { class: "panel", id: "col-" + id });
      cols.push(col);
      try { const run = await SG.api("GET", "/api/runs/" + encodeURIComponent(rid)); runs.push(run); }
      catch (e) { col.innerHTML = '<div class="error">' + SG.esc(e.message) + "</div>"; }
    }
    if (runs.length === 2 && runs[0].result && runs[1].result) out.insertAdjacentHTML("beforeend", diffTable(runs[0], runs[1]));
    cols.forEach(c => out.appendChild(c));
    for (let k = 0; k < runs.length; k++) {
      cols[k].appendChild(SG.el("h2", {}, (k ? "B: " : "A: ") + SG.esc(label(runs[k]))));
      const box = SG.el("div"); cols[k].appendChild(box); await SG.renderRun(box, runs[k]);
    }
  }
  document.getElementById("compare-go").onclick = go;
  init().catch(SG.error);
})();
