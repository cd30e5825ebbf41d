/* The Debugger tab: a live debug session stepped forward and back, play, breakpoints, the log. */
"use strict";
(function () {
  const M = SG.M, S = M.S, $ = M.$, h = SG.h;
  const sessionUrl = path => "/api/sessions/" + encodeURIComponent(S.session) + (path || "");

  M.startSession = async function () {
    M.stopPlay();
    let sel; try { sel = M.selection(); } catch (e) { SG.error(e); return; }
    if (S.session) SG.api("DELETE", sessionUrl()).catch(() => {});
    S.session = null; S.log.clear(); $("dbg-log").replaceChildren(); S.groups = null;
    if (S.body) { S.body = ""; S.expanded.clear(); await M.loadLayout(); }
    try {
      const st = await SG.api("POST", "/api/sessions", Object.assign({ model: M.MID }, sel));
      S.session = st.id; S.sessionLabel = sel.backend;
      $("colour").value = "subgraph";
      applyState(st);
      M.applyColour();
      ["dbg-first", "dbg-prev", "dbg-next", "dbg-last", "dbg-play", "dbg-run"].forEach(id => { $(id).disabled = false; });
    } catch (e) { $("dbg-status").textContent = e.message; SG.error(e); }
  };

  M.step = async function (action, extra) {
    if (!S.session || S.busy) return;
    S.busy = true;
    const t0 = performance.now();
    try {
      const st = await SG.api("POST", sessionUrl("/step"), Object.assign({ action, index: S.index }, extra || {}));
      applyState(st);
      if (action === "run" && st.breakpoint_hit === false) noHit(st, extra.breakpoint);
      $("dbg-status").dataset.ms = (performance.now() - t0).toFixed(1);   // round trip + drawing
      const cur = st.highlight && st.highlight.node.length ? st.highlight.node[0] : null;
      if (cur && (action === "run" || action === "last" || action === "goto")) { M.reveal(cur); M.view.center(cur); }
      else if (cur) M.view.follow(cur);   // the view follows the current node
      return st;
    } catch (e) {
      M.stopPlay(); SG.error(e);
      if (e.status === 404) { S.session = null; $("dbg-status").textContent = e.message; }
    } finally { S.busy = false; }
  };

  /* A run that met no matching event stops at the last event it reached: say so, so that event is
     not taken for the breakpoint (a pass without cycles ends on pass_end). */
  function noHit(st, bp) {
    const what = bp.cycle ? "a cycle found" : bp.kind ? "event kind " + bp.kind : bp.node ? "node " + bp.node : "op type " + bp.op;
    const where = st.done && st.index >= st.known - 1 ? "before the trace ended; this is its last event"
      : "in the events searched; Run again to search further";
    $("dbg-status").appendChild(h("div", { class: "notice", id: "dbg-nohit" }, "Breakpoint not reached: no event matched " + what + " " + where + "."));
  }

  function applyState(st) {
    S.lastState = st; S.index = st.index; S.known = st.known; S.done = st.done;
    S.dbgSubgraphs = st.subgraphs || [];
    const stEl = $("dbg-status");
    SG.fill(stEl, "step " + (st.index + 1) + " · " + st.known + " event(s) pulled" + (st.done ? " · trace complete" : " · live"));
    stEl.dataset.index = st.index;
    if (st.error) { stEl.appendChild(h("div", { class: "error", id: "dbg-error" }, st.error)); M.stopPlay(); }
    const e = st.event;
    $("dbg-event").hidden = !e;
    if (e) {
      $("dbg-call").textContent = e.call; $("dbg-kind").textContent = e.kind; $("dbg-text").textContent = e.text;
      const few = xs => (xs || []).length ? xs.slice(0, 10).join(", ") + (xs.length > 10 ? " … (" + xs.length + " in all)" : "") : "–";
      $("dbg-cands").textContent = few(st.highlight.candidates);
      $("dbg-queue").textContent = few(st.highlight.queue);
      logEntry(st.index, e);
    }
    M.applyStep(st);
    if ($("colour").value === "subgraph") M.applyColour();
    $("dbg-prev").disabled = $("dbg-first").disabled = st.index <= 0;
    $("dbg-next").disabled = st.done && st.index >= st.known - 1;
    M.legend();
  }

  M.applyStep = function (st) {
    if (!st || !st.event) { M.view.setState({}); return; }
    const hl = st.highlight;
    const made = new Set(); for (const sg of st.subgraphs) for (const n of sg.nodes) made.add(n);
    const cls = { sg: [...made], candidate: hl.candidates, queue: hl.queue, path: hl.path, neighbour: hl.neighbour, current: hl.node };
    if (st.event.kind === "exclude") cls.path = hl.node;
    M.view.setState(cls);
  };

  function callText(call) {
    const ans = /-> (true|false)$/i.exec(call);
    if (!ans) return call;
    return [call.slice(0, ans.index) + "-> ", h("span", { class: "ans-" + ans[1].toLowerCase() }, ans[1])];
  }

  /* Events a jump passed over (Run to, Last, a click in the log) are not in the log: the entry
     after such a gap says how many (CSS draws "⋯ N events run through" above it), so a log
     reading "1 pass_start, 99 pass_end" does not look like a pass of two events. */
  function markGap(li) {
    const prev = li.previousElementSibling;
    const gap = Number(li.dataset.index) - (prev ? Number(prev.dataset.index) : -1) - 1;
    if (gap > 0) li.dataset.gap = String(gap); else delete li.dataset.gap;
  }

  function logEntry(index, e) {
    const ol = $("dbg-log");
    ol.querySelectorAll("li.active").forEach(li => li.classList.remove("active"));
    let li = S.log.get(index);
    if (!li) {
      li = h("li", { class: "k-" + e.kind, "data-index": index, title: e.text, onclick: () => M.step("goto", { index }) },
        h("span", { class: "muted" }, String(index + 1)), " ", callText(e.call));
      let next = null;
      for (const [k, el] of S.log) if (k > index && (!next || k < Number(next.dataset.index))) next = el;
      ol.insertBefore(li, next);
      S.log.set(index, li);
      if (S.log.size > 400) { const k = Math.min(...S.log.keys()); if (k !== index) { S.log.get(k).remove(); S.log.delete(k); } }
      markGap(li); if (next) markGap(next);
    }
    li.classList.add("active");
    li.scrollIntoView({ block: "nearest" });
  }

  /* Open the collapsed box holding the current node (Play, run to a breakpoint, a jump), then keep
     it in view. Single steps only mark the box (class "member") so a step stays one round trip. */
  M.reveal = async function (name) {
    if (S.revealing || !S.layout || S.layout.mode !== "collapsed" || M.view.unit(name) === name) return;
    S.revealing = true;
    try { await M.expandTo(name); M.view.follow(name); } catch (e) { SG.error(e); } finally { S.revealing = false; }
  };

  /* The glyphs are CSS shapes: U+23F8 (pause) is missing from Debian's default fonts. */
  const playLabel = kind => [h("span", { class: "glyph glyph-" + kind, "aria-hidden": "true" }), kind === "play" ? " Play" : " Pause"];
  M.stopPlay = function () { if (S.playing) { clearInterval(S.playing); S.playing = null; } SG.fill($("dbg-play"), playLabel("play")); };
  M.togglePlay = function () {
    if (S.playing) { M.stopPlay(); return; }
    if (!S.session) return;
    SG.fill($("dbg-play"), playLabel("pause"));
    const tick = async () => {
      if (S.busy || S.revealing) return;
      if (S.done && S.index >= S.known - 1) { M.stopPlay(); return; }
      const st = await M.step("next");
      const cur = st && st.highlight && st.highlight.node.length ? st.highlight.node[0] : null;
      if (cur && S.playing) await M.reveal(cur);
    };
    S.playing = setInterval(tick, Math.max(30, 1000 / Number($("dbg-speed").value)));
  };
  M.syncBp = function () {
    const t = $("bp-type").value;
    $("bp-value").hidden = !(t === "node" || t === "op");
    $("bp-kind").hidden = t !== "kind";
    $("bp-value").placeholder = t === "node" ? "node name" : "op type";
  };
  M.runToBreakpoint = function () {
    const t = $("bp-type").value; const bp = {};
    if (t === "cycle") bp.cycle = true; else if (t === "kind") bp.kind = $("bp-kind").value; else bp[t] = $("bp-value").value.trim();
    if ((t === "node" || t === "op") && !bp[t]) { SG.error("type a " + (t === "node" ? "node name" : "op type") + " to break at"); return; }
    M.stopPlay();
    M.step("run", { breakpoint: bp });
  };
})();
