/* The guided walkthrough: the real trace of the cycle example (why partitioning must avoid cycles), one explained step at a time. */
"use strict";
(function () {
  const view = new SG.GraphView(document.getElementById("graph"), {});
  let steps = [], i = 0, layouts = null, drawn = null;

  function subgraphsUpTo(k) {
    const done = [];
    for (let j = 0; j <= k; j++) if (steps[j].kind === "subgraph") done.push(...steps[j].candidates);
    return done;
  }

  /* The trace is drawn on the plain graph; the last step, the result, on the graph with its
     subgraphs drawn as boxes. */
  function draw(which) {
    if (drawn === which) return;
    view.render(layouts[which]); drawn = which;
    document.getElementById("graph").dataset.layout = which;
  }

  function show(k) {
    i = Math.max(0, Math.min(steps.length - 1, k));
    const e = steps[i];
    draw(e.kind === "result" ? "final" : "trace");
    document.getElementById("step-no").textContent = "step " + (i + 1) + " of " + steps.length;
    document.getElementById("step-call").textContent = e.call;
    document.getElementById("step-text").textContent = e.text;
    const classes = { sg: subgraphsUpTo(i), candidate: e.candidates, current: e.node ? [e.node] : [],
      neighbour: e.neighbour ? [e.neighbour] : [], path: e.path };
    if (e.kind === "exclude") classes.path = [e.node];
    view.setState(classes);
    document.querySelectorAll("#learn-steps li").forEach((li, j) => li.classList.toggle("active", j === i));
    document.getElementById("learn-prev").disabled = i === 0;
    document.getElementById("learn-next").disabled = i === steps.length - 1;
  }

  async function load() {
    try {
      const data = await SG.api("GET", "/api/learn");
      steps = data.steps.concat([{ kind: "result", call: data.result.call, text: data.result.text,
        candidates: [], path: [], node: null }]);
      layouts = { trace: data.layout, final: data.final_layout };
      draw("trace");
      const ol = document.getElementById("learn-steps");
      SG.fill(ol, steps.map(s => SG.h("li", null, s.call)));
      ol.querySelectorAll("li").forEach((li, j) => li.addEventListener("click", () => show(j)));
      document.getElementById("learn-open").href = "/models/" + encodeURIComponent(data.model) +
        "?backend=" + encodeURIComponent(data.backend) + "&ops=" + encodeURIComponent(data.ops.join(","));
      show(0);
    } catch (e) { document.getElementById("step-text").textContent = "The walkthrough could not load: " + e.message; SG.error(e); }
  }
  document.getElementById("learn-next").onclick = () => show(i + 1);
  document.getElementById("learn-prev").onclick = () => show(i - 1);
  document.getElementById("learn-first").onclick = () => show(0);
  document.getElementById("learn-last").onclick = () => show(steps.length - 1);
  document.addEventListener("keydown", ev => {
    if (ev.key === "ArrowRight") show(i + 1); else if (ev.key === "ArrowLeft") show(i - 1);
    else if (ev.key === "Home") show(0); else if (ev.key === "End") show(steps.length - 1);
  });
  window.addEventListener("resize", () => view.fit());
  load();
})();
