"""The engine's lock: one that yields the GIL once before it blocks.

Measured (``bench/engine.py``, 10k pushed no-op functions, 2 CPUs): with a
plain ``threading.Lock`` the threaded engine ran at 3.5-4.2 us per function in
some runs and 6-10 us in others, and a longer ``sys.setswitchinterval`` made
every run fast (50 ms: 3.6-5.0 us) while a shorter one made every run slow
(0.5 ms: 8.6-10.1 us). py-spy showed the pushing thread in the slow runs waiting
on the engine lock in a third of its samples and the worker in its completion.
That is a lock convoy under the GIL: the interpreter's forced switch lands while
one thread holds the lock; the other blocks on the lock's futex; from then on
each release by the first thread (which holds the GIL and re-takes the lock at
once) wakes the sleeper for nothing, a system call and a context switch per
function, until the GIL changes hands again (2,100-3,100 voluntary context
switches per run in the slow runs, ~1,100 in a fast one).

So a contended ``acquire`` first gives the GIL away once (``time.sleep(0)``): the
holder, typically stalled waiting for the GIL inside its short critical section,
finishes it and releases the lock; then the lock is tried again, and only then
does the caller block. Measured: 4.1-5.7 us per function in ten runs out of ten.
An uncontended acquire costs one Python call more than a plain lock's; the
engine's two hottest sections (a push, a worker's release-and-pop) avoid even
that: ``lock.try_acquire(False) or lock.acquire()`` then ``lock.release()`` are
C calls unless the lock is contended.

``threading.Condition`` works over it (it uses ``_is_owned``, ``_release_save``
and ``_acquire_restore`` when the lock has them).
"""

from __future__ import annotations

import threading
import time
from typing import Any

#: Times a contended acquire gives the GIL away before it blocks (1 to 50 measured
#: alike: the holder's critical sections are microseconds).
_YIELDS = 1


class YieldingLock:
    """A non-reentrant lock: ``threading.Lock`` that yields the GIL once when contended."""

    __slots__ = ("_lock", "try_acquire", "release", "locked")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.try_acquire = self._lock.acquire  # the plain lock's: no yield
        self.release = self._lock.release
        self.locked = self._lock.locked

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        lock = self._lock
        if lock.acquire(False):
            return True
        if not blocking:
            return False
        for _ in range(_YIELDS):
            time.sleep(0)  # the GIL to the holder: it finishes and releases
            if lock.acquire(False):
                return True
        return lock.acquire(True, timeout)

    def __enter__(self) -> bool:
        return self._lock.acquire(False) or self.acquire()  # the common case: one call

    def __exit__(self, *exc: Any) -> None:
        self._lock.release()

    # threading.Condition's hooks (as it does for a plain lock)
    def _is_owned(self) -> bool:
        return self._lock.locked()

    def _release_save(self) -> None:
        self._lock.release()

    def _acquire_restore(self, _state: Any) -> None:
        self.acquire()
