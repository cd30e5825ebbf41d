/* The page of a model that is no longer loaded: say so, and list its stored runs (each opens on the
   compare page, which shows a single run when given only ?a=). */
"use strict";
(function () {
  const box = document.getElementById("model-gone");
  const mid = box.dataset.model;
  document.getElementById("gone-id").textContent = mid;
  SG.api("GET", "/api/runs?model=" + encodeURIComponent(mid)).then(data => {
    const h = SG.h;
    const out = document.getElementById("gone-runs");
    if (!data.runs.length) { SG.fill(out, h("p", { class: "muted" }, "no runs of it were kept")); return; }
    SG.fill(out, h("table", { class: "grid" }, SG.headRow("run", "model", "backend", "status", "when"),
      data.runs.map(r => SG.row(h("a", { href: "/runs/compare?a=" + encodeURIComponent(r.id) }, r.id), r.model_name,
        r.backend, r.status, new Date(r.created * 1000).toLocaleString()))));
  }).catch(e => SG.fill(document.getElementById("gone-runs"), SG.errorBox(e)));
})();
