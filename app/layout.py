"""Graph layout on the server: one ``dot -Tjson`` run per view, cached.

- **Flat** (graphs up to ``flat_limit`` nodes, about 1,500): every node, graph
  inputs and outputs as small ellipses, partitions drawn as graphviz clusters.
- **Collapsed** (more than ``flat_limit`` boxes, or when asked): nodes grouped by their ONNX
  name scope (``stage0/block3/Conv_7`` -> ``stage0`` -> ``stage0/block3``),
  subgraph members optionally by partition (``part:<id>``), and what is left
  ungrouped in nested runs of ``CHUNK`` nodes in graph order, so no level ever hands
  ``dot`` thousands of nodes (a flat 5,000-node graph takes ``dot`` ~45 s).
  ``expanded`` lists the groups opened, one level at a time, as in
  TensorBoard's graph view and Model Explorer.

Never an error for a big or odd graph: too many boxes drop the expansions, then the name scopes;
``dot`` failing or timing out gives a plain grid; each says so in ``note``. At most one ``dot`` per
model at a time, two in the whole server.

Positions are in points, y growing downwards; the browser draws SVG from
them and only ever changes classes while stepping, so nodes never move.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from collections import OrderedDict
from typing import Any, Iterable, Mapping

from partition.errors import LensError
from partition.ir import Graph

from .layout_fold import foldable_constants, shape_text

CHUNK = 100
LAYERS_OPEN = 200    # graphs with name scopes and more nodes than this open collapsed by scope
BIG = 400            # more boxes than this: dot gets iteration limits
INPUT_FANOUT = 2     # graph inputs: full edges to this many consumers, stubs to the rest
FANOUT = 6           # node outputs: the same
NODE_W, NODE_H = 1.55, 0.42          # inches: dot's unit
IO_W, IO_H = 1.1, 0.3
DOT_TIMEOUT = 30

CACHE_SIZE = 64


class LayoutError(LensError):
    """graphviz is missing or failed: a clear message, and a 503 (the server itself is fine)."""
    http_status = 503


class LayoutTimeout(LayoutError):
    pass


#: At most this many ``dot`` processes at once in the whole server (each is one CPU).
DOT_PROCESSES = threading.BoundedSemaphore(2)
#: At most this many groups may be listed as expanded; more is junk.
MAX_EXPANDED = 256


class LayoutCache:
    """Views computed once per key (concurrent askers of one key wait for one ``dot`` run); LRU.
    One model's views are computed one at a time (one ``dot`` per model at once).
    One per app, so two apps in a process never share layouts."""

    def __init__(self, size: int = CACHE_SIZE) -> None:
        self.size = size
        self._views: OrderedDict[tuple, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()
        self._model_locks: dict[Any, threading.Lock] = {}
        self._scopes: OrderedDict[tuple, frozenset[str]] = OrderedDict()

    def view(self, key: tuple, graph: Graph, **kwargs: Any) -> dict[str, Any]:
        with self._lock:
            if key in self._views:
                self._views.move_to_end(key)
                return self._views[key]
            lock = self._model_locks.setdefault(key[0], threading.Lock())
        with lock:
            with self._lock:
                if key in self._views:
                    return self._views[key]
            view = graph_view(graph, **kwargs)
            with self._lock:
                self._views[key] = view
                while len(self._views) > self.size:
                    self._views.popitem(last=False)
        return view

    def scopes(self, key: tuple, graph: Graph) -> frozenset[str]:
        """Every name scope of ``graph`` (cached by ``key``: model id and body)."""
        with self._lock:
            if key in self._scopes:
                return self._scopes[key]
        found = frozenset(p for n in graph.nodes for p in scope_parts(n.name))
        with self._lock:
            self._scopes[key] = found
            while len(self._scopes) > self.size:
                self._scopes.popitem(last=False)
        return found


def item_count(graph: Graph) -> int:
    """Boxes of the flat view: nodes plus the graph inputs (not weights) and outputs."""
    inputs = sum(1 for t in graph.inputs if t not in graph.initializers)
    return len(graph.nodes) + inputs + len(graph.outputs)


def normalise(graph: Graph, scopes: frozenset[str], expand: str, collapse: str | None,
              flat_limit: int) -> tuple[tuple[str, ...], bool, str | None]:
    """(expanded groups that exist, collapsed or not, a note): junk in a layout request's ``expand``
    and ``collapse`` maps to the same cache key as a clean request."""
    want_flat = {"1": False, "0": True}.get(collapse or "")
    note = None
    big = item_count(graph) > flat_limit
    if want_flat is None:  # a big graph, or a layered one past LAYERS_OPEN nodes, opens by its layers
        collapsed = big or (len(graph.nodes) > LAYERS_OPEN and has_layers(graph))
    else:
        collapsed = not want_flat
        if want_flat and big:
            collapsed = True
            note = f"the flat view of {item_count(graph)} boxes is too big for graphviz: shown collapsed"
    expanded: list[str] = []
    if collapsed:
        for e in dict.fromkeys(x for x in expand.split(",") if x):
            kind, _, rest = e.partition(":")
            ok = ((kind == "scope" and rest in scopes) or (kind == "part" and rest.isdigit())
                  or (kind == "seq" and _seq_range(rest) is not None))
            if ok:
                expanded.append(e)
            if len(expanded) >= MAX_EXPANDED:
                break
    return tuple(sorted(expanded)), collapsed, note


def _seq_range(rest: str) -> tuple[int, int] | None:
    a, _, b = rest.partition("-")
    if a.isdigit() and b.isdigit() and int(a) <= int(b):
        return int(a), int(b)
    return None


def scope_parts(name: str) -> list[str]:
    """The name scopes of a node name: ``a/b/Conv_1`` -> ``["a", "a/b"]``."""
    parts = [p for p in name.split("/")[:-1] if p]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def useful_scopes(graph: Graph) -> dict[str, int]:
    """Name scope -> node count, without a scope holding every node (a single root such as
    ``model``: one box that says nothing). The layers open at the first scope that splits the graph.
    Constants do not count: T5's ``model`` scope holds every node but its 200 weight aliases."""
    counts: dict[str, int] = {}
    total = 0
    for node in graph.nodes:
        if graph.is_constant(node):
            continue
        total += 1
        for scope in scope_parts(node.name):
            counts[scope] = counts.get(scope, 0) + 1
    return {k: v for k, v in counts.items() if v < total}


def has_layers(graph: Graph) -> bool:
    """Whether the graph's names give layers to collapse (torch-style ``/model.2/cv1/conv/Conv``)."""
    return bool(useful_scopes(graph))


def search_index(graph: Graph) -> list[list[Any]]:
    """[name, op type, output tensor names] of every node, so the browser's search finds names, op
    types and tensors in every view (a collapsed view draws groups, not the nodes)."""
    return [[n.name, n.op_type, [t for t in n.outputs if t]] for n in graph.nodes]


def graph_view(graph: Graph, *, assignment: Mapping[str, int] | None = None, expanded: Iterable[str] = (),
               flat_limit: int = 1500, collapse: bool | None = None,
               group_partitions: bool = False, fold_constants: bool = False) -> dict[str, Any]:
    """The JSON-able view of ``graph``: nodes with positions, edges with spline points, clusters.

    ``fold_constants``: Constant nodes are not drawn (``folded`` maps each to the box of its
    first consumer, where the debugger and search then point), as Netron does; exported models
    carry hundreds of them. Never fails on a big or odd graph: too many boxes for one level drops
    the expansions, then the name scopes; ``dot`` timing out or failing gives a plain grid; each
    with a ``note``."""
    assignment = dict(assignment or {})
    folded = foldable_constants(graph) if fold_constants else {}
    if collapse is None:
        collapse = item_count(graph) > flat_limit
    if not collapse:
        try:  # a small graph falls back to a grid, a bigger one to the collapsed view
            return _flat_view(graph, assignment, grid_fallback=len(graph.nodes) <= CHUNK, folded=folded)
        except LayoutError as exc:
            view = _collapsed_view(graph, assignment, set(expanded), flat_limit, group_partitions, folded)
            view["note"] = f"dot took too long or failed on the flat graph ({exc}): shown collapsed"
            return view
    return _collapsed_view(graph, assignment, set(expanded), flat_limit, group_partitions, folded)


# -------------------------------------------------------------------- flat --
def _flat_view(graph: Graph, assignment: Mapping[str, int], grid_fallback: bool = True,
               folded: Mapping[str, str] | None = None) -> dict[str, Any]:
    folded = folded or {}
    items: list[dict[str, Any]] = []
    ids: dict[str, str] = {}
    for i, t in enumerate(graph.inputs):
        if t in graph.initializers:
            continue
        ids[f"in:{t}"] = f"i{i}"
        items.append({"id": f"in:{t}", "kind": "input", "label": t, "tensor": t})
    for i, node in enumerate(graph.nodes):
        if node.name in folded:
            continue
        ids[node.name] = f"n{i}"
        item = {"id": node.name, "kind": "node", "op": node.op_type, "label": node.name}
        if node.name in assignment:
            item["sg"] = assignment[node.name]
        if node.subgraphs:
            item["bodies"] = list(node.subgraphs)
        items.append(item)
    for i, t in enumerate(graph.outputs):
        ids[f"out:{t}"] = f"o{i}"
        items.append({"id": f"out:{t}", "kind": "output", "label": t, "tensor": t})
    edges = [e for e in _node_edges(graph) if e[0] not in folded]
    for t in graph.inputs:
        if t in graph.initializers:
            continue
        for k, c in enumerate(graph.consumers(t)):
            edges.append((f"in:{t}", c.name, t, k >= INPUT_FANOUT))
    for t in graph.outputs:
        p = graph.producer(t)
        if p is not None:
            edges.append((p.name, f"out:{t}", t, False))
        elif f"in:{t}" in ids:
            edges.append((f"in:{t}", f"out:{t}", t, False))
    clusters: dict[int, list[str]] = {}
    for name, sid in assignment.items():
        if name in ids:
            clusters.setdefault(sid, []).append(name)
    view = _run_dot(items, ids, edges, clusters, grid_fallback=grid_fallback)
    for e in view["edges"]:   # what flows along each edge, where shape inference knows it
        e["shapes"] = [shape_text(graph, t) for t in e["tensors"]]
    view.update(mode="flat", node_count=len(graph.nodes), layers=has_layers(graph), search=search_index(graph),
                folded=dict(folded), folded_count=len(folded))
    return view


def _node_edges(graph: Graph) -> list[tuple[str, str, str, bool]]:
    """(producer, consumer, tensor, ghost): a tensor read by many nodes is drawn in full to the first
    ``FANOUT`` of them only; the others get a short stub (``ghost``), as long edges across many
    ranks make ``dot``'s crossing minimisation explode (4 s for 300 nodes, 28 s for 1,500)."""
    edges: list[tuple[str, str, str, bool]] = []
    fan: dict[str, int] = {}
    for node in graph.nodes:
        seen: set[str] = set()
        for t in graph.reads(node):
            p = graph.producer(t)
            if p is not None and p.name not in seen:
                seen.add(p.name)
                k = fan[t] = fan.get(t, -1) + 1
                edges.append((p.name, node.name, t, k >= FANOUT))
    return edges


# --------------------------------------------------------------- collapsed --
def unit_of_factory(graph: Graph, assignment: Mapping[str, int], expanded: set[str],
                    group_partitions: bool, use_scopes: bool = True) -> dict[str, str]:
    """Node name -> the id of the unit (group or node) it is drawn in."""
    units: dict[str, str] = {}
    loose: list[str] = []
    useful = useful_scopes(graph) if use_scopes else {}
    for node in graph.nodes:
        unit = None
        if group_partitions and node.name in assignment:
            key = f"part:{assignment[node.name]}"
            if key not in expanded:
                unit = key
        if unit is None and use_scopes:
            for scope in scope_parts(node.name):
                key = f"scope:{scope}"
                if scope in useful and key not in expanded:
                    unit = key
                    break
        if unit is None:
            loose.append(node.name)
        else:
            units[node.name] = unit
    sizes: dict[str, int] = {}
    for unit in units.values():
        sizes[unit] = sizes.get(unit, 0) + 1
    for name, unit in units.items():   # a scope box of one node says less than the node: draw the node
        if sizes[unit] == 1 and unit.startswith("scope:"):
            units[name] = name
    units.update(_runs(loose, expanded))
    return units


def _runs(loose: list[str], expanded: set[str]) -> dict[str, str]:
    """Ungrouped nodes at a level with too many of them: nested runs in graph order, at most
    ``CHUNK`` per level (200,000 nodes: 20 runs of 10,000, each opening into 100 runs of 100)."""
    n = len(loose)
    if n <= CHUNK:
        return {name: name for name in loose}
    top = CHUNK
    while top * CHUNK < n:
        top *= CHUNK
    out: dict[str, str] = {}
    for i, name in enumerate(loose):
        size, unit = top, name
        while size > 1:
            start = (i // size) * size
            key = f"seq:{start}-{min(start + size, n) - 1}"
            if key not in expanded:
                unit = key
                break
            size //= CHUNK
        out[name] = unit
    return out


def _collapsed_view(graph: Graph, assignment: Mapping[str, int], expanded: set[str], flat_limit: int,
                    group_partitions: bool, folded: Mapping[str, str] | None = None) -> dict[str, Any]:
    note = None
    folded = folded or {}
    attempts = [(expanded, True, group_partitions), (set(), True, group_partitions), (set(), False, False)]
    for k, (exp, scopes, by_part) in enumerate(attempts):
        units = unit_of_factory(graph, assignment, exp, by_part, use_scopes=scopes)
        members: dict[str, list[str]] = {}
        for node in graph.nodes:
            if node.name not in folded:
                members.setdefault(units[node.name], []).append(node.name)
        if len(members) <= flat_limit or k == len(attempts) - 1:
            break
        note = (f"{len(members)} boxes at this level is over the limit of {flat_limit}: "
                + ("shown with every group closed" if k == 0 else "shown in runs of nodes, not name scopes or partitions"))
    folded_units = {c: units[consumer] for c, consumer in folded.items()}
    units = {n: u for n, u in units.items() if n not in folded}
    view = _units_view(graph, assignment, exp, units, members)
    view.update(folded=folded_units, folded_count=len(folded))
    if note:
        view["note"] = note + (f"; {view['note']}" if view.get("note") else "")
    return view


def _units_view(graph: Graph, assignment: Mapping[str, int], expanded: set[str], units: dict[str, str],
                members: dict[str, list[str]]) -> dict[str, Any]:
    by_name = graph.node_by_name
    items: list[dict[str, Any]] = []
    ids: dict[str, str] = {}
    for i, (unit, names) in enumerate(members.items()):
        ids[unit] = f"u{i}"
        if unit == names[0] and len(names) == 1 and unit in by_name:
            items.append(_node_item(by_name[unit], assignment))
        else:
            items.append(_group_item(unit, names, by_name, assignment))
    counts: dict[tuple[str, str], int] = {}
    carried: dict[tuple[str, str], dict[str, None]] = {}   # the tensors along each box-to-box edge
    for src, dst, t, _ghost in _node_edges(graph):
        if src not in units:   # a folded Constant
            continue
        a, b = units[src], units[dst]
        if a != b:
            counts[(a, b)] = counts.get((a, b), 0) + 1
            carried.setdefault((a, b), {})[t] = None
    # The strongest FANOUT edges out of each box are drawn by dot, the rest as stubs: a dense
    # 50-box view of a random DAG (1,155 edges) takes dot over 30 s, its 300 strongest 0.3 s.
    kept: dict[str, int] = {}
    edges = []
    for (a, b), n in sorted(counts.items(), key=lambda kv: -kv[1]):
        kept[a] = kept.get(a, 0) + 1
        ts = carried[(a, b)]
        edges.append((a, b, next(iter(ts)) if len(ts) == 1 else f"{len(ts)} tensors", kept[a] > FANOUT))
    # Runs of nodes are in graph order; runs no edge joins (parallel branches) would sit side by side
    # in one very wide rank: an invisible edge from each run to the next stacks them instead.
    seqs = [u for u in members if u.startswith("seq:")]
    chain = [(a, b) for a, b in zip(seqs, seqs[1:]) if (a, b) not in counts]
    view = _run_dot(items, ids, edges, {}, chain=chain, scopes=_scope_boxes(members, expanded))
    for e in view["edges"]:   # one tensor along the edge: its shape, as in the flat view
        ts = carried[(e["source"], e["target"])]
        e["shapes"] = [shape_text(graph, next(iter(ts)))] if len(ts) == 1 else [None]
    view.update(mode="collapsed", node_count=len(graph.nodes), expanded=sorted(expanded),
                units={n: u for n, u in units.items() if n != u}, layers=has_layers(graph),
                search=search_index(graph))
    return view


def _scope_boxes(members: Mapping[str, list[str]], expanded: set[str]) -> dict[str, list[str]]:
    """Open name scope -> the units drawn directly inside it (its innermost open scope), so an opened
    layer is drawn as a box around its members, as in Model Explorer. Open scopes holding only other
    open scopes are kept (empty lists): they still frame their children."""
    boxes: dict[str, list[str]] = {}
    for unit in members:
        path = unit[len("scope:"):] if unit.startswith("scope:") else unit
        inner = [p for p in scope_parts(path) if f"scope:{p}" in expanded]
        for p in inner:
            boxes.setdefault(p, [])
        if inner:
            boxes[inner[-1]].append(unit)
    return boxes


def _node_item(node: Any, assignment: Mapping[str, int]) -> dict[str, Any]:
    item = {"id": node.name, "kind": "node", "op": node.op_type, "label": node.name}
    if node.name in assignment:
        item["sg"] = assignment[node.name]
    if node.subgraphs:
        item["bodies"] = list(node.subgraphs)
    return item


def _group_item(unit: str, names: list[str], by_name: Mapping[str, Any],
                assignment: Mapping[str, int]) -> dict[str, Any]:
    ops: dict[str, int] = {}
    sgs: dict[int, int] = {}
    for n in names:
        op = by_name[n].op_type
        ops[op] = ops.get(op, 0) + 1
        if n in assignment:
            sgs[assignment[n]] = sgs.get(assignment[n], 0) + 1
    kind, _, rest = unit.partition(":")
    if kind == "scope":
        label = rest.rsplit("/", 1)[-1]
    elif kind == "part":
        label = f"partition {rest}"
    else:
        label = "nodes " + rest.replace("-", "..")
    item = {"id": unit, "kind": "group", "group": kind, "label": label, "count": len(names),
            "ops": dict(sorted(ops.items(), key=lambda kv: -kv[1])[:6]), "covered": sum(sgs.values())}
    if sgs:
        item["sg"] = max(sgs, key=sgs.get)
    return item


# --------------------------------------------------------------------- dot --
def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _run_dot(items: list[dict[str, Any]], ids: Mapping[str, str], edges: list[tuple[str, str, str, bool]],
             clusters: Mapping[int, list[str]], grid_fallback: bool = True,
             chain: Iterable[tuple[str, str]] = (), scopes: Mapping[str, list[str]] | None = None) -> dict[str, Any]:
    # Big graphs: bound crossing minimisation and network simplex (a random 1,500-node DAG:
    # 6.2 s -> 2.0 s); small ones keep dot's best effort.
    limits = "mclimit=0.1, nslimit=1, " if len(items) > BIG or len(edges) > BIG else ""
    lines = ["digraph G {", f'graph [{limits}rankdir=TB, nodesep=0.18, ranksep=0.32, splines=true, outputorder=edgesfirst];',
             f'node [shape=box, fixedsize=true, width={NODE_W}, height={NODE_H}, label=""];']
    scopes = scopes or {}
    in_cluster = {n for names in clusters.values() for n in names} | {n for names in scopes.values() for n in names}
    for item in items:
        if item["id"] in in_cluster:
            continue
        lines.append(_dot_node(ids[item["id"]], item))
    by_id = {item["id"]: item for item in items}
    lines.extend(_scope_clusters(scopes, ids, by_id))
    for sid, names in sorted(clusters.items()):
        lines.append(f'subgraph cluster_{int(sid)} {{ margin=10; label="subgraph {int(sid)}"; '
                     'labeljust=l; fontsize=11;')
        for n in names:
            lines.append(_dot_node(ids[n], by_id[n]))
        lines.append("}")
    pairs: dict[tuple[str, str], dict[str, Any]] = {}
    edge_list: list[dict[str, Any]] = []   # drawn by dot, in dot's edge order
    ghosts: list[dict[str, Any]] = []
    for src, dst, label, ghost in edges:
        if (src, dst) in pairs:
            pairs[(src, dst)]["tensors"].append(label)
            continue
        e = pairs[(src, dst)] = {"source": src, "target": dst, "tensors": [label]}
        if ghost:
            e["ghost"] = True
            ghosts.append(e)
            continue
        edge_list.append(e)
        lines.append(f"{ids[src]} -> {ids[dst]};")
    for src, dst in chain:
        lines.append(f"{ids[src]} -> {ids[dst]} [style=invis];")
    lines.append("}")
    try:
        data = _dot_json("\n".join(lines))
    except LayoutError as exc:
        if not grid_fallback:
            raise
        view = _grid(items, edge_list)
        view["note"] = f"{exc}; shown as a plain grid"
    else:
        view = _parse(data, items, ids, edge_list, clusters)
        order = sorted(scopes or {}, key=lambda p: p.split("/"))
        view["scopes"] = [{**box, "id": order[box["k"]]} for box in view.pop("scope_boxes")]
        for box in view["scopes"]:
            del box["k"]
    view["edges"].extend(ghosts)
    return view


def _scope_clusters(scopes: Mapping[str, list[str]], ids: Mapping[str, str],
                    by_id: Mapping[str, dict[str, Any]]) -> list[str]:
    """Nested ``cluster_s<k>`` subgraphs for open scopes, without recursion: sorted by their path
    parts, scopes come parent first, and a stack closes each one when the next is outside it.
    The label is a blank (room for the name, which the browser draws: names never enter dot)."""
    lines: list[str] = []
    stack: list[str] = []
    for k, scope in enumerate(sorted(scopes, key=lambda p: p.split("/"))):
        while stack and not scope.startswith(stack[-1] + "/"):
            stack.pop()
            lines.append("}")
        lines.append(f'subgraph cluster_s{k} {{ margin=8; label=" "; fontsize=12; labeljust=l;')
        stack.append(scope)
        for unit in scopes[scope]:
            lines.append(_dot_node(ids[unit], by_id[unit]))
    lines.extend("}" for _ in stack)
    return lines


def _grid(items: list[dict[str, Any]], edges: list[dict[str, Any]]) -> dict[str, Any]:
    """A layout without graphviz: boxes in rows in graph order, edges as straight lines."""
    per_row = max(4, int(len(items) ** 0.5))
    step_x, step_y = NODE_W * 72 + 24, NODE_H * 72 + 40
    nodes, pos = [], {}
    for i, item in enumerate(items):
        x, y = 20 + step_x / 2 + (i % per_row) * step_x, 20 + step_y / 2 + (i // per_row) * step_y
        pos[item["id"]] = (x, y)
        nodes.append({**item, "x": round(x, 1), "y": round(y, 1), "w": NODE_W * 72, "h": NODE_H * 72})
    for e in edges:
        (x0, y0), (x1, y1) = pos[e["source"]], pos[e["target"]]
        e["points"] = [[x0, y0 + NODE_H * 36], [x1, y1 - NODE_H * 36]]
    rows = (len(items) + per_row - 1) // per_row
    return {"nodes": nodes, "edges": edges, "clusters": [], "width": round(40 + per_row * step_x, 1),
            "height": round(40 + rows * step_y, 1)}


def _dot_node(gid: str, item: dict[str, Any]) -> str:
    if item["kind"] in ("input", "output"):
        return f"{gid} [shape=ellipse, width={IO_W}, height={IO_H}];"
    if item["kind"] == "group":
        return f"{gid} [width={NODE_W + 0.4}, height={NODE_H + 0.3}];"
    return f"{gid};"


def _dot_json(source: str) -> dict[str, Any]:
    exe = shutil.which("dot")
    if exe is None:
        raise LayoutError("graphviz 'dot' is not installed (apt-get install graphviz; `make run` does it)")
    try:
        with DOT_PROCESSES:
            proc = subprocess.run([exe, "-Tjson"], input=source.encode(), capture_output=True,
                                  timeout=DOT_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        raise LayoutTimeout(f"graphviz dot took over {DOT_TIMEOUT} s on this graph") from None
    if proc.returncode != 0:
        first = proc.stderr.decode(errors="replace").strip().splitlines()[:1]
        raise LayoutError(f"graphviz dot failed (exit {proc.returncode}: {first[0][:200] if first else 'no message'})")
    try:
        return json.loads(proc.stdout)
    except ValueError:
        raise LayoutError("graphviz dot wrote output that is not JSON") from None


def _floats(s: str) -> list[float]:
    return [float(v) for v in s.split(",")]


def _parse(data: dict[str, Any], items: list[dict[str, Any]], ids: Mapping[str, str],
           edges: list[dict[str, Any]], clusters: Mapping[int, list[str]]) -> dict[str, Any]:
    bb = _floats(data.get("bb", "0,0,0,0"))
    height = bb[3]
    by_gid = {gid: name for name, gid in ids.items()}
    pos: dict[str, tuple[float, float, float, float]] = {}
    cluster_boxes = []
    scope_boxes: list[dict[str, Any]] = []
    objects = data.get("objects", [])
    for obj in objects:
        name = obj.get("name", "")
        if name.startswith("cluster_s") and "bb" in obj:
            x0, y0, x1, y1 = _floats(obj["bb"])
            scope_boxes.append({"k": int(name[len("cluster_s"):]), "x": x0, "y": height - y1, "w": x1 - x0, "h": y1 - y0})
        elif name.startswith("cluster_") and "bb" in obj:
            x0, y0, x1, y1 = _floats(obj["bb"])
            cluster_boxes.append({"id": int(name[len("cluster_"):]), "x": x0, "y": height - y1,
                                  "w": x1 - x0, "h": y1 - y0})
        elif name in by_gid and "pos" in obj:
            x, y = _floats(obj["pos"])
            pos[by_gid[name]] = (x, height - y, float(obj["width"]) * 72, float(obj["height"]) * 72)
    nodes = []
    for item in items:
        x, y, w, h = pos.get(item["id"], (0.0, 0.0, NODE_W * 72, NODE_H * 72))
        nodes.append({**item, "x": round(x, 1), "y": round(y, 1), "w": round(w, 1), "h": round(h, 1)})
    # Matched by their ends, not by order: dot may list edges in another order than it was given.
    gv_name = {obj.get("_gvid"): obj.get("name", "") for obj in objects}
    points: dict[tuple[str, str], str] = {}
    for ge in data.get("edges", []):
        if ge.get("style") == "invis":
            continue
        tail, head = by_gid.get(gv_name.get(ge.get("tail"), "")), by_gid.get(gv_name.get(ge.get("head"), ""))
        points.setdefault((tail, head), ge.get("pos", ""))
    for e in edges:
        e["points"] = _edge_points(points.get((e["source"], e["target"]), ""), height)
    return {"nodes": nodes, "edges": edges, "clusters": cluster_boxes, "scope_boxes": scope_boxes,
            "width": round(bb[2], 1), "height": round(height, 1)}


def _edge_points(pos: str, height: float) -> list[list[float]]:
    """dot's ``e,x,y p0 p1 ...`` spline: the B-spline control points plus the arrow tip last."""
    points, end = [], None
    for part in pos.split():
        if part.startswith("e,"):
            end = _floats(part[2:])
        elif part.startswith("s,"):
            continue
        else:
            points.append(_floats(part))
    if end is not None:
        points.append(end)
    return [[round(x, 1), round(height - y, 1)] for x, y in points]
