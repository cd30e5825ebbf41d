"""Request guards and response headers: who may talk to the server, and what a page may do.

Every request passes, in order:

1. **Host check** (DNS rebinding): the ``Host`` header's name must be a loopback name
   (``127.0.0.1``, ``localhost``, ``::1``), the bound address, or a name given with
   ``--allowed-host``; when bound to a wildcard address (``0.0.0.0``/``::``), IP literals too.
   A page on ``evil.example`` whose name was re-pointed at 127.0.0.1 sends ``Host: evil.example``
   and is refused.
2. **Access token** (only when one is configured: ``--token``, or any non-loopback ``--host``):
   ``?token=...`` once (a cookie is set), the cookie, or ``Authorization: Bearer ...``.
3. **Same origin for state changes** (CSRF): POST/PUT/PATCH/DELETE carrying an ``Origin`` (or,
   without it, a ``Referer``) must come from this server's own origin; ``Origin: null`` is refused,
   and so is a ``Sec-Fetch-Site`` other than ``same-origin``/``none``.
   A request with neither header is not from a browser page (browsers send ``Origin`` on every
   cross-origin POST) and is accepted: curl and scripts keep working.
4. **Body cap**: non-upload bodies are limited to ``SGLENS_MAX_JSON`` bytes (1 MiB) with a 413.

Every response carries a Content-Security-Policy without inline or eval'd script,
``X-Content-Type-Options: nosniff``, ``X-Frame-Options: DENY`` and a ``Referrer-Policy``.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
from typing import Any
from urllib.parse import urlsplit

from flask import Flask, g, redirect, request
from werkzeug.wrappers import Response

from .errors import error_response

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
TOKEN_COOKIE = "sglens_token"
CLIENT_COOKIE = "sglens_client"
#: Paths whose bodies are uploads (capped by SGLENS_MAX_UPLOAD instead of SGLENS_MAX_JSON).
UPLOAD_PATHS = frozenset({"/api/models"})
#: Paths taking uploads only as multipart forms (a run's input arrays); their JSON stays capped.
MULTIPART_UPLOAD_PATHS = frozenset({"/api/runs"})

# plotly.min.js (2.x/3.x) draws bar and scatter charts without eval; its styles are injected as
# <style> elements, hence 'unsafe-inline' for styles only. No inline or eval'd script anywhere.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
       "font-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
       "form-action 'self'; frame-ancestors 'none'")
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
}


def is_loopback(host: str) -> bool:
    """``host`` (a name or address from the command line) only ever reaches this machine."""
    h = host.strip("[]").lower()
    if h == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def _is_wildcard(host: str) -> bool:
    return host.strip("[]") in ("0.0.0.0", "::", "")


def _ip_literal(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


def host_name(host_header: str) -> str:
    """The name part of a ``Host`` header: ``[::1]:8000`` -> ``::1``, ``a.b:80`` -> ``a.b``."""
    h = host_header.strip().lower()
    if h.startswith("["):
        return h[1:h.find("]")] if "]" in h else h
    if h.count(":") == 1:
        h = h.split(":", 1)[0]
    return h.rstrip(".")


class Guard:
    """The per-app settings of the guards (from the ``SGLENS_*`` config keys)."""

    def __init__(self, config: Any) -> None:
        bound = str(config.get("SGLENS_BIND_HOST") or "127.0.0.1")
        names = {n.lower() for n in LOOPBACK_NAMES}
        names.add(bound.strip("[]").lower())
        # "name", "name:port" and "[v6]" all mean the name: the port is not part of the check
        names.update(host_name(n) for n in config.get("SGLENS_ALLOWED_HOSTS") or () if n.strip())
        self.allowed_hosts = frozenset(names)
        self.any_ip = _is_wildcard(bound)
        self.token: str | None = config.get("SGLENS_TOKEN") or None
        self.max_json = int(config.get("SGLENS_MAX_JSON", 1 << 20))

    def host_allowed(self, host_header: str) -> bool:
        name = host_name(host_header)
        if not name:
            return False
        return name in self.allowed_hosts or (self.any_ip and _ip_literal(name))

    def token_ok(self) -> bool:
        assert self.token is not None
        given = (request.cookies.get(TOKEN_COOKIE) or request.args.get("token")
                 or _bearer(request.headers.get("Authorization", "")))
        return bool(given) and hmac.compare_digest(given.encode(), self.token.encode())


def _bearer(value: str) -> str:
    return value[7:].strip() if value.lower().startswith("bearer ") else ""


def _origin_of(url: str) -> str | None:
    parts = urlsplit(url)
    if not parts.scheme or not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc}".lower()


def cross_site_reason() -> str | None:
    """Why this state-changing request is refused as cross-site, or None when it is fine."""
    own = f"{request.scheme}://{request.host}".lower()
    site = request.headers.get("Sec-Fetch-Site")   # modern browsers: a third line besides Origin and Referer
    if site is not None and site.strip().lower() not in ("same-origin", "none"):
        return f"cross-site request ({site[:20]}) refused; only pages of {own} may change data"
    origin = request.headers.get("Origin")
    if origin is not None:
        if origin.strip().lower() != own:
            return f"cross-origin request from '{origin[:100]}' refused; only pages of {own} may change data"
        return None
    referer = request.headers.get("Referer")
    if referer:
        if _origin_of(referer) != own:
            return f"cross-origin request (Referer from another site) refused; only pages of {own} may change data"
    return None


def _cookie_client() -> str | None:
    cid = request.cookies.get(CLIENT_COOKIE, "")
    return cid if 8 <= len(cid) <= 64 and cid.isalnum() else None


def client_id() -> str:
    """Who is asking, for per-client cache quotas: ``"<remote address>|<client cookie>"`` (the cookie
    being set by this response on a first visit). Quotas are per cookie; when the whole cache is
    full, the address holding the most pays (``app.quota``); loopback clients count one by one."""
    cid = _cookie_client() or g.get("sglens_new_client") or "-"
    addr = request.remote_addr or "?"
    # On loopback every client is on this machine (or behind a local reverse proxy): grouping them by
    # address would merge them all, so by default they count by cookie. SGLENS_LOOPBACK_CLIENTS=address
    # groups them by address like everyone else (a machine whose local users do not share a proxy;
    # also how the eviction test attacks from 127.0.0.2 without leaving loopback).
    by_cookie = is_loopback(addr) and os.environ.get("SGLENS_LOOPBACK_CLIENTS", "cookie") != "address"
    group = f"{addr}/{cid}" if by_cookie else addr
    return f"{group}|{cid}"


def install(app: Flask) -> None:
    """Register the guards and headers on ``app``."""
    guard = Guard(app.config)
    app.extensions["sglens_guard"] = guard

    @app.before_request
    def _guards():
        if not guard.host_allowed(request.host or ""):
            name = host_name(request.host or "")[:100]
            return error_response(f"host '{name}' is not allowed here; start the server with "
                                  f"--allowed-host {name or 'NAME'} to serve it under that name", 400)
        if guard.token is not None:
            if not guard.token_ok():
                return error_response("this server needs its access token: open the URL it printed at "
                                      "start (ending in ?token=...), or send 'Authorization: Bearer TOKEN'", 401)
            if request.args.get("token") and request.method == "GET" and not request.path.startswith("/api/"):
                # Move the token from the address bar into a cookie: it leaves no trace in history.
                args = request.args.to_dict(flat=False)
                args.pop("token", None)
                from urllib.parse import urlencode
                query = urlencode(args, doseq=True)
                resp = redirect(request.path + ("?" + query if query else ""))
                _set_token_cookie(resp, guard.token)
                return resp
        if _cookie_client() is None and not request.path.startswith("/static/"):
            g.sglens_new_client = secrets.token_hex(12)
        if request.method in UNSAFE_METHODS:
            why = cross_site_reason()
            if why:
                return error_response(why, 403)
            upload = request.path in UPLOAD_PATHS or (request.path in MULTIPART_UPLOAD_PATHS
                                                      and request.mimetype == "multipart/form-data")
            if not upload:
                # Read past this many bytes and werkzeug raises 413 (chunked bodies too).
                request.max_content_length = guard.max_json
                g.sglens_body_cap = guard.max_json
        return None

    @app.after_request
    def _headers(resp: Response) -> Response:
        for k, v in HEADERS.items():
            resp.headers.setdefault(k, v)
        if guard.token is not None and request.args.get("token") and guard.token_ok():
            _set_token_cookie(resp, guard.token)
        new = g.get("sglens_new_client")
        if new:
            resp.set_cookie(CLIENT_COOKIE, new, httponly=True, samesite="Strict", max_age=30 * 86400)
        return resp


def _set_token_cookie(resp: Response, token: str) -> None:
    resp.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="Strict", max_age=30 * 86400)
