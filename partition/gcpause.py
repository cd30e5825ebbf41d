"""``paused_gc()``: run a block with Python's cyclic garbage collector off.

Importing a model and partitioning it allocate millions of small objects that
form no reference cycles (nodes, tuples, reasons, lists). With the collector on,
its full collections walk everything alive -- the whole graph -- again and
again: ~40% of partitioning time and of IR import time on a 100k-node model.
Reference counting still frees everything; the collector runs again afterwards.
"""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
