/* The model library: sample and uploaded models, upload with a progress bar (then a link to open
   the new model), and a Delete button on uploaded models (two clicks: no modal dialog). */
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
    const del = m.source === "sample" ? null : h("button", { class: "card-delete", "data-delete": m.id,
      title: "delete this model and forget it", onclick: ev => deleteModel(m, ev.currentTarget) }, "Delete");
    return h("div", { class: "card", "data-model": m.id },
      h("h3", null, h("a", { href: "/models/" + encodeURIComponent(m.id) }, m.name), del),
      h("div", { class: "meta" }, m.source + " · " + m.nodes + " nodes · opset " + opset + " · " + SG.bytes(m.size) +
        (m.control_flow.length ? " · " + m.control_flow.join(", ") : "")),
      m.error ? h("p", { class: "error" }, m.error) : null,
      h("table", null, SG.row("inputs", io(m.inputs)), SG.row("outputs", io(m.outputs))),
      h("div", { class: "chips" }, ops));
  }

  /* The first click asks, the second (within 5 s) deletes. */
  async function deleteModel(m, button) {
    if (!button.classList.contains("confirm")) {
      button.classList.add("confirm"); button.textContent = "Delete " + m.name + "?";
      setTimeout(() => { if (button.isConnected) { button.classList.remove("confirm"); button.textContent = "Delete"; } }, 5000);
      return;
    }
    try { await SG.api("DELETE", "/api/models/" + encodeURIComponent(m.id)); await refresh(); }
    catch (e) { SG.error(e); }
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
    const files = [...document.getElementById("upload-file").files];
    const err = document.getElementById("upload-error");
    err.hidden = true;
    if (!files.length) { err.textContent = "choose an .onnx file (or the .onnx and its data files, or an archive) first"; err.hidden = false; return; }
    const total = files.reduce((n, f) => n + f.size, 0);
    const what = files.length === 1 ? files[0].name : files.length + " files (a bundle)";
    if (total > maxBytes) { err.textContent = what + ": " + SG.bytes(total) + " is over the upload limit of " + SG.bytes(maxBytes); err.hidden = false; return; }
    const prog = document.getElementById("upload-progress");
    const bar = prog.querySelector(".bar"), label = prog.querySelector(".label");
    prog.hidden = false; bar.style.width = "0%"; label.textContent = "uploading " + what;
    const form = new FormData(); files.forEach(f => form.append("file", f));
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
      if (xhr.status === 201) {
        SG.fill(label, "loaded " + data.name + ": " + data.nodes + " nodes · ",
          SG.h("a", { id: "upload-open", href: "/models/" + encodeURIComponent(data.id) }, "open it →"));
        bar.style.width = "100%"; refresh();
      }
      else { prog.hidden = true; err.textContent = (data && data.error) || ("upload failed: HTTP " + xhr.status); err.hidden = false; }
    };
    xhr.onerror = () => { prog.hidden = true; err.textContent = "upload failed: the server cannot be reached"; err.hidden = false; };
    xhr.send(form);
  });
  refresh();
})();
