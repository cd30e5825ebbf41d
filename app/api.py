"""The JSON API (``/api``): thin views over partition/, engine/ and app.serialize.

Documented in ``docs/api.md``. Every error is ``{"error": "..."}`` with a 4xx
or 5xx status (see ``app.errors``).
"""

from __future__ import annotations

import io
import json
import tempfile
from types import MappingProxyType
from typing import Any

from flask import Blueprint, current_app, g, jsonify, request, send_file

from partition.errors import LensError, SelectorError
from partition.ir import Graph
from partition.registry import Selection

from . import serialize
from .errors import ApiError
from .quota import BYTES_PER_NODE
from .run_spec import RULE, properties

bp = Blueprint("api", __name__)


def lens():
    return current_app.extensions["sglens"]


# ------------------------------------------------------------ request parsing --
def _json_body() -> dict[str, Any]:
    raw = request.get_data(cache=True)
    cap = g.get("sglens_body_cap")
    if cap and len(raw) >= cap:   # a chunked body is cut at the cap, not refused, by werkzeug
        raise ApiError(f"the request body is larger than the limit of {cap} bytes for JSON requests; "
                       "send less data", 413)
    data = request.get_json(silent=True)
    if data is None:
        if raw:
            raise ApiError("the request body is not valid JSON")
        return {}
    if not isinstance(data, dict):
        raise ApiError("the request body must be a JSON object")
    return data


#: Older top-level spellings of backend options, still accepted beside the one web shape
#: ``{"backend": NAME, "options": {...}}``: field -> option name (``keep_data_dependent`` is inverted).
LEGACY_OPTION_FIELDS = {"ops": "ops", "min_size": "min_size", "trt_version": "trt_version",
                        "trt_plugins": "trt_plugins", "keep_data_dependent": "exclude_data_dependent"}


def selection(data: dict[str, Any]) -> Selection:
    """The request's selection, validated once into a frozen ``Selection``.

    One shape: ``{"backend": NAME, "options": {option: value}}`` (``options`` as JSON text in a
    query string), or ``{"backend": "rule", "rule": {...}}`` (``Selection("rule", {"rule": ...})``,
    the rule checked here). The older top-level fields (``ops``, ``min_size``,
    ``keep_data_dependent``, ``trt_version``, ``trt_plugins``) are aliases folded into
    ``options``; the backend's schema checks and coerces every value once, in the registry."""
    from .rules import rule_property
    backend = data.get("backend") or "default"
    if not isinstance(backend, str) or len(backend) > 200:
        raise ApiError("'backend' must be a backend name")
    if backend == RULE:
        rule = data.get("rule")
        if isinstance(rule, str):
            try:
                rule = json.loads(rule)
            except ValueError:
                raise ApiError("'rule' is not valid JSON") from None
        rule_property(rule)   # a bad rule is the request's error (400)
        return Selection(RULE, MappingProxyType({"rule": rule}))
    options = _request_options(data.get("options"))
    for field, name in LEGACY_OPTION_FIELDS.items():
        value = data.get(field)
        if value in (None, "", []):
            continue
        if field in ("ops", "trt_plugins") and isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if field == "keep_data_dependent":
            value = str(value).lower() not in ("1", "true")
            if value:   # "keep" off is the default: nothing to set
                continue
        if name in options and options[name] != value:
            raise ApiError(f"'{field}' and options.{name} disagree ({value!r} and {options[name]!r}); "
                           f"send the option once, in 'options'")
        options[name] = value
    from partition.errors import UnknownBackendError
    try:
        return lens().registry.select(backend, options)
    except UnknownBackendError as exc:   # a bad field of the request (400), not a missing resource
        raise ApiError(str(exc)) from None


def selection_key(chosen: Selection) -> tuple[str, str]:
    """A cache key of a selection (results, layouts)."""
    return chosen.backend, json.dumps(chosen.values(), sort_keys=True)


def _request_options(extra: Any) -> dict[str, Any]:
    """The request's ``options`` object (JSON text in GET requests: layout, downloads, groups)."""
    if isinstance(extra, str) and extra:
        try:
            extra = json.loads(extra)
        except ValueError:
            raise ApiError("'options' is not valid JSON") from None
    if extra in (None, ""):
        return {}
    if not isinstance(extra, dict):
        raise ApiError("'options' must be an object of option names and values")
    return dict(extra)


def _backend_properties(chosen: Selection) -> list:
    """The selection's properties from this app's own registry (a plugin factory's error named)."""
    try:
        return properties(chosen, lens().registry)
    except LensError:
        raise
    except Exception as exc:  # noqa: BLE001 - a plugin's factory raised
        raise SelectorError(f"backend '{chosen.backend}' could not be set up: {type(exc).__name__}: {exc}") from None


def _partition(mid: str, data: dict[str, Any]):
    from partition.runner import partition
    entry = lens().models.get(mid)
    chosen = selection(data)
    backend, key = chosen.backend, selection_key(chosen)

    def compute():
        props = _backend_properties(chosen)
        try:
            return partition(entry.graph, backend, properties=props)
        except LensError:
            raise
        except Exception as exc:  # noqa: BLE001 - a plugin's factory or property raised
            raise SelectorError(f"backend '{backend}' raised {type(exc).__name__}: {exc}") from None
    from .security import client_id
    results = lens().results
    cache_key = (mid, *key)
    value = results.get(cache_key)
    if value is None:
        value = compute()
        results.put(cache_key, value, client_id(), len(entry.graph.nodes) * BYTES_PER_NODE)
    return entry, value


def _body(graph: Graph, path: str | None) -> Graph:
    """A nested If/Loop/Scan body: ``path`` is ``node:attr`` steps joined by ``|``. Never a file path."""
    if not path:
        return graph
    for step in path.split("|"):
        name, _, attr = step.rpartition(":")
        node = graph.node_by_name.get(name)
        if node is None or attr not in node.subgraphs:
            raise ApiError(f"no body '{attr}' on node '{name}'", 404)
        graph = node.subgraphs[attr]
    return graph


# ----------------------------------------------------------------- general --
@bp.get("/health")
def health():
    return jsonify({"ok": True})


@bp.get("/backends")
def backends():
    L = lens()
    plugin_backends = {b for names in L.plugins.values() for b in names}
    items = []
    for name in L.registry.names():
        items.append({"name": name, "plugin": name in plugin_backends, "needs_ops": name == "default"})
    items.append({"name": "rule", "plugin": False, "needs_rule": True})
    # Each backend's option schema (name, type, default, help, choices): enough to generate its form.
    schemas = {name: [o.to_json() for o in L.registry.schema(name)] for name in L.registry.names()}
    return jsonify({"backends": items, "options": schemas, "plugins": L.plugins,
                    "plugin_errors": L.plugin_errors, "runs": "available"})


@bp.get("/kinds")
def kinds():
    """The trace event kinds and reason kinds, for the front end (one list, from partition/trace.py)."""
    from partition.trace import EVENT_KINDS, REASON_KINDS, REASON_LABELS
    return jsonify({"events": list(EVENT_KINDS), "reasons": list(REASON_KINDS), "reason_labels": REASON_LABELS})


# ------------------------------------------------------------------ models --
@bp.get("/models")
def models():
    return jsonify({"models": [_summary(e) for e in lens().models.list()]})


def _summary(entry: Any) -> dict[str, Any]:
    """A model's library card; a stored model's facts as stored (no model parsed to list them)."""
    return serialize.model_summary(entry, lens().models.card(entry, serialize.graph_card, serialize.CARD_VERSION))


@bp.post("/models")
def upload():
    """One .onnx (field ``file``), or a bundle: several files in field ``file`` (the .onnx and its
    external-data files) or one .zip/.tar/.tgz of the model's folder."""
    from .uploads import is_bundle_upload, store_bundle
    files = request.files.getlist("file")
    if not files:
        raise ApiError("upload the model as multipart form field 'file'")
    if is_bundle_upload(files):
        entry = store_bundle(lens().models, current_app.instance_path, files,
                             current_app.config["SGLENS_MAX_UPLOAD"])
    else:
        f = files[0]
        entry = lens().models.upload(f.filename or "upload.onnx", f.stream)
    from .quota import model_bytes_estimate
    from .security import client_id
    lens().graphs.put(entry.id, entry.id, client_id(), model_bytes_estimate(entry.graph))
    return jsonify(_summary(entry)), 201


@bp.get("/models/<mid>")
def model(mid: str):
    return jsonify(_summary(lens().models.get(mid)))


@bp.delete("/models/<mid>")
def delete_model(mid: str):
    entry = lens().models.get(mid)
    if entry.source == "sample":
        raise ApiError("sample models cannot be deleted", 403)
    lens().models.delete(mid)
    lens().graphs.pop(mid)
    if getattr(entry, "bundle", None):   # the bundle's unpacked folder (ours, named by the id)
        import shutil
        shutil.rmtree(entry.bundle, ignore_errors=True)
    return jsonify({"deleted": mid})


@bp.get("/models/<mid>/inputs")
def model_inputs(mid: str):
    """The Runs tab's form: per graph input a prefilled spec (symbolic dims named), the tolerance."""
    from .run_inputs import defaults_json, remembered
    entry = lens().models.get(mid)
    return jsonify(defaults_json(entry.graph, remembered(current_app.instance_path, mid)))


@bp.get("/models/<mid>/layout")
def layout(mid: str):
    """Positions from graphviz, cached per graph, partition and expanded groups."""
    entry = lens().models.get(mid)
    args = request.args
    body = args.get("body") or ""
    graph = _body(entry.graph, body)
    assignment: dict[str, int] = {}
    pkey: tuple = ()
    if args.get("backend") and not body:
        _, result = _partition(mid, args.to_dict())
        assignment = serialize.assignment(result)
        pkey = selection_key(selection(args.to_dict()))
    from .layout import normalise
    L = lens()
    scopes = L.layouts.scopes((mid, body), graph)
    expanded, collapse, note = normalise(graph, scopes, args.get("expand", "")[:20000],
                                         args.get("collapse"), L.flat_limit)
    group = collapse and args.get("group") == "partition" and bool(assignment)
    fold = args.get("constants") != "1"   # Constant nodes folded unless asked for
    key = (mid, body, pkey, expanded, collapse, group, fold)
    view = L.layouts.view(key, graph, assignment=assignment, expanded=expanded,
                          flat_limit=L.flat_limit, collapse=collapse, group_partitions=group,
                          fold_constants=fold)
    out = {**view, "model": mid, "body": body,
           "metrics": serialize.node_metrics(graph) if len(graph.nodes) <= L.flat_limit else {}}
    if note:
        out["note"] = note + (f"; {view['note']}" if view.get("note") else "")
    return jsonify(out)


@bp.get("/models/<mid>/node")
def node(mid: str):
    entry = lens().models.get(mid)
    graph = _body(entry.graph, request.args.get("body"))
    name = request.args.get("name", "")
    n = graph.node_by_name.get(name)
    if n is None:
        raise ApiError(f"no node named '{name}' in this graph", 404)
    offset = _int_arg("offset", 0, 0, 1 << 31)
    return jsonify(serialize.node_json(graph, n, offset or 0))


@bp.post("/models/<mid>/partition")
def partition_model(mid: str):
    _, result = _partition(mid, _json_body())
    return jsonify(serialize.result_json(result))


def _selection_args() -> dict[str, Any]:
    return request.args.to_dict()


@bp.get("/models/<mid>/partitioned.onnx")
def partitioned_onnx(mid: str):
    from partition.onnx_io import to_model_proto
    entry, result = _partition(mid, _selection_args())
    data = to_model_proto(result.graph).SerializeToString()
    return send_file(io.BytesIO(data), mimetype="application/octet-stream", as_attachment=True,
                     download_name=f"{_stem(entry.name)}.partitioned.onnx")


@bp.get("/models/<mid>/subgraphs/<int:sid>.onnx")
def subgraph_onnx(mid: str, sid: int):
    from partition.report import export_subgraphs
    entry, result = _partition(mid, _selection_args())
    index = [i for i, s in enumerate(result.subgraphs) if s.id == sid]
    if not index:
        raise ApiError(f"no subgraph {sid} in this partition", 404)
    with tempfile.TemporaryDirectory(prefix="sglens-export-") as tmp:  # names made by export_subgraphs
        paths = export_subgraphs(result, tmp)
        data = paths[index[0]].read_bytes()
    return send_file(io.BytesIO(data), mimetype="application/octet-stream", as_attachment=True,
                     download_name=f"{_stem(entry.name)}.subgraph{sid}.onnx")


@bp.get("/models/<mid>/groups")
def groups(mid: str):
    from partition.tensorrt.node_report import groups_report
    entry = lens().models.get(mid)
    name = request.args.get("node", "")
    if name not in entry.graph.node_by_name:
        raise ApiError(f"no node named '{name}' in this graph", 404)
    chosen = selection({**request.args.to_dict(), "backend": "tensorrt"})
    return jsonify(groups_report(entry.graph, name, chosen))


def _stem(name: str) -> str:
    stem = name[:-5] if name.endswith(".onnx") else name
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in stem)[:80] or "model"


def _model_of(data: dict[str, Any]) -> tuple[str, Any]:
    """The model a JSON body names in ``model``: (id, store entry); 404 when unknown."""
    mid = data.get("model")
    if not isinstance(mid, str):
        raise ApiError("'model' (a model id) is required")
    return mid, lens().models.get(mid)


# ---------------------------------------------------------------- sessions --
@bp.post("/sessions")
def create_session():
    data = _json_body()
    mid, entry = _model_of(data)
    chosen = selection(data)
    backend = chosen.backend
    from .security import client_id
    session = lens().sessions.create(mid, entry.graph, backend, chosen.values(), _backend_properties(chosen),
                                     client=client_id())
    with session.lock:
        session.ensure(0)
        state = session.state(0 if session.events else -1)
    lens().sessions.charge(session)
    return jsonify({"id": session.id, "model": mid, "backend": backend, **state}), 201


@bp.get("/sessions/<sid>")
def get_session(sid: str):
    session = lens().sessions.get(sid)
    index = _int_arg("index", None, -1, 1 << 62)
    with session.lock:
        if index is None:
            index = len(session.events) - 1
        session.ensure(index)
        index = max(-1, min(index, len(session.events) - 1))
        return jsonify(session.state(index))


@bp.post("/sessions/<sid>/step")
def step(sid: str):
    """``{"action": "next"|"prev"|"first"|"last"|"goto"|"run", "index": i, "breakpoint": {...}}``."""
    from .sessions import breakpoint_matcher
    session = lens().sessions.get(sid)
    data = _json_body()
    action = data.get("action", "next")
    current = data.get("index", -1)
    if not isinstance(current, int):
        raise ApiError("'index' must be an integer")
    with session.lock:
        if action == "next":
            target = current + 1
        elif action == "prev":
            target = max(0, current - 1)
        elif action == "first":
            target = 0
        elif action == "goto":
            target = max(0, current)
        elif action == "last":
            session.ensure(1 << 62)
            target = len(session.events) - 1
        elif action == "run":
            bp_spec = data.get("breakpoint")
            if not isinstance(bp_spec, dict):
                raise ApiError("'run' needs a 'breakpoint' object: node, op, kind or cycle")
            target, hit = session.run_until(current, breakpoint_matcher(session.graph, bp_spec))
        else:
            raise ApiError(f"unknown action '{action}'; one of next, prev, first, last, goto, run")
        session.ensure(target)
        target = max(-1, min(target, len(session.events) - 1))
        state = session.state(target)
        if action == "run":
            state["breakpoint_hit"] = hit
    lens().sessions.charge(session)
    if state["error"]:
        state["error"] = f"the selector failed: {state['error']}"
    return jsonify(state)


@bp.get("/sessions/<sid>/events")
def session_events(sid: str):
    """Every event of the session's trace (run to its end), optionally of some ``kinds`` only."""
    from .teaching import explain, selector_call
    session = lens().sessions.get(sid)
    kinds = {k for k in request.args.get("kinds", "").split(",") if k}
    limit = _int_arg("limit", 2000, 0, 20000) or 0
    with session.lock:
        session.ensure(1 << 62)
        events = [(i, e) for i, e in enumerate(session.events) if not kinds or e.kind in kinds]
        out = []
        for i, e in events[:limit]:
            data = serialize.event_json(e, explain(e, session.graph))
            data["call"], data["index"] = selector_call(e), i
            out.append(data)
    lens().sessions.charge(session)
    return jsonify({"events": out, "total": len(events), "done": session.done, "error": session.error})


def _int_arg(name: str, default: int | None, low: int, high: int) -> int | None:
    """An integer query argument; junk or out of [low, high] is a 400 naming it."""
    raw = request.args.get(name)
    if raw in (None, ""):
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(f"'{name}' must be an integer, got '{raw[:40]}'") from None
    if not low <= value <= high:
        raise ApiError(f"'{name}' must be from {low} to {high}, got {value}")
    return value


@bp.delete("/sessions/<sid>")
def delete_session(sid: str):
    lens().sessions.delete(sid)
    return jsonify({"deleted": True})


# -------------------------------------------------------------------- runs --
@bp.get("/runs")
def list_runs():
    L = lens()
    stored = L.runs.list()
    ids = {r["id"] for r in stored}
    jobs = {j.id: j for j in L.jobs.active()}
    for r in stored:   # this process's runs in flight: their live progress, not the last one written
        job = jobs.get(r["id"])
        if job is not None and r["status"] in ("queued", "running") and job.status in ("queued", "running"):
            r.update(status=job.status, stage=job.stage, progress=round(job.progress, 3), message=job.message)
    live = [j.to_json() for j in jobs.values() if j.id not in ids]
    model = request.args.get("model")
    items = live + stored
    if model:
        items = [r for r in items if r.get("model_id") == model]
    return jsonify({"runs": [_run_out(r) for r in items]})


#: Models up to this size are parsed once more to ask ONNX shape inference about a run's shapes
#: before it is queued; bigger ones are checked by the run itself.
INFER_CHECK_BYTES = 256 << 20


def _run_request() -> tuple[dict[str, Any], dict[str, Any]]:
    """The run's JSON fields, and uploaded arrays: JSON, or multipart with a ``request`` JSON field
    and one file per input (``input:<name>``, .npy or .npz)."""
    if request.mimetype == "multipart/form-data":
        try:
            data = json.loads(request.form.get("request") or "{}")
        except ValueError:
            raise ApiError("form field 'request' is not valid JSON") from None
        if not isinstance(data, dict):
            raise ApiError("form field 'request' must be a JSON object")
        return data, {k: f for k, f in request.files.items()}
    return _json_body(), {}


def subgraph_runtime(data: dict[str, Any]) -> str:
    """What runs the subgraph nodes: ``subgraph_runtime``, or its older name ``executor`` (an alias;
    both given must agree). The ``RunSpec`` checks the value."""
    named = {k: data[k] for k in ("subgraph_runtime", "executor") if data.get(k) not in (None, "")}
    if len(set(map(str, named.values()))) > 1:
        raise ApiError(f"'subgraph_runtime' and its older name 'executor' disagree ({named['subgraph_runtime']!r} "
                       f"and {named['executor']!r}); send 'subgraph_runtime' only")
    value = next(iter(named.values()), "auto")
    if not isinstance(value, str):
        raise ApiError("'subgraph_runtime' must be a runtime name (auto, engine, onnxruntime, tensorrt)")
    return value


@bp.post("/runs")
def start_run():
    from . import run_inputs as ri
    data, uploads = _run_request()
    instance = current_app.instance_path
    previous = None
    if data.get("repeat_of"):   # the same inputs, tolerance, backend and executor as a stored run
        rid = str(data["repeat_of"])
        old = lens().runs.get(rid)
        previous = ri.load(instance, rid)
        if old is None or previous is None:
            raise ApiError(f"run '{rid[:40]}' has no stored inputs to repeat", 404)
        opts = dict(old["options"] or {})
        data = {"model": old["model_id"], "backend": old["backend"], "device": old["device"],
                "subgraph_runtime": old["executor"], "host_runtime": serialize.host_runtime(old),
                "rule": opts.pop("rule", None), "options": opts,
                "repeat": data.get("repeat", previous.repeat or current_app.config["SGLENS_RUN_REPEAT"])}
    mid, entry = _model_of(data)
    chosen = selection(data)
    runtime = subgraph_runtime(data)
    repeat = data.get("repeat", current_app.config["SGLENS_RUN_REPEAT"])
    if not isinstance(repeat, int) or not 1 <= repeat <= 100:
        raise ApiError("'repeat' must be an integer from 1 to 100")
    if previous is not None:
        inputs = previous
        inputs.feeds(entry.graph)        # the model may have been replaced: checked again
    else:
        arrays = ri.read_arrays(uploads, entry.graph, lens().run_memory_limit)
        model = None
        if entry.size <= INFER_CHECK_BYTES:
            import onnx
            model = onnx.load_model_from_string(entry.model_bytes())
        inputs = ri.parse_run_inputs(entry.graph, model, data, arrays,
                                     ri.remembered(instance, mid), lens().run_memory_limit)
    inputs.repeat = repeat
    ri.check_room(lens().models, inputs)
    job = lens().jobs.submit(entry, chosen, device=data.get("device", "cpu"), subgraph_runtime=runtime,
                             host_runtime=data.get("host_runtime", "ours"), repeat=repeat, run_inputs=inputs)
    ri.save(instance, job.id, inputs)
    ri.remember(instance, mid, inputs.specs)
    return jsonify({**job.to_json(), "inputs": inputs.to_json()}), 202


@bp.get("/runs/diff")
def diff_runs():
    """Every setting that differs between two stored runs ``a`` and ``b`` (the compare page's top)."""
    L = lens()
    runs = []
    for key in ("a", "b"):
        rid = request.args.get(key, "")
        run = L.runs.get(rid) if rid else None
        if run is None:
            raise ApiError(f"no stored run '{rid[:40]}' for '{key}'; give ?a=RUN_ID&b=RUN_ID", 404)
        runs.append(_with_context(run))
    return jsonify({"a": runs[0]["id"], "b": runs[1]["id"],
                    "differences": serialize.settings_diff(runs[0], runs[1])})


@bp.get("/runs/<rid>")
def get_run(rid: str):
    L = lens()
    job = L.jobs.get(rid)
    if job is not None and job.status in ("queued", "running"):
        return jsonify(_run_out({**job.to_json(), "result": None}))
    stored = L.runs.get(rid)
    if stored is None:
        if job is not None:  # finished a moment ago, being written
            return jsonify(_run_out({**job.to_json(), "result": None}))
        raise ApiError(f"no run with id '{rid}'", 404)
    if job is not None:
        stored["progress"], stored["stage"], stored["message"] = job.progress, job.stage, job.message
    return jsonify(_run_out(_with_context(stored)))


def _with_context(run: dict[str, Any]) -> dict[str, Any]:
    """A stored run plus what it used (specs, tolerance) and whether its model is still loaded."""
    from .run_inputs import stored_json
    try:
        lens().models.get(run["model_id"])
        present = True
    except ApiError:
        present = False
    return {**run, "model_present": present, "inputs_used": stored_json(current_app.instance_path, run["id"])}


@bp.post("/runs/<rid>/cancel")
def cancel_run(rid: str):
    job = lens().jobs.cancel(rid)
    return jsonify(_run_out(job.to_json()))


def _run_out(run: dict[str, Any]) -> dict[str, Any]:
    """A run as JSON: its error and progress texts come from engine and library exceptions, which
    may name server files; those paths are replaced as in every error response."""
    from .errors import scrub
    return {**run, **{k: scrub(run[k]) for k in ("error", "message") if isinstance(run.get(k), str)}}


@bp.get("/runs/<rid>/trace.json")
def run_trace(rid: str):
    data = lens().runs.chrome_trace(rid)
    if not data:
        raise ApiError(f"no trace for run '{rid}' (it did not finish)", 404)
    return send_file(io.BytesIO(data.encode()), mimetype="application/json", as_attachment=True,
                     download_name=f"run-{rid}.trace.json")


@bp.get("/runs/<rid>/partitioned.onnx")
def run_partitioned(rid: str):
    from partition.onnx_io import to_model_proto
    run = lens().runs.get(rid)
    if run is None:
        raise ApiError(f"no run with id '{rid}'", 404)
    opts = dict(run["options"] or {})
    data = {"backend": run["backend"], **opts}
    entry, result = _partition(run["model_id"], data)
    payload = to_model_proto(result.graph).SerializeToString()
    return send_file(io.BytesIO(payload), mimetype="application/octet-stream", as_attachment=True,
                     download_name=f"{_stem(entry.name)}.partitioned.onnx")


# ----------------------------------------------------------------- teaching --
@bp.get("/learn")
def learn():
    """The walkthrough: the real trace of the TensorRT integration design's cycle example, explained, and its layout."""
    from .teaching import WALKTHROUGH_BACKEND, WALKTHROUGH_MODEL, WALKTHROUGH_OPS, walkthrough, walkthrough_result
    L = lens()
    entry = next((e for e in L.models.list() if e.name == WALKTHROUGH_MODEL), None)
    if entry is None:
        from partition.onnx_io import load_model
        from sample_models.generate import BUILDERS
        data = BUILDERS[WALKTHROUGH_MODEL]().SerializeToString()
        entry = L.models.add_graph(WALKTHROUGH_MODEL, load_model(data), data)
    steps = L.models.cached(("learn", entry.id), lambda: walkthrough(entry.graph))
    view = L.layouts.view((entry.id, "", (), (), False, False), entry.graph, collapse=False)
    result = L.models.cached(("learn-result", entry.id), lambda: walkthrough_result(entry.graph))
    final = L.layouts.view((entry.id, "", ("learn-result",), (), False, False), entry.graph,
                           assignment=result["assignment"], collapse=False)
    return jsonify({"model": entry.id, "backend": WALKTHROUGH_BACKEND, "ops": WALKTHROUGH_OPS,
                    "nodes": {n.name: n.op_type for n in entry.graph.nodes},
                    "steps": steps, "layout": view,
                    "result": {k: result[k] for k in ("text", "call", "subgraphs")}, "final_layout": final})
