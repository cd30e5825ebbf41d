"""``paused_gc()``: run a block with Python's cyclic garbage collector off.

Importing a model and partitioning it allocate millions of small objects that
form no reference cycles (nodes, tuples, reasons, lists). With the collector on,
its full collections walk everything alive -- the whole graph -- again and
again: ~40% of partitioning time and of IR import time on a 100k-node model.
Reference counting still frees everything.

Leaving the block: every object allocated inside is still in the youngest
generation, so the first collection after ``gc.enable()`` would walk all the
survivors at once (0.1-0.15 s after partitioning a 100k-node model, paid by
whoever allocates next). Instead they are handed to the oldest generation
(``gc.freeze()`` then ``gc.unfreeze()``: two list splices, no walk), where the
collector looks at them in its next full collection, like any long-lived data,
and where the few reference cycles made inside are freed then. When someone
else keeps frozen objects (``gc.get_freeze_count()`` not 0, e.g. a pre-fork
server) their freeze is left alone and the plain re-enable is used.
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
            if gc.get_freeze_count() == 0:
                gc.freeze()    # young + middle generations -> permanent (a splice)
                gc.unfreeze()  # permanent -> oldest (a splice): survivors age without a walk
            gc.enable()
