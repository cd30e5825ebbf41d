/* One selection for the whole page: the backend and its options, {backend, options} (the shape
   the API takes; the "rule" backend carries its rule instead). Every tab reads it through
   M.selection(). The toolbar's form and the TensorRT tab's form are two editors of this one state,
   never copies: a change in either is written here and shown in the other. It lives in the URL's
   query (backend=NAME&options=JSON, rule=JSON), so a reload or a shared link restores it; the older
   ops=A,B link still opens. */
"use strict";
(function () {
  const M = SG.M, S = M.S, $ = M.$, h = SG.h;
  M.schemas = {};
  S.sel = { backend: "default", options: {} };
  const remembered = {};         // backend -> its options, so switching back restores what was typed
  const editors = [];            // {box, backend (null: the toolbar's, i.e. the selection's), skip, idPrefix}
  const listeners = [];

  /* ---------------- the inputs, generated from a backend's option schema ---------------- */
  const optId = name => name === "ops" ? "ops" : "opt-" + name;
  M.optionInput = function (o, idPrefix) {
    const id = (idPrefix || "") + optId(o.name);
    const title = o.help + (o.minimum != null ? " (at least " + o.minimum + ")" : "");
    let input;
    if (o.choices) {
      input = h("select", { id, "data-opt": o.name, "data-type": o.type, title },
        o.default == null ? h("option", { value: "" }, o.name === "trt_version" ? "newest" : "default") : null,
        o.choices.map(c => h("option", { value: c }, String(c))));
      if (o.default != null) input.value = String(o.default);
    } else if (o.type === "bool") {
      input = h("input", { id, type: "checkbox", "data-opt": o.name, "data-type": o.type, title });
      input.checked = !!o.default;
    } else {
      const num = o.type === "int" || o.type === "float";
      input = h("input", { id, "data-opt": o.name, "data-type": o.type, title, type: num ? "number" : "text",
        size: num ? 5 : (o.name === "ops" ? 28 : 16), step: o.type === "float" ? "any" : null, min: o.minimum,
        placeholder: o.name === "ops" ? "op types, e.g. Conv,Relu" : (o.type === "str_list" ? "comma-separated" : "") });
      input.value = o.default == null ? "" : (Array.isArray(o.default) ? o.default.join(",") : String(o.default));
    }
    return h("label", { class: o.type === "bool" ? "opt-bool" : null }, o.type === "bool" ? [input, " " + o.name] : [o.name + " ", input]);
  };
  const isDefault = (o, v) => JSON.stringify(v) === JSON.stringify(o.default == null ? (o.type === "str_list" ? [] : null) : o.default);
  /* {name: value} of the inputs under ``box`` whose value is not the schema default. */
  M.readOptions = function (box, schema) {
    const out = {};
    for (const o of schema) {
      const el = box.querySelector('[data-opt="' + CSS.escape(o.name) + '"]'); if (!el) continue;
      let v;
      if (o.type === "bool") v = el.checked;
      else if (o.type === "str_list") v = el.value.split(",").map(x => x.trim()).filter(Boolean);
      else if (el.value === "") v = null;
      else if (o.type === "int") v = Number.isInteger(Number(el.value)) ? Number(el.value) : el.value;
      else if (o.type === "float") v = Number.isFinite(Number(el.value)) ? Number(el.value) : el.value;
      else v = el.value;
      if (!isDefault(o, v)) out[o.name] = v;
    }
    return out;
  };
  /* Put option values into the inputs under ``box``; options not named keep their schema default. */
  M.setOptions = function (box, schema, values) {
    for (const o of schema) {
      const el = box.querySelector('[data-opt="' + CSS.escape(o.name) + '"]'); if (!el) continue;
      const v = values && Object.prototype.hasOwnProperty.call(values, o.name) ? values[o.name] : o.default;
      if (el.type === "checkbox") el.checked = !!v;
      else el.value = Array.isArray(v) ? v.join(",") : (v == null ? "" : String(v));
    }
  };

  /* ---------------- the one state ---------------- */
  M.selection = function () {
    if (S.sel.backend === "rule") {
      if (!S.rule) throw new Error("make a rule first: press 'Edit rule…'");
      return { backend: "rule", rule: S.rule };
    }
    const sel = { backend: S.sel.backend };
    if (Object.keys(S.sel.options).length) sel.options = Object.assign({}, S.sel.options);
    return sel;
  };
  /* The selection as query arguments: the URL's, and the API's GET requests' (layout, downloads). */
  M.query = function (sel) {
    const q = new URLSearchParams();
    if (!sel) return q;
    q.set("backend", sel.backend);
    if (sel.rule) q.set("rule", JSON.stringify(sel.rule));
    if (sel.options && Object.keys(sel.options).length) q.set("options", JSON.stringify(sel.options));
    return q;
  };
  M.onSelection = fn => listeners.push(fn);

  /* Set the selection (from an editor, a link, the TensorRT tab) and show it everywhere but in the
     editor it came from, which already shows it (re-filling it would lose the caret). */
  M.setSelection = function (sel, source) {
    const backend = sel.backend || "default";
    S.sel = { backend, options: Object.assign({}, sel.options || {}) };
    remembered[backend] = S.sel.options;
    if (sel.rule) S.rule = sel.rule;
    $("backend").value = backend;
    $("rule-edit").hidden = backend !== "rule";
    for (const ed of editors) if (ed !== source) renderEditor(ed);
    writeUrl();
    for (const fn of listeners) fn(S.sel);
  };
  M.setRule = rule => { S.rule = rule; M.setSelection({ backend: "rule" }); };

  function writeUrl() {
    const q = new URLSearchParams(location.search);
    ["backend", "ops", "options", "rule"].forEach(k => q.delete(k));
    const sel = S.sel.backend === "rule" ? { backend: "rule", rule: S.rule } : S.sel;
    for (const [k, v] of M.query(sel)) q.set(k, v);
    history.replaceState(history.state, "", location.pathname + "?" + q.toString() + location.hash);
  }

  /* ---------------- editors ---------------- */
  function editorSchema(ed) {
    const backend = ed.backend || S.sel.backend;
    return (M.schemas[backend] || []).filter(o => !(ed.skip || []).includes(o.name));
  }
  function renderEditor(ed) {
    const schema = editorSchema(ed);
    SG.fill(ed.box, schema.map(o => M.optionInput(o, ed.idPrefix)));
    const mine = !ed.backend || ed.backend === S.sel.backend;
    M.setOptions(ed.box, schema, mine ? S.sel.options : remembered[ed.backend]);
  }
  /* ``backend`` fixed (the TensorRT tab): an edit there selects that backend, keeping the options
     of it this editor does not show (``skip``). */
  M.addEditor = function (box, opts) {
    const ed = Object.assign({ box }, opts || {});
    editors.push(ed);
    const changed = () => {
      const backend = ed.backend || S.sel.backend;
      const keep = {};
      if (backend === S.sel.backend) for (const k of ed.skip || []) if (k in S.sel.options) keep[k] = S.sel.options[k];
      M.setSelection({ backend, options: Object.assign(keep, M.readOptions(box, editorSchema(ed))) }, ed);
    };
    box.addEventListener("input", changed);
    box.addEventListener("change", changed);
    renderEditor(ed);
    return ed;
  };
  M.selectBackend = function (backend) {
    M.setSelection({ backend, options: remembered[backend] || {} });
  };

  /* ---------------- the first selection: the URL's, else the server's guess of the compute ops ---------------- */
  M.initialSelection = function (params, backends, summary) {
    let backend = params.get("backend") || "default";
    if (!backends.includes(backend)) { if (params.get("backend")) SG.error("this link names backend '" + backend + "', which this server does not have; showing 'default'"); backend = "default"; }
    let options = {};
    if (params.get("options")) {
      try { options = JSON.parse(params.get("options")); } catch (e) { options = null; }
      if (!options || typeof options !== "object" || Array.isArray(options)) { SG.error("the link's 'options' are not a JSON object; using the defaults"); options = {}; }
    }
    if (params.get("ops")) options.ops = params.get("ops").split(",").map(s => s.trim()).filter(Boolean);
    let rule = null;
    if (params.get("rule")) { try { rule = JSON.parse(params.get("rule")); } catch (e) { SG.error("the link's rule is not valid JSON"); } }
    const fromLink = params.has("backend") || params.has("options") || params.has("ops");
    if (!fromLink && backend === "default" && (M.schemas.default || []).some(o => o.name === "ops")) {
      // the server's guess (partition/backends.py suggested_ops, as the command line's): the
      // model's most frequent compute op types, so a page only opened partitions something
      const guess = summary.suggested_ops || [];
      if (guess.length) options.ops = guess;
    }
    return { backend, options, rule };
  };
})();
