"""The TensorRT tab's "what to support first" ranking (``sglens gains`` on the web).

    GET /api/models/<mid>/gains?options=<JSON>   the tensorrt backend's options (release, target,
                                                 assume_supported, ...); the ranking of
                                                 ``partition.tensorrt.gains.rank_gains``

Each row costs one partition of the model, so the route bounds the work: models above
``SGLENS_GAINS_MAX_NODES`` nodes (default 20000) are refused with a pointer to the CLI, one
ranking runs at a time per process (another waits up to 30 s, then is a 429), and the last few are kept.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Any

from flask import Blueprint, current_app, jsonify, request

from .api import lens, selection, selection_key
from .errors import ApiError

bp = Blueprint("gains", __name__)
DEFAULT_MAX_NODES = 20000
KEEP = 16
WAIT_S = 30
_busy = threading.Lock()   # one ranking at a time in this process (each is CPU-bound)


def _cache() -> "OrderedDict[tuple, dict[str, Any]]":
    return current_app.extensions.setdefault("sglens_gains", OrderedDict())


@bp.get("/api/models/<mid>/gains")
def gains(mid: str):
    from partition.tensorrt.gains import rank_gains
    entry = lens().models.get(mid)
    chosen = selection({**request.args.to_dict(), "backend": "tensorrt"})
    key = selection_key(chosen)
    limit = int(current_app.config.get("SGLENS_GAINS_MAX_NODES", DEFAULT_MAX_NODES))
    if len(entry.graph.nodes) > limit:
        raise ApiError(f"the model has {len(entry.graph.nodes)} nodes; the web ranking takes at most {limit} "
                       "(each row is a partition): run 'sglens gains MODEL --backend tensorrt' instead", 413)
    cache, cache_key = _cache(), (mid, key)
    if cache_key in cache:
        cache.move_to_end(cache_key)
        return jsonify(cache[cache_key])
    if not _busy.acquire(timeout=WAIT_S):   # a toggle re-ranks while the last ranking may still run
        raise ApiError("another ranking is still running; try again when it ends", 429)
    try:
        ranked = rank_gains(entry.graph, chosen)
    finally:
        _busy.release()
    ranked["options"] = json.loads(key[1])
    cache[cache_key] = ranked
    while len(cache) > KEEP:
        cache.popitem(last=False)
    return jsonify(ranked)
