"""Which pods exist on a node, per the Kubernetes API: what a batch's processes may name.

GPU-sharing attribution needs the processes of pods that are not the session's targets (a
neighbour on the same GPU), so those records are kept; but a batch may only name pods that
the API says run on the node it speaks for, else an agent could pin its samples on any pod
of the cluster. A UID not known yet lists the node's pods again, at most once per
`min_refresh_s` (a flood of unknown UIDs costs one list call per node per interval; the
others are told to retry, never refused on a stale listing), and a pod seen once on a node
is remembered (`remember_s`), so a late batch of a pod that has just ended still lands.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any


class NodePods:
    """Pod UIDs per node from `list_pods(node)` (pod objects), cached (thread-safe)."""

    def __init__(
        self,
        list_pods: Callable[[str], Iterable[Mapping[str, Any]]],
        *,
        min_refresh_s: float = 5.0,
        remember_s: float = 3600.0,
        max_nodes: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._list, self.min_refresh_s, self.remember_s = list_pods, min_refresh_s, remember_s
        self.max_nodes, self.clock = max_nodes, clock
        self._lock = threading.Lock()
        self._seen: dict[str, dict[str, float]] = {}  # node -> pod uid -> last seen there
        self._listed: dict[str, float] = {}  # node -> when last listed
        self.lists = 0  # list calls made (what the cache saves is visible in tests)

    def on_node(self, uid: str, node: str) -> bool | None:
        """Whether pod `uid` runs (or lately ran) on `node`, by a listing made now when it
        is not known; None when the node was listed too lately to list it again (ask
        later). API errors propagate."""
        now = self.clock()
        with self._lock:
            seen = self._seen.get(node, {})
            if now - seen.get(uid, -1e18) <= self.remember_s:
                return True
            if now - self._listed.get(node, -1e18) < self.min_refresh_s:
                return None
            self._listed[node] = now
        pods = list(self._list(node))
        self.lists += 1
        with self._lock:
            seen = {u: t for u, t in self._seen.get(node, {}).items() if now - t <= self.remember_s}
            for p in pods:
                meta = p.get("metadata") or {}
                if (p.get("spec") or {}).get("nodeName") == node and meta.get("uid"):
                    seen[str(meta["uid"])] = now
            self._seen[node] = seen
            while len(self._seen) > self.max_nodes:
                oldest = next(iter(self._seen))
                del self._seen[oldest]
                self._listed.pop(oldest, None)
            return uid in seen
