/* The precision page: start a search for the nodes that must stay FP32, follow it live.
   The graph is coloured by each node's error growth (decades of error it adds in the reduced
   run); the current candidate pin set is outlined; runs, result and trouble nodes are listed.
   Every model string goes through SG.h / text nodes (common.js), never markup. */
"use strict";
(function () {
  const $ = id => document.getElementById(id);
  const h = SG.h;
  const root = $("prec");
  const mid = root.dataset.model;
  const view = new SG.GraphView($("graph"), {});
  let job = null, timer = null;
  const INF_COLOUR = "#c084fc";   // purple: apart from the heat scale, dark labels stay readable

  /* Colour: the decades of error a node adds by itself (reduced alone on exact FP32 inputs). */
  function colour(row) {
    if (!row.reduced) return null;
    if (row.alone_growth == null) return row.alone_nonfinite ? INF_COLOUR : null;
    return SG.heat(Math.max(0, row.alone_growth) / 3);
  }
  $("p-sw0").style.background = SG.heat(0); $("p-sw1").style.background = SG.heat(1 / 3);
  $("p-sw3").style.background = SG.heat(1); $("p-swinf").style.background = INF_COLOUR;

  function fmt(v) { return v == null ? "inf/NaN" : typeof v === "string" ? v : Number(v).toPrecision(3); }   // "inf", "nan": as the server wrote them

  function showNodes(rows) {
    const fills = {};
    for (const r of rows) { const c = colour(r); if (c) fills[r.node] = c; }
    view.setFill(fills);
    const trouble = rows.filter(r => r.overflow || r.underflow || r.suspect || r.alone_nonfinite).slice(0, 200);
    SG.fill($("p-nodes"), trouble.map(r => SG.row(r.node, r.op, String(r.overflow), String(r.underflow),
      r.alone_growth == null ? (r.alone_nonfinite ? "inf/NaN" : "") : String(r.alone_growth), r.suspect || "")));
  }

  function showResult(rep) {
    const box = $("p-result");
    box.classList.remove("muted");
    const notes = (rep.notes || []).length ? h("ul", { id: "p-notes" }, rep.notes.map(n => h("li", null, n))) : null;
    if (rep.no_pins_needed) { SG.fill(box, h("p", { id: "p-nopins" }, rep.summary), notes); return; }
    const v = rep.verified;
    SG.fill(box,
      h("p", null, rep.summary), notes,
      h("p", null, "Verified with exactly these pins: " + (v.match ? "within" : "NOT within") + " tolerance (max abs error " + fmt(v.max_abs) + ")"),
      h("ol", { id: "p-pins" }, rep.pins.map(p => h("li", null, h("code", null, p), " — error with only this node reduced: " +
        fmt((rep.alone[p] || {}).max_abs)))),
      h("p", null, "trtexec:"), h("pre", { class: "cmd", id: "p-trtexec" }, rep.trtexec),
      h("p", null, "polygraphy:"), h("pre", { class: "cmd" }, rep.polygraphy),
      h("p", null, h("a", { href: "/api/precision/" + job + "/marked.onnx", id: "p-download" }, "Download the ONNX model with the pins marked")));
    view.setState({ match: rep.pins });
  }

  function render(st) {
    const bar = $("p-progress");
    bar.hidden = false;
    bar.querySelector(".bar").style.width = Math.min(100, 100 * st.runs / Math.max(1, st.max_runs + 2)) + "%";
    bar.querySelector(".label").textContent = st.runs + " runs · " + st.stage;
    $("p-status").textContent = st.status === "running" ? "Searching: " + st.stage + " (" + st.seconds + " s)" :
      st.status === "done" ? "Done in " + st.runs + " runs" + (st.report ? ", " + st.report.search_runs + " of them searching" : "") + " (" + st.seconds + " s)" : st.status;
    $("p-status").dataset.status = st.status;
    $("p-inputs-used").textContent = st.inputs ? "inputs: " + st.inputs : "";
    SG.fill($("p-candidate"), st.candidate.length ? st.candidate.map(n => h("code", { class: "cand" }, n)).flatMap(c => [c, " "]) : "none");
    SG.fill($("p-runs"), st.history.slice().reverse().map(e => SG.row(String(e.run), e.stage, String(e.pins), e.match ? "yes" : "no", fmt(e.max_abs))));
    if (st.nodes) showNodes(st.nodes);
    if (st.status === "running") view.setState({ match: st.candidate });
    if (st.error) { $("p-error").hidden = false; $("p-error").textContent = st.error; }
    if (st.report) showResult(st.report);
  }

  async function poll() {
    try {
      const st = await SG.api("GET", "/api/precision/" + job);
      render(st);
      if (st.status === "running") { timer = setTimeout(poll, 300); return; }
    } catch (e) { SG.error(e); }
    $("p-go").disabled = false; $("p-cancel").hidden = true;
  }

  async function start() {
    const req = { target: $("p-target").value, atol: Number($("p-atol").value), rtol: Number($("p-rtol").value),
      max_runs: Number($("p-max").value), backend: $("p-backend").value, scope: $("p-scope").value };
    const form = new FormData();
    form.append("request", JSON.stringify(req));
    const file = $("p-inputs").files[0];
    if (file) form.append("inputs", file);
    $("p-error").hidden = true; $("p-go").disabled = true;
    SG.fill($("p-result"), "—"); $("p-result").classList.add("muted");
    let resp, data;
    try {
      resp = await fetch("/api/models/" + encodeURIComponent(mid) + "/precision", { method: "POST", body: form });
      data = await resp.json();
    } catch (e) { data = { error: "the server cannot be reached (" + e.message + ")" }; resp = { ok: false }; }
    if (!resp.ok) { $("p-error").hidden = false; $("p-error").textContent = data.error || "failed"; $("p-go").disabled = false; return; }
    job = data.id; $("p-cancel").hidden = false;
    render(data); clearTimeout(timer); poll();
  }

  $("p-go").addEventListener("click", start);
  $("p-cancel").addEventListener("click", () => { if (job) SG.api("POST", "/api/precision/" + job + "/cancel").catch(SG.error); });
  SG.api("GET", "/api/models/" + encodeURIComponent(mid) + "/layout").then(layout => {
    view.render(layout); document.body.dataset.ready = "1";
  }).catch(SG.error);
})();
