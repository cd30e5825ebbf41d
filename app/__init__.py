"""The Subgraph Lens web debugger: a Flask app factory.

``create_app(config)`` builds an app with three blueprints: ``pages`` (HTML),
``api`` (JSON under ``/api``) and ``precision`` (the precision page and its routes). Views are thin: they call ``partition/`` and
``engine/`` functions and ``app.serialize``; the state they need (models,
partition results, debug sessions, run jobs, runs in SQLite) lives in
``app.extensions["sglens"]``, one ``Lens`` object per app, so two apps in one
process (tests) never share anything.

Config keys (defaults in ``DEFAULTS``):

- ``SGLENS_MAX_UPLOAD``: largest accepted upload in bytes (1 GiB); also Flask's
  ``MAX_CONTENT_LENGTH``, so bigger requests get a 413 JSON error.
- ``SGLENS_SAMPLES``: load ``sample_models/*.onnx`` at start.
- ``SGLENS_MODELS``: model paths to load at start (``.onnx``, a model folder, or a .zip/.tar bundle).
- ``SGLENS_PLUGINS``: plugin files to import (paths from the command line only).
- ``SGLENS_INSTANCE``: the instance folder (uploads, ``runs.sqlite3``).
- ``SGLENS_MAX_SESSIONS``: debug sessions kept (least recently used evicted).
- ``SGLENS_FLAT_LIMIT``: graphs with more nodes get the collapsed, hierarchical view.
- ``SGLENS_RUN_WORKERS``: background run jobs at once.
- ``SGLENS_RUN_REPEAT``: measured repeats per side of a comparison.
- ``SGLENS_RUN_KERNELS``: a kernel finder handed to the engine (``kernels=``); None = the registry.
- ``SGLENS_RUN_CLUSTER``: None runs in threads of this process; ``"local"`` starts a Dask
  ``LocalCluster`` (``SGLENS_WORKERS`` processes of ``SGLENS_WORKER_MEMORY`` bytes); a
  ``tcp://`` address uses that scheduler (``app.dask_runs``, ``docs/deploy.md``).
- ``SGLENS_STORE_URL``: the store's database (default ``<instance>/runs.sqlite3``; a
  ``postgresql://`` URL for a shared one); ``SGLENS_STORE_LIMIT``: bytes the store may hold.
- ``SGLENS_RUN_MEMORY_LIMIT``: bytes a run's tensors may take (estimated before running); None = no limit.
- ``SGLENS_RUN_TIME_LIMIT``: seconds of wall clock a run may take on its worker (600); None = no limit.
- ``SGLENS_DASK_SECURITY``: TLS for the Dask cluster (``app.dask_security``); None = ``Security.temporary()``
  for the local cluster, plain TCP for a loopback ``tcp://`` scheduler.
- ``SGLENS_BIND_HOST``, ``SGLENS_ALLOWED_HOSTS``, ``SGLENS_TOKEN``, ``SGLENS_MAX_JSON``: the request
  guards of ``app.security`` (Host names answered, access token, cap on JSON bodies).
- ``SGLENS_PRECISION_MAX_RUNS``: the most model runs one precision search may ask for
  (``app/precision_api.py``; one search runs at a time).
- ``SGLENS_CACHE_BYTES``, ``SGLENS_CLIENT_CACHE_BYTES``: estimated bytes of partition results, of
  debug sessions and of imported uploads kept in all and per client (``app.quota``).
- ``SGLENS_MAX_NODES``, ``SGLENS_MAX_INITIALIZERS``, ``SGLENS_MAX_ATTRIBUTES``: objects one model may
  hold (None: the defaults of ``partition.import_limits``); see ``app.limits.import_limits``.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from flask import Flask

from partition.backends import builtin_registry
from partition.errors import LensError
from partition.plugins import load_plugin
from partition.registry import use_registry

DEFAULTS: dict[str, Any] = {
    "SGLENS_MAX_UPLOAD": 1 << 30,
    "SGLENS_SAMPLES": False,
    "SGLENS_MODELS": (),
    "SGLENS_PLUGINS": (),
    "SGLENS_INSTANCE": None,
    "SGLENS_MAX_SESSIONS": 64,
    "SGLENS_FLAT_LIMIT": 1500,
    "SGLENS_RUN_WORKERS": 2,
    "SGLENS_RUN_REPEAT": 3,
    "SGLENS_RUN_CLUSTER": None,
    "SGLENS_WORKERS": 1,
    "SGLENS_WORKER_MEMORY": None,
    "SGLENS_RUN_TIME_LIMIT": 600.0,
    "SGLENS_DASK_SECURITY": None,
    "SGLENS_SHARED_STORE": False,
    "SGLENS_STORE_URL": None,
    "SGLENS_STORE_LIMIT": None,
    "SGLENS_RUN_MEMORY_LIMIT": None,
    "SGLENS_BIND_HOST": "127.0.0.1",
    "SGLENS_ALLOWED_HOSTS": (),
    "SGLENS_TOKEN": None,
    "SGLENS_MAX_JSON": 1 << 20,
    "SGLENS_CACHE_BYTES": 1 << 30,
    "SGLENS_CLIENT_CACHE_BYTES": 384 << 20,
    "SGLENS_PRECISION_MAX_RUNS": 500,
}

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _assets(name: str) -> str:
    """``templates``/``static``: inside the package when installed from a wheel, else the checkout's."""
    packaged = os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
    return packaged if os.path.isdir(packaged) else os.path.join(ROOT, name)


class Lens:
    """Everything one app instance holds: stores, sessions, jobs."""

    def __init__(self, app: Flask) -> None:
        from .dask_runs import make_job_manager
        from .layout import LayoutCache
        from .quota import ClientQuota
        from .sessions import SessionStore
        from .store import Database, ModelStore, RunStore
        cfg = app.config
        database = Database(cfg.get("SGLENS_STORE_URL") or os.path.join(app.instance_path, "runs.sqlite3"))
        self.runs = RunStore(database)          # migrates the schema
        self.runs.mark_interrupted()            # runs a stopped server left in flight
        limit = cfg.get("SGLENS_STORE_LIMIT")
        self.models = ModelStore(os.path.join(app.instance_path, "uploads"),
                                 max_bytes=int(cfg["SGLENS_MAX_UPLOAD"]), database=database,
                                 store_limit=int(limit) if limit else None,
                                 bundle_dir=os.path.join(app.instance_path, "bundles"),
                                 counted_dirs=(os.path.join(app.instance_path, "bundles"),
                                               os.path.join(app.instance_path, "run_inputs")))
        total, per_client = int(cfg["SGLENS_CACHE_BYTES"]), int(cfg["SGLENS_CLIENT_CACHE_BYTES"])
        self.sessions = SessionStore(max_sessions=int(cfg["SGLENS_MAX_SESSIONS"]), total_bytes=total,
                                     client_bytes=per_client)
        #: partition results by (model, backend options), charged to the client that asked first
        self.results: ClientQuota[Any] = ClientQuota(total, per_client)
        #: imported uploads held in memory, charged by their objects to the client that uploaded them;
        #: over the quota a client's oldest graphs leave memory (imported again from disk when used)
        self.graphs: ClientQuota[str] = ClientQuota(total, per_client,
                                                    on_evict=lambda mid, _v: self.models.forget_graph(str(mid)))
        run_limit = cfg.get("SGLENS_RUN_MEMORY_LIMIT")
        self.run_memory_limit: int | None = int(run_limit) if run_limit else None
        self.run_kernels = cfg.get("SGLENS_RUN_KERNELS")
        time_limit = cfg.get("SGLENS_RUN_TIME_LIMIT")
        self.run_time_limit: float | None = float(time_limit) if time_limit else None
        self.jobs = make_job_manager(self, cfg)
        self.models.on_delete.append(self.jobs.cancel_model)
        self.models.on_load.append(self._charge_graph)
        self.flat_limit = int(cfg["SGLENS_FLAT_LIMIT"])
        self.layouts = LayoutCache()
        #: this app's backends: the built-ins plus its own plugins, never another app's
        self.registry = builtin_registry()
        self.plugins: dict[str, list[str]] = {}
        self.plugin_errors: dict[str, str] = {}

    def _charge_graph(self, mid: str, graph: Any) -> None:
        """A stored model read back from disk is held like an upload: charged to the client that
        asked for it (outside a request, to the server itself), evicted past the quota."""
        from flask import has_request_context

        from .quota import model_bytes_estimate
        from .security import client_id
        self.graphs.put(mid, mid, client_id() if has_request_context() else "server", model_bytes_estimate(graph))


def create_app(config: Mapping[str, Any] | None = None) -> Flask:
    """The app: ``config`` overrides ``DEFAULTS`` (and any Flask setting)."""
    merged = dict(DEFAULTS)
    merged.update(config or {})
    instance = merged.get("SGLENS_INSTANCE") or os.path.join(os.getcwd(), "instance")
    app = Flask(__name__, instance_path=os.path.abspath(instance),
                template_folder=_assets("templates"), static_folder=_assets("static"))
    app.config.update(merged)
    app.config["MAX_CONTENT_LENGTH"] = int(merged["SGLENS_MAX_UPLOAD"]) + (1 << 20)  # multipart overhead
    from .serialize import FiniteJSONProvider
    app.json = FiniteJSONProvider(app)   # no bare NaN / Infinity in any answer
    app.json.sort_keys = False
    os.makedirs(app.instance_path, exist_ok=True)
    from .uploads import request_class
    app.request_class = request_class(os.path.join(app.instance_path, "tmp"))
    lens = Lens(app)
    app.extensions["sglens"] = lens
    for path in merged.get("SGLENS_PLUGINS") or ():
        try:
            with use_registry(lens.registry):  # the plugin's registrations go to this app only
                lens.plugins[str(path)] = load_plugin(path)
        except LensError as exc:  # a broken plugin is reported in the page, the server still serves
            lens.plugin_errors[str(path)] = str(exc)
    if merged.get("SGLENS_SAMPLES"):
        lens.models.load_samples()
    from .uploads import preload_model
    for path in merged.get("SGLENS_MODELS") or ():   # sglens serve --model PATH (file, folder, archive)
        preload_model(lens.models, app.instance_path, str(path), int(merged["SGLENS_MAX_UPLOAD"]))
    from .api import bp as api_bp
    from .pages import bp as pages_bp
    from .errors import register_error_handlers
    from .security import install as install_guards
    install_guards(app)
    app.register_blueprint(pages_bp)
    app.register_blueprint(api_bp, url_prefix="/api")
    from .precision_api import bp as precision_bp   # the precision page and its routes (issue 26)
    app.register_blueprint(precision_bp)
    from .gains_api import bp as gains_bp   # the TensorRT tab's ranking of what to support first (issue 25)
    app.register_blueprint(gains_bp)
    register_error_handlers(app)
    return app
