"""The production HTTP server of ``sglens serve``: waitress, plus the run and store flags.

Waitress (pure Python, no C build) reads requests asynchronously and only hands complete
ones to its bounded pool of ``--threads`` threads, so a slow upload holds no thread; an idle
or stalled connection is closed after ``--read-timeout`` seconds (``channel_timeout``);
headers over ``--max-header-bytes`` and bodies over the upload limit are refused before
the app sees them; at most ``--connection-limit`` connections are open at once, and at most
``--connections-per-client`` from one remote address (``LimitedChannels``: over it, the new
connection gets a 503 and is closed at once, so one address opening idle sockets cannot fill
the server). Waitress's own error answers (a malformed request, oversize headers) carry the
security headers of our pages. Werkzeug's development server is used only with ``--debug``.

``add_server_arguments`` adds the flags to ``sglens serve``; ``config_from_args`` turns them
into ``create_app`` config; ``make_production_server`` gives an object with the same
``server_port`` / ``serve_forever`` / ``shutdown`` / ``server_close`` as Werkzeug's server.
"""

from __future__ import annotations

import argparse
import signal
import threading
from typing import Any


def _bytes(text: str) -> int:
    """``2GiB``, ``512MB``, ``1000000``: bytes (argparse type; a bad value is one usage line)."""
    from dask.utils import parse_bytes
    try:
        value = int(parse_bytes(text))
    except (ValueError, TypeError):
        raise argparse.ArgumentTypeError(f"'{text}' is not a size: give bytes, or e.g. 512MiB, 2GB") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"'{text}' must be a positive size")
    return value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"'{text}' must be 1 or more")
    return value


def _address(text: str) -> str:
    if not text.startswith(("tcp://", "tls://")) or len(text) < 7:
        raise argparse.ArgumentTypeError(f"'{text}' is not a scheduler address like tcp://HOST:8786")
    return text


def add_server_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of the production server, the runs on Dask and the store (``docs/deploy.md``)."""
    g = p.add_argument_group("server")
    g.add_argument("--debug", action="store_true",
                   help="Werkzeug's development server (reloader off) instead of waitress")
    g.add_argument("--threads", type=_positive, default=8, help="request threads (default 8)")
    g.add_argument("--read-timeout", type=_positive, default=60, metavar="SECONDS",
                   help="close a connection idle or stalled this long (default 60)")
    g.add_argument("--max-header-bytes", type=_bytes, default=64 * 1024, metavar="BYTES",
                   help="largest request header block (default 64KiB)")
    g.add_argument("--connection-limit", type=_positive, default=200,
                   help="open connections at most (default 200)")
    g.add_argument("--connections-per-client", type=_positive, default=32, metavar="N",
                   help="open connections from one remote address at most (default 32); more get a 503")
    m = p.add_argument_group("model limits")
    m.add_argument("--max-nodes", type=_positive, default=None, metavar="N",
                   help="nodes one model may have, bodies and functions included (default 250000)")
    m.add_argument("--max-initializers", type=_positive, default=None, metavar="N",
                   help="initializers one model may have (default 100000)")
    m.add_argument("--max-attributes", type=_positive, default=None, metavar="N",
                   help="node attributes one model may have (default 1000000)")
    r = p.add_argument_group("runs")
    r.add_argument("--workers", type=_positive, default=1,
                   help="local Dask worker processes for runs (default 1; one run at a time each)")
    r.add_argument("--worker-memory", type=_bytes, default=None, metavar="LIMIT",
                   help="memory limit per local worker, e.g. 4GiB (default half the RAM / workers); "
                        "a run passing it is killed and fails with that message")
    r.add_argument("--scheduler", type=_address, default=None, metavar="tcp://HOST:8786",
                   help="submit runs to this Dask scheduler instead of starting local workers")
    r.add_argument("--in-process-runs", action="store_true",
                   help="run in threads of the server process (no Dask; a crashing run takes the server)")
    r.add_argument("--shared-store", action="store_true",
                   help="workers read uploaded models from the store's path instead of receiving the bytes")
    s = p.add_argument_group("store")
    s.add_argument("--store-url", default=None, metavar="URL",
                   help="database of the store (default <instance>/runs.sqlite3; postgresql://... to share)")
    s.add_argument("--store-limit", type=_bytes, default=None, metavar="BYTES",
                   help="most bytes the store may hold (uploads + database); more gets a 507 error")


def config_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """``create_app`` config from the flags above."""
    if args.in_process_runs:
        cluster = None
    else:
        cluster = args.scheduler or "local"
    return {"SGLENS_MAX_NODES": args.max_nodes, "SGLENS_MAX_INITIALIZERS": args.max_initializers,
            "SGLENS_MAX_ATTRIBUTES": args.max_attributes,
            "SGLENS_RUN_CLUSTER": cluster, "SGLENS_WORKERS": args.workers,
            "SGLENS_WORKER_MEMORY": args.worker_memory, "SGLENS_SHARED_STORE": args.shared_store,
            "SGLENS_STORE_URL": args.store_url, "SGLENS_STORE_LIMIT": args.store_limit}


class ProductionServer:
    """A waitress server with Werkzeug's server interface (what ``app.cli`` and tests call)."""

    def __init__(self, host: str, port: int, app: Any, threads: int = 8, read_timeout: int = 60,
                 max_header_bytes: int = 64 * 1024, connection_limit: int = 200,
                 connections_per_client: int = 32, sockets: list | None = None) -> None:
        from waitress.server import create_server
        # The body limit sits above Flask's MAX_CONTENT_LENGTH so that a declared oversize upload
        # gets the app's JSON 413; waitress's own limit bounds chunked bodies that declare nothing.
        body = int(app.config.get("MAX_CONTENT_LENGTH") or (1 << 30)) + (1 << 20)
        where: dict[str, Any] = {"sockets": sockets} if sockets else {"host": host, "port": port}
        self._server = create_server(app, **where, threads=threads, channel_timeout=read_timeout,
                                     max_request_header_size=max_header_bytes, max_request_body_size=body,
                                     connection_limit=connection_limit, ident="sglens",
                                     # idle channels are looked for this often: an idle socket lives
                                     # at most read_timeout + this (waitress: every 30 s)
                                     cleanup_interval=max(1, min(10, read_timeout // 4)),
                                     clear_untrusted_proxy_headers=True)
        from .connections import LimitedChannels
        LimitedChannels.install(self._server, connections_per_client)
        self.server_port = int(self._server.effective_port)
        self.server_address = (host, self.server_port)
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._closed = False

    def serve_forever(self) -> None:
        """Serve until ``shutdown()``, Ctrl-C or SIGTERM (the last two raise ``KeyboardInterrupt``)."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, _raise_interrupt)
        srv = self._server
        try:
            # waitress's own run() loops until its socket map is empty; one poll at a time lets
            # shutdown() stop it from another thread without closing sockets under its feet.
            while not self._stop.is_set():
                srv.asyncore.loop(timeout=srv.adj.asyncore_loop_timeout, map=srv._map,
                                  use_poll=srv.adj.asyncore_use_poll, count=1)
        finally:
            self._stopped.set()

    def shutdown(self) -> None:
        """Stop ``serve_forever`` (from another thread) and release the sockets and threads."""
        self._stop.set()
        self._server.pull_trigger()
        self._stopped.wait(10)
        self.server_close()

    def server_close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._server.task_dispatcher.shutdown(cancel_pending=True, timeout=5)
        for channel in list(self._server._map.values()):
            channel.close()


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt()


def make_production_server(host: str, port: int, app: Any, args: argparse.Namespace | None = None,
                           sockets: list | None = None) -> ProductionServer:
    kw: dict[str, Any] = {"sockets": sockets}
    if args is not None:
        kw = {**kw, "threads": args.threads, "read_timeout": args.read_timeout,
              "max_header_bytes": args.max_header_bytes, "connection_limit": args.connection_limit,
              "connections_per_client": args.connections_per_client}
    return ProductionServer(host, port, app, **kw)
