/* A run's card: the verdict in words (a weak match said, never a difference under a match), the
   inputs used, the errors against onnxruntime, what ran each subgraph and why (with its time and peak
   memory), timings and memory. Node names are links: ``opts.onNode(name)`` / ``opts.onNodes(names)``
   on the model page; elsewhere ``opts.nodeHref(name)`` (a link to the model page). Loaded after
   plots.js, whose SG.renderRun calls SG.runSummary. */
"use strict";
(function () {
  const h = SG.h;
  // the server sends a NaN or inf as the string "nan" / "inf" / "-inf" (JSON has no such numbers)
  const num = x => (x == null ? "n/a" : typeof x === "string" ? x : (x === 0 ? "0" : Math.abs(x) >= 1e-3 && Math.abs(x) < 1e4 ? Number(x.toPrecision(4)).toString() : x.toExponential(2)));
  const ms = s => (s == null ? "n/a" : (s * 1e3).toFixed(3));

  /* A verdict's status in a word or two (the run history, the compare page's run labels). */
  SG.verdictWord = function (status) {
    return ({ match: "✔ match", weak: "✔ weak match", rounding: "≈ rounding only", differ: "✘ differs" })[status] || "";
  };

  /* The verdict of a stored run: the server's words, or (runs stored before verdicts had words) ok. */
  SG.runVerdict = function (c) {
    if (c.verdict) return c.verdict;
    return { status: c.ok ? "match" : "differ", headline: c.ok ? "✔ outputs match onnxruntime" : "✘ outputs differ from onnxruntime",
      details: [], first_divergent: c.ok ? null : c.first_divergent, inner_difference: null };
  };

  /* "onnxruntime ×2, engine ×1": which runtime ran how many subgraphs. */
  SG.runtimeCounts = function (subgraphs) {
    const counts = {};
    for (const s of subgraphs || []) counts[s.executor || "?"] = (counts[s.executor || "?"] || 0) + 1;
    return Object.entries(counts).map(([k, n]) => k + " ×" + n).join(", ");
  };

  /* What ran the nodes outside the subgraphs of a run: "ours" (our engine; every run from before
     the choice existed) or "onnxruntime" (the result's runtimes, the history row's summary, a live job). */
  SG.hostRuntime = function (run) {
    const r = (run && run.result) || {};
    return (r.runtimes || {}).host || ((run && run.summary) || {}).host_runtime || (run && run.host_runtime) || "ours";
  };
  SG.hostRuntimeName = host => (host === "ours" ? "our engine" : host);
  /* " (3 onnxruntime regions, 12 nodes; 1 node on our engine)" for a run whose rest ran on onnxruntime. */
  function hostRegions(r) {
    const rt = (r && r.runtimes) || {};
    if (rt.host_regions == null) return "";
    const stay = rt.host_on_engine || [];
    return " (" + rt.host_regions + " region(s), " + rt.host_nodes + " node(s)" +
      (stay.length ? "; on our engine: " + stay.join(", ") : "") + ")";
  }

  /* A node name as a link to the graph (a plain code element when there is nowhere to go). */
  SG.nodeLink = function (name, opts, members) {
    opts = opts || {};
    const label = h("code", null, name);
    if (opts.onNode) {
      return h("span", { class: "clickable node-link", "data-node": name, title: "show in the graph",
        onclick: () => (members && opts.onNodes ? opts.onNodes(members) : opts.onNode(name)) }, label);
    }
    if (opts.nodeHref) {
      return h("a", { class: "node-link", "data-node": name, href: opts.nodeHref(members && members.length ? members[0] : name),
        title: "open the model with this node selected" }, label);
    }
    return label;
  };

  function outputsTable(c) {
    const rows = [];
    for (const [name, per] of Object.entries(c.outputs)) {
      for (const [run, e] of Object.entries(per)) {
        const below = e.ref_below_atol == null ? "n/a" : (100 * e.ref_below_atol).toFixed(1) + "%";
        const weak = e.weak || e.inputs_independent;  // near zero, or the same for other inputs
        rows.push(h("tr", { class: e.match ? (weak ? "ok weak" : "ok") : "bad", "data-output": name, "data-run": run },
          [h("td", null, h("code", null, name)), h("td", null, run), h("td", null, num(e.max_abs)),
            h("td", { class: "max-rel", title: e.rel_note || null }, num(e.max_rel) + (e.rel_note ? " *" : "")),
            h("td", null, num(e.mean_abs)), h("td", null, e.cosine == null ? "n/a" : typeof e.cosine === "string" ? e.cosine : e.cosine.toFixed(6)),
            h("td", null, e.mismatched == null ? (e.note || "n/a") : String(e.mismatched)),
            h("td", { class: "below-atol" }, below),
            h("td", null, e.match ? (e.inputs_independent ? "✔ match (ignores inputs)"
              : e.weak ? "✔ match (weak)" : "✔ match") : "✘ differs")]));
      }
    }
    return h("table", { class: "grid run-errors" },
      SG.headRow("output", "run", "max abs", "max rel", "mean abs", "cosine", "elements out", "|ref| ≤ atol", "verdict"), rows);
  }

  function timingsTable(c) {
    const gpu = Object.values(c.timings).some(t => t.cuda_graph);  // a GPU run: its CUDA Graph column
    const rows = Object.entries(c.timings).map(([run, t]) => h("tr", { "data-run": run },
      [h("td", null, run), h("td", { class: "t-median" }, ms(t.seconds)),
        h("td", { class: "t-spread" }, ms(t.p10) + " – " + ms(t.p90)),
        h("td", { class: "t-repeats" }, (t.repeat != null ? t.repeat : "?") + " (+" + (t.warmup || 0) + " warm-up)"),
        h("td", null, SG.bytes(t.rss_added_bytes)), h("td", null, t.peak_bytes == null ? "n/a (not our executor)" : SG.bytes(t.peak_bytes)),
        gpu ? h("td", { class: "t-graph" }, SG.cudaGraphText(t.cuda_graph)) : null]));
    return h("table", { class: "grid run-timings" },
      SG.headRow("run", "median ms", "p10 – p90 ms", "measured runs", "peak RSS added", "live tensors (ours)",
        ...(gpu ? ["CUDA graph replay"] : [])), rows);
  }

  /* A GPU run as CUDA Graph replays (engine/gpu_graphs.py): its time, or why it stayed eager. */
  SG.cudaGraphText = function (g) {
    if (!g) return "–";
    if (g.seconds != null) return ms(g.seconds) + " ms" + (g.matches_eager ? "" : " (outputs differ from eager!)");
    const failed = (g.capture_failed || [])[0];
    const first = (g.eager_because || [])[0];
    return "eager: " + (failed || (first ? first.node + ": " + first.why : "not captured"));
  };

  SG.fillText = s => (s.fill === "random" ? "random " + s.low + " … " + s.high + ", seed " + s.seed :
    s.fill === "file" ? "uploaded array" : s.fill === "constant" ? "constant " + s.value : s.fill);

  function inputsTable(r) {
    const used = r.inputs; if (!used || !used.specs) return null;
    return h("table", { class: "grid run-inputs-used" }, SG.headRow("input", "shape", "dtype", "values"),
      used.specs.map(s => SG.row(h("code", null, s.name), "[" + s.shape.join(", ") + "]", s.dtype, SG.fillText(s))));
  }

  /* The reason every subgraph of a run shares (23 rows of "auto: tensorrt does not import ..."
     on a quantized CRNN), to say once; null when they differ or there is one subgraph. */
  SG.sharedReason = list => (list.length > 1 && list.every(s => s.reason === list[0].reason) ? list[0].reason || null : null);

  /* Per subgraph: what ran it (auto resolved) and why (said once above when all share it), its
     time and peak memory. */
  SG.subgraphRuntimeTable = function (c, r, opts) {
    const subs = c.subgraphs || [];
    if (!subs.length) return null;
    const members = {};
    for (const s of ((r.partition || {}).subgraphs || [])) members[s.id] = s.nodes || [];
    const common = SG.sharedReason(subs);
    const table = h("table", { class: "grid run-subgraphs" },
      SG.headRow(...["subgraph", "property", "ran on"].concat(common ? [] : ["why"], ["median ms", "peak memory"])),
      subs.map(s => h("tr", { "data-subgraph": String(s.id), "data-runtime": s.executor || "?" },
        [h("td", null, "#" + s.id + " ", SG.nodeLink(s.node, opts, members[s.id])), h("td", null, s.property || ""),
          h("td", { class: "ran-on" }, h("b", null, s.executor || "?")), common ? null : h("td", { class: "why" }, s.reason || ""),
          h("td", null, ms(s.seconds) + (s.device_seconds != null ? " (GPU " + ms(s.device_seconds) + ")" : "")),
          h("td", { class: "sg-peak" }, SG.bytes(s.peak_bytes) + SG.poolPeak(s))])));
    return common ? [h("p", { class: "muted why", "data-shared": "run" }, "every subgraph: " + common), table] : table;
  };

  /* GPU runs: the cupy pool's high-water mark beside the live-tensor peak ("" elsewhere). */
  SG.poolPeak = s => (s.pool_peak_bytes != null ? " (GPU pool " + SG.bytes(s.pool_peak_bytes) + ")" : "");

  /* "#7 name" -> the subgraph's record, for its member nodes. */
  function subgraphOf(c, label) {
    return (c.subgraphs || []).find(s => label === "#" + s.id + " " + s.node);
  }
  function subgraphLink(c, r, label, opts) {
    const s = subgraphOf(c, label);
    if (!s) return h("code", null, label);
    const part = ((r.partition || {}).subgraphs || []).find(p => p.id === s.id);
    return ["#" + s.id + " ", SG.nodeLink(s.node, opts, part ? part.nodes : null)];
  }

  SG.runSummary = function (run, opts) {
    opts = opts || {};
    const r = run.result; const c = r.comparison;
    const sum = r.partition.summary || {};
    const tol = c.tolerance || {};
    const v = SG.runVerdict(c);
    const fd = c.first_divergent_node;
    const fb = c.fallback_nodes || [];
    const ran = SG.runtimeCounts(c.subgraphs);
    const details = (v.details || []).filter(d => !d.startsWith("first subgraph introducing"));
    return h("div", { class: "run-summary", "data-verdict": v.status },
      h("b", { class: "verdict verdict-" + v.status }, v.headline),
      details.length ? h("ul", { class: "verdict-details" }, details.map(d => h("li", null, d))) : null,
      h("div", { class: "match-rule muted" }, "match rule (as Polygraphy): every element |ours − ref| ≤ atol + rtol·|ref|, atol " +
        num(tol.atol) + ", rtol " + num(tol.rtol) + "; max rel only over elements with |ref| > 10·atol (near zero the ratio means nothing)"),
      h("div", { class: "muted run-setup" }, "backend " + run.backend + " · subgraph runtime " + c.executor +
        (ran ? " → ran on " + ran : "") + " · ", h("span", { class: "run-host", "data-host-runtime": SG.hostRuntime(run) },
          "rest of the graph on " + SG.hostRuntimeName(SG.hostRuntime(run)) + hostRegions(r)), " · device " + c.device + " · " +
        (sum.partitions != null ? sum.partitions + " partitions, coverage " + (100 * sum.coverage).toFixed(0) + "%" : "")),
      inputsTable(r),
      h("h4", null, "Outputs against onnxruntime"), outputsTable(c),
      fd ? h("div", { class: "first-node" }, "first node out of tolerance (topological order, engine run): ",
        fd.inside ? [SG.nodeLink(fd.inside, opts), " › ", h("code", null, fd.node.slice(fd.inside.length + 1))] : SG.nodeLink(fd.node, opts),
        " (" + fd.op_type + "), output ", h("code", null, fd.tensor), ", max abs " + num(fd.max_abs),
        fd.isolated && fd.isolated.finding ? h("div", { class: "first-node-alone muted" }, "alone: " + fd.isolated.finding) : null) : null,
      v.first_divergent ? h("div", { class: "first-subgraph" }, "first subgraph introducing a difference: ", subgraphLink(c, r, v.first_divergent, opts)) : null,
      v.inner_difference ? h("div", { class: "inner-difference" }, "subgraph whose outputs differ inside the graph (outputs still match): ",
        subgraphLink(c, r, v.inner_difference, opts)) : null,
      fb.length ? h("div", { class: "fallback" }, h("b", null, fb.length + " node(s) without a kernel of ours ran on onnxruntime, one session per node: "),
        fb.map((n, k) => [k ? ", " : "", SG.nodeLink(n.node || n.name || "?", opts), " (" + (n.op_type || n.op || "?") + ")"])) : null,
      (c.subgraphs || []).length ? h("h4", null, "What ran each subgraph") : null, SG.subgraphRuntimeTable(c, r, opts),
      h("h4", null, "Timings and memory"), timingsTable(c),
      h("div", { class: "muted mem-legend" }, "peak RSS added: the rise of the whole process's resident-memory high-water mark during " +
        "that run (set-up, warm-up and repeats; onnxruntime's arenas included), measured the same way for every run. " +
        "live tensors: the largest total of tensors our executor held at once (not measured for onnxruntime)."),
      (r.notes || []).map(n => h("div", { class: "muted" }, "note: " + n)));
  };
})();
