/* A model's page: wiring of the toolbar, tabs and keys, then the first load. Loaded last. */
"use strict";
(function () {
  const M = SG.M, S = M.S, $ = M.$, h = SG.h;

  document.querySelectorAll(".tabs button").forEach(b => { b.onclick = () => { M.showTab(b.dataset.tab); if (b.dataset.tab === "runs") M.listRuns(); }; });
  $("backend").onchange = () => M.selectBackend($("backend").value);
  $("partition-go").onclick = async () => { try { await M.doPartition(M.selection()); } catch (e) { SG.error(e); } };
  $("colour").onchange = M.applyColour;
  $("grp").onchange = () => { S.expanded.clear(); M.reload(); };
  $("fit").onclick = () => M.view.fit();
  $("search").oninput = ev => M.search(ev.target.value);
  $("search").onkeydown = ev => { if (ev.key === "Enter") { ev.preventDefault(); M.nextHit(ev.shiftKey ? -1 : 1); } };
  $("zoom-in").onclick = () => M.view.zoomBy(1.25);
  $("zoom-out").onclick = () => M.view.zoomBy(0.8);
  $("rule-edit").onclick = M.ruleDialog;
  $("dbg-start").onclick = M.startSession;
  $("dbg-next").onclick = () => M.step("next");
  $("dbg-prev").onclick = () => M.step("prev");
  $("dbg-first").onclick = () => M.step("first");
  $("dbg-last").onclick = () => { M.stopPlay(); M.step("last"); };
  $("dbg-play").onclick = M.togglePlay;
  $("dbg-run").onclick = M.runToBreakpoint;
  $("dbg-speed").oninput = () => { if (S.playing) { M.stopPlay(); M.togglePlay(); } };
  $("bp-type").onchange = M.syncBp;
  $("trt-go").onclick = M.trt;
  $("run-go").onclick = M.startRun;
  $("run-cancel").onclick = M.cancelRun;
  document.addEventListener("keydown", ev => {
    const tag = (ev.target.tagName || "").toLowerCase();
    if (["input", "select", "textarea"].includes(tag) || ev.ctrlKey || ev.metaKey || ev.altKey) return;
    if (tag === "button" && (ev.key === " " || ev.key === "Enter")) return;   // the button's own action
    const keys = { ArrowRight: () => M.step("next"), ArrowLeft: () => M.step("prev"), Home: () => M.step("first"),
      End: () => { M.stopPlay(); M.step("last"); }, " ": M.togglePlay, b: M.runToBreakpoint, f: () => M.view.fit(), "/": () => $("search").focus(),
      "+": () => M.view.zoomBy(1.25), "=": () => M.view.zoomBy(1.25), "-": () => M.view.zoomBy(0.8) };
    if (keys[ev.key]) { ev.preventDefault(); keys[ev.key](); }
  });

  async function init() {
    try {
      const [summary, be, kinds] = await Promise.all([SG.api("GET", M.api("")), SG.api("GET", "/api/backends"), SG.api("GET", "/api/kinds")]);
      S.summary = summary; M.renderSummary(summary);
      SG.fill($("backend"), be.backends.map(b => h("option", { value: b.name }, b.name + (b.plugin ? " (plugin)" : b.name === "rule" ? " (made here)" : ""))));
      SG.fill($("bp-kind"), kinds.events.map(k => h("option", null, k)));   // the server's one list
      M.schemas = be.options || {};
      const names = be.backends.map(b => b.name);
      M.addEditor($("opts"));                  // the toolbar: the selected backend's options
      M.renderTrtOptions();                    // the TensorRT tab: the same state
      M.setSelection(M.initialSelection(M.params, names, summary));
      const errs = Object.entries(be.plugin_errors || {});
      if (errs.length) SG.error(errs.map(([, e]) => e).join("\n"));
      if (be.runs !== "available") { $("run-go").disabled = true; $("run-error").textContent = be.runs; $("run-error").hidden = false; }
      M.syncBp();
      await M.loadLayout();
      if (M.params.get("node")) await M.gotoNode(M.params.get("node"), true);   // a link from a run's report
    } catch (e) { SG.error(e); SG.fill($("graph"), SG.errorBox(e)); }
  }
  init();
})();
