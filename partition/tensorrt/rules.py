"""TensorRT compatibility of ONNX nodes, decided as onnx-tensorrt's parser decides, with a reason and a source.

The rules are data: one table per TensorRT release (``partition/data/
tensorrt_<release>.json``, loaded by ``table.py``; every row cites the parser
source line or the ``docs/operators.md`` row it comes from). This module
interprets a table. For each node, in this order (the first failure is the
reason; ``TRTRules.cite(name)`` gives its source):

1. dispatch as the parser does: by op type with the domain ignored when the
   parser has an importer of that name (``com.microsoft::Gelu`` is Gelu);
   ``ai.onnx.ml`` ops are refused; a model-local function is expanded and its
   body decides; any other name is a plugin lookup -- TensorRT's bundled
   plugins (libnvinfer_plugin) and the user's ``plugins`` are accepted with a
   note, the rest refused;
2. the row is supported in this release;
3. data-dependent output shapes (NonZero, NonMaxSuppression, RoiAlign) unless
   ``exclude_data_dependent=False``; the user's ``fallback_ops``;
4. attribute checks (``onnxOpCheckers.cpp`` and the importers);
5. element types: DOUBLE is cast down to FLOAT by the parser; UINT8 only as a
   network input/output and refused by the importers that say so; INT8/FP8/INT4
   only through Q/DQ;
6. inputs that must be weights, shape tensors, or known values (``rules_constants``);
7. ``If``/``Loop``/``Scan`` and local functions: every body node passes, bodies
   nested in bodies too (walked with a stack; the parser stops at 24 levels). A
   call of a model-local function carries its body on the node
   (``subgraphs["function"]``, built by the importer with attribute references
   bound); the call must pass as many inputs as the function declares.

The default-domain opset never refuses: outside the documented 9-20 (or below
7, where the parser itself warns) it is a warning (``TRTRules.warnings``).
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Mapping

import numpy as np

from ..dtypes import ONNX_TYPE_NAMES
from ..ir import SUBGRAPH_DOMAIN, Graph, Node
from ..local_functions import FUNCTION_KEY
from .rules_constants import Scope, check_input
from .rules_bodies import _typed_body, _weights, local_functions_of  # noqa: F401 - local_functions_of re-exported
from .rules_source import source_checks
from .table import load_table

#: TensorRT 10.1's parser: a call must pass as many inputs as the function declares, and
#: If/Loop/Scan/function bodies nest at most 24 deep (``kMAX_NESTED_SUBGRAPHS``).
_ARITY_CITE = "onnxOpCheckers.cpp:787"
_NESTED_CITE = "ModelImporter.cpp:118"
_MAX_NESTED = 24
FUNCTION_BODY = "function body"

ML_DOMAIN = "ai.onnx.ml"
#: domains whose nodes are not dispatched by op type (refused before the op's row is read)
_NOT_BY_OP_TYPE = frozenset((SUBGRAPH_DOMAIN,))
_ORDER = ["FLOAT", "FLOAT16", "BFLOAT16", "INT8", "UINT8", "INT32", "INT64", "BOOL", "FLOAT8E4M3FN", "INT4"]


def _names(types: Iterable[str]) -> str:
    return ", ".join(sorted(types, key=lambda t: (_ORDER.index(t) if t in _ORDER else 99, t)))


class _OpRule:
    """One op's row, pre-digested."""

    __slots__ = ("name", "row", "supported", "types", "refuses", "input_types", "output_types", "inputs",
                 "attrs", "data_dependent", "control_flow", "all_inputs", "cite", "structural", "plugin")

    def __init__(self, name: str, row: Mapping[str, Any]) -> None:
        self.name, self.row = name, row
        self.supported = bool(row.get("supported", True))
        self.types = frozenset(row["types"]) if row.get("types") is not None else None
        self.refuses = {int(k): (frozenset(v["types"]), v["cite"]) for k, v in row.get("refuses", {}).items()}
        self.input_types = {int(k): frozenset(v) for k, v in row.get("input_types", {}).items()}
        self.output_types = {int(k): frozenset(v) for k, v in row.get("output_types", {}).items()}
        self.inputs = {int(k): v for k, v in row.get("inputs", {}).items()}
        self.attrs = list(row.get("attrs", ()))
        self.data_dependent = bool(row.get("data_dependent_shape", False))
        self.control_flow = bool(row.get("control_flow", False))
        self.all_inputs = bool(row.get("all_inputs", False))
        self.cite = (row.get("cite") or ["?"])[0]
        # Most rows have only a type list: skip the steps a row has nothing for (100k-node graphs).
        self.structural = any(k in row for k in _STRUCTURAL)
        self.plugin = any(k in row for k in ("plugin", "plugin_when", "plugin_note", "ignored_attrs"))


_STRUCTURAL = ("max_outputs", "requires", "bidirectional_same", "requires_distinct", "symmetric_pads",
               "requires_int_when", "rank", "rank_min", "static_input", "pool_spatial", "deconv_pre_padding",
               "resize_scales", "static_without_axes", "qdq_axis", "min_inputs")


class TRTRules:
    """Interprets one release's table; ``check`` gives a node's reason, ``compat`` a whole graph's."""

    def __init__(self, table: Mapping[str, Any] | None = None, *, version: str | None = None,
                 exclude_data_dependent: bool = True, fallback_ops: Iterable[str] = (),
                 plugins: Iterable[str] = (), local_functions: Mapping[str, Graph] | None = None,
                 assume_supported: Iterable[str] = (),
                 input_shapes: Mapping[str, tuple[int, ...]] | None = None) -> None:
        #: the engine's fixed input shapes (``trt_input_shapes``): the parser imports dynamic shapes, so
        #: only the DLA checks (``DLARules``) read them
        self.input_shapes = dict(input_shapes or {})
        self.table = dict(table) if table is not None else load_table(version)
        self.version = str(self.table.get("tensorrt_rules", self.table.get("tensorrt_version", "?")))
        self.exclude_data_dependent = exclude_data_dependent
        self.fallback_ops = frozenset(fallback_ops)
        self.user_plugins = frozenset(p.strip() for p in plugins if p and p.strip())
        #: op types the user asks to treat as supported ("what if I wrote a plugin for it")
        self.assume_supported = frozenset(p.strip() for p in assume_supported if p and p.strip())
        #: single nodes treated as supported (``gains.rank_gains`` tries them one by one)
        self.assume_nodes: frozenset[str] = frozenset()
        self.local_functions = dict(local_functions or {})
        self.rules = {name: _OpRule(name, row) for name, row in self.table["ops"].items()}
        self.bundled = {p["name"]: p for p in self.table.get("bundled_plugins", ())}
        types = self.table.get("types", {})
        self.cast_down: dict[str, str] = dict(types.get("cast_down", {"DOUBLE": "FLOAT"}))
        #: types the parser converts when they arrive as weights (initializers, Constants)
        self.weights_cast: dict[str, str] = dict(types.get("weights_cast", {}))
        self.known_types = frozenset(types.get("known", _ORDER + ["DOUBLE"]))
        self.quantized = frozenset(types.get("quantized", ("INT8", "FLOAT8E4M3FN", "INT4")))
        self.types_meta = types
        self.dispatch = self.table.get("dispatch", {})
        #: 8.x parsers have no local-function importer: a call is a plugin lookup like any unknown op
        self.has_local_functions = "local_functions" in self.dispatch
        self.non_compute_ops = frozenset(self.table.get("non_compute_ops", ("Constant", "Identity")))
        opset = self.table.get("opset", {})
        self.opset_supported = tuple(opset.get("supported", (9, 20)))
        self.opset_warn_below = int(opset.get("warn_below", 7))
        self.opset_meta = opset
        self.notes: dict[str, str] = {}
        self.cites: dict[str, str] = {}
        self._type_ok: set[tuple[str, int, str]] = set()
        #: (body, input types) of function bodies that passed in this ``compat``: a body shared
        #: by many calls (or calls nested many ways) is walked once per typing, not once per path
        self._body_ok: set[tuple] = set()
        self.warnings: list[str] = []

    # ---------------------------------------------------------- whole graph --
    def compat(self, graph: Graph) -> dict[str, str]:
        """Node name -> reason, for every incompatible node of ``graph`` (top level).

        Also sets ``self.cites`` (name -> source of the verdict), ``self.notes``
        (accepted nodes with a caveat, e.g. plugins) and ``self.warnings``.
        """
        out: dict[str, str] = {}
        self.notes, self.cites, self._body_ok = {}, {}, set()
        scope = Scope(graph, None)
        # Speed (100k nodes: 0.11 s -> ~0.04 s): a node whose row has nothing but types to
        # check passes or fails by (op, input types, output types) alone, so a passing
        # signature is remembered and its next nodes skip ``_check``. Refusals are always
        # checked in full: their texts name the tensors.
        simple = self._type_only_ops()
        dtype = self._top_dtypes(graph).get
        graph_outputs = frozenset(graph.outputs)
        passed: set[tuple] = set()
        check, cites = self._check, self.cites
        for node in graph.nodes:
            key = None
            if node.op_type in simple and not node.subgraphs and node.domain not in _NOT_BY_OP_TYPE and \
                    graph_outputs.isdisjoint(node.outputs):
                key = (node.op_type, tuple(map(dtype, node.inputs)), tuple(map(dtype, node.outputs)))
                if key in passed:
                    continue
            verdict = check(scope, node)
            if verdict:
                out[node.name], cites[node.name] = verdict
            elif key is not None and node.name not in self.assume_nodes:
                passed.add(key)
        self.warnings = self.graph_warnings(graph)
        return out

    def _type_only_ops(self) -> frozenset[str]:
        """Ops whose verdict depends on the node's input and output types only: a supported row
        with no attribute, structure, input, plugin or body checks, not data-dependent, not
        forced to fall back."""
        return frozenset(
            op for op, r in self.rules.items()
            if r.supported and not r.attrs and not r.structural and not r.inputs and not r.plugin
            and not r.control_flow and not (r.data_dependent and self.exclude_data_dependent)
            and op not in self.fallback_ops and op not in self.assume_supported)

    def _top_dtypes(self, graph: Graph) -> dict[str, str]:
        """Tensor -> the element type ``_dtype`` gives it at the top level (cast down, known only)."""
        cast, weights_cast = self.cast_down, self.weights_cast
        found = {t: cast.get(i.dtype, i.dtype) for t, i in graph.tensors.items() if i.dtype is not None}
        for t, w in graph.initializers.items():
            if w.dtype is not None:
                found[t] = weights_cast.get(w.dtype) or cast.get(w.dtype, w.dtype)
        if weights_cast:
            for node in graph.nodes:
                if node.op_type == "Constant" and not node.domain:
                    for t in node.outputs:
                        if found.get(t) in weights_cast:
                            found[t] = weights_cast[found[t]]
        return found

    def check(self, graph: Graph, node: Node) -> str | None:
        """The reason ``node`` of ``graph`` cannot go to TensorRT, or None."""
        verdict = self._check(Scope(graph, None), node)
        return verdict[0] if verdict else None

    def graph_warnings(self, graph: Graph) -> list[str]:
        found = [w for w in (self.opset_warning(graph),) if w]
        note = self.types_meta.get("cast_down_note")
        if note and any(w.dtype == "INT64" for w in graph.initializers.values()):
            cite = self.release_cite(self.types_meta["cast_down_note_cite"])
            found.append(f"TensorRT {self.version}: {note} ({cite})")
        plugins = sorted({n.split(": ", 1)[0] for n in self.notes.values() if "plugin" in n})
        if plugins:
            found.append(f"nodes imported as TensorRT plugins ({', '.join(plugins)}): the plugin library "
                         "(libnvinfer_plugin or the user's) must be loaded when the engine is built")
        return found

    def opset_warning(self, graph: Graph) -> str | None:
        """A warning (never a refusal) when the default-domain opset is outside what the release documents."""
        version = graph.opset.get("", graph.opset.get("ai.onnx"))
        if version is None:
            return None
        lo, hi = self.opset_supported
        if version < self.opset_warn_below:
            return (f"default-domain opset {version}: TensorRT {self.version}'s parser warns that models below "
                    f"opset {self.opset_warn_below} are not guaranteed to work "
                    f"({self.opset_meta.get('warn_below_cite', '')})")
        if not lo <= version <= hi:
            return (f"default-domain opset {version} is outside the range TensorRT {self.version} documents "
                    f"({lo}-{hi}); the parser still imports it, op by op "
                    f"({self.opset_meta.get('supported_cite', '')})")
        return None

    # ------------------------------------------------------------ one node --
    def _check(self, scope: Scope, node: Node, descend: bool = True) -> tuple[str, str] | None:
        """The node's verdict; ``descend=False`` leaves out its control-flow bodies."""
        op = node.op_type
        if node.is_subgraph:
            return (f"{op}: an earlier pass's subgraph node (domain '{node.domain}'), not an ONNX operator",
                    "sglens")
        if op in self.assume_supported or node.name in self.assume_nodes:
            self.notes[node.name] = f"{op}: assumed supported (--assume-supported: a plugin you would write)"
            return None
        # The parser dispatches on op_type alone (the domain is never read): an ai.onnx.ml node
        # has no importer of its name and so goes to the plugin lookup like any custom op.
        rule = self.rules.get(op)
        if rule is None:
            return self._not_builtin(scope, node)
        if not rule.supported:
            return f"{op}: not supported by TensorRT {self.version}'s ONNX parser", rule.cite
        if rule.data_dependent and self.exclude_data_dependent:
            return f"{op}: output shape depends on input values", rule.cite
        if op in self.fallback_ops:
            return f"{op}: forced to fall back (fallback_ops)", "user option fallback_ops"
        verdict = (rule.attrs and self._attrs(scope, rule, node)) or \
            (rule.structural and self._structure(scope, rule, node)) or self._types(scope, rule, node) or \
            (rule.inputs and self._inputs(scope, rule, node))
        if verdict:
            return verdict
        if rule.plugin:
            self._plugin_note(rule, node)
        for spec in rule.row.get("ignored_attrs", ()):
            if spec["name"] in node.attrs:
                self.notes[node.name] = spec["note"].format(value=_text(node.attrs[spec["name"]]))
        if rule.control_flow and descend:
            return self._bodies(scope, node, self._imported_bodies(scope, rule, node))
        return None

    @staticmethod
    def _imported_bodies(scope: Scope, rule: _OpRule, node: Node) -> list[tuple[str, Graph]]:
        """The bodies the parser imports: an If whose condition is one known value imports only the
        branch it takes."""
        bodies = list(node.subgraphs.items())
        if rule.row.get("constant_condition") and node.inputs and node.inputs[0]:
            value = scope.weights_value(node.inputs[0])
            if value is not None and value is not False and np.asarray(value).size == 1:
                taken = "then_branch" if bool(np.asarray(value).reshape(-1)[0]) else "else_branch"
                return [(k, g) for k, g in bodies if k == taken]
        return bodies

    def _not_builtin(self, scope: Scope, node: Node) -> tuple[str, str] | None:
        op = node.op_type
        body = node.subgraphs.get(FUNCTION_KEY) or self.local_functions.get(op)
        if body is not None and self.has_local_functions:
            return self._call_arity(node, body) or self._bodies(scope, node, [(FUNCTION_BODY, body)])
        version, namespace = _text(node.attrs.get("plugin_version", "1")), _text(node.attrs.get("plugin_namespace", ""))
        key = f"{op} (plugin_version {version}" + (f", plugin_namespace '{namespace}')" if namespace else ")")
        if op in self.user_plugins:
            self.notes[node.name] = (f"{op}: imported as the user's TensorRT plugin {key} (declared with "
                                     "--trt-plugin; its library must register that version and namespace)")
            return None
        where = f"{node.domain}.{op}" if node.domain else op
        bundled = self.bundled.get(op)
        if bundled is not None:
            versions = bundled.get("versions") or ["1"]
            if not namespace and version in versions:
                self.notes[node.name] = (f"{op}: imported as TensorRT's bundled plugin {key}; libnvinfer_plugin "
                                         f"must be loaded ({bundled['cite']})")
                return None
            return (f"{where}: TensorRT {self.version} bundles plugin {op} in versions {', '.join(versions)} and "
                    f"namespace '', but the node asks for {key} (fix plugin_version/plugin_namespace, or declare "
                    f"your own with --trt-plugin {op})", self.dispatch.get("plugin_version", bundled["cite"]))
        return (f"{where}: no importer for '{op}' in TensorRT {self.version}'s ONNX parser and no known plugin of "
                f"that name (declare one with --trt-plugin {op} if you have it)",
                self.dispatch.get("plugin_lookup", "?"))

    def _plugin_note(self, rule: _OpRule, node: Node) -> None:
        row = rule.row
        when = row.get("plugin_when")
        if row.get("plugin"):
            self.notes[node.name] = (f"{node.op_type}: imported through TensorRT's plugin {row['plugin']}; "
                                     "libnvinfer_plugin must be loaded")
        elif when and str(node.attrs.get(when["attr"], when["not"])) != when["not"]:
            self.notes[node.name] = (f"{node.op_type} {when['attr']}={node.attrs[when['attr']]}: imported through "
                                     f"TensorRT's plugin {when['plugin']}; libnvinfer_plugin must be loaded")
        elif row.get("plugin_note"):
            self.notes[node.name] = f"{node.op_type}: {row['plugin_note']}"

    def _attrs(self, scope: Scope, rule: _OpRule, node: Node) -> tuple[str, str] | None:
        opset = scope.opset
        for spec in rule.attrs:
            if opset is not None and not spec.get("min_opset", 0) <= opset <= spec.get("max_opset", 10 ** 6):
                continue
            name = spec["name"]
            if spec.get("absent"):
                if name in node.attrs:
                    return spec["message"].format(value=_text(node.attrs[name])), spec["cite"]
                continue
            if name not in node.attrs and "default" not in spec:
                continue
            value = node.attrs.get(name, spec.get("default"))
            if spec.get("as") == "dtype":
                value = ONNX_TYPE_NAMES.get(int(value), str(value))
            value = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
            if "each_allowed" in spec:
                value = [_text(v) for v in (value or ())]
            bad = ("allowed" in spec and value not in spec["allowed"]) or \
                  ("forbidden" in spec and value in spec["forbidden"]) or \
                  ("all_equal" in spec and any(v != spec["all_equal"] for v in (value or ()))) or \
                  ("each_allowed" in spec and any(v not in spec["each_allowed"] for v in value)) or \
                  ("charset" in spec and any(c not in spec["charset"] for c in _text(value)))
            if bad:
                return spec["message"].format(value=_text(value), op=node.op_type), spec["cite"]
        return None

    def _structure(self, scope: Scope, rule: _OpRule, node: Node) -> tuple[str, str] | None:
        """Output count, ranks, paired attributes: the checks that are code, not a list."""
        row, op, attrs = rule.row, node.op_type, node.attrs
        # every output slot counts, an empty name too: the parser compares node.output().size()
        if "max_outputs" in row and len(node.outputs) > row["max_outputs"]:
            return row["max_outputs_message"], row.get("max_outputs_cite", rule.cite)
        if "min_inputs" in row and len(node.inputs) < row["min_inputs"]:
            return row["min_inputs_message"], row["min_inputs_cite"]
        for spec in row.get("requires", ()):
            (key, want), = spec["if"].items()
            (other, allowed), = spec["then"].items()
            if (scope.opset or 99) >= spec.get("min_opset", 0) and attrs.get(key) == want:
                value = attrs.get(other, spec["default"][other])
                if value not in allowed:
                    return spec["message"].format(value=value), spec["cite"]
        if row.get("bidirectional_same") and attrs.get("direction") == "bidirectional":
            for key in ("activations", "activation_alpha", "activation_beta"):
                values = list(attrs.get(key) or ())
                half = len(values) // 2
                if values and values[:half] != values[half:]:
                    return (f"{op}: a bidirectional {op} needs the same {key} in both directions, got {values}",
                            row["bidirectional_same"])
        if row.get("requires_distinct"):
            a, a_default, b, b_default, cite = row["requires_distinct"]
            if attrs.get(a, a_default) == attrs.get(b, b_default):
                return f"{op}: {a} and {b} cannot be the same ({attrs.get(a, a_default)})", cite
        if row.get("symmetric_pads") and attrs.get("pads"):
            pads = list(attrs["pads"])
            if pads[:len(pads) // 2] != pads[len(pads) // 2:]:
                return (f"{op}: pads {pads} must add the same at the beginning and end of each axis",
                        row["symmetric_pads"])
        when = row.get("requires_int_when")
        if when and attrs.get(when["attr"], 0) == when["value"]:
            dtype = self._dtype(scope, node.inputs[0]) if node.inputs else None
            if dtype in ("FLOAT", "FLOAT16", "BFLOAT16"):
                return f"{op} {when['attr']}={when['value']} on {dtype}: only INT32/INT64 inputs", when["cite"]
        return self._shapes(scope, rule, node) or source_checks(scope, row, node)

    def _shapes(self, scope: Scope, rule: _OpRule, node: Node) -> tuple[str, str] | None:
        row, op = rule.row, node.op_type
        shape = scope.shape(node.inputs[0]) if node.inputs and node.inputs[0] else None
        if shape is None:
            return None
        if row.get("rank") and len(shape) not in row["rank"]:
            ranks = " or ".join(str(r) for r in row["rank"])
            return f"{op}: input 0 has rank {len(shape)}; TensorRT takes rank {ranks} here", row["rank_cite"]
        if row.get("rank_min") and len(shape) < row["rank_min"]:
            return (f"{op}: input 0 has rank {len(shape)}; TensorRT needs rank {row['rank_min']} or more",
                    row["rank_cite"])
        if row.get("static_input") and not all(isinstance(d, int) for d in shape):
            return f"{op}: input 0 must have static dimensions, not {list(shape)}", row["static_cite"]
        return None

    # -------------------------------------------------------------- types --
    def _dtype(self, scope: Scope, t: str) -> str | None:
        dtype = scope.dtype(t)
        if dtype is None:
            return None
        if dtype in self.weights_cast and scope.weights_value(t) is not False:
            return self.weights_cast[dtype]  # e.g. UINT8 weights are imported as INT32
        return self.cast_down.get(dtype, dtype)

    def _types(self, scope: Scope, rule: _OpRule, node: Node) -> tuple[str, str] | None:
        op, ok = node.op_type, self._type_ok
        dtypes: list[str | None] = []
        for index, t in enumerate(node.inputs):
            dtype = self._dtype(scope, t) if t else None
            dtypes.append(dtype)
            if dtype is None or (op, index, dtype) in ok:
                continue
            verdict = self._type_of(rule, node, index, t, dtype)
            if verdict:
                return self._carried(scope, t, dtype, verdict)
            ok.add((op, index, dtype))  # the verdict depends on (op, index, dtype) only
        if rule.row.get("same_types"):
            seen = {d for d in dtypes if d is not None}
            if len(seen) > 1:
                return f"{op}: all inputs must share one type, got {_names(seen)}", rule.row["same_types_cite"]
        for index, t in enumerate(node.outputs):
            if not t:
                continue
            dtype = self._dtype(scope, t)
            allowed = rule.output_types.get(index)
            as_type = rule.row.get("output_as", {}).get(dtype)
            if as_type is not None and (allowed is None or dtype in allowed):
                continue  # TensorRT produces another type here (QuantizeLinear: UINT8 -> INT8)
            if dtype is not None and allowed is not None and dtype not in allowed:
                return (f"{op} producing {dtype}: type not supported (output {index} '{t}'; {op} gives "
                        f"{_names(allowed)})", rule.cite)
            if dtype in self.types_meta.get("io_only", ("UINT8",)) and not scope.is_graph_output(t):
                return (f"{op} producing {dtype} for '{t}': TensorRT allows {dtype} only as a network input or "
                        "output, not for intermediate tensors", self.types_meta.get("io_only_cite", rule.cite))
        return None

    def _carried(self, scope: Scope, t: str, dtype: str, verdict: tuple[str, str]) -> tuple[str, str]:
        """A type refusal on a cast-down type says which type the model has (8.x: INT64 carried as INT32)."""
        original = scope.dtype(t)
        if original is None or original == dtype or self.cast_down.get(original) != dtype:
            return verdict
        cite = self.release_cite(self.cast_down_cite(original))
        return verdict[0] + f" ({original} carried as {dtype} by TensorRT {self.version}, {cite})", verdict[1]

    def cast_down_cite(self, dtype: str) -> str:
        cites = self.types_meta.get("cast_down_cite") or []
        index = list(self.cast_down).index(dtype) if dtype in self.cast_down else -1
        return cites[index] if 0 <= index < len(cites) else "?"

    def _type_of(self, rule: _OpRule, node: Node, index: int, t: str, dtype: str) -> tuple[str, str] | None:
        op = node.op_type
        if dtype not in self.known_types:
            return (f"{op} on {dtype}: TensorRT has no {dtype} type (input {index} '{t}')",
                    self.types_meta.get("known_cite", rule.cite))
        refused = rule.refuses.get(index)
        if refused and dtype in refused[0]:
            return f"{op} on {dtype}: the parser refuses {dtype} for input {index} '{t}'", refused[1]
        allowed = rule.input_types.get(index)
        if allowed is None and (index == 0 or rule.all_inputs) and index not in rule.inputs:
            allowed = rule.types
        if allowed is None or dtype in allowed:
            return None
        if dtype in self.quantized:
            return (f"{op} on {dtype}: {dtype} is a quantized type in TensorRT, taken only through "
                    f"QuantizeLinear/DequantizeLinear (input {index} '{t}')",
                    self.types_meta.get("quantized_cite", rule.cite))
        if dtype in self.types_meta.get("io_only", ("UINT8",)):
            return (f"{op} on {dtype}: TensorRT allows {dtype} only as a network input or output; Cast it first "
                    f"(input {index} '{t}')", self.types_meta.get("io_only_doc", rule.cite))
        hint = ("; an INT32 bias behind DequantizeLinear is what onnxruntime's quantizer writes: "
                "extra_options={'QuantizeBias': False} keeps biases float"
                if op == "DequantizeLinear" and dtype == "INT32" else "")
        return (f"{op} on {dtype}: type not supported (input {index} '{t}'; {op} takes {_names(allowed)}){hint}",
                rule.row.get("types_cite", rule.cite))

    def _inputs(self, scope: Scope, rule: _OpRule, node: Node) -> tuple[str, str] | None:
        for index, spec in sorted(rule.inputs.items()):
            if index < len(node.inputs) and not node.inputs[index] and spec.get("empty_refused"):
                return (f"{node.op_type}: input {index} ({spec.get('what', 'optional')}) is given with an empty name; "
                        "the parser counts it and finds no initializer there (drop the empty input)", spec["cite"])
            if index >= len(node.inputs) or not node.inputs[index]:
                continue
            if spec.get("all_zero") and self._dtype(scope, node.inputs[index]) == "FLOAT8E4M3FN":
                spec = {k: v for k, v in spec.items() if k != "all_zero"}  # FP8 zero points are not checked
            verdict = check_input(scope, node, index, spec)
            if verdict:
                return verdict
        return None

    def _bodies(self, scope: Scope, node: Node, bodies: Iterable[tuple[str, Graph]]) -> tuple[str, str] | None:
        """Every node of ``node``'s bodies must pass, bodies inside them too (the parser imports
        them node by node). Iterative: a stack of body-node iterators, never recursion on depth.

        The reason names the innermost refused node; below the first level it adds the
        path of calls and branches that leads there.
        """
        bodies = list(bodies)
        first = self._body_key(scope, node, bodies)
        if first in self._body_ok:
            return None
        stack: list[tuple[Iterator[tuple[Scope, str, Node]], list[tuple[str, Node]], tuple | None]] = \
            [(self._body_nodes(scope, node, bodies), [], first)]
        while stack:
            entries, path, done = stack[-1]
            entry = next(entries, None)
            if entry is None:
                stack.pop()
                if done is not None:
                    self._body_ok.add(done)
                continue
            inner, key, sub = entry
            here = path + [(key, sub)]
            if len(here) > _MAX_NESTED:
                return self._inner_reason(node, here, (
                    f"{sub.op_type}: nested {len(here)} bodies deep; TensorRT's parser stops at "
                    f"{_MAX_NESTED} levels of If/Loop/Scan/function nesting", _NESTED_CITE))
            verdict = self._shallow(inner, sub)
            if isinstance(verdict, tuple):
                return self._inner_reason(node, here, verdict)
            if verdict:
                key = self._body_key(inner, sub, verdict)
                if key not in self._body_ok:
                    stack.append((self._body_nodes(inner, sub, verdict), here, key))
        return None

    @staticmethod
    def _body_key(scope: Scope, call: Node, bodies: list[tuple[str, Graph]]) -> tuple | None:
        """What a function body's verdict depends on: the body and the call's input types."""
        if len(bodies) != 1 or bodies[0][0] != FUNCTION_BODY:
            return None  # control-flow bodies belong to one node and read the outer scope
        # the body object itself (not its id): the set keeps it alive, so a key is never reused
        return (bodies[0][1], *((scope.dtype(t), scope.shape(t), t if _weights(scope, t) is not None else None)
                                if t else None for t in call.inputs))

    def _shallow(self, scope: Scope, node: Node) -> tuple[str, str] | list[tuple[str, Graph]] | None:
        """``_check`` without descending: a refusal, or the bodies still to check, or None."""
        body = None if node.op_type in self.rules else \
            node.subgraphs.get(FUNCTION_KEY) or self.local_functions.get(node.op_type)
        if body is not None and not node.is_subgraph:
            return self._call_arity(node, body) or [(FUNCTION_BODY, body)]
        rule = self.rules.get(node.op_type)
        if rule is not None and rule.control_flow and node.subgraphs:
            verdict = self._check(scope, node, descend=False)
            return verdict if verdict else self._imported_bodies(scope, rule, node)
        return self._check(scope, node)

    def _call_arity(self, node: Node, body: Graph) -> tuple[str, str] | None:
        if len(node.inputs) != len(body.inputs):
            return (f"{node.op_type}: the call passes {len(node.inputs)} inputs but the function declares "
                    f"{len(body.inputs)}; TensorRT's parser needs exactly as many", _ARITY_CITE)
        return None

    @staticmethod
    def _body_nodes(scope: Scope, owner: Node, bodies: Iterable[tuple[str, Graph]]
                    ) -> Iterator[tuple[Scope, str, Node]]:
        """(scope, key, node) for every node of ``bodies``; a function body is a scope of its own
        (it sees only its inputs), typed from the call where the call's tensors are typed."""
        for key, body in bodies:
            if key == FUNCTION_BODY:
                inner = Scope(_typed_body(scope, owner, body), None)
            else:
                inner = Scope(body, scope)
            for sub in body.nodes:
                yield inner, key, sub

    @staticmethod
    def _inner_reason(node: Node, path: list[tuple[str, Node]], verdict: tuple[str, str]) -> tuple[str, str]:
        key, leaf = path[0][0], path[-1][1]
        via = ""
        if len(path) > 1:
            steps = [f"{k} '{n.name}' ({n.op_type})" for k, n in path]
            if len(steps) > 5:  # deep nesting: the way in and the last step say enough
                steps = steps[:2] + ["..."] + steps[-1:]
            via = " (via " + " > ".join(steps) + ")"
        return (f"{node.op_type}: node '{leaf.name}' ({leaf.op_type}) in its {key}{via} is not compatible: "
                f"{verdict[0]}", verdict[1])

    # ---------------------------------------------------------- utilities --
    def is_compute(self, node: Node) -> bool:
        return node.op_type not in self.non_compute_ops

    def cite(self, name: str) -> str | None:
        """The source of the last ``compat`` verdict on node ``name``, as ``release:file:line``."""
        cite = self.cites.get(name)
        return self.release_cite(cite) if cite else cite

    def release_cite(self, cite: str) -> str:
        """``file:line`` of this table's release as ``release:file:line`` (other sources unchanged)."""
        if cite.count(":") == 1 and not cite.startswith(("NVIDIA/", "user ", "sglens")):
            return f"{self.version}:{cite}"
        return cite


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
