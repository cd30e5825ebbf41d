"""``sglens serve``: the web debugger on loopback by default."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    """Add ``serve`` to the ``sglens`` subparsers."""
    add_serve_parser(subparsers)


def add_serve_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("serve", help="start the web debugger",
                              description="Serve the Subgraph Lens web debugger (binds 127.0.0.1 "
                                          "unless --host says otherwise).")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    p.add_argument("--plugin", action="append", default=[], metavar="FILE.py",
                   help="Python file registering its own subgraph properties (repeatable)")
    p.add_argument("--samples", action="store_true", help="load the sample models (sample_models/*.onnx)")
    p.add_argument("--instance", default=None, metavar="DIR",
                   help="instance folder for uploads and runs.sqlite3 (default ./instance)")
    p.add_argument("--max-upload", type=int, default=None, metavar="BYTES",
                   help="largest upload accepted (default 1 GiB)")
    from .server import add_server_arguments
    add_server_arguments(p)  # --debug, --threads, --workers, --worker-memory, --scheduler, --store-limit, ...
    p.set_defaults(func=cmd_serve)
    return p


def make_server(host: str, port: int, app: Any):
    from werkzeug.serving import make_server as mk
    return mk(host, port, app, threaded=True)


def cmd_serve(args: argparse.Namespace) -> int:
    from . import create_app
    config: dict[str, Any] = {"SGLENS_SAMPLES": args.samples, "SGLENS_PLUGINS": tuple(args.plugin)}
    if args.instance:
        config["SGLENS_INSTANCE"] = args.instance
    if args.max_upload:
        config["SGLENS_MAX_UPLOAD"] = args.max_upload
    from .server import config_from_args, make_production_server
    config.update(config_from_args(args))
    app = create_app(config)
    lens = app.extensions["sglens"]
    for path, err in lens.plugin_errors.items():
        print(f"sglens serve: plugin {path}: {err}")
    server = make_server(args.host, args.port, app) if args.debug else \
        make_production_server(args.host, args.port, app, args)
    print(f"Subgraph Lens: http://{args.host}:{server.server_port}/  "
          f"({len(lens.models.list())} models loaded; Ctrl-C stops)", flush=True)
    print(f"runs: {lens.jobs.describe()}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        lens.jobs.close()
    return 0
