"""Ask the real TensorRT ONNX parser, where ``tensorrt`` imports, what our rule tables only emulate.

Only machines with TensorRT's Python package can run this; ``engine/subgraph_ops.py``
imports TensorRT too (to build engines), for another job. The check is designed so
that it *can* give per-node truth (``OnnxParser.supports_model_v2`` cannot: it stops
at the first error, keeps only the last error node, and the old check only re-parsed
subgraphs our table had accepted, so it could never find a wrong refusal):

1. the parser session loads TensorRT's bundled plugins (``trt.init_libnvinfer_plugins``)
   and any plugin libraries the user names, so plugin-backed nodes are looked up as
   a real build would;
2. **per node**: every top-level node is exported as a one-node model (its Constant
   producers come along, so ``is_weights()`` inputs stay weights; initializers stay
   initializers; every other input becomes a typed graph input) and parsed on its own.
   This answers "does the parser import this node?" both ways: a node we refuse that
   the parser imports is a *wrong refusal*, a node we accept that it refuses a
   *missed refusal*;
3. **per subgraph**: each subgraph of our partition is exported (``report.export_subgraphs``)
   and parsed whole, which catches what only shows in context (shape tensors, ranks
   the parser infers through the subgraph).

What it proves: for the model, the release installed and the plugins loaded, which
nodes and which of our subgraphs the parser imports. What it does not prove: that the
engine builds (tactics, memory, optimisation profiles) -- that is a build, not a parse.
A one-node model sees its non-weight inputs as graph inputs; a check that depends on
where a tensor comes from (a shape tensor) can differ from the node in its model, and
the per-subgraph parse is the arbiter there. Which options count: ``trt_version`` (the
table compared) and ``trt_plugins`` (declared plugins); ``exclude_data_dependent``,
``fallback_ops``, ``min_size`` and ``mode`` are partition choices, not parser facts,
and are ignored for the per-node comparison (the report says so).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

#: ``parse(model_bytes) -> (ok, [{"node", "op", "desc"}])``: the real parser, or a stand-in in tests
Parse = Callable[[bytes], "tuple[bool, list[dict[str, Any]]]"]
IGNORED_OPTIONS = ("exclude_data_dependent", "fallback_ops", "min_size", "mode", "trt_target", "assume_supported",
                   "trt_input_shapes")


def _trt() -> Any | None:
    try:
        return importlib.import_module("tensorrt")
    except Exception:  # noqa: BLE001 - ImportError, or a broken CUDA install raising at import
        return None


def available() -> bool:
    return _trt() is not None


def version() -> str | None:
    trt = _trt()
    return getattr(trt, "__version__", None) if trt is not None else None


def real_parser(plugin_libraries: Sequence[str | os.PathLike] = ()) -> Parse:
    """A ``Parse`` backed by TensorRT's OnnxParser, plugins initialised (raises where TensorRT is absent)."""
    trt = _trt()
    if trt is None:
        raise RuntimeError("tensorrt is not installed here; the parser check needs it")
    logger = trt.Logger(trt.Logger.ERROR)
    trt.init_libnvinfer_plugins(logger, "")  # the bundled plugins, as trtexec and a real build load them
    builder = trt.Builder(logger)
    registry = builder.get_plugin_registry() if hasattr(builder, "get_plugin_registry") else trt.get_plugin_registry()
    for library in plugin_libraries:
        registry.load_library(str(library))

    def parse(data: bytes) -> tuple[bool, list[dict[str, Any]]]:
        flags = 0
        if hasattr(trt.NetworkDefinitionCreationFlag, "EXPLICIT_BATCH"):  # 8.x; implicit in 10.x
            flags = 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
        network = builder.create_network(flags)
        parser = trt.OnnxParser(network, logger)
        ok = bool(parser.parse(data))
        errors = []
        for k in range(parser.num_errors):
            err = parser.get_error(k)
            errors.append({"node": _call(err, "node_name") or str(_call(err, "node")),
                           "op": _call(err, "node_operator") or "", "desc": _call(err, "desc") or str(err)})
        return ok and not errors, errors
    return parse


def _call(obj: Any, name: str) -> Any:
    f = getattr(obj, name, None)
    try:
        return f() if callable(f) else f
    except Exception:  # noqa: BLE001 - older TensorRT versions lack some accessors
        return None


def parser_check(paths: Sequence[str | os.PathLike], parse: Parse | None = None) -> list[dict[str, Any]]:
    """Parse each ONNX file: [{"path", "ok", "errors": [{"node", "op", "desc"}]}]."""
    parse = parse or real_parser()
    out = []
    for path in paths:
        ok, errors = parse(Path(path).read_bytes())
        out.append({"path": str(path), "ok": ok, "errors": errors})
    return out


def one_node_models(graph: Any) -> Iterator[tuple[Any, bytes]]:
    """(node, model bytes) for every top-level node that is not a Constant: the node alone, with the
    Constants it reads (so they stay weights) and the initializers it reads."""

    from ..onnx_io import standalone_model
    from ..state import subgraph_body
    for node in graph.nodes:
        if node.op_type == "Constant" and not node.domain:
            continue
        producers = [graph.producer(t) for t in node.inputs if t]
        members = [p for p in producers if p is not None and p.op_type == "Constant" and not p.domain] + [node]
        members = list({m.name: m for m in members}.values())
        body = subgraph_body(graph, members, f"node_{graph.index[node.name]}")
        outputs = [t for t in node.outputs if t]
        body = type(body).trusted(body.name, body.nodes, body.inputs, outputs, body.tensors, body.opset, closed=True)
        model = standalone_model(body, graph.initializers, graph.opset, name=body.name)
        yield node, model.SerializeToString()


def check_parser(graph: Any, rules: Any, parse: Parse, result: Any = None,
                 out_dir: str | os.PathLike | None = None) -> dict[str, Any]:
    """Per-node and (when ``result`` and ``out_dir`` are given) per-subgraph disagreements.

    ``disagreements``: [{"node", "op_type", "ours", "parser", "our_reason", "parser_errors",
    "kind": "missed refusal" | "wrong refusal"}]; ``subgraphs``: [{"subgraph", "errors"}] for our
    subgraphs the parser refuses as a whole.
    """
    ours = rules.compat(graph)
    rows = []
    for node, data in one_node_models(graph):
        parser_ok, errors = parse(data)
        our_ok = node.name not in ours
        if parser_ok != our_ok:
            rows.append({"node": node.name, "op_type": node.op_type, "ours": our_ok, "parser": parser_ok,
                         "kind": "missed refusal" if our_ok else "wrong refusal",
                         "our_reason": ours.get(node.name, ""), "parser_errors": errors})
    report = {"tensorrt": version(), "tensorrt_rules": rules.version, "nodes": len(graph.nodes),
              "plugins": sorted(rules.user_plugins), "ignored_options": list(IGNORED_OPTIONS),
              "disagreements": rows, "subgraphs": []}
    if result is not None and out_dir is not None:
        from ..report import export_subgraphs
        for check in parser_check(export_subgraphs(result, out_dir), parse):
            if not check["ok"]:
                report["subgraphs"].append({"subgraph": Path(check["path"]).stem, "errors": check["errors"]})
    return report


def disagreements(result: Any, out_dir: str | os.PathLike, parse: Parse | None = None) -> dict[str, Any]:
    """Our subgraphs the parser refuses as a whole: {"tensorrt", "checked", "disagreements": [...]}."""
    from ..report import export_subgraphs
    checks = parser_check(export_subgraphs(result, out_dir), parse)
    bad = [{"subgraph": Path(c["path"]).stem, "path": c["path"], "errors": c["errors"]} for c in checks if not c["ok"]]
    return {"tensorrt": version(), "checked": len(checks), "disagreements": bad}


def rules_for_check(selection: Any) -> Any:
    """The rules ``--check-parser`` compares: a validated tensorrt selection's rules (``options.rules_for``,
    the same function the backend uses, so ``trt_version`` and ``trt_plugins`` cannot be dropped), less the
    partition choices of ``IGNORED_OPTIONS``, which are not parser facts: data-dependent ops, fallback ops
    and assumed plugins are not held back, and the parser is the GPU parser whatever the target."""
    from .options import rules_for
    return rules_for(selection.options, exclude_data_dependent=False, fallback_ops=(), assume_supported=(),
                     trt_target="gpu", trt_input_shapes=())


def run_check(graph: Any, selection: Any, parse: Parse, out_dir: str | os.PathLike | None = None
              ) -> dict[str, Any]:
    """The whole ``--check-parser``: per node, then per subgraph of the partition the selection gives."""
    from ..runner import partition
    rules = rules_for_check(selection)
    result = None
    if out_dir is not None:
        result = partition(graph, selection)
    return check_parser(graph, rules, parse, result, out_dir)


def cli_check_parser(args: Any, selection: Any, graph: Any) -> int:
    """``sglens partition --backend tensorrt --check-parser``: print the disagreements (exit 1 when any)."""
    import json
    import tempfile

    from ..errors import LensError
    if selection is None or selection.backend != "tensorrt":
        raise LensError("--check-parser compares the tensorrt backend's rules; add --backend tensorrt")
    if not available():
        raise LensError("--check-parser needs TensorRT's Python package (tensorrt), which does not import here")
    libraries = [p for p in os.environ.get("SGLENS_TRT_PLUGIN_LIBS", "").split(os.pathsep) if p]
    with tempfile.TemporaryDirectory() as tmp:
        report = run_check(graph, selection, real_parser(libraries), out_dir=args.export_dir or tmp)
    print(json.dumps(report, indent=1))
    return 1 if report["disagreements"] or report["subgraphs"] else 0
