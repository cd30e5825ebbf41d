/* The Runs tab: start a comparison run, follow its progress, list this model's runs, plots. */
"use strict";
(function () {
  const M = SG.M, S = M.S, $ = M.$, h = SG.h;
  let poll = null;
  const runUrl = (rid, path) => "/api/runs/" + encodeURIComponent(rid) + (path || "");

  function showError(msg) { $("run-error").textContent = msg; $("run-error").hidden = false; }

  M.startRun = async function () {
    let sel; try { sel = M.selection(); } catch (e) { SG.error(e); return; }
    $("run-error").hidden = true; $("run-plots").replaceChildren();
    try {
      const job = await SG.api("POST", "/api/runs", Object.assign({ model: M.MID, device: $("run-device").value, executor: $("run-executor").value }, sel));
      S.runId = job.id; $("run-cancel").hidden = false; $("run-go").disabled = true;
      progress(job);
      poll = setInterval(pollRun, 300);
    } catch (e) { showError(e.message); }
  };
  function progress(job) {
    const p = $("run-progress"); p.hidden = false;
    p.querySelector(".bar").style.width = (100 * (job.progress || 0)).toFixed(0) + "%";
    p.querySelector(".label").textContent = job.status + ": " + (job.message || job.stage || "");
  }
  async function pollRun() {
    try {
      const run = await SG.api("GET", runUrl(S.runId));
      progress(run);
      if (["done", "failed", "cancelled"].includes(run.status)) {
        clearInterval(poll); poll = null; $("run-cancel").hidden = true; $("run-go").disabled = false;
        if (run.status === "done" && run.result) { S.lastRun = run; await SG.renderRun($("run-plots"), run); $("run-plots").dataset.run = run.id; }
        else showError(run.status === "cancelled" ? "the run was cancelled" : ("the run failed: " + (run.error || "unknown error")));
        M.listRuns();
      }
    } catch (e) { clearInterval(poll); poll = null; $("run-go").disabled = false; SG.error(e); }
  }
  M.cancelRun = async function () { if (S.runId) { try { await SG.api("POST", runUrl(S.runId, "/cancel")); } catch (e) { SG.error(e); } } };

  async function showRun(rid) {
    try { const run = await SG.api("GET", runUrl(rid)); S.lastRun = run; await SG.renderRun($("run-plots"), run); } catch (e) { SG.error(e); }
  }
  M.listRuns = async function () {
    try {
      const data = await SG.api("GET", "/api/runs?model=" + encodeURIComponent(M.MID));
      const rows = data.runs.map(r => SG.row(h("input", { type: "checkbox", value: r.id, disabled: r.status !== "done" }),
        new Date(r.created * 1000).toLocaleTimeString(), r.backend, r.executor + "/" + r.device,
        [r.status, r.status === "done" ? [" ", h("span", { class: "clickable", "data-show": r.id, onclick: () => showRun(r.id) }, "show")] : null]));
      if (!rows.length) { SG.fill($("run-list"), h("p", { class: "muted" }, "no runs yet")); return; }
      SG.fill($("run-list"), h("table", { class: "grid" }, SG.headRow("", "when", "backend", "executor", "status"), rows),
        h("button", { id: "run-compare", onclick: () => {
          const ids = [...$("run-list").querySelectorAll("input:checked")].map(i => i.value);
          if (ids.length !== 2) { SG.error("tick exactly two finished runs"); return; }
          location.href = "/runs/compare?a=" + encodeURIComponent(ids[0]) + "&b=" + encodeURIComponent(ids[1]);
        } }, "Compare the two ticked runs"));
    } catch (e) { SG.error(e); }
  };
})();
