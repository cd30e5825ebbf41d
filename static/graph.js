/* The graph view: SVG drawn from server-computed positions; pan, zoom, classes. Nodes never move
   once drawn: stepping only changes classes (setState) and fills (setFill). */
"use strict";
(function () {
  const NS = "http://www.w3.org/2000/svg";
  const STATE = ["current", "neighbour", "candidate", "queue", "path", "anc", "desc", "match", "sg",
    "excluded", "dim", "focus", "selected"];

  function trunc(t, n) { t = String(t); return t.length > n ? t.slice(0, n - 1) + "…" : t; }
  /* An SVG element: attributes set as values, children appended (strings as text nodes). */
  function s(tag, attrs, ...kids) {
    const e = document.createElementNS(NS, tag);
    for (const k in (attrs || {})) e.setAttribute(k, String(attrs[k]));
    for (const k of kids) e.appendChild(typeof k === "string" ? document.createTextNode(k) : k);
    return e;
  }

  function edgePath(pts) {
    if (!pts || pts.length < 2) return "";
    let d = "M" + pts[0][0] + "," + pts[0][1];
    let i = 1;
    const hasTip = (pts.length - 1) % 3 === 1;
    const n = hasTip ? pts.length - 1 : pts.length;
    for (; i + 2 < n; i += 3) d += "C" + pts[i] + " " + pts[i + 1] + " " + pts[i + 2];
    for (; i < n; i++) d += "L" + pts[i];
    if (hasTip) d += "L" + pts[pts.length - 1];
    return d;
  }

  class GraphView {
    constructor(el, opts) {
      this.el = el; this.opts = opts || {};
      this.s = 1; this.tx = 0; this.ty = 0;
      this.elements = new Map(); this.items = new Map(); this.marked = [];
      this._pan();
    }

    render(layout) {
      this.layout = layout; this.units = layout.units || {};
      /* SVG built with createElementNS: labels are text nodes, ids are attribute values. */
      const svg = s("svg");
      const marker = s("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" },
        s("path", { d: "M0,0 L10,5 L0,10 z", fill: "#9aa3b2" }));
      svg.appendChild(s("defs", null, marker));
      const vp = s("g", { class: "vp" }); svg.appendChild(vp);
      for (const c of layout.clusters || []) {
        vp.appendChild(s("g", { class: "cluster", "data-sg": c.id }, s("rect", { x: c.x, y: c.y, width: c.w, height: c.h, rx: 8 }),
          s("text", { x: c.x + 8, y: c.y + 14 }, "subgraph " + c.id)));
      }
      const byId = new Map(layout.nodes.map(n => [n.id, n]));
      for (const e of layout.edges) {
        if (e.ghost) {
          const t = byId.get(e.target); if (!t) continue;
          const y0 = t.y - t.h / 2; const x = t.x - t.w / 2 + 10;
          vp.appendChild(s("g", { class: "edge ghost" }, s("path", { d: "M" + x + "," + (y0 - 14) + "L" + x + "," + y0, "marker-end": "url(#arrow)" }),
            s("text", { x: x + 3, y: y0 - 8 }, trunc(e.tensors[0], 18))));
          continue;
        }
        vp.appendChild(s("g", { class: "edge" }, s("path", { d: edgePath(e.points), "marker-end": "url(#arrow)" }, s("title", null, e.tensors.join(", ")))));
      }
      for (const n of layout.nodes) {
        const x = n.x - n.w / 2, y = n.y - n.h / 2;
        let g;
        if (n.kind === "input" || n.kind === "output") {
          g = s("g", { class: "node io" }, s("ellipse", { cx: n.x, cy: n.y, rx: n.w / 2, ry: n.h / 2 }),
            s("text", { x: n.x, y: n.y + 4, "text-anchor": "middle" }, trunc(n.label, 18)));
        } else if (n.kind === "group") {
          const ops = Object.keys(n.ops || {}).slice(0, 3).join(", ");
          g = s("g", { class: "node group" }, s("rect", { x, y, width: n.w, height: n.h, rx: 6 }),
            s("text", { class: "op", x: n.x, y: n.y - 6, "text-anchor": "middle" }, trunc(n.label, 22) + " ⊞"),
            s("text", { class: "sub", x: n.x, y: n.y + 8, "text-anchor": "middle" }, n.count + " nodes"),
            s("text", { class: "sub", x: n.x, y: n.y + 20, "text-anchor": "middle" }, trunc(ops, 26)),
            s("title", null, n.id + " — click to expand"));
        } else {
          const leaf = String(n.label).split("/").pop();
          g = s("g", { class: "node" }, s("rect", { x, y, width: n.w, height: n.h, rx: 5 }),
            s("text", { class: "op", x: n.x, y: n.y - 2, "text-anchor": "middle" }, trunc(n.op, 20) + (n.bodies ? " ▣" : "")),
            s("text", { class: "sub", x: n.x, y: n.y + 11, "text-anchor": "middle" }, trunc(leaf, 24)),
            s("title", null, n.id));
        }
        g.setAttribute("data-id", n.id);
        vp.appendChild(g);
      }
      this.el.replaceChildren(svg);
      if (layout.note) this.el.appendChild(SG.h("div", { class: "graph-note muted" }, layout.note));
      this.svg = this.el.querySelector("svg"); this.vp = this.svg.querySelector(".vp");
      this.elements.clear(); this.items = byId; this.marked = [];
      for (const g of this.svg.querySelectorAll(".node")) this.elements.set(g.getAttribute("data-id"), g);
      this.svg.addEventListener("click", ev => {
        if (this._moved) return;
        const g = ev.target.closest(".node"); if (!g) return;
        const id = g.getAttribute("data-id");
        if (this.opts.onClick) this.opts.onClick(id, byId.get(id));
      });
      this.fit();
    }

    /* Display id of an original node name (a group when collapsed). */
    unit(name) { return this.elements.has(name) ? name : (this.units[name] || null); }

    /* classes: {className: [node names]}; replaces every state class set before. */
    setState(classes) {
      for (const g of this.marked) g.classList.remove(...STATE);
      this.marked = [];
      for (const cls in classes) {
        for (const name of classes[cls] || []) {
          const id = this.unit(name); const g = id && this.elements.get(id);
          if (g) { g.classList.add(cls); this.marked.push(g); }
        }
      }
    }

    /* fills: {display id or node name: css colour}; null clears all. */
    setFill(fills) {
      for (const [id, g] of this.elements) {
        const shape = g.querySelector("rect, ellipse");
        if (!shape) continue;
        const c = fills ? (fills[id] || null) : null;
        shape.style.fill = c || "";
      }
    }

    center(name) {
      const id = this.unit(name); const n = id && this.items.get(id);
      if (!n) return;
      const r = this.el.getBoundingClientRect();
      this.tx = r.width / 2 - n.x * this.s; this.ty = r.height / 2 - n.y * this.s;
      this._apply();
    }

    fit() {
      const r = this.el.getBoundingClientRect();
      const L = this.layout; if (!L || !r.width) return;
      const s = Math.min(r.width / (L.width + 40), r.height / (L.height + 40), 1.4);
      this.s = Math.max(s, 0.55);   // a tall graph starts readable at the top, not as a thin line
      this.tx = (r.width - L.width * this.s) / 2; this.ty = 20;
      if (L.height * this.s < r.height) this.ty = (r.height - L.height * this.s) / 2;
      this._apply();
    }

    zoom(f, cx, cy) {
      const s2 = Math.min(6, Math.max(0.02, this.s * f));
      this.tx = cx - (cx - this.tx) * (s2 / this.s); this.ty = cy - (cy - this.ty) * (s2 / this.s); this.s = s2;
      this._apply();
    }

    _apply() { if (this.vp) this.vp.setAttribute("transform", "translate(" + this.tx + "," + this.ty + ") scale(" + this.s + ")"); }

    _pan() {
      let sx = 0, sy = 0, down = false;
      this.el.addEventListener("mousedown", ev => { down = true; this._moved = false; sx = ev.clientX; sy = ev.clientY; });
      window.addEventListener("mousemove", ev => {
        if (!down) return;
        const dx = ev.clientX - sx, dy = ev.clientY - sy;
        if (Math.abs(dx) + Math.abs(dy) > 3) { this._moved = true; this.el.classList.add("dragging"); }
        if (this._moved) { this.tx += dx; this.ty += dy; sx = ev.clientX; sy = ev.clientY; this._apply(); }
      });
      window.addEventListener("mouseup", () => { down = false; this.el.classList.remove("dragging"); setTimeout(() => { this._moved = false; }, 0); });
      this.el.addEventListener("wheel", ev => {
        ev.preventDefault();
        const r = this.el.getBoundingClientRect();
        this.zoom(Math.exp(-ev.deltaY * 0.0015), ev.clientX - r.left, ev.clientY - r.top);
      }, { passive: false });
    }
  }
  SG.GraphView = GraphView;
})();
