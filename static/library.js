/* The model library: sample and uploaded models, upload with a progress bar. */
"use strict";
(function () {
  const maxEl = document.getElementById("max-upload");
  const maxBytes = Number(maxEl.dataset.bytes);
  maxEl.textContent = SG.bytes(maxBytes);

  function card(m) {
    const h = SG.h;
    const ops = Object.entries(m.op_counts).slice(0, 10).map(([op, n]) => h("span", { class: "chip" }, op + " ×" + n));
    const io = list => list.map((t, k) => [k ? h("br") : null, h("code", null, t.name), " " + (t.dtype || "?") + " " + SG.shape(t)]);
    const opset = Object.entries(m.opset).map(([d, v]) => (d || "ai.onnx") + " " + v).join(", ");
    return h("div", { class: "card", "data-model": m.id },
      h("h3", null, h("a", { href: "/models/" + encodeURIComponent(m.id) }, m.name)),
      h("div", { class: "meta" }, m.source + " · " + m.nodes + " nodes · opset " + opset + " · " + SG.bytes(m.size) +
        (m.control_flow.length ? " · " + m.control_flow.join(", ") : "")),
      h("table", null, SG.row("inputs", io(m.inputs)), SG.row("outputs", io(m.outputs))),
      h("div", { class: "chips" }, ops));
  }

  async function refresh() {
    const box = document.getElementById("models");
    try {
      const data = await SG.api("GET", "/api/models");
      SG.fill(box, data.models.length ? data.models.map(card) :
        SG.h("p", { class: "muted" }, "No models yet: upload one, or start the server with --samples."));
    } catch (e) { SG.fill(box, SG.errorBox(e)); }
  }

  document.getElementById("upload-form").addEventListener("submit", ev => {
    ev.preventDefault();
    const file = document.getElementById("upload-file").files[0];
    const err = document.getElementById("upload-error");
    err.hidden = true;
    if (!file) { err.textContent = "choose an .onnx file first"; err.hidden = false; return; }
    if (file.size > maxBytes) { err.textContent = file.name + ": " + SG.bytes(file.size) + " is over the upload limit of " + SG.bytes(maxBytes); err.hidden = false; return; }
    const prog = document.getElementById("upload-progress");
    const bar = prog.querySelector(".bar"), label = prog.querySelector(".label");
    prog.hidden = false; bar.style.width = "0%"; label.textContent = "uploading " + file.name;
    const form = new FormData(); form.append("file", file);
    const xhr = new XMLHttpRequest();
    xhr.open("POST", "/api/models");
    xhr.upload.onprogress = e => {
      if (e.lengthComputable) {
        const p = e.loaded / e.total; bar.style.width = (p * 100).toFixed(1) + "%";
        label.textContent = (p < 1 ? "uploading " : "reading the model… ") + SG.bytes(e.loaded) + " / " + SG.bytes(e.total);
      }
    };
    xhr.onload = () => {
      let data = null; try { data = JSON.parse(xhr.responseText); } catch (e) { /* not JSON */ }
      if (xhr.status === 201) { label.textContent = "loaded " + data.name + ": " + data.nodes + " nodes"; bar.style.width = "100%"; refresh(); }
      else { prog.hidden = true; err.textContent = (data && data.error) || ("upload failed: HTTP " + xhr.status); err.hidden = false; }
    };
    xhr.onerror = () => { prog.hidden = true; err.textContent = "upload failed: the server cannot be reached"; err.hidden = false; };
    xhr.send(form);
  });
  refresh();
})();
