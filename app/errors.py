"""Every error is a JSON body ``{"error": "..."}`` with a 4xx or 5xx status.

Messages never show absolute server paths: the instance folder, the checkout, the working
directory and the temp folder are replaced by a short placeholder before they leave the server.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile

from flask import Flask, current_app, g, has_app_context, jsonify
from werkzeug.exceptions import HTTPException

from partition.errors import LensError

log = logging.getLogger("sglens.web")


class ApiError(LensError):
    """An error the API raises itself (bad request shape, unknown id)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.http_status = status


def _server_dirs() -> list[tuple[str, str]]:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    dirs = [(root, "<install>"), (os.getcwd(), "<cwd>"), (tempfile.gettempdir(), "<tmp>"),
            (sys.prefix, "<python>"), (os.path.expanduser("~"), "~")]
    if has_app_context():
        dirs.insert(0, (current_app.instance_path, "<instance>"))
    # longest first, so a folder inside another is replaced whole
    return sorted(((d, n) for d, n in dirs if d and d != "/"), key=lambda dn: -len(dn[0]))


def scrub(message: str) -> str:
    """``message`` without the server's absolute folders."""
    for path, name in _server_dirs():
        message = message.replace(path, name)
    return message


def error_response(message: str, status: int):
    resp = jsonify({"error": scrub(message)})
    resp.status_code = status
    return resp


def register_error_handlers(app: Flask) -> None:
    @app.errorhandler(LensError)
    def _lens(exc: LensError):
        return error_response(str(exc), int(getattr(exc, "http_status", 400) or 400))

    @app.errorhandler(413)
    def _too_large(exc: HTTPException):
        cap = g.get("sglens_body_cap")
        if cap:
            return error_response(f"the request body is larger than the limit of {cap} bytes for JSON "
                                  "requests; send less data", 413)
        limit = app.config["SGLENS_MAX_UPLOAD"]
        return error_response(f"the upload is larger than the limit of {limit} bytes "
                              f"({limit / 2**20:.0f} MiB); raise SGLENS_MAX_UPLOAD to allow it", 413)

    @app.errorhandler(HTTPException)
    def _http(exc: HTTPException):
        messages = {404: "not found", 405: "method not allowed"}
        msg = exc.description if exc.code not in messages else messages[exc.code]
        if exc.code == 404 and exc.description and "requested URL was not found" not in exc.description:
            msg = exc.description
        return error_response(msg or exc.name, exc.code or 500)

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception):
        log.exception("unexpected error")
        return error_response(f"internal error: {type(exc).__name__}: {exc}", 500)
