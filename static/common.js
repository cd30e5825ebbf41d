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

SG.esc = function (s) {
  return String(s == null ? "" : s).replace(/[&<>"']/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
};

SG.bytes = function (n) {
  if (n == null) return "n/a";
  const u = ["B", "KiB", "MiB", "GiB"]; let i = 0; let v = n;
  while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
  return (i ? v.toFixed(1) : v) + " " + u[i];
};
SG.ms = s => (s == null ? "n/a" : (s * 1000).toFixed(3) + " ms");
SG.shape = t => (t.shape ? "[" + t.shape.map(d => d == null ? "?" : d).join(", ") + "]" : "?");
SG.el = function (tag, attrs, html) {
  const e = document.createElement(tag);
  for (const k in (attrs || {})) { if (k === "class") e.className = attrs[k]; else e.setAttribute(k, attrs[k]); }
  if (html != null) e.innerHTML = html;
  return e;
};
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
