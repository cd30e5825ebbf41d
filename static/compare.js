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
  async function go() {
    const out = document.getElementById("compare-out"); out.innerHTML = "";
    for (const id of ["run-a", "run-b"]) {
      const rid = document.getElementById(id).value; if (!rid) continue;
      const col = SG.el("div", { class: "panel", id: "col-" + id });
      out.appendChild(col);
      try { const run = await SG.api("GET", "/api/runs/" + encodeURIComponent(rid)); col.appendChild(SG.el("h2", {}, SG.esc(label(run)))); const box = SG.el("div"); col.appendChild(box); await SG.renderRun(box, run); }
      catch (e) { col.innerHTML = '<div class="error">' + SG.esc(e.message) + "</div>"; }
    }
  }
  document.getElementById("compare-go").onclick = go;
  init().catch(SG.error);
})();
