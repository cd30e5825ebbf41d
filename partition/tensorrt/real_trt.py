"""Ask the real TensorRT ONNX parser about exported subgraphs, where ``tensorrt`` imports.

Only some GPU machines have TensorRT; nothing else in the project imports it.
``available()`` says whether it does here; ``parser_check(paths)`` parses each
exported subgraph model and returns, per file, the parser's errors;
``disagreements(result, out_dir)`` exports the result's subgraphs and lists
every one the parser refuses although our table accepted it.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any, Sequence


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


def parser_check(paths: Sequence[str | os.PathLike]) -> list[dict[str, Any]]:
    """Parse each ONNX file with TensorRT's parser: [{"path", "ok", "errors": [{"node", "op", "desc"}]}]."""
    trt = _trt()
    if trt is None:
        raise RuntimeError("tensorrt is not installed here; parser_check needs it")
    logger = trt.Logger(trt.Logger.ERROR)
    builder = trt.Builder(logger)
    out: list[dict[str, Any]] = []
    for path in paths:
        flags = 0
        if hasattr(trt.NetworkDefinitionCreationFlag, "EXPLICIT_BATCH"):
            flags = 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
        network = builder.create_network(flags)
        parser = trt.OnnxParser(network, logger)
        ok = bool(parser.parse_from_file(str(path)))
        errors = []
        for k in range(parser.num_errors):
            err = parser.get_error(k)
            errors.append({"node": _call(err, "node_name") or str(_call(err, "node")),
                           "op": _call(err, "node_operator") or "", "desc": _call(err, "desc") or str(err)})
        out.append({"path": str(path), "ok": ok and not errors, "errors": errors})
    return out


def _call(obj: Any, name: str) -> Any:
    f = getattr(obj, name, None)
    try:
        return f() if callable(f) else f
    except Exception:  # noqa: BLE001 - older TensorRT versions lack some accessors
        return None


def disagreements(result: Any, out_dir: str | os.PathLike) -> dict[str, Any]:
    """Export ``result``'s subgraphs and compare the parser's verdict with our table's.

    Every exported subgraph is one our table accepted; any parser error is a
    disagreement (our table too generous). Returns {"tensorrt": version,
    "checked": n, "disagreements": [{"subgraph", "path", "errors"}]}.
    """
    from ..report import export_subgraphs
    paths = export_subgraphs(result, out_dir)
    checks = parser_check(paths)
    bad = [{"subgraph": Path(c["path"]).stem, "path": c["path"], "errors": c["errors"]}
           for c in checks if not c["ok"]]
    return {"tensorrt": version(), "checked": len(checks), "disagreements": bad}


def parser_support(model_bytes: bytes, path: str | None = None) -> dict[int, bool]:
    """Node index -> does the real parser put it in a supported subgraph (``supports_model_v2``, TensorRT >= 10.1)."""
    trt = _trt()
    if trt is None:
        raise RuntimeError("tensorrt is not installed here; --check-parser needs it")
    logger = trt.Logger(trt.Logger.ERROR)
    network = trt.Builder(logger).create_network(0)
    parser = trt.OnnxParser(network, logger)
    if not hasattr(parser, "supports_model_v2"):
        raise RuntimeError(f"tensorrt {version()} has no OnnxParser.supports_model_v2 (added in 10.1)")
    parser.supports_model_v2(model_bytes, path) if path else parser.supports_model_v2(model_bytes)
    count = _call(parser, "num_subgraphs")
    if count is None:
        count = _call(parser, "get_nb_subgraphs") or 0
    verdict: dict[int, bool] = {}
    for k in range(int(count)):
        ok = bool(parser.is_subgraph_supported(k))
        for index in parser.get_subgraph_nodes(k):
            verdict[int(index)] = ok
    return verdict


def check_parser(graph: Any, model_bytes: bytes, rules: Any, path: str | None = None) -> dict[str, Any]:
    """Every node where our rules and the real parser disagree (nodes in model order, as the parser counts them)."""
    ours = rules.compat(graph)
    theirs = parser_support(model_bytes, path)
    rows = []
    for index, node in enumerate(graph.nodes):
        parser_ok = theirs.get(index)
        our_ok = node.name not in ours
        if parser_ok is not None and parser_ok != our_ok:
            rows.append({"node": node.name, "op_type": node.op_type, "ours": our_ok, "parser": parser_ok,
                         "our_reason": ours.get(node.name, "")})
    return {"tensorrt": version(), "tensorrt_rules": rules.version, "nodes": len(graph.nodes),
            "disagreements": rows}


def cli_check_parser(args: Any, selection: Any, graph: Any) -> int:
    """``sglens partition --backend tensorrt --check-parser``: print the disagreements (exit 1 when any)."""
    import json
    from ..errors import LensError
    from .options import rules_for
    if selection is None or selection.backend != "tensorrt":
        raise LensError("--check-parser compares the tensorrt backend's rules; add --backend tensorrt")
    if not available():
        raise LensError("--check-parser needs TensorRT's Python package (tensorrt), which does not import here")
    # Every option of the selection reaches the rules (trt_plugins was once read as "plugins" and lost);
    # data-dependent ops are left to the real parser to judge.
    rules = rules_for(selection.options, exclude_data_dependent=False)
    report = check_parser(graph, Path(args.model).read_bytes(), rules, str(args.model))
    print(json.dumps(report, indent=1))
    return 1 if report["disagreements"] else 0
