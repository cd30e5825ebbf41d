"""HTML pages: the library, a model's view (graph, debugger, TensorRT, runs), the walkthrough,
two runs side by side. Pages are shells; their JS reads the JSON API."""

from __future__ import annotations

import os

from flask import Blueprint, abort, current_app, render_template, send_file

bp = Blueprint("pages", __name__)


def lens():
    return current_app.extensions["sglens"]


@bp.get("/")
def index():
    return render_template("index.html", max_upload=current_app.config["SGLENS_MAX_UPLOAD"])


@bp.get("/models/<mid>")
def model(mid: str):
    from .errors import ApiError
    try:
        entry = lens().models.get(mid)
    except ApiError:   # deleted, or uploaded before a restart: a page that says so, with its runs
        return render_template("model_gone.html", model_id=mid[:100]), 404
    return render_template("model.html", model_id=entry.id, model_name=entry.name)


@bp.get("/learn")
def learn():
    return render_template("learn.html")


@bp.get("/runs/compare")
def compare():
    return render_template("compare.html")


@bp.get("/vendor/plotly.min.js")
def plotly_js():
    """plotly.js from the installed python package: no CDN, nothing vendored into git."""
    import plotly
    path = os.path.join(os.path.dirname(plotly.__file__), "package_data", "plotly.min.js")
    if not os.path.isfile(path):
        abort(404, description="plotly.min.js is not in the installed plotly package")
    return send_file(path, mimetype="application/javascript", max_age=86400)
