"""Caches limited by (estimated) bytes, charged to the client that filled them.

Each entry belongs to the client that created it (``security.client_id()``: the client cookie,
else the remote address). When a client goes over its own quota, only that client's least
recently used entries go. When the total goes over the global limit, entries go from the client
holding the most bytes — counted per remote address, so a flood of fresh cookies from one
address pays for itself: one client filling the cache evicts its own entries, never everyone
else's first. With a per-client quota of at most half the total (the defaults: 384 MiB of
1 GiB), a client within its quota is never evicted because of another address.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Callable, Generic, Hashable, TypeVar

V = TypeVar("V")

#: Rough bytes per graph node held by a partition result or a debug session (measured: a cached
#: partition of a 200k-node model is about 300 MiB).
BYTES_PER_NODE = 1500
#: Rough bytes per trace event a debug session keeps.
BYTES_PER_EVENT = 400
#: Rough bytes per node or initializer of an imported model held in memory (measured: a model of
#: 1,000,000 scalar initializers kept 1.27 GiB).
BYTES_PER_OBJECT = 1400


def model_bytes_estimate(graph: Any) -> int:
    """What holding ``graph`` in memory costs, by its objects (the file size says little)."""
    return (len(graph.nodes) + len(graph.initializers)) * BYTES_PER_OBJECT


class ClientQuota(Generic[V]):
    """key -> value with per-client and total byte limits; LRU within a client."""

    def __init__(self, total_bytes: int, client_bytes: int,
                 on_evict: Callable[[Hashable, V], None] | None = None) -> None:
        self.total_bytes = total_bytes
        self.client_bytes = client_bytes
        self.on_evict = on_evict
        self._items: OrderedDict[Hashable, tuple[str, int, V]] = OrderedDict()
        self._lock = threading.RLock()

    def get(self, key: Hashable) -> V | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            self._items.move_to_end(key)
            return item[2]

    def put(self, key: Hashable, value: V, client: str, size: int) -> None:
        evicted: list[tuple[Hashable, V]] = []
        with self._lock:
            self._items[key] = (client, max(1, int(size)), value)
            self._items.move_to_end(key)
            evicted += self._shrink(lambda: self._client_total(client) > self.client_bytes, client, keep=key)
            evicted += self._shrink(lambda: self._total() > self.total_bytes, None, keep=key)
        for k, v in evicted:
            if self.on_evict:
                self.on_evict(k, v)

    def resize(self, key: Hashable, size: int) -> None:
        """A grown entry (a debug session that pulled more events) is charged its new size; its
        client's older entries make room, as for a new entry."""
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return
            value = item[2]
        self.put(key, value, item[0], size)

    def pop(self, key: Hashable) -> V | None:
        with self._lock:
            item = self._items.pop(key, None)
        return item[2] if item else None

    def usage(self) -> dict[str, int]:
        """Bytes held per client (for tests and the docs)."""
        out: dict[str, int] = {}
        with self._lock:
            for client, size, _ in self._items.values():
                out[client] = out.get(client, 0) + size
        return out

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._items

    # ---- internals (lock held) ----
    def _total(self) -> int:
        return sum(size for _, size, _ in self._items.values())

    def _client_total(self, client: str) -> int:
        return sum(size for c, size, _ in self._items.values() if c == client)

    def _shrink(self, over: Callable[[], bool], client: str | None, keep: Hashable) -> list[tuple[Hashable, Any]]:
        evicted: list[tuple[Hashable, Any]] = []
        while over():
            if client is not None:
                victim = next((k for k, (c, _, _) in self._items.items() if c == client and k != keep), None)
            else:
                victim = self._from_biggest_group(keep)
            if victim is None:
                break   # only the new entry is left: it is kept even when alone over the limit
            evicted.append((victim, self._items.pop(victim)[2]))
        return evicted

    def _from_biggest_group(self, keep: Hashable) -> Hashable | None:
        """The oldest entry of the group (remote address) holding the most bytes, the new entry
        counted: many fresh cookies from one address add up to one group, so they cannot outvote
        another address. The new entry itself is never the victim."""
        usage: dict[str, int] = {}
        for c, size, _ in self._items.values():
            usage[group_of(c)] = usage.get(group_of(c), 0) + size
        for group in sorted(usage, key=lambda grp: -usage[grp]):
            victim = next((k for k, (c, _, _) in self._items.items() if group_of(c) == group and k != keep), None)
            if victim is not None:
                return victim
        return None


def group_of(client: str) -> str:
    """``"<address>|<cookie>"`` -> the address part (a client without "|" is its own group)."""
    return client.split("|", 1)[0]
