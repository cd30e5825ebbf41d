"""Waitress's connections, bounded per client address, and its own error answers made like ours.

Waitress bounds connections in all (``connection_limit``) but not per client: 200 idle sockets
from one address (opened, nothing sent) filled the server, and a normal request waited for
``channel_timeout``. Waitress makes every accepted connection by calling its server's
``channel_class(server, conn, addr, adj, map)``; ``LimitedChannels`` is that callable: it counts
the open channels of the new connection's remote address and, at the limit, answers 503 at once
and closes the socket instead of making a channel. No thread is involved: accepting runs in
waitress's event loop.

Waitress answers malformed requests itself (``ErrorTask``), without the app: ``SecureChannel``
gives those answers the security headers of every other response (``app.security.HEADERS``).
"""

from __future__ import annotations

import json
from typing import Any

from waitress.channel import HTTPChannel
from waitress.task import ErrorTask

from .security import HEADERS


class SecureErrorTask(ErrorTask):
    """Waitress's error answer (400 malformed request, 431 headers too large, ...) plus our headers."""

    def execute(self) -> None:
        self.response_headers.extend(HEADERS.items())
        super().execute()


class SecureChannel(HTTPChannel):
    error_task_class = SecureErrorTask


def _host(addr: Any) -> str:
    return str(addr[0]) if isinstance(addr, tuple) and addr else str(addr)


def refusal(limit: int) -> bytes:
    """The whole HTTP answer to a connection over the per-address limit."""
    body = json.dumps({"error": f"too many open connections from your address (the limit is {limit}); "
                                "close idle connections and retry"}).encode()
    head = ["HTTP/1.1 503 Service Unavailable", "Content-Type: application/json",
            f"Content-Length: {len(body)}", "Connection: close", "Retry-After: 5",
            *(f"{k}: {v}" for k, v in HEADERS.items())]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


class LimitedChannels:
    """Waitress's ``channel_class``: a ``SecureChannel``, unless ``per_client`` channels from the
    same remote address are open already."""

    def __init__(self, per_client: int) -> None:
        self.per_client = per_client
        self.answer = refusal(per_client)

    def __call__(self, server: Any, conn: Any, addr: Any, adj: Any, map: dict | None = None) -> Any:
        host = _host(addr)
        channels = (map or {}).values()
        open_here = sum(1 for ch in list(channels) if isinstance(ch, HTTPChannel) and _host(ch.addr) == host)
        if open_here >= self.per_client:
            try:
                conn.send(self.answer)   # fits in the socket buffer of a fresh connection
            except OSError:
                pass
            conn.close()
            return None
        return SecureChannel(server, conn, addr, adj, map=map)

    @classmethod
    def install(cls, server: Any, per_client: int) -> None:
        """On ``server`` (from ``waitress.create_server``) and every listening server in its map."""
        limiter = cls(per_client)
        socket_map = getattr(server, "_map", None) or getattr(server, "map", None) or {}
        for dispatcher in [server, *list(socket_map.values())]:
            if hasattr(dispatcher, "channel_class"):
                dispatcher.channel_class = limiter
