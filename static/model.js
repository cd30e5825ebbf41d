/* A model's page: graph view, selector debugger, TensorRT tab, runs, summary. */
"use strict";
(function () {
  const root = document.getElementById("app");
  const MID = root.dataset.model;
  const $ = id => document.getElementById(id);
  const params = new URLSearchParams(location.search);
  const S = { body: "", expanded: new Set(), partitioned: null, result: null, layout: null, summary: null,
    session: null, index: -1, known: 0, done: false, playing: null, busy: false, log: new Map(), dbgSubgraphs: [],
    rule: null, groups: null, lastRun: null, colour: "op", selected: null };
  const view = new SG.GraphView($("graph"), { onClick: onNodeClick });

  /* ---------------- selection (backend + options) ---------------- */
  function selection() {
    const backend = $("backend").value;
    const sel = { backend };
    if (backend === "default") sel.ops = $("ops").value.split(",").map(s => s.trim()).filter(Boolean);
    if (backend === "rule") {
      if (!S.rule) throw new Error("make a rule first: press 'Edit rule…'");
      sel.rule = S.rule;
    }
    return sel;
  }
  function query(sel) {
    const q = new URLSearchParams();
    if (!sel) return q;
    q.set("backend", sel.backend);
    if (sel.ops && sel.ops.length) q.set("ops", sel.ops.join(","));
    if (sel.rule) q.set("rule", JSON.stringify(sel.rule));
    return q;
  }
  function syncBackendUi() {
    const b = $("backend").value;
    $("ops-wrap").hidden = b !== "default";
    $("rule-edit").hidden = b !== "rule";
  }

  /* ---------------- layout ---------------- */
  async function loadLayout() {
    const q = query(S.body ? null : S.partitioned);
    if (S.body) q.set("body", S.body);
    if (S.expanded.size) q.set("expand", [...S.expanded].join(","));
    if ($("grp").checked && S.partitioned && !S.body) q.set("group", "partition");
    const t0 = performance.now();
    const layout = await SG.api("GET", "/api/models/" + encodeURIComponent(MID) + "/layout?" + q.toString());
    S.layout = layout;
    view.render(layout);
    $("graph").dataset.mode = layout.mode;
    $("graph").dataset.nodes = layout.nodes.length;
    $("graph").dataset.ms = Math.round(performance.now() - t0);
    renderCrumbs();
    $("grp-wrap").hidden = !(layout.mode === "collapsed" && S.partitioned && !S.body);
    applyColour();
    if (S.session && !S.body) applyStep(S.lastState);
    legend();
    document.body.dataset.ready = "1";
  }

  function renderCrumbs() {
    const c = $("view-crumbs"); const parts = [];
    parts.push('<a data-crumb="">' + SG.esc(root.dataset.name) + "</a>");
    if (S.body) {
      const steps = S.body.split("|");
      steps.forEach((st, k) => parts.push('› <a data-crumb="' + SG.esc(steps.slice(0, k + 1).join("|")) + '">' + SG.esc(st) + "</a>"));
    }
    if (S.expanded.size) parts.push('<a data-collapse="1" title="collapse every group">⊟ collapse all</a>');
    if (S.layout && S.layout.mode === "collapsed") parts.push('<span class="muted">' + S.layout.node_count + " nodes, grouped by name scope</span>");
    c.innerHTML = parts.join(" ");
    c.querySelectorAll("a[data-crumb]").forEach(a => a.onclick = () => { S.body = a.dataset.crumb; S.expanded.clear(); loadLayout().catch(SG.error); });
    const col = c.querySelector("a[data-collapse]"); if (col) col.onclick = () => { S.expanded.clear(); loadLayout().catch(SG.error); };
  }

  function legend() {
    const L = $("legend");
    if (S.session) L.innerHTML = '<span class="sw current"></span>current <span class="sw neighbour"></span>neighbour <span class="sw candidate"></span>candidates <span class="sw path"></span>cycle path <span class="sw sg"></span>subgraph made';
    else if (S.groups) L.innerHTML = '<span class="sw path"></span>incompatible node <span class="sw anc"></span>ancestors <span class="sw desc"></span>descendants';
    else L.innerHTML = "colour: " + SG.esc($("colour").selectedOptions[0].textContent) + (S.partitioned ? " · partitions drawn as clusters" : "") + " · drag to pan, wheel to zoom";
  }

  /* ---------------- colouring ---------------- */
  function applyColour() {
    const mode = $("colour").value; const fills = {};
    const L = S.layout; if (!L) return;
    const assign = {};
    const subs = S.session ? S.dbgSubgraphs : (S.result ? S.result.subgraphs : []);
    for (const sg of subs) for (const n of sg.nodes) assign[n] = sg.id;
    const excluded = new Set(S.result ? S.result.excluded.map(e => e.node) : []);
    const secs = (S.lastRun && S.lastRun.result) ? S.lastRun.result.original_node_seconds || {} : {};
    const maxT = Math.max(1e-12, ...Object.values(secs));
    const metrics = L.metrics || {};
    const maxB = Math.max(1, ...Object.values(metrics).map(m => m.out_bytes));
    for (const n of L.nodes) {
      if (n.kind !== "node") continue;
      if (mode === "op") fills[n.id] = SG.opColour(n.op);
      else if (mode === "subgraph") { const s = assign[n.id] != null ? assign[n.id] : n.sg; if (s != null) fills[n.id] = SG.palette[s % SG.palette.length]; }
      else if (mode === "supported" && S.result) fills[n.id] = excluded.has(n.id) ? "#fecaca" : "#bbf7d0";
      else if (mode === "time" && secs[n.id] != null) fills[n.id] = SG.heat(secs[n.id] / maxT);
      else if (mode === "memory" && metrics[n.id]) fills[n.id] = SG.heat(metrics[n.id].out_bytes / maxB);
    }
    for (const n of L.nodes) if (n.kind === "group" && mode === "subgraph" && n.sg != null) fills[n.id] = SG.palette[n.sg % SG.palette.length];
    view.setFill(fills);
    if (mode === "supported" && !S.result) SG.error("partition first to colour by supported or not");
    if (mode === "time" && !Object.keys(secs).length) SG.error("run a comparison first (Runs tab) to colour by time");
    legend();
  }

  /* ---------------- node panel ---------------- */
  function showTab(name) {
    document.querySelectorAll(".tabs button").forEach(b => b.classList.toggle("active", b.dataset.tab === name));
    document.querySelectorAll(".tab").forEach(t => { t.hidden = t.id !== "tab-" + name; });
    const wide = name === "runs";
    if (document.querySelector(".side").classList.contains("wide") !== wide) {
      document.querySelector(".side").classList.toggle("wide", wide);
      view.fit();
      if (window.Plotly) document.querySelectorAll("#run-plots .plot").forEach(p => window.Plotly.Plots.resize(p));
    }
  }
  async function onNodeClick(id, item) {
    if (!item) return;
    if (item.kind === "group") { S.expanded.add(id); await loadLayout().catch(SG.error); return; }
    if (item.kind !== "node") return;
    S.selected = id;
    const q = new URLSearchParams({ name: id }); if (S.body) q.set("body", S.body);
    try {
      const n = await SG.api("GET", "/api/models/" + encodeURIComponent(MID) + "/node?" + q);
      renderNode(n);
      showTab("node");
    } catch (e) { SG.error(e); }
  }
  function renderNode(n) {
    const t = $("tab-node");
    const attrs = Object.entries(n.attrs).map(([k, v]) => "<tr><td>" + SG.esc(k) + "</td><td><code>" + SG.esc(JSON.stringify(v)).slice(0, 400) + "</code></td></tr>").join("") || '<tr><td class="muted">none</td></tr>';
    const tens = (list, dir) => list.map(x => "<tr><td><code>" + SG.esc(x.name || "(omitted)") + "</code>" + (x.weight ? ' <span class="chip">weight</span>' : "") +
      "</td><td>" + SG.esc(x.dtype || "?") + "</td><td>" + SG.shape(x) + "</td><td>" +
      (dir === "in" ? (x.producer ? '<span class="clickable" data-goto="' + SG.esc(x.producer) + '">' + SG.esc(x.producer) + "</span>" : "") :
        (x.consumers || []).map(c => '<span class="clickable" data-goto="' + SG.esc(c) + '">' + SG.esc(c) + "</span>").join(", ")) + "</td></tr>").join("");
    let part = "";
    if (S.result && !S.body) {
      const sg = S.result.subgraphs.find(s => s.nodes.includes(n.name));
      const ex = S.result.excluded.find(e => e.node === n.name);
      part = "<p>" + (sg ? "in subgraph <b>" + sg.id + "</b> (" + SG.esc(sg.property) + ")" : ex ? "left out: " + SG.esc(ex.reason) : "") + "</p>";
    }
    const bodies = Object.entries(n.bodies).map(([k, b]) => '<button data-body="' + SG.esc(n.name + ":" + k) + '">open ' + SG.esc(k) + " (" + b.nodes + " nodes)</button>").join(" ");
    t.innerHTML = '<h3 id="node-title">' + SG.esc(n.op_type) + " <code>" + SG.esc(n.name) + "</code></h3>" + (n.domain ? "<p>domain " + SG.esc(n.domain) + "</p>" : "") + part +
      (bodies ? '<div class="row">' + bodies + "</div>" : "") +
      '<div class="row"><button id="node-groups">incompatibility groups</button><button id="node-break">break at this node</button></div>' +
      "<h3>attributes</h3><table class='kv'>" + attrs + "</table>" +
      "<h3>inputs</h3><table class='grid'><tr><th>tensor</th><th>dtype</th><th>shape</th><th>from</th></tr>" + tens(n.inputs, "in") + "</table>" +
      "<h3>outputs</h3><table class='grid'><tr><th>tensor</th><th>dtype</th><th>shape</th><th>to</th></tr>" + tens(n.outputs, "out") + "</table>";
    t.querySelectorAll("[data-goto]").forEach(a => a.onclick = () => { view.center(a.dataset.goto); view.setState({ focus: [a.dataset.goto] }); onNodeClick(a.dataset.goto, view.items.get(view.unit(a.dataset.goto))); });
    t.querySelectorAll("[data-body]").forEach(b => b.onclick = () => { S.body = S.body ? S.body + "|" + b.dataset.body : b.dataset.body; S.expanded.clear(); loadLayout().catch(SG.error); });
    $("node-groups").onclick = () => showGroups(n.name);
    $("node-break").onclick = () => { $("bp-type").value = "node"; syncBp(); $("bp-value").value = n.name; showTab("debug"); };
    if (S.body) $("node-groups").hidden = true;
  }

  /* ---------------- debugger ---------------- */
  async function startSession() {
    stopPlay();
    let sel; try { sel = selection(); } catch (e) { SG.error(e); return; }
    if (S.session) SG.api("DELETE", "/api/sessions/" + S.session).catch(() => {});
    S.session = null; S.log.clear(); $("dbg-log").innerHTML = ""; S.groups = null;
    if (S.body) { S.body = ""; S.expanded.clear(); await loadLayout(); }
    try {
      const st = await SG.api("POST", "/api/sessions", Object.assign({ model: MID }, sel));
      S.session = st.id; S.sessionLabel = sel.backend;
      $("colour").value = "subgraph";
      applyState(st);
      applyColour();
      ["dbg-first", "dbg-prev", "dbg-next", "dbg-last", "dbg-play", "dbg-run"].forEach(id => $(id).disabled = false);
    } catch (e) { $("dbg-status").textContent = e.message; SG.error(e); }
  }

  async function step(action, extra) {
    if (!S.session || S.busy) return;
    S.busy = true;
    const t0 = performance.now();
    try {
      const st = await SG.api("POST", "/api/sessions/" + S.session + "/step", Object.assign({ action, index: S.index }, extra || {}));
      applyState(st);
      $("dbg-status").dataset.ms = (performance.now() - t0).toFixed(1);   // round trip + drawing
      if (action === "run" || action === "last") { const h = st.highlight; if (h && h.node.length) view.center(h.node[0]); }
      return st;
    } catch (e) {
      stopPlay(); SG.error(e);
      if (e.status === 404) { S.session = null; $("dbg-status").textContent = e.message; }
    } finally { S.busy = false; }
  }

  function applyState(st) {
    S.lastState = st; S.index = st.index; S.known = st.known; S.done = st.done;
    S.dbgSubgraphs = st.subgraphs || [];
    const stEl = $("dbg-status");
    stEl.textContent = "step " + (st.index + 1) + " · " + st.known + " event(s) pulled" + (st.done ? " · trace complete" : " · live");
    stEl.dataset.index = st.index;
    if (st.error) { stEl.innerHTML += '<div class="error" id="dbg-error">' + SG.esc(st.error) + "</div>"; stopPlay(); }
    const e = st.event;
    $("dbg-event").hidden = !e;
    if (e) {
      $("dbg-call").textContent = e.call; $("dbg-kind").textContent = e.kind; $("dbg-text").textContent = e.text;
      const few = xs => (xs || []).length ? xs.slice(0, 10).join(", ") + (xs.length > 10 ? " … (" + xs.length + " in all)" : "") : "–";
      $("dbg-cands").textContent = few(st.highlight.candidates);
      $("dbg-queue").textContent = few(st.highlight.queue);
      logEntry(st.index, e);
    }
    applyStep(st);
    if ($("colour").value === "subgraph") applyColour();
    $("dbg-prev").disabled = $("dbg-first").disabled = st.index <= 0;
    $("dbg-next").disabled = st.done && st.index >= st.known - 1;
    legend();
  }

  function applyStep(st) {
    if (!st || !st.event) { view.setState({}); return; }
    const h = st.highlight;
    const made = new Set(); for (const s of st.subgraphs) for (const n of s.nodes) made.add(n);
    const cls = { sg: [...made], candidate: h.candidates, queue: h.queue, path: h.path, neighbour: h.neighbour, current: h.node };
    if (st.event.kind === "exclude") cls.path = h.node;
    view.setState(cls);
  }

  function logEntry(index, e) {
    const ol = $("dbg-log");
    ol.querySelectorAll("li.active").forEach(li => li.classList.remove("active"));
    let li = S.log.get(index);
    if (!li) {
      li = SG.el("li", { class: "k-" + e.kind, "data-index": index });
      const ans = /-> (true|false)$/i.exec(e.call);
      const call = ans ? SG.esc(e.call.slice(0, ans.index)) + '-> <span class="ans-' + ans[1].toLowerCase() + '">' + ans[1] + "</span>" : SG.esc(e.call);
      li.innerHTML = '<span class="muted">' + (index + 1) + "</span> " + call;
      li.title = e.text;
      li.onclick = () => step("goto", { index });
      let next = null;
      for (const [k, el] of S.log) if (k > index && (!next || k < Number(next.dataset.index))) next = el;
      ol.insertBefore(li, next);
      S.log.set(index, li);
      if (S.log.size > 400) { const k = Math.min(...S.log.keys()); if (k !== index) { S.log.get(k).remove(); S.log.delete(k); } }
    }
    li.classList.add("active");
    li.scrollIntoView({ block: "nearest" });
  }

  function stopPlay() { if (S.playing) { clearInterval(S.playing); S.playing = null; } $("dbg-play").textContent = "▶︎ Play"; }
  function togglePlay() {
    if (S.playing) { stopPlay(); return; }
    if (!S.session) return;
    $("dbg-play").textContent = "⏸ Pause";
    const tick = async () => {
      if (S.busy) return;
      if (S.done && S.index >= S.known - 1) { stopPlay(); return; }
      await step("next");
    };
    const speed = Number($("dbg-speed").value);
    S.playing = setInterval(tick, Math.max(30, 1000 / speed));
  }
  function syncBp() {
    const t = $("bp-type").value;
    $("bp-value").hidden = !(t === "node" || t === "op");
    $("bp-kind").hidden = t !== "kind";
    $("bp-value").placeholder = t === "node" ? "node name" : "op type";
  }
  function runToBreakpoint() {
    const t = $("bp-type").value; const bp = {};
    if (t === "cycle") bp.cycle = true; else if (t === "kind") bp.kind = $("bp-kind").value; else bp[t] = $("bp-value").value.trim();
    if ((t === "node" || t === "op") && !bp[t]) { SG.error("type a " + (t === "node" ? "node name" : "op type") + " to break at"); return; }
    stopPlay();
    step("run", { breakpoint: bp });
  }

  /* ---------------- partition + TensorRT ---------------- */
  async function doPartition(sel) {
    const result = await SG.api("POST", "/api/models/" + encodeURIComponent(MID) + "/partition", sel);
    S.result = result; S.partitioned = sel; S.body = ""; S.expanded.clear();
    if (S.session) { SG.api("DELETE", "/api/sessions/" + S.session).catch(() => {}); S.session = null; stopPlay(); S.lastState = null; }
    await loadLayout();
    if ($("colour").value === "op") { $("colour").value = "subgraph"; applyColour(); }
    return result;
  }

  async function trt() {
    const out = $("trt-out"); out.innerHTML = '<p class="muted">partitioning…</p>';
    try {
      $("backend").value = "tensorrt"; syncBackendUi();
      const r = await doPartition({ backend: "tensorrt" });
      const s = r.summary; const q = query({ backend: "tensorrt" }).toString();
      const unsupported = (s.unsupported || []).map(u => "<tr><td>" + SG.esc(u.op_type) + "</td><td>" + u.count + "</td><td>" + SG.esc(Object.keys(u.reasons).join("; ")) + "</td></tr>").join("") || '<tr><td colspan="3" class="muted">none</td></tr>';
      const incompatible = r.excluded.map(e => '<li><span class="clickable" data-groups="' + SG.esc(e.node) + '">' + SG.esc(e.node) + "</span> — " + SG.esc(e.reason) + "</li>").join("");
      const subs = r.subgraphs.map(sg => '<tr><td>' + sg.id + "</td><td>" + sg.node_count + "</td><td>" + SG.bytes(sg.boundary_bytes) + '</td><td><a href="/api/models/' + encodeURIComponent(MID) + "/subgraphs/" + sg.id + ".onnx?" + q + '" download>ONNX</a></td></tr>').join("");
      out.innerHTML = '<h3>Summary</h3><table class="kv" id="trt-summary"><tr><td>coverage</td><td><b>' + (100 * s.coverage).toFixed(1) + "%</b> (" + s.nodes_covered + " of " + s.nodes + " nodes)</td></tr>" +
        "<tr><td>partitions</td><td>" + s.partitions + " (sizes " + s.partition_sizes.min + "–" + s.partition_sizes.max + ")</td></tr><tr><td>cycles avoided</td><td>" + s.cycles_avoided + "</td></tr></table>" +
        '<h3>Unsupported op types</h3><table class="grid"><tr><th>op</th><th>nodes</th><th>reason</th></tr>' + unsupported + "</table>" +
        '<h3>Nodes left out <span class="muted">(click for incompatibility groups)</span></h3><ul id="trt-excluded">' + (incompatible || '<li class="muted">none</li>') + "</ul>" +
        '<div id="trt-groups"></div><h3>Cycle checks</h3><div id="trt-cycles" class="muted">reading the trace…</div>' +
        '<h3>Subgraphs</h3><table class="grid"><tr><th>#</th><th>nodes</th><th>boundary</th><th></th></tr>' + subs + "</table>" +
        '<p><a class="button" href="/api/models/' + encodeURIComponent(MID) + "/partitioned.onnx?" + q + '" download>Download the partitioned ONNX</a></p>';
      out.querySelectorAll("[data-groups]").forEach(a => a.onclick = () => showGroups(a.dataset.groups));
      cycleChecks(r);
    } catch (e) { out.innerHTML = '<div class="error">' + SG.esc(e.message) + "</div>"; }
  }

  async function cycleChecks(r) {
    const box = $("trt-cycles");
    try {
      const st = await SG.api("POST", "/api/sessions", { model: MID, backend: "tensorrt" });
      const ev = await SG.api("GET", "/api/sessions/" + st.id + "/events?kinds=cycle,refuse");
      SG.api("DELETE", "/api/sessions/" + st.id).catch(() => {});
      const cyc = ev.events.filter(e => e.kind === "cycle");
      const grp = ev.events.filter(e => e.kind === "refuse" && e.extra && e.extra.group);
      let html = "";
      html += cyc.length ? "<ul>" + cyc.map(e => '<li><span class="clickable" data-path="' + SG.esc(e.path.join("|")) + '">' + SG.esc(e.path.join(" → ")) + "</span> — " + SG.esc(e.text) + "</li>").join("") + "</ul>"
        : "<p>No contraction would have closed a cycle" + (grp.length ? ": the incompatibility groups kept these nodes apart first:" : ".") + "</p>";
      if (grp.length) html += "<ul>" + grp.map(e => '<li><span class="clickable" data-path="' + SG.esc([e.node, e.neighbour, e.extra.incompatible].join("|")) + '">' + SG.esc(e.neighbour) + "</span> refused from " + SG.esc(e.node) + ": " + SG.esc(e.reason) + "</li>").join("") + "</ul>";
      for (const c of r.cycles || []) html += '<div class="muted">recorded: seed ' + SG.esc(c.seed) + ", path " + SG.esc((c.path || []).join(" → ")) + ", excluded " + SG.esc(c.excluded) + "</div>";
      box.className = ""; box.innerHTML = html;
      box.querySelectorAll("[data-path]").forEach(a => a.onclick = () => { S.groups = null; view.setState({ path: a.dataset.path.split("|") }); legend(); });
    } catch (e) { box.innerHTML = '<div class="error">' + SG.esc(e.message) + "</div>"; }
  }

  async function showGroups(node) {
    try {
      const g = await SG.api("GET", "/api/models/" + encodeURIComponent(MID) + "/groups?node=" + encodeURIComponent(node));
      S.groups = g;
      if (S.body) { S.body = ""; await loadLayout(); }
      view.setState({ path: [node], anc: g.ancestors, desc: g.descendants });
      view.center(node);
      legend();
      const box = $("trt-groups") || $("tab-node");
      const list = (xs) => xs.length ? xs.map(x => "<code>" + SG.esc(x) + "</code>").join(", ") : '<span class="muted">none</span>';
      const html = '<div class="panel" id="groups-panel"><h3>Incompatibility groups of <code>' + SG.esc(node) + "</code> (" + SG.esc(g.op_type) + ")</h3>" +
        "<p>" + (g.compatible ? "compatible with TensorRT" : "<b>incompatible:</b> " + SG.esc(g.reason)) + "</p>" +
        '<p><span class="sw anc"></span> <b>ancestors</b> (' + g.ancestor_count + "): " + list(g.ancestors) + "</p>" +
        '<p><span class="sw desc"></span> <b>descendants</b> (' + g.descendant_count + "): " + list(g.descendants) + "</p>" +
        '<p class="muted">' + SG.esc(g.note) + "</p></div>";
      if ($("trt-groups")) { $("trt-groups").innerHTML = html; showTab("trt"); } else { $("tab-node").insertAdjacentHTML("afterbegin", html); }
    } catch (e) { SG.error(e); }
  }

  /* ---------------- runs ---------------- */
  let poll = null;
  async function startRun() {
    let sel; try { sel = selection(); } catch (e) { SG.error(e); return; }
    $("run-error").hidden = true; $("run-plots").innerHTML = "";
    try {
      const job = await SG.api("POST", "/api/runs", Object.assign({ model: MID, device: $("run-device").value, executor: $("run-executor").value }, sel));
      S.runId = job.id; $("run-cancel").hidden = false; $("run-go").disabled = true;
      progress(job);
      poll = setInterval(pollRun, 300);
    } catch (e) { $("run-error").textContent = e.message; $("run-error").hidden = false; }
  }
  function progress(job) {
    const p = $("run-progress"); p.hidden = false;
    p.querySelector(".bar").style.width = (100 * (job.progress || 0)).toFixed(0) + "%";
    p.querySelector(".label").textContent = job.status + ": " + (job.message || job.stage || "");
  }
  async function pollRun() {
    try {
      const run = await SG.api("GET", "/api/runs/" + S.runId);
      progress(run);
      if (["done", "failed", "cancelled"].includes(run.status)) {
        clearInterval(poll); poll = null; $("run-cancel").hidden = true; $("run-go").disabled = false;
        if (run.status === "done" && run.result) { S.lastRun = run; await SG.renderRun($("run-plots"), run); $("run-plots").dataset.run = run.id; }
        else { $("run-error").textContent = run.status === "cancelled" ? "the run was cancelled" : ("the run failed: " + (run.error || "unknown error")); $("run-error").hidden = false; }
        listRuns();
      }
    } catch (e) { clearInterval(poll); poll = null; $("run-go").disabled = false; SG.error(e); }
  }
  async function cancelRun() { if (S.runId) { try { await SG.api("POST", "/api/runs/" + S.runId + "/cancel"); } catch (e) { SG.error(e); } } }
  async function listRuns() {
    try {
      const data = await SG.api("GET", "/api/runs?model=" + encodeURIComponent(MID));
      const rows = data.runs.map(r => '<tr><td><input type="checkbox" value="' + r.id + '"' + (r.status !== "done" ? " disabled" : "") + "></td><td>" + new Date(r.created * 1000).toLocaleTimeString() +
        "</td><td>" + SG.esc(r.backend) + "</td><td>" + SG.esc(r.executor) + "/" + SG.esc(r.device) + "</td><td>" + SG.esc(r.status) +
        (r.status === "done" ? ' <span class="clickable" data-show="' + r.id + '">show</span>' : "") + "</td></tr>").join("");
      $("run-list").innerHTML = rows ? '<table class="grid"><tr><th></th><th>when</th><th>backend</th><th>executor</th><th>status</th></tr>' + rows + '</table><button id="run-compare">Compare the two ticked runs</button>' : '<p class="muted">no runs yet</p>';
      $("run-list").querySelectorAll("[data-show]").forEach(a => a.onclick = async () => { const run = await SG.api("GET", "/api/runs/" + a.dataset.show); S.lastRun = run; SG.renderRun($("run-plots"), run); });
      const btn = $("run-compare");
      if (btn) btn.onclick = () => {
        const ids = [...$("run-list").querySelectorAll("input:checked")].map(i => i.value);
        if (ids.length !== 2) { SG.error("tick exactly two finished runs"); return; }
        location.href = "/runs/compare?a=" + ids[0] + "&b=" + ids[1];
      };
    } catch (e) { SG.error(e); }
  }

  /* ---------------- rule dialog ---------------- */
  function ruleDialog() {
    const d = $("rule-dialog");
    const ops = Object.keys(S.summary.op_counts);
    const cur = S.rule || { name: "rule", ops: [], conditions: [] };
    $("rule-ops").innerHTML = ops.map(o => '<label><input type="checkbox" value="' + SG.esc(o) + '"' + (cur.ops.includes(o) ? " checked" : "") + "> " + SG.esc(o) + "</label>").join("");
    $("rule-conds").innerHTML = "";
    const addCond = (c) => {
      c = c || { op: "*", attr: "", cmp: "==", value: "" };
      const row = SG.el("div", { class: "cond" }, '<select class="c-op"><option>*</option>' + ops.map(o => "<option>" + SG.esc(o) + "</option>").join("") + '</select><input class="c-attr" placeholder="attribute" size="10"><select class="c-cmp">' +
        ["==", "!=", "<", "<=", ">", ">=", "in", "not_in", "exists", "absent"].map(x => "<option>" + x + "</option>").join("") + '</select><input class="c-val" placeholder="value (JSON)" size="10"><button type="button" class="c-del">✕</button>');
      row.querySelector(".c-op").value = c.op; row.querySelector(".c-attr").value = c.attr; row.querySelector(".c-cmp").value = c.cmp;
      row.querySelector(".c-val").value = c.value === undefined ? "" : JSON.stringify(c.value);
      row.querySelector(".c-del").onclick = () => { row.remove(); preview(); };
      $("rule-conds").appendChild(row);
    };
    const build = () => {
      const rule = { name: "rule", ops: [...$("rule-ops").querySelectorAll("input:checked")].map(i => i.value), conditions: [] };
      for (const row of $("rule-conds").children) {
        const raw = row.querySelector(".c-val").value; let value;
        try { value = raw === "" ? null : JSON.parse(raw); } catch (e) { value = raw; }
        const c = { op: row.querySelector(".c-op").value, attr: row.querySelector(".c-attr").value.trim(), cmp: row.querySelector(".c-cmp").value };
        if (!["exists", "absent"].includes(c.cmp)) c.value = value;
        if (c.attr) rule.conditions.push(c);
      }
      return rule;
    };
    const preview = () => { $("rule-json").textContent = JSON.stringify(build(), null, 1); };
    cur.conditions.forEach(addCond);
    $("rule-add").onclick = () => { addCond(); preview(); };
    d.oninput = preview; d.onchange = preview;
    preview();
    d.onclose = () => { if (d.returnValue === "ok") { S.rule = build(); } };
    d.showModal();
  }

  /* ---------------- summary ---------------- */
  function renderSummary(m) {
    const io = (list) => list.map(t => "<tr><td><code>" + SG.esc(t.name) + "</code></td><td>" + SG.esc(t.dtype || "?") + "</td><td>" + SG.shape(t) + "</td></tr>").join("");
    $("tab-summary").innerHTML = "<h3>" + SG.esc(m.name) + "</h3><p>" + m.nodes + " nodes · opset " + SG.esc(Object.entries(m.opset).map(([d, v]) => (d || "ai.onnx") + " " + v).join(", ")) + " · " + m.initializers + " weights</p>" +
      "<h3>inputs</h3><table class='grid'>" + io(m.inputs) + "</table><h3>outputs</h3><table class='grid'>" + io(m.outputs) + "</table>" +
      "<h3>op counts</h3><table class='grid'>" + Object.entries(m.op_counts).map(([o, n]) => "<tr><td>" + SG.esc(o) + "</td><td>" + n + "</td></tr>").join("") + "</table>";
  }

  /* ---------------- search, keys, wiring ---------------- */
  function search(q) {
    q = q.trim().toLowerCase();
    if (!q || !S.layout) { view.setState(S.lastState ? {} : {}); if (S.lastState) applyStep(S.lastState); return; }
    const hits = S.layout.nodes.filter(n => String(n.id).toLowerCase().includes(q) || (n.op || "").toLowerCase() === q).map(n => n.id);
    const unitHits = Object.keys(S.layout.units || {}).filter(n => n.toLowerCase().includes(q));
    view.setState({ match: hits.concat(unitHits) });
    if (hits.length || unitHits.length) view.center(hits[0] || unitHits[0]);
  }

  document.querySelectorAll(".tabs button").forEach(b => b.onclick = () => { showTab(b.dataset.tab); if (b.dataset.tab === "runs") listRuns(); });
  const plots = SG.el("style", {}, ".side.wide .plot { height: 300px; }"); document.head.appendChild(plots);
  $("backend").onchange = syncBackendUi;
  $("partition-go").onclick = async () => { try { await doPartition(selection()); } catch (e) { SG.error(e); } };
  $("colour").onchange = applyColour;
  $("grp").onchange = () => { S.expanded.clear(); loadLayout().catch(SG.error); };
  $("fit").onclick = () => view.fit();
  $("search").oninput = ev => search(ev.target.value);
  $("rule-edit").onclick = ruleDialog;
  $("dbg-start").onclick = startSession;
  $("dbg-next").onclick = () => step("next");
  $("dbg-prev").onclick = () => step("prev");
  $("dbg-first").onclick = () => step("first");
  $("dbg-last").onclick = () => { stopPlay(); step("last"); };
  $("dbg-play").onclick = togglePlay;
  $("dbg-run").onclick = runToBreakpoint;
  $("dbg-speed").oninput = () => { if (S.playing) { stopPlay(); togglePlay(); } };
  $("bp-type").onchange = syncBp;
  $("trt-go").onclick = trt;
  $("run-go").onclick = startRun;
  $("run-cancel").onclick = cancelRun;
  document.addEventListener("keydown", ev => {
    const tag = (ev.target.tagName || "").toLowerCase();
    if (["input", "select", "textarea"].includes(tag) || ev.ctrlKey || ev.metaKey || ev.altKey) return;
    if (tag === "button" && (ev.key === " " || ev.key === "Enter")) return;   // the button's own action
    const keys = { ArrowRight: () => step("next"), ArrowLeft: () => step("prev"), Home: () => step("first"),
      End: () => { stopPlay(); step("last"); }, " ": togglePlay, b: runToBreakpoint, f: () => view.fit(), "/": () => $("search").focus() };
    if (keys[ev.key]) { ev.preventDefault(); keys[ev.key](); }
  });
  window.addEventListener("resize", () => view.fit());

  async function init() {
    try {
      const [summary, be, kinds] = await Promise.all([SG.api("GET", "/api/models/" + encodeURIComponent(MID)), SG.api("GET", "/api/backends"), SG.api("GET", "/api/kinds")]);
      S.summary = summary; renderSummary(summary);
      $("backend").innerHTML = be.backends.map(b => '<option value="' + SG.esc(b.name) + '">' + SG.esc(b.name) + (b.plugin ? " (plugin)" : b.name === "rule" ? " (made here)" : "") + "</option>").join("");
      $("bp-kind").innerHTML = kinds.events.map(k => "<option>" + SG.esc(k) + "</option>").join("");
      $("backend").value = params.get("backend") || "default";
      $("ops").value = params.get("ops") || Object.keys(summary.op_counts).slice(0, 3).join(",");
      const errs = Object.entries(be.plugin_errors || {});
      if (errs.length) SG.error(errs.map(([p, e]) => e).join("\n"));
      if (be.runs !== "available") { $("run-go").disabled = true; $("run-error").textContent = be.runs; $("run-error").hidden = false; }
      syncBackendUi(); syncBp();
      await loadLayout();
    } catch (e) { SG.error(e); $("graph").innerHTML = '<div class="error">' + SG.esc(e.message) + "</div>"; }
  }
  init();
})();
