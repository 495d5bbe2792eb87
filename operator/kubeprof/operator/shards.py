"""Which agent DaemonSet (shard) of a session pins which nodes: pure, no API calls.

A DaemonSet pins its nodes by name, one affinity term per node (~100 bytes each), so one
DaemonSet for every node of a large session would grow with the cluster (96 kB at 1,000
nodes; etcd refuses objects over 1.5 MB). A session instead gets as many DaemonSets as it
needs of at most `size` nodes each, so no one object grows with the cluster.

Assignment is sticky: a node stays in the shard that pins it while it hosts targets, so
adding or removing nodes never moves a running agent from one DaemonSet to another (that
would delete its pod and start a new one). New nodes fill the lowest-numbered shards that
have room, then new shards; a shard left without nodes is dropped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence


def assign(
    current: Mapping[int, Sequence[str]], nodes: Iterable[str], size: int
) -> dict[int, list[str]]:
    """Shard index -> its sorted nodes, for exactly `nodes`, each shard at most `size`.

    `current` is what the existing DaemonSets pin (index -> nodes). A shard over `size`
    (the limit was lowered) keeps its first `size` nodes; the rest are placed anew.
    """
    if size < 1:
        raise ValueError(f"shard size must be at least 1 node, got {size}")
    want = set(nodes)
    out: dict[int, list[str]] = {}
    placed: set[str] = set()
    for idx in sorted(current):
        keep = [n for n in sorted(set(current[idx])) if n in want and n not in placed][:size]
        if keep:
            out[idx] = keep
            placed.update(keep)
    todo = sorted(want - placed)
    idx = 0
    while todo:
        room = size - len(out.get(idx, []))
        if room > 0:
            out[idx] = sorted([*out.get(idx, []), *todo[:room]])
            todo = todo[room:]
        idx += 1
    return out
