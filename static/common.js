/* Shared helpers: JSON API calls, errors shown in the page, formatting. */
"use strict";
const SG = window.SG || {};
window.SG = SG;

SG.api = async function (method, url, body) {
  const opts = { method, headers: {} };
  if (body !== undefined) { opts.headers["Content-Type"] = "application/json"; opts.body = JSON.stringify(body); }
  let resp;
  try { resp = await fetch(url, opts); }
  catch (e) { throw new Error("the server cannot be reached (" + e.message + ")"); }
  let data = null;
  const text = await resp.text();
  try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
  if (!resp.ok) {
    const msg = (data && data.error) ? data.error : ("HTTP " + resp.status);
    const err = new Error(msg); err.status = resp.status; throw err;
  }
  return data;
};

SG.toastTimer = null;
SG.error = function (msg) {
  const t = document.getElementById("toast");
  if (!t) { console.error(msg); return; }
  t.textContent = String(msg && msg.message ? msg.message : msg);
  t.hidden = false;
  clearTimeout(SG.toastTimer);
  SG.toastTimer = setTimeout(() => { t.hidden = true; }, 8000);
  t.onclick = () => { t.hidden = true; };
};

SG.bytes = function (n) {
  if (n == null) return "n/a";
  const u = ["B", "KiB", "MiB", "GiB"]; let i = 0; let v = n;
  while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
  return (i ? v.toFixed(1) : v) + " " + u[i];
};
/* A subgraph's boundary bytes: symbolic-shaped tensors have no size, so say "unknown" (or "at least"). */
SG.boundaryBytes = sg => (!(sg.boundary_unknown || []).length ? SG.bytes(sg.boundary_bytes) :
  (sg.boundary_bytes ? "≥ " + SG.bytes(sg.boundary_bytes) + " + " : "") + "unknown (" + sg.boundary_unknown.length + " symbolic-shape tensor" + (sg.boundary_unknown.length > 1 ? "s" : "") + ")");
SG.ms = s => (s == null ? "n/a" : (s * 1000).toFixed(3) + " ms");
/* A tensor shape as plain text (symbolic dims are model strings: show them as text only). */
SG.shape = t => (t.shape ? "[" + t.shape.map(d => d == null ? "?" : String(d)).join(", ") + "]" : "?");
/* DOM building: every string becomes a text node or an attribute value, never markup. Model data
   (names, op types, dims, attributes, doc strings, error texts) goes through here only. */
SG.append = function (parent, kids) {
  for (const k of [kids].flat(Infinity)) {
    if (k == null || k === false) continue;
    parent.appendChild(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return parent;
};
SG.h = function (tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const k in (attrs || {})) {
    const v = attrs[k];
    if (v == null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("on") && typeof v === "function") e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  return SG.append(e, kids);
};
SG.el = (tag, attrs, text) => SG.h(tag, attrs, text);
/* Replace every child of parent. */
SG.fill = (parent, ...kids) => { parent.replaceChildren(); return SG.append(parent, kids); };
SG.errorBox = msg => SG.h("div", { class: "error" }, String(msg && msg.message ? msg.message : msg));
/* A table row of cells (strings, nodes or arrays of them). */
SG.row = (...cells) => SG.h("tr", null, cells.map(c => SG.h("td", null, c)));
SG.headRow = (...cells) => SG.h("tr", null, cells.map(c => SG.h("th", null, c)));
SG.palette = ["#93c5fd", "#86efac", "#fcd34d", "#f9a8d4", "#c4b5fd", "#5eead4", "#fdba74", "#a5b4fc",
  "#bef264", "#fda4af", "#67e8f9", "#d8b4fe"];
SG.opColour = function (op) {
  let h = 0; for (let i = 0; i < op.length; i++) h = (h * 31 + op.charCodeAt(i)) >>> 0;
  return "hsl(" + (h % 360) + ", 65%, 90%)";
};
SG.heat = function (v) { // 0..1 -> white..red
  const t = Math.max(0, Math.min(1, v));
  return "hsl(" + (50 - 50 * t) + ", 95%, " + (96 - 46 * t) + "%)";
};
