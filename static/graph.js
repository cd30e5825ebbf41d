/* The graph view: SVG drawn from server-computed positions; pan, zoom, classes, a minimap.
   Nodes never move once drawn: stepping only changes classes (setState) and fills (setFill).

   Zoom decisions (issue 12): the op type is drawn at OP_FONT units and the node name smaller; the
   view opens at the whole graph when its labels are then at least READABLE_PX on screen, otherwise
   at the graph's width (never below the readable scale) from its top, and the minimap shows the
   rest. *Fit* always shows the whole graph, whatever the label size. */
"use strict";
(function () {
  const NS = "http://www.w3.org/2000/svg";
  const STATE = ["current", "neighbour", "candidate", "queue", "path", "anc", "desc", "match", "sg",
    "excluded", "dim", "focus", "member"];
  const OP_FONT = 13, READABLE_PX = 10, MARGIN = 16, MAX_SCALE = 1.5, OPEN_SCALE = 1.0;
  const READABLE = (READABLE_PX + 0.2) / OP_FONT;   // a hair over: 10 px, not 9.9999
  const MINI_W = 170, MINI_H = 150;

  function trunc(t, n) { t = String(t); return t.length > n ? t.slice(0, n - 1) + "…" : t; }
  /* The end of a name (its most specific part: "…l.2/cv1/conv/Conv"), a leading slash dropped. */
  function tail(t, n) { t = String(t).replace(/^\//, ""); return t.length > n ? "…" + t.slice(t.length - n + 1) : t; }
  /* An SVG element: attributes set as values, children appended (strings as text nodes). */
  function s(tag, attrs, ...kids) {
    const e = document.createElementNS(NS, tag);
    for (const k in (attrs || {})) e.setAttribute(k, String(attrs[k]));
    for (const k of kids) e.appendChild(typeof k === "string" ? document.createTextNode(k) : k);
    return e;
  }

  /* An edge label's shape: a symbolic dim that is an exporter's placeholder ("unk__2187",
     "p2o.DynamicDimension.0") or longer than 12 characters reads as "?"; a chosen name ("batch",
     "batch_size", "seq") stays, placed clear of the other labels (labelPoint) or left to the
     tooltip, which keeps the full names. */
  function shortShape(text) {
    return text.split("×").map(d => /^\d+$/.test(d) || (d.length <= 12 && !/^unk_/.test(d)) ? d : "?").join("×");
  }
  /* Where an edge's shape label goes: the middle control point, or the nearest one to it clear of
     every box, cluster title and label already placed (``taken``, which the chosen spot joins: edges
     that meet at a node would otherwise stack their labels there, unreadable). Null: no room, the
     shape stays in the edge's tooltip. */
  const LABEL_CHAR_W = 6;   // px per character at the label's 8.5 px font, "×" included (measured 5.7)
  function labelPoint(pts, taken, chars) {
    const w = 4 + chars * LABEL_CHAR_W;
    const mid = Math.floor(pts.length / 2);
    const free = ([x, y]) => !taken.some(([x0, y0, x1, y1]) => x + 2 < x1 && x + w > x0 && y + 3 > y0 && y - 8 < y1);
    for (let d = 0; d < pts.length; d++) {
      for (const k of [mid + d, mid - d]) {
        if (k < 0 || k >= pts.length || !free(pts[k])) continue;
        taken.push([pts[k][0] + 2, pts[k][1] - 8, pts[k][0] + w, pts[k][1] + 3]);
        return pts[k];
      }
    }
    return null;
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

  /* One box: the op type (or a group's scope) large, the name small. */
  function nodeEl(n) {
    const x = n.x - n.w / 2, y = n.y - n.h / 2;
    if (n.kind === "input" || n.kind === "output") {
      return s("g", { class: "node io" }, s("ellipse", { cx: n.x, cy: n.y, rx: n.w / 2, ry: n.h / 2 }),
        s("text", { class: "io-label", x: n.x, y: n.y + 4, "text-anchor": "middle" }, trunc(n.label, 18)), s("title", null, n.label));
    }
    if (n.kind === "group") {
      const ops = Object.keys(n.ops || {}).slice(0, 3).join(", ");
      return s("g", { class: "node group" }, s("rect", { x, y, width: n.w, height: n.h, rx: 6 }),
        s("text", { class: "op", x: n.x, y: n.y - 5, "text-anchor": "middle" }, trunc(n.label, 18) + " ⊞"),
        s("text", { class: "sub", x: n.x, y: n.y + 9, "text-anchor": "middle" }, n.count + (n.count === 1 ? " node" : " nodes")),
        s("text", { class: "sub ops", x: n.x, y: n.y + 20, "text-anchor": "middle" }, trunc(ops, 25)),
        s("title", null, n.id + " — click to expand"));
    }
    return s("g", { class: "node" }, s("rect", { x, y, width: n.w, height: n.h, rx: 5 }),
      s("text", { class: "op", x: n.x, y: n.y + 1, "text-anchor": "middle" }, trunc(n.op, n.bodies ? 10 : 12) + (n.bodies ? " ▣" : "")),
      s("text", { class: "sub", x: n.x, y: n.y + 12, "text-anchor": "middle" }, tail(n.label, 21)),
      s("title", null, n.op + " " + n.id));
  }

  class GraphView {
    constructor(el, opts) {
      this.el = el; this.opts = opts || {};
      this.s = 1; this.tx = 0; this.ty = 0; this.auto = "open";
      this.elements = new Map(); this.items = new Map(); this.marked = []; this.selected = null;
      this.fills = null;
      this._pan();
      if (window.ResizeObserver) new ResizeObserver(() => this._resized()).observe(el);
    }

    /* opts.keep: a re-layout of the same graph (a group opened or closed): keep the zoom, the caller
       centres what changed; otherwise the first view (open). */
    render(layout, opts) {
      this.layout = layout; this.units = Object.assign({}, layout.folded || {}, layout.units || {});
      /* SVG built with createElementNS: labels are text nodes, ids are attribute values. */
      const svg = s("svg");
      const marker = s("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" },
        s("path", { d: "M0,0 L10,5 L0,10 z", fill: "#9aa3b2" }));
      svg.appendChild(s("defs", null, marker));
      const vp = s("g", { class: "vp" }); svg.appendChild(vp);
      for (const b of layout.scopes || []) {   // an opened layer: a frame around its members; its name collapses it
        const leaf = String(b.id).split("/").pop();
        vp.appendChild(s("g", { class: "scope-box", "data-scope": "scope:" + b.id }, s("rect", { x: b.x, y: b.y, width: b.w, height: b.h, rx: 8 }),
          s("text", { x: b.x + 8, y: b.y + 13 }, "⊟ " + trunc(leaf, Math.max(6, Math.floor(b.w / 7)))), s("title", null, b.id + " — click the name to collapse")));
      }
      for (const c of layout.clusters || []) {
        vp.appendChild(s("g", { class: "cluster", "data-sg": c.id }, s("rect", { x: c.x, y: c.y, width: c.w, height: c.h, rx: 8 })));
      }
      const byId = new Map(layout.nodes.map(n => [n.id, n]));
      const titles = (layout.clusters || []).map(c => [c.x, c.y, c.x + 110, c.y + 20])   // "subgraph N" labels and boxes
        .concat(layout.nodes.map(n => [n.x - n.w / 2, n.y - n.h / 2, n.x + n.w / 2, n.y + n.h / 2]));
      for (const e of layout.edges) {
        if (e.ghost) {
          const t = byId.get(e.target); if (!t) continue;
          const y0 = t.y - t.h / 2; const x = t.x - t.w / 2 + 10;
          vp.appendChild(s("g", { class: "edge ghost" }, s("path", { d: "M" + x + "," + (y0 - 14) + "L" + x + "," + y0, "marker-end": "url(#arrow)" }),
            s("text", { x: x + 3, y: y0 - 8 }, trunc(e.tensors[0], 18))));
          continue;
        }
        const tip = e.tensors.map((t, k) => t + (e.shapes && e.shapes[k] ? " " + e.shapes[k] : "")).join(", ");
        const g = s("g", { class: "edge" }, s("path", { d: edgePath(e.points), "marker-end": "url(#arrow)" }, s("title", null, tip)));
        const shapes = (e.shapes || []).filter(Boolean);
        const text = trunc(shapes.map(shortShape).join(", "), 22);   // as Netron shows it
        const at = shapes.length && e.points && e.points.length > 1 ? labelPoint(e.points, titles, text.length) : null;
        if (at) g.appendChild(s("text", { class: "shape", x: at[0] + 4, y: at[1] + 3 }, text));
        vp.appendChild(g);
      }
      for (const c of layout.clusters || []) {   // over the edges, with a halo: an edge never crosses the name
        vp.appendChild(s("g", { class: "cluster-label" }, s("text", { x: c.x + 8, y: c.y + 14 }, "subgraph " + c.id)));
      }
      for (const n of layout.nodes) {
        const g = nodeEl(n);
        g.setAttribute("data-id", n.id);
        vp.appendChild(g);
      }
      this.el.replaceChildren(svg);
      if (layout.note) this.el.appendChild(SG.h("div", { class: "graph-note muted" }, layout.note));
      this.svg = svg; this.vp = vp;
      this.elements.clear(); this.items = byId; this.marked = []; this.fills = null;
      for (const g of svg.querySelectorAll(".node")) this.elements.set(g.getAttribute("data-id"), g);
      svg.addEventListener("click", ev => {
        if (this._moved) return;
        const box = ev.target.closest(".scope-box");
        if (box && this.opts.onScope) { this.opts.onScope(box.getAttribute("data-scope")); return; }
        const g = ev.target.closest(".node"); if (!g) return;
        const id = g.getAttribute("data-id");
        if (this.opts.onClick) this.opts.onClick(id, byId.get(id));
      });
      this._miniBuild();
      if (this.selected) this.setSelected(this.selected);
      if (opts && opts.keep && this._last) this._apply(); else this.open();
    }

    /* Centre a point of the layout (a frame's middle), keeping the zoom. */
    centerPoint(x, y) {
      const { w, h } = this._size(); if (!w) return;
      this.tx = w / 2 - x * this.s; this.ty = h / 2 - y * this.s; this.auto = null; this._apply();
    }

    /* Display id of an original node name (a group when collapsed). */
    unit(name) { return this.elements.has(name) ? name : (this.units[name] || null); }

    /* classes: {className: [node names]}; replaces every state class set before. A node inside a
       collapsed group marks the group (and "member", so the box shows it holds the node). */
    setState(classes) {
      for (const g of this.marked) g.classList.remove(...STATE);
      this.marked = [];
      for (const cls in classes) {
        for (const name of classes[cls] || []) {
          const id = this.unit(name); const g = id && this.elements.get(id);
          if (!g) continue;
          g.classList.add(cls); this.marked.push(g);
          if (id !== name) g.classList.add("member");
        }
      }
      this._miniDraw();
    }

    /* The selected node: kept across steps (setState never clears it). */
    setSelected(name) {
      for (const g of this.svg ? this.svg.querySelectorAll(".node.selected") : []) g.classList.remove("selected");
      this.selected = name;
      const id = name && this.unit(name); const g = id && this.elements.get(id);
      if (g) g.classList.add("selected");
    }

    /* fills: {display id or node name: css colour}; null clears all. */
    setFill(fills) {
      this.fills = fills;
      for (const [id, g] of this.elements) {
        const shape = g.querySelector("rect, ellipse");
        if (!shape) continue;
        const c = fills ? (fills[id] || null) : null;
        shape.style.fill = c || "";
      }
      this._miniDraw();
    }

    /* badges: {group id: {parts: [[fraction, css colour], ...], text}}: a closed group's share of its
       members per colour as a bar along its bottom edge, and a line of text in place of its op list
       ("13/15 in subgraphs", "4.2 ms in 15 nodes"). null clears them. */
    setBadges(badges) {
      for (const el of this.svg ? this.svg.querySelectorAll(".badge") : []) el.remove();
      for (const g of this.elements.values()) g.classList.remove("badged");
      for (const id in (badges || {})) {
        const g = this.elements.get(id); const n = this.items.get(id); const b = badges[id];
        if (!g || !n) continue;
        const x0 = n.x - n.w / 2 + 6, width = n.w - 12, y = n.y + n.h / 2 - 8;
        const bar = s("g", { class: "badge bar" });
        let x = x0;
        for (const [frac, colour] of b.parts || []) {
          if (frac <= 0) continue;
          const seg = s("rect", { x, y, width: frac * width, height: 5, "data-frac": frac.toFixed(4) });
          seg.style.fill = colour; bar.appendChild(seg); x += frac * width;
        }
        if (b.parts && b.parts.length) g.appendChild(bar);
        if (b.text) g.appendChild(s("text", { class: "sub badge", x: n.x, y: n.y + 20, "text-anchor": "middle" }, trunc(b.text, 26)));
        g.classList.add("badged");
      }
    }

    _size() { const r = this.el.getBoundingClientRect(); return { w: r.width, h: r.height }; }

    /* Centre a node (or the group holding it), at a zoom where its label is readable. */
    center(name, opts) {
      const id = this.unit(name); const n = id && this.items.get(id);
      if (!n) return false;
      const { w, h } = this._size(); if (!w) return false;
      if (!(opts && opts.keepZoom)) this.s = Math.min(MAX_SCALE, Math.max(this.s, READABLE));
      this.tx = w / 2 - n.x * this.s; this.ty = h / 2 - n.y * this.s;
      this.auto = null; this._apply();
      return true;
    }

    /* Bring a node into view only when it is outside the middle of the view (Play follows it). */
    follow(name) {
      const id = this.unit(name); const n = id && this.items.get(id);
      if (!n) return;
      const { w, h } = this._size();
      const x = n.x * this.s + this.tx, y = n.y * this.s + this.ty;
      if (x < w * 0.15 || x > w * 0.85 || y < h * 0.15 || y > h * 0.85) this.center(name, { keepZoom: this.s >= READABLE });
    }

    /* The whole graph, centred. */
    fit() {
      const L = this.layout; const { w, h } = this._size();
      if (!L || !w || !h) return;
      this.s = Math.min((w - 2 * MARGIN) / Math.max(L.width, 1), (h - 2 * MARGIN) / Math.max(L.height, 1), MAX_SCALE);
      this.tx = (w - L.width * this.s) / 2; this.ty = (h - L.height * this.s) / 2;
      this.auto = "fit"; this._apply();
    }

    /* The first view: the whole graph if its labels are readable so, else the graph's width (at least
       the readable scale) from its top, centred on the first node when wider than the view. */
    open() {
      const L = this.layout; const { w, h } = this._size();
      if (!L || !w || !h) { this.auto = "open"; return; }
      const whole = Math.min((w - 2 * MARGIN) / Math.max(L.width, 1), (h - 2 * MARGIN) / Math.max(L.height, 1), MAX_SCALE);
      if (whole >= READABLE) { this.fit(); this.auto = "open"; return; }
      this.s = Math.min(OPEN_SCALE, Math.max(READABLE, (w - 2 * MARGIN) / Math.max(L.width, 1)));
      const gw = L.width * this.s, gh = L.height * this.s;
      this.ty = gh <= h ? (h - gh) / 2 : MARGIN;
      if (gw <= w) this.tx = (w - gw) / 2;
      else {   // wider than the view: centred on the first (topmost) node, no blank beyond the edges
        let top = null; for (const n of L.nodes) if (!top || n.y < top.y) top = n;
        this.tx = Math.min(MARGIN, Math.max(w - gw - MARGIN, w / 2 - (top ? top.x : 0) * this.s));
      }
      this.auto = "open"; this._apply();
    }

    zoom(f, cx, cy) {
      const s2 = Math.min(6, Math.max(0.01, this.s * f));
      this.tx = cx - (cx - this.tx) * (s2 / this.s); this.ty = cy - (cy - this.ty) * (s2 / this.s); this.s = s2;
      this.auto = null; this._apply();
    }

    /* The size changed: redo the automatic view, or keep the same graph point in the middle. */
    _resized() {
      const { w, h } = this._size(); if (!w || !h || !this.layout) return;
      const last = this._last || { w, h };
      if (this.auto === "fit") this.fit();
      else if (this.auto === "open") this.open();
      else { this.tx += (w - last.w) / 2; this.ty += (h - last.h) / 2; this._apply(); }
    }

    _apply() {
      if (!this.vp) return;
      this.vp.setAttribute("transform", "translate(" + this.tx + "," + this.ty + ") scale(" + this.s + ")");
      const { w, h } = this._size(); this._last = { w, h };
      this.el.dataset.scale = this.s.toFixed(3);
      this._miniView();
    }

    /* ---------------- minimap: every box as a rectangle; click or drag to move the view ---------------- */
    _miniBuild() {
      const L = this.layout;
      const box = SG.h("div", { class: "minimap", title: "minimap: click or drag to move the view" });
      const k = Math.min(MINI_W / Math.max(L.width, 1), MINI_H / Math.max(L.height, 1));
      const cw = Math.max(24, Math.round(L.width * k)), ch = Math.max(24, Math.round(L.height * k));
      const canvas = SG.h("canvas", { width: cw, height: ch });
      const frame = SG.h("div", { class: "minimap-view" });
      box.append(canvas, frame);
      box.style.width = cw + "px"; box.style.height = ch + "px";
      this.mini = { box, canvas, frame, k };
      const moveTo = ev => {
        const r = canvas.getBoundingClientRect();
        const gx = (ev.clientX - r.left) / k, gy = (ev.clientY - r.top) / k;
        const { w, h } = this._size();
        this.tx = w / 2 - gx * this.s; this.ty = h / 2 - gy * this.s; this.auto = null; this._apply();
      };
      let down = false;
      box.addEventListener("mousedown", ev => { ev.stopPropagation(); ev.preventDefault(); down = true; moveTo(ev); });
      window.addEventListener("mousemove", ev => { if (down) moveTo(ev); });
      window.addEventListener("mouseup", () => { down = false; });
      box.addEventListener("click", ev => ev.stopPropagation());
      box.addEventListener("wheel", ev => ev.stopPropagation());
      this.el.appendChild(box);
      this._miniDraw();
    }

    _miniDraw() {
      if (!this.mini || !this.layout) return;
      const { canvas, k } = this.mini; const ctx = canvas.getContext("2d");
      ctx.clearRect(0, 0, canvas.width, canvas.height);
      const marked = new Map();
      for (const g of this.marked) marked.set(g.getAttribute("data-id"), g);
      for (const n of this.layout.nodes) {
        const m = marked.get(n.id);
        ctx.fillStyle = m ? "#f59e0b" : (this.fills && this.fills[n.id]) || (n.kind === "group" ? "#94a3b8" : "#cbd5e1");
        const w = Math.max(1.5, n.w * k), h = Math.max(1.5, n.h * k);
        ctx.fillRect(n.x * k - w / 2, n.y * k - h / 2, w, h);
      }
    }

    _miniView() {
      if (!this.mini) return;
      const { frame, k, canvas } = this.mini; const { w, h } = this._size();
      let x = -this.tx / this.s * k, y = -this.ty / this.s * k, fw = w / this.s * k, fh = h / this.s * k;
      const x0 = Math.max(0, x), y0 = Math.max(0, y);
      fw = Math.min(canvas.width, x + fw) - x0; fh = Math.min(canvas.height, y + fh) - y0;
      frame.style.left = x0 + "px"; frame.style.top = y0 + "px";
      frame.style.width = Math.max(2, fw) + "px"; frame.style.height = Math.max(2, fh) + "px";
      // the whole graph in view: the minimap has nothing to add and would hide a corner of it
      this.mini.box.classList.toggle("whole", x <= 1 && y <= 1 && fw >= canvas.width - 2 && fh >= canvas.height - 2);
    }

    _pan() {
      let sx = 0, sy = 0, down = false;
      this.el.addEventListener("mousedown", ev => { down = true; this._moved = false; sx = ev.clientX; sy = ev.clientY; });
      window.addEventListener("mousemove", ev => {
        if (!down) return;
        const dx = ev.clientX - sx, dy = ev.clientY - sy;
        if (Math.abs(dx) + Math.abs(dy) > 3) { this._moved = true; this.el.classList.add("dragging"); }
        if (this._moved) { this.tx += dx; this.ty += dy; sx = ev.clientX; sy = ev.clientY; this.auto = null; this._apply(); }
      });
      window.addEventListener("mouseup", () => { down = false; this.el.classList.remove("dragging"); setTimeout(() => { this._moved = false; }, 0); });
      /* Wheel scrolls (a tall graph is read by scrolling, as in Netron); ctrl+wheel or a pinch zooms. */
      this.el.addEventListener("wheel", ev => {
        ev.preventDefault();
        const r = this.el.getBoundingClientRect();
        if (ev.ctrlKey || ev.metaKey) this.zoom(Math.exp(-ev.deltaY * 0.002), ev.clientX - r.left, ev.clientY - r.top);
        else { this.tx -= ev.shiftKey ? ev.deltaY : ev.deltaX; this.ty -= ev.shiftKey ? 0 : ev.deltaY; this.auto = null; this._apply(); }
      }, { passive: false });
    }

    /* Zoom about the middle of the view (the + and - keys and buttons). */
    zoomBy(f) { const { w, h } = this._size(); this.zoom(f, w / 2, h / 2); }
  }
  GraphView.READABLE = READABLE;
  SG.GraphView = GraphView;
})();
