"""The kernels' device seam: host-built constants made resident, library calls where cupy has them.

Kernels are written once against ``xp`` (numpy or cupy). A few build small host arrays
from static facts on every call (Resize's per-axis gather indices and weights, say):
``resident`` uploads each distinct one once and hands back the same device array after,
so a warm run copies nothing to the device but its graph inputs.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import numpy as np

#: Host constants kept per process (an LRU): the largest one kept, and all of them together.
MAX_BYTES = 1 << 20
MAX_TOTAL_BYTES = 64 << 20

_lock = threading.Lock()
_cache: "OrderedDict[tuple, Any]" = OrderedDict()
_total = 0


def resident(xp: Any, host: np.ndarray) -> Any:
    """``xp.asarray(host)``, uploaded once per distinct value (same dtype, shape and bytes)."""
    if xp is np:
        return host
    host = np.ascontiguousarray(host)
    if host.nbytes > MAX_BYTES:
        return xp.asarray(host)
    key = (id(xp), host.dtype.str, host.shape, host.tobytes())
    with _lock:
        found = _cache.get(key)
        if found is not None:
            _cache.move_to_end(key)
            return found
    global _total
    made = xp.asarray(host)
    with _lock:
        if key not in _cache:
            _cache[key] = made
            _total += 2 * host.nbytes  # the key's bytes and the device copy
        while _total > MAX_TOTAL_BYTES:
            (_, _, _, old), _ = _cache.popitem(last=False)
            _total -= 2 * len(old)
    return made
