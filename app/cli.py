"""``sglens serve``: the web debugger on loopback by default.

Bound to anything but loopback, the server requires an access token (``--token``, or one generated
and printed once) and says so on stderr. A busy port is one line and exit 2.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from typing import Any

#: Default run memory budget: this fraction of the machine's RAM.
RUN_MEMORY_FRACTION = 4
#: Default wall-clock limit of one run, seconds (docs/running.md says why ten minutes).
RUN_TIME_LIMIT = 600


def register(subparsers: Any) -> None:
    """Add ``serve`` to the ``sglens`` subparsers."""
    add_serve_parser(subparsers)


def add_serve_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("serve", help="start the web debugger",
                              description="Serve the Subgraph Lens web debugger (binds 127.0.0.1 "
                                          "unless --host says otherwise).")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1); anything "
                   "but loopback requires an access token")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    p.add_argument("--plugin", action="append", default=[], metavar="FILE.py",
                   help="Python file registering its own subgraph properties (repeatable)")
    p.add_argument("--samples", action="store_true", help="load the sample models (sample_models/*.onnx)")
    p.add_argument("--model", action="append", default=[], metavar="PATH",
                   help="load this model at start: a .onnx file, a model folder, or a .zip/.tar of one, "
                        "with its external data (repeatable)")
    p.add_argument("--instance", default=None, metavar="DIR",
                   help="instance folder for uploads and runs.sqlite3 (default ./instance)")
    p.add_argument("--max-upload", type=int, default=None, metavar="BYTES",
                   help="largest upload accepted (default 1 GiB)")
    p.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                   help="also answer requests whose Host header names NAME (repeatable; loopback names "
                        "and the bound address are always allowed)")
    p.add_argument("--token", default=None, metavar="TOKEN",
                   help="require this access token on every request (generated when --host is not loopback)")
    p.add_argument("--run-memory-limit", type=int, default=None, metavar="BYTES",
                   help="bytes a run's tensors may take, estimated before running (default 1/4 of RAM; 0 = no limit)")
    p.add_argument("--run-time-limit", type=float, default=RUN_TIME_LIMIT, metavar="SECONDS",
                   help=f"wall-clock seconds a run may take on its worker before it fails and the worker is "
                        f"replaced (default {RUN_TIME_LIMIT}; 0 = no limit)")
    from .server import add_server_arguments
    add_server_arguments(p)
    t = p.add_argument_group("Dask cluster security (docs/deploy.md, docs/security.md)")
    t.add_argument("--tls-ca-file", default=None, metavar="CA.pem",
                   help="with --scheduler tls://...: the CA that signed the scheduler's and workers' certificates")
    t.add_argument("--tls-cert", default=None, metavar="CERT.pem", help="this server's certificate (same CA)")
    t.add_argument("--tls-key", default=None, metavar="KEY.pem", help="the key of --tls-cert")
    t.add_argument("--insecure-scheduler", action="store_true",
                   help="accept a plain tcp:// --scheduler off loopback (anyone who reaches it runs code on "
                        "its workers); the local cluster always uses TLS")  # --debug, --threads, --workers, --worker-memory, --scheduler, --store-limit, ...
    p.set_defaults(func=cmd_serve)
    return p


def make_server(host: str, port: int, app: Any):
    from werkzeug.serving import make_server as mk
    return mk(host, port, app, threaded=True)


def default_run_memory_limit() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // RUN_MEMORY_FRACTION
    except (ValueError, OSError, AttributeError):
        return None


def serve_config(args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    """The app config from the command line, and the warnings to print."""
    from .security import is_loopback
    config: dict[str, Any] = {"SGLENS_SAMPLES": args.samples, "SGLENS_PLUGINS": tuple(args.plugin),
                              "SGLENS_MODELS": tuple(getattr(args, "model", ()) or ()),
                              "SGLENS_BIND_HOST": args.host, "SGLENS_ALLOWED_HOSTS": tuple(args.allowed_host)}
    if args.instance:
        config["SGLENS_INSTANCE"] = args.instance
    if args.max_upload:
        config["SGLENS_MAX_UPLOAD"] = args.max_upload
    limit = args.run_memory_limit
    config["SGLENS_RUN_MEMORY_LIMIT"] = default_run_memory_limit() if limit is None else (limit or None)
    config["SGLENS_RUN_TIME_LIMIT"] = args.run_time_limit or None
    warnings: list[str] = []
    token = args.token
    if not is_loopback(args.host):
        token = token or secrets.token_urlsafe(24)
        warnings.append(f"sglens serve: warning: listening on {args.host}, reachable from other machines; "
                        "every request needs the access token, and uploaded models are parsed by this "
                        "server: expose it only to people you trust")
    config["SGLENS_TOKEN"] = token
    return config, warnings


def scheduler_security_from_args(args: argparse.Namespace) -> tuple[Any, list[str]]:
    """The Dask ``Security`` for ``--scheduler`` (None for the local cluster, which makes its own)."""
    from .dask_security import SchedulerSecurityError, TlsFiles, scheduler_security
    files = (args.tls_ca_file, args.tls_cert, args.tls_key)
    scheduler = getattr(args, "scheduler", None)
    if not scheduler or getattr(args, "in_process_runs", False):
        if any(files) or args.insecure_scheduler:
            raise SchedulerSecurityError("--tls-ca-file, --tls-cert, --tls-key and --insecure-scheduler go with "
                                         "--scheduler ADDRESS (the local cluster makes its own TLS credentials)")
        return None, []
    if any(files) and not all(files):
        raise SchedulerSecurityError("a tls:// scheduler needs all of --tls-ca-file, --tls-cert and --tls-key")
    return scheduler_security(scheduler, TlsFiles(*files) if all(files) else None, args.insecure_scheduler)


def cmd_serve(args: argparse.Namespace) -> int:
    from . import create_app
    if args.run_memory_limit is not None and args.run_memory_limit < 0:
        print("sglens serve: --run-memory-limit must be 0 (no limit) or a number of bytes", file=sys.stderr)
        return 2
    if not 0 <= args.run_time_limit < float("inf"):
        print("sglens serve: --run-time-limit must be 0 (no limit) or a number of seconds", file=sys.stderr)
        return 2
    if not 0 <= args.port <= 65535:
        print(f"sglens serve: --port must be from 0 to 65535, got {args.port}", file=sys.stderr)
        return 2
    config, warnings = serve_config(args)
    from .dask_security import SchedulerSecurityError
    try:
        config["SGLENS_DASK_SECURITY"], notes = scheduler_security_from_args(args)
    except SchedulerSecurityError as exc:
        print(f"sglens serve: {exc}", file=sys.stderr)
        return 2
    warnings += notes
    try:
        server_probe = _bind(args.host, args.port)
    except OSError as exc:
        print(f"sglens serve: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    from .server import config_from_args
    config.update(config_from_args(args))
    from partition.errors import LensError
    try:
        app = create_app(config)
    except LensError as exc:   # a --model that cannot be loaded: one line, exit 2
        print(f"sglens serve: {exc}", file=sys.stderr)
        return 2
    lens = app.extensions["sglens"]
    for path, err in lens.plugin_errors.items():
        print(f"sglens serve: plugin {path}: {err}")
    for w in warnings:
        print(w, file=sys.stderr, flush=True)
    server = server_probe(app, None if args.debug else args)   # waitress unless --debug
    host = f"[{args.host}]" if ":" in args.host else args.host
    url = f"http://{host}:{server.server_address[1]}/"
    if config["SGLENS_TOKEN"]:
        url += f"?token={config['SGLENS_TOKEN']}"
    print(f"Subgraph Lens: {url}  ({len(lens.models.list())} models loaded; Ctrl-C stops)", flush=True)
    print(f"runs: {lens.jobs.describe()}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        lens.jobs.close()
    return 0


def _bind(host: str, port: int):
    """Bind the port before building the app (a busy port fails fast); returns a server factory."""
    import socket
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    probe = socket.socket(family, socket.SOCK_STREAM)
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        probe.bind((host, port))
        probe.listen(128)
    except OSError:
        probe.close()
        raise
    bound_port = probe.getsockname()[1]

    def factory(app: Any, production: argparse.Namespace | None = None):
        if production is not None:       # waitress on the bound socket (app/server.py)
            from .server import make_production_server
            return make_production_server(host, bound_port, app, production, sockets=[probe])
        from werkzeug.serving import make_server as mk
        server = mk(host, bound_port, app, threaded=True, fd=probe.fileno())
        probe.close()   # the server holds its own duplicate of the socket
        return server
    return factory
