"""The precision page and its JSON routes: a search for the nodes that must stay FP32, live.

    GET  /models/<mid>/precision              the page (templates/precision.html)
    POST /api/models/<mid>/precision          start one (JSON, or multipart: field ``request``
                                              with the JSON, files ``input:<name>`` / an .npz)
    GET  /api/precision/<jid>                 its state: stage, runs, current candidate set,
                                              run history, per-node rows, the report when done
    POST /api/precision/<jid>/cancel          stop it after the current run
    GET  /api/precision/<jid>/marked.onnx     the model with the pins marked

The work is ``engine.precision_report.investigate``; this module only checks the request
(``PrecisionRequest``, the input specs of ``app/run_inputs.py``), runs one search at a time
per app in a thread (another one is a 429 until it ends: each is CPU-bound for up to
``SGLENS_PRECISION_MAX_RUNS`` model runs), and keeps the last few in memory.
"""

from __future__ import annotations

import io
import json
import threading
import time
import uuid
from collections import OrderedDict
from typing import Any

from flask import Blueprint, current_app, jsonify, render_template, request, send_file

from engine.precision import PrecisionError
from engine.precision_report import PrecisionRequest

from .errors import ApiError

bp = Blueprint("precision", __name__)
KEEP_JOBS = 16
HISTORY_SHOWN = 400
DEFAULT_MAX_RUNS = 500     # SGLENS_PRECISION_MAX_RUNS: the most runs one web request may ask for


class Cancelled(Exception):
    """Raised from the progress callback when the user cancels."""


class PrecisionJob:
    def __init__(self, model_id: str, model_name: str, request_: PrecisionRequest,
                 inputs: str = "", inputs_guessed: bool = False) -> None:
        self.id = uuid.uuid4().hex
        self.model_id, self.model_name, self.request = model_id, model_name, request_
        self.inputs = inputs                  # what the search runs on, in words (_inputs_said)
        self.inputs_guessed = inputs_guessed  # not given with the request: a failure says how to
        self.status, self.stage, self.runs = "running", "starting", 0
        self.candidate: list[str] = []
        self.history: list[dict[str, Any]] = []
        self.nodes: list[dict[str, Any]] | None = None
        self.report: dict[str, Any] | None = None
        self.error: str | None = None
        self.cancelled = False
        self.started = time.time()
        self.ended: float | None = None   # the clock stops when the search ends, however it ends
        self.lock = threading.Lock()
        self.marked: bytes | None = None

    def on_progress(self, event: dict[str, Any]) -> None:
        if self.cancelled:
            raise Cancelled()
        with self.lock:
            self.stage = event["stage"]
            self.runs = int(event.get("run") or self.runs)
            self.candidate = list(event.get("candidate") or [])
            if "nodes" in event:
                self.nodes = event["nodes"]
            elif event.get("match") is not None:
                self.history.append({k: event.get(k) for k in ("run", "stage", "pins", "match", "max_abs")})

    def end(self, status: str, error: str | None) -> None:
        """A search that ended without a report; its clock stops with it (under the same lock,
        so no answer shows the end with a running clock). A failure on inputs the request did not
        give says which they were and how to give others: the page has no size fields of its own."""
        if error is not None and self.inputs_guessed:
            error += (f". The inputs were {self.inputs}. To search on others, run the model once on "
                      "its page's Runs tab with sizes that run (after a failure there it offers sizes "
                      "onnxruntime runs; a search uses the last run's sizes), or give an .npz of inputs")
        with self.lock:
            self.status, self.error, self.ended = status, error, time.time()
            if status == "cancelled":
                self.stage = "cancelled"

    def to_json(self) -> dict[str, Any]:
        with self.lock:
            return {"id": self.id, "model": self.model_id, "status": self.status, "stage": self.stage,
                    "runs": self.runs, "max_runs": self.request.max_runs, "target": self.request.target,
                    "candidate": self.candidate, "history": self.history[-HISTORY_SHOWN:],
                    "nodes": self.nodes, "report": self.report, "error": self.error, "inputs": self.inputs,
                    "seconds": round((self.ended or time.time()) - self.started, 2)}


class PrecisionJobs:
    """The app's precision searches: one running at a time, the last ``KEEP_JOBS`` kept."""

    def __init__(self) -> None:
        self.jobs: OrderedDict[str, PrecisionJob] = OrderedDict()
        self.lock = threading.Lock()

    def start(self, job: PrecisionJob, graph: Any, model_bytes: Any, feeds: dict[str, Any]) -> None:
        with self.lock:
            busy = [j for j in self.jobs.values() if j.status == "running"]
            if busy:
                raise ApiError(f"a precision search is already running (job {busy[0].id}); wait for "
                               "it or cancel it", 429)
            self.jobs[job.id] = job
            while len(self.jobs) > KEEP_JOBS:
                self.jobs.popitem(last=False)
        threading.Thread(target=_work, args=(job, graph, model_bytes, feeds), daemon=True,
                         name=f"precision-{job.id[:8]}").start()

    def get(self, jid: str) -> PrecisionJob:
        job = self.jobs.get(jid)
        if job is None:
            raise ApiError(f"no precision search '{jid[:40]}'; it ended long ago or never existed", 404)
        return job


def _work(job: PrecisionJob, graph: Any, model_bytes: Any, feeds: dict[str, Any]) -> None:
    from engine.precision_export import marked_model
    from engine.precision_report import investigate
    from partition.errors import LensError
    try:
        report = investigate(graph, feeds, job.request, job.on_progress)
        marked = marked_model(graph, model_bytes, report["pins"], job.request.target)
        with job.lock:
            job.report, job.status, job.stage = report, "done", "done"
            job.candidate = list(report["pins"])
            job.nodes = report["nodes"]
            job.marked = marked.SerializeToString()
            job.ended = time.time()
    except Cancelled:
        job.end("cancelled", None)
    except LensError as exc:
        job.end("failed", str(exc))
    except Exception as exc:  # noqa: BLE001 - shown to the user, the server keeps serving
        job.end("failed", f"{type(exc).__name__}: {exc}")


def _jobs() -> PrecisionJobs:
    ext = current_app.extensions
    if "sglens_precision" not in ext:
        ext["sglens_precision"] = PrecisionJobs()
    return ext["sglens_precision"]


def _lens():
    return current_app.extensions["sglens"]


# ------------------------------------------------------------------- routes --
@bp.get("/models/<mid>/precision")
def page(mid: str):
    entry = _lens().models.get(mid)
    return render_template("precision.html", model_id=entry.id, model_name=entry.name)


def _request_fields() -> tuple[dict[str, Any], dict[str, Any]]:
    if request.mimetype == "multipart/form-data":
        try:
            data = json.loads(request.form.get("request") or "{}")
        except ValueError:
            raise ApiError("form field 'request' is not valid JSON") from None
        files = dict(request.files.items())
    else:
        data, files = request.get_json(silent=True), {}
    if not isinstance(data, dict):
        raise ApiError("the request must be a JSON object (or form field 'request' holding one)")
    return data, files


def parse_request(data: dict[str, Any], cap: int) -> PrecisionRequest:
    """The request's fields as a checked ``PrecisionRequest`` (400 naming the field)."""
    from .api import selection
    backend = data.get("backend") or "tensorrt"
    chosen = None
    if backend not in ("none", "whole model"):
        chosen = selection({**data, "backend": backend})   # validated once, a frozen Selection
        if chosen.backend == "rule":
            raise ApiError("the precision search partitions with a registered backend, not a rule; "
                           "choose a backend (e.g. tensorrt)")
    try:
        max_runs = int(data.get("max_runs", 200))
        atol, rtol = float(data.get("atol", 1e-3)), float(data.get("rtol", 1e-3))
    except (TypeError, ValueError):
        raise ApiError("'max_runs' must be an integer and 'atol'/'rtol' numbers") from None
    if max_runs > cap:
        raise ApiError(f"'max_runs' {max_runs} is above this server's cap of {cap}")
    try:
        return PrecisionRequest(target=str(data.get("target", "fp16")), atol=atol, rtol=rtol,
                                max_runs=max_runs, selection=chosen,
                                scope=str(data.get("scope", "subgraphs")))
    except PrecisionError as exc:
        raise ApiError(str(exc).replace("--", "")) from None


@bp.post("/api/models/<mid>/precision")
def start(mid: str):
    from . import run_inputs as ri
    entry = _lens().models.get(mid)
    data, files = _request_fields()
    req = parse_request(data, int(current_app.config.get("SGLENS_PRECISION_MAX_RUNS", DEFAULT_MAX_RUNS)))
    arrays = ri.read_arrays(files, entry.graph)
    last = ri.remembered(current_app.instance_path, mid)
    inputs = ri.parse_run_inputs(entry.graph, None, data, arrays, last, _lens().run_memory_limit)
    given = bool(arrays) or bool(data.get("inputs"))
    job = PrecisionJob(mid, entry.name, req, _inputs_said(inputs, given, bool(last)), not given)
    _jobs().start(job, entry.graph, entry.model_bytes, inputs.feeds(entry.graph))
    return jsonify(job.to_json()), 202


def _inputs_said(inputs: Any, given: bool, last_run: bool) -> str:
    """``input [1, 192], sr [] (the sizes of this model's last run)``: the search's inputs in words."""
    shapes = ", ".join(f"{s.name} " + ("(a file)" if s.name in inputs.files else str(list(s.shape)))
                       for s in inputs.specs)
    source = ("as given" if given else "the sizes of this model's last run" if last_run
              else "the model's own sizes, symbolic axes guessed")
    return f"{shapes} ({source})"


@bp.get("/api/precision/<jid>")
def status(jid: str):
    return jsonify(_jobs().get(jid).to_json())


@bp.post("/api/precision/<jid>/cancel")
def cancel(jid: str):
    job = _jobs().get(jid)
    job.cancelled = True
    return jsonify({"id": job.id, "cancelled": True})


@bp.get("/api/precision/<jid>/marked.onnx")
def marked(jid: str):
    job = _jobs().get(jid)
    if job.marked is None:
        raise ApiError("the search has not finished; the marked model exists once it has", 409)
    stem = "".join(c if c.isalnum() or c in "-_" else "_" for c in job.model_name.rsplit(".", 1)[0])[:60]
    return send_file(io.BytesIO(job.marked), mimetype="application/octet-stream", as_attachment=True,
                     download_name=f"{stem or 'model'}.fp32-pins.onnx")
