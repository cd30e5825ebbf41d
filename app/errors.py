"""Every error is a JSON body ``{"error": "..."}`` with a 4xx or 5xx status."""

from __future__ import annotations

import logging

from flask import Flask, jsonify
from werkzeug.exceptions import HTTPException

from partition.errors import LensError

log = logging.getLogger("sglens.web")


class ApiError(LensError):
    """An error the API raises itself (bad request shape, unknown id)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.http_status = status


def error_response(message: str, status: int):
    resp = jsonify({"error": message})
    resp.status_code = status
    return resp


def register_error_handlers(app: Flask) -> None:
    @app.errorhandler(LensError)
    def _lens(exc: LensError):
        return error_response(str(exc), int(getattr(exc, "http_status", 400) or 400))

    @app.errorhandler(413)
    def _too_large(exc: HTTPException):
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
