/* The Runs tab: per graph input a shape form (symbolic dims named, prefilled by the server from the
   model's dims, its example shapes and the shapes entered last time), the values (seeded random in a
   range, zeros, ones, a constant, or an uploaded .npy/.npz), the tolerance and repeats (kept after a
   run); then a comparison run with live progress and Cancel (followed again after a reload), this
   model's runs (a list that updates itself while any runs; Repeat re-submits a run's stored inputs),
   and the report, whose node names select the node in the graph. */
"use strict";
(function () {
  const M = SG.M, S = M.S, $ = M.$, h = SG.h;
  let poll = null;           // polling the run this page follows
  let listTimer = null;      // refreshing the run list while any run of this model is in flight
  const FINAL = ["done", "failed", "cancelled", "interrupted"];
  let form = null;          // {inputs: [{spec, dims: [input], fill, low, high, seed, file}], atol, rtol, repeat}
  const runUrl = (rid, path) => "/api/runs/" + encodeURIComponent(rid) + (path || "");

  function showError(msg) { $("run-error").textContent = msg; $("run-error").hidden = false; }

  /* The form lives in a box of its own, made here, between the run buttons and the report. */
  function formBox() {
    let box = $("run-inputs");
    if (!box) {
      box = h("div", { id: "run-inputs", class: "run-inputs" });
      const row = document.querySelector("#tab-runs .row");
      row.parentNode.insertBefore(box, row);
    }
    return box;
  }

  const num = (attrs) => { const e = h("input", Object.assign({ type: "number" }, attrs)); e.style.width = (attrs.width || 70) + "px"; return e; };

  function inputBlock(spec) {
    const dims = spec.shape.map((d, i) => {
      const name = spec.dim_names[i];
      const e = num({ value: d, min: 0, step: 1, class: "dim", "data-input": spec.name, "data-axis": i,
        title: name ? "symbolic dim '" + name + "'" : "axis " + i, width: 72 });
      return e;
    });
    const fill = h("select", { class: "fill", "data-input": spec.name },
      ["random", "zeros", "ones", "constant", "file"].map(f => h("option", { value: f }, f === "file" ? "uploaded .npy/.npz" : f)));
    fill.value = spec.fill;
    const value = num({ value: spec.value != null ? spec.value : 0, step: "any", class: "value", width: 90, title: "every element takes this value" });
    const low = num({ value: spec.low, step: "any", class: "low", width: 70 });
    const high = num({ value: spec.high, step: "any", class: "high", width: 70 });
    const seed = num({ value: spec.seed, step: 1, class: "seed", width: 60 });
    const file = h("input", { type: "file", accept: ".npy,.npz", class: "file", "data-input": spec.name });
    const randomBox = h("span", { class: "random-opts" }, " range ", low, " … ", high, " seed ", seed);
    const constBox = h("span", { class: "constant-opts" }, " value ", value);
    const sync = () => {
      randomBox.hidden = fill.value !== "random"; file.hidden = fill.value !== "file"; constBox.hidden = fill.value !== "constant";
      dims.forEach(d => { d.disabled = fill.value === "file"; });
    };
    fill.onchange = sync; sync();
    const labels = spec.shape.map((d, i) => {
      const name = spec.dim_names[i];
      return h("label", { class: "dimlabel" }, h("span", { class: name ? "dimname" : "muted" }, name || ("axis " + i)), dims[i]);
    });
    const el = h("fieldset", { class: "input-spec", "data-input": spec.name },
      h("legend", null, h("code", null, spec.name), " ", h("span", { class: "chip dtype" }, spec.dtype)),
      h("div", { class: "row dims" }, "shape ", labels),
      h("div", { class: "row values" }, "values ", fill, randomBox, constBox, file));
    el.style.border = "1px solid #e2e8f0"; el.style.borderRadius = "6px"; el.style.margin = "6px 0"; el.style.padding = "4px 8px";
    labels.forEach(l => { l.style.display = "inline-flex"; l.style.flexDirection = "column"; l.style.fontSize = "11px"; l.style.marginRight = "4px"; });
    return { spec, el, dims, fill, low, high, seed, value, file };
  }

  M.loadRunForm = async function () {
    if (form) return;
    const box = formBox();
    let data;
    try { data = await SG.api("GET", M.api("/inputs")); } catch (e) { SG.fill(box, SG.errorBox(e)); return; }
    const blocks = data.inputs.map(inputBlock);
    // Lengths prefilled from another input's axis (waveforms_lens: the waveform's samples)
    // follow that axis while the user changes it, until the user types lengths of their own.
    for (const [name, link] of Object.entries(data.lengths || {})) {
      const lens = blocks.find(b => b.spec.name === name), src = blocks.find(b => b.spec.name === link.input);
      const axis = src && src.dims[link.axis];
      if (!lens || !axis) continue;
      let follows = true;
      lens.value.addEventListener("input", () => { follows = false; });
      axis.addEventListener("input", () => { if (follows && lens.fill.value === "constant") lens.value.value = axis.value; });
      lens.value.title = "the length of " + link.input + " axis " + link.axis + ": follows it until you change this value";
    }
    // a load that raced another (the tab opened as Run was clicked) keeps the first form's settings
    const kept = form ? { atol: form.atol.value, rtol: form.rtol.value, repeat: form.repeat.value } :
      { atol: data.tolerance.atol, rtol: data.tolerance.rtol, repeat: 5 };
    const atol = num({ id: "run-atol", value: kept.atol, step: "any", min: 0, width: 90 });
    const rtol = num({ id: "run-rtol", value: kept.rtol, step: "any", min: 0, width: 90 });
    const repeat = num({ id: "run-repeat", value: kept.repeat, min: 1, max: 100, step: 1, width: 60 });
    form = { blocks, atol, rtol, repeat };
    SG.fill(box, h("h3", null, "Inputs"),
      data.remembered.length ? h("div", { class: "muted" }, "shapes prefilled from your last run of this model") :
        h("div", { class: "muted" }, "shapes prefilled from the model (its example shapes when it carries them); named boxes are symbolic dims"),
      blocks.map(b => b.el),
      h("div", { class: "row tolerance" }, "tolerance: atol ", atol, " rtol ", rtol,
        h("span", { class: "muted" }, " match when |ours − ref| ≤ atol + rtol·|ref| for every element (defaults " +
          data.tolerance.atol + ", " + data.tolerance.rtol +
          (data.float16 ? ": the model computes in float16, whose 11 significant bits two correct runs round differently" : "") + ")")),
      h("div", { class: "row" }, "measured repeats ", repeat, h("span", { class: "muted" }, " (after 1 warm-up, excluded; our engine's goes on while it still tries parallel against serial runs)")));
  };

  /* A run that failed on its sizes names sizes onnxruntime runs (engine/size_probe.py): one
     click sets them in the form (the lengths that follow an axis follow) and runs again. */
  function offerSizes(hint) {
    const shapes = hint && hint.inputs;
    if (!shapes || !form) return;
    const shown = Object.entries(shapes).map(([k, v]) => k + " [" + v.join(", ") + "]").join("; ");
    const go = h("button", { type: "button", id: "run-with-sizes" }, "Run with " + shown);
    go.onclick = () => {
      for (const b of form.blocks) {
        const shape = shapes[b.spec.name];
        if (!shape || shape.length !== b.dims.length) continue;
        b.dims.forEach((d, i) => { d.value = shape[i]; d.dispatchEvent(new Event("input")); });
      }
      M.startRun();
    };
    $("run-error").append(h("div", { class: "row" }, go));
  }

  /* A weak match names an atol at which the check means something (engine/verdict.py
     suggested_atol: a thousandth of the outputs' largest |ref|): one click sets it in the form and
     runs again. Only under a run just made: the form then holds what that run used. */
  function offerTolerance(run) {
    const v = run.result && run.result.comparison && run.result.comparison.verdict;
    const atol = v && v.status === "weak" ? v.suggested_atol : null;
    const box = $("run-plots").querySelector(".run-summary");
    if (!atol || !form || !box) return;
    const go = h("button", { type: "button", id: "run-with-atol" }, "Run again with atol " + atol);
    go.onclick = () => { form.atol.value = atol; form.atol.dispatchEvent(new Event("input")); M.startRun(); };
    (box.querySelector(".verdict-details") || box.querySelector(".verdict")).after(h("div", { class: "row" }, go));
  }

  function collect() {
    const inputs = []; const files = [];
    for (const b of form.blocks) {
      const spec = { name: b.spec.name, fill: b.fill.value };
      if (b.fill.value === "file") {
        if (!b.file.files[0]) throw new Error("input '" + b.spec.name + "': choose a .npy or .npz file for its values");
        files.push(["input:" + b.spec.name, b.file.files[0]]);
      } else {
        spec.shape = b.dims.map(d => {
          const v = Number(d.value);
          if (d.value === "" || !Number.isInteger(v) || v < 0) throw new Error("input '" + b.spec.name + "': " + (d.title || "a dim") + " must be a whole number ≥ 0");
          return v;
        });
      }
      if (b.fill.value === "random") { spec.low = Number(b.low.value); spec.high = Number(b.high.value); spec.seed = Number(b.seed.value); }
      if (b.fill.value === "constant") {
        if (b.value.value === "" || !Number.isFinite(Number(b.value.value))) throw new Error("input '" + b.spec.name + "': the constant value must be a number");
        spec.value = Number(b.value.value);
      }
      inputs.push(spec);
    }
    return { inputs, files, tolerance: { atol: Number(form.atol.value), rtol: Number(form.rtol.value) }, repeat: Number(form.repeat.value) };
  }

  /* JSON, or multipart (a "request" JSON field and one file per input) when arrays are uploaded. */
  async function submit(body, files) {
    if (!files || !files.length) return SG.api("POST", "/api/runs", body);
    const fd = new FormData(); fd.append("request", JSON.stringify(body));
    for (const [k, f] of files) fd.append(k, f);
    const resp = await fetch("/api/runs", { method: "POST", body: fd });
    const data = await resp.json().catch(() => null);
    if (!resp.ok) throw new Error((data && data.error) || ("HTTP " + resp.status));
    return data;
  }

  /* From the click on, the last run's report, error and "done: finished" give way to "submitting"
     (the form is fetched and the run posted before the server says anything). */
  function pending() {
    $("run-error").hidden = true; $("run-plots").replaceChildren();
    progress({ status: "submitting", message: "sending the run to the server" }); $("run-go").disabled = true;
  }

  /* The run never started (a bad form, a refused post): no bar, the button back, the reason shown. */
  function notStarted(msg) { $("run-progress").hidden = true; $("run-go").disabled = false; showError(msg); }

  async function launch(body, files) {   // after pending()
    try {
      const job = await submit(body, files);
      attach(job);
      M.listRuns();
    } catch (e) { notStarted(e.message); }
  }

  /* Follow a run in flight: its progress, Cancel, then its report. Used for a run just started and,
     after a reload, for this model's newest run still queued or running. */
  function attach(job) {
    S.runId = job.id; $("run-cancel").hidden = false; $("run-go").disabled = true;
    $("run-progress").dataset.run = job.id;
    progress(job);
    if (!poll) poll = setInterval(pollRun, 300);
  }

  M.startRun = async function () {
    let sel, got;
    pending();
    try { sel = M.selection(); await M.loadRunForm(); got = collect(); }
    catch (e) { notStarted(e.message); return; }
    await launch(Object.assign({ model: M.MID, device: $("run-device").value, subgraph_runtime: $("run-executor").value,
      host_runtime: $("run-host-runtime").value,
      inputs: got.inputs, tolerance: got.tolerance, repeat: got.repeat }, sel), got.files);
  };
  M.repeatRun = rid => { pending(); return launch({ repeat_of: rid }); };

  function progress(job) {
    const p = $("run-progress"); p.hidden = false;
    const ended = FINAL.includes(job.status);   // an ended run fills its bar, whatever stage it reached
    p.classList.toggle("ended-badly", ended && job.status !== "done");
    p.querySelector(".bar").style.width = (ended ? 100 : 100 * (job.progress || 0)).toFixed(0) + "%";
    p.querySelector(".label").textContent = job.status + ": " + (job.message || job.stage || "");
  }
  let polling = false;   // one request at a time: a slow answer must not let two polls render the end
  async function pollRun() {
    if (polling) return;
    polling = true;
    try { await pollOnce(); } finally { polling = false; }
  }
  async function pollOnce() {
    try {
      const run = await SG.api("GET", runUrl(S.runId));
      progress(run);
      if (FINAL.includes(run.status)) {
        clearInterval(poll); poll = null; $("run-cancel").hidden = true; $("run-go").disabled = false;
        if (run.status === "done" && run.result) { S.lastRun = run; await SG.renderRun($("run-plots"), run, cardOpts); $("run-plots").dataset.run = run.id; }
        else showError(run.status === "cancelled" ? "the run was cancelled" : ("the run failed: " + (run.error || "unknown error")));
        // The form already holds what this run used, and what the user typed since: it is not
        // fetched again over them (a late re-render undid the lengths a user typed as the report
        // appeared). Made only where there is none (a run followed after a reload).
        M.listRuns(); await M.loadRunForm();
        if (run.status === "failed") offerSizes(run.hint);
        else if (run.status === "done" && run.result) offerTolerance(run);
      }
    } catch (e) { clearInterval(poll); poll = null; $("run-go").disabled = false; SG.error(e); }
  }
  M.cancelRun = async function () { if (S.runId) { try { await SG.api("POST", runUrl(S.runId, "/cancel")); } catch (e) { SG.error(e); } } };

  /* Node names in the report select and centre the node in the graph; a subgraph focuses its members. */
  /* ``open``: also show the node's tab (a link from another page); from the report the report stays. */
  M.gotoNode = async function (name, open) {
    try { await M.expandTo(name); } catch (e) { SG.error(e); return; }
    M.view.center(name); M.view.setState({ focus: [name] });
    S.selected = name; M.view.setSelected(name);
    $("graph").dataset.hit = name;
    if (open && M.onNodeClick) M.onNodeClick(name, M.view.items.get(M.view.unit(name)));
  };
  M.gotoNodes = async function (names) {
    if (!names || !names.length) return;
    try { await M.expandTo(names[0]); } catch (e) { SG.error(e); return; }
    M.view.setState({ focus: names }); M.view.center(names[0]);
    $("graph").dataset.hit = names[0];
  };
  const cardOpts = { onNode: name => M.gotoNode(name), onNodes: names => M.gotoNodes(names) };

  async function showRun(rid) {
    try { const run = await SG.api("GET", runUrl(rid)); S.lastRun = run; await SG.renderRun($("run-plots"), run, cardOpts); } catch (e) { SG.error(e); }
  }
  const fmt = x => (x == null ? "" : typeof x === "string" ? x : Number(x.toPrecision(3)).toString());   // "inf", "nan" as sent
  function optionsText(o) {
    const parts = Object.entries(o || {}).map(([k, v]) => k + "=" + (Array.isArray(v) ? v.join(",") : typeof v === "object" ? JSON.stringify(v) : v));
    return parts.join(" · ");
  }
  function statusCell(r) {
    if (!FINAL.includes(r.status)) {
      return h("span", { class: "run-live" }, r.status + (r.progress ? " " + (100 * r.progress).toFixed(0) + "%" : "") + (r.message ? ": " + r.message : ""));
    }
    return [r.status, r.status === "done" ? [" ", h("span", { class: "clickable", "data-show": r.id, onclick: () => showRun(r.id) }, "show")] : null];
  }
  function historyRow(r) {
    const s = r.summary || {};
    const v = s.verdict;
    const runtimes = s.runtimes && Object.keys(s.runtimes).length ?
      " → " + Object.entries(s.runtimes).map(([k, n]) => k + " ×" + n).join(", ") : "";
    const shapes = s.shapes ? Object.entries(s.shapes).map(([k, d]) => k + " [" + (d || []).join("×") + "]").join(", ") :
      ((r.inputs || {}).specs || []).map(x => x.name + " [" + (x.shape || []).join("×") + "]").join(", ");
    const tol = s.tolerance || (r.inputs || {}).tolerance;
    return h("tr", { "data-run": r.id, "data-status": r.status },
      [h("td", null, h("input", { type: "checkbox", value: r.id, disabled: r.status !== "done" })),
        h("td", null, new Date(r.created * 1000).toLocaleTimeString()),
        h("td", { class: "h-backend" }, r.backend, r.options && Object.keys(r.options).length ? h("div", { class: "muted h-options" }, optionsText(r.options)) : null),
        h("td", { class: "h-runtime" }, r.executor + runtimes + " / " + r.device,
          h("div", { class: "muted h-host", "data-host-runtime": SG.hostRuntime(r) }, "rest of the graph: " + SG.hostRuntimeName(SG.hostRuntime(r))),
          Object.entries(s.runtime_reasons || {}).map(([k, why]) => why.length ? h("div", { class: "muted h-why" }, k + ": " + why.join("; ")) : null)),
        h("td", { class: "h-status" }, statusCell(r)),
        h("td", { class: "h-verdict verdict-" + (v ? v.status : "none"), title: v ? v.headline : null },
          v ? SG.verdictWord(v.status) : ""),
        h("td", { class: "h-shapes" }, shapes),
        h("td", { class: "h-tolerance" }, tol ? "atol " + fmt(tol.atol) + ", rtol " + fmt(tol.rtol) : ""),
        h("td", { class: "h-median" }, s.median_seconds != null ? (s.median_seconds * 1e3).toFixed(3) : ""),
        h("td", null, ["done", "failed"].includes(r.status) ? h("button", { class: "repeat", "data-repeat": r.id,
          title: "run again with the same inputs, tolerance and backend", onclick: () => M.repeatRun(r.id) }, "Repeat") : null)]);
  }
  M.listRuns = async function () {
    M.loadRunForm();
    clearTimeout(listTimer); listTimer = null;
    let data;
    try { data = await SG.api("GET", "/api/runs?model=" + encodeURIComponent(M.MID)); } catch (e) { SG.error(e); return; }
    const live = data.runs.filter(r => !FINAL.includes(r.status));
    // a run in flight that this page does not follow (the page was reloaded): follow the newest
    if (live.length && !poll) attach(live.reduce((a, b) => (b.created > a.created ? b : a)));
    if (live.length) listTimer = setTimeout(M.listRuns, 1000);   // the list updates itself while anything runs
    if (!data.runs.length) { SG.fill($("run-list"), h("p", { class: "muted" }, "no runs yet")); return; }
    SG.fill($("run-list"), h("table", { class: "grid run-history" },
      SG.headRow("", "when", "backend · options", "subgraph runtime → ran on / device", "status", "verdict", "input shapes",
        "tolerance", "median ms (partitioned)", ""), data.runs.map(historyRow)),
    h("button", { id: "run-compare", onclick: () => {
      const ids = [...$("run-list").querySelectorAll("input:checked")].map(i => i.value);
      if (ids.length !== 2) { SG.error("tick exactly two finished runs"); return; }
      location.href = "/runs/compare?a=" + encodeURIComponent(ids[0]) + "&b=" + encodeURIComponent(ids[1]);
    } }, "Compare the two ticked runs"));
  };
  // After a reload: a run of this model still in flight is followed again (progress, Cancel).
  M.listRuns();
})();
