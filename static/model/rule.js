/* The rule dialog: a rule selector made of ticked op types and attribute conditions (JSON data). */
"use strict";
(function () {
  const M = SG.M, S = M.S, $ = M.$, h = SG.h;
  const CMPS = ["==", "!=", "<", "<=", ">", ">=", "in", "not_in", "exists", "absent"];

  M.ruleDialog = function () {
    const d = $("rule-dialog");
    const ops = Object.keys(S.summary.op_counts);
    const cur = S.rule || { name: "rule", ops: [], conditions: [] };
    SG.fill($("rule-ops"), ops.map(o => h("label", null, h("input", { type: "checkbox", value: o, checked: cur.ops.includes(o) }), " " + o)));
    $("rule-conds").replaceChildren();
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
    const addCond = c => {
      c = c || { op: "*", attr: "", cmp: "==", value: "" };
      const row = h("div", { class: "cond" },
        h("select", { class: "c-op" }, h("option", null, "*"), ops.map(o => h("option", null, o))),
        h("input", { class: "c-attr", placeholder: "attribute", size: 10 }),
        h("select", { class: "c-cmp" }, CMPS.map(x => h("option", null, x))),
        h("input", { class: "c-val", placeholder: "value (JSON)", size: 10 }),
        h("button", { type: "button", class: "c-del", onclick: () => { row.remove(); preview(); } }, "✕"));
      row.querySelector(".c-op").value = c.op; row.querySelector(".c-attr").value = c.attr; row.querySelector(".c-cmp").value = c.cmp;
      row.querySelector(".c-val").value = c.value === undefined ? "" : JSON.stringify(c.value);
      $("rule-conds").appendChild(row);
    };
    cur.conditions.forEach(addCond);
    $("rule-add").onclick = () => { addCond(); preview(); };
    d.oninput = preview; d.onchange = preview;
    preview();
    d.onclose = () => { if (d.returnValue === "ok") M.setRule(build()); };
    d.showModal();
  };
})();
