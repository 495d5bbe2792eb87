"""The merged call tree, as flat arrays in pre-order, built once in Python for the flame graph.

A flame graph of 100,000+ distinct stacks cannot be one object (or one DOM node) per frame.
Here stacks are merged into a tree whose nodes are stored as parallel arrays in depth-first
pre-order, children sorted by label: a node's subtree is then the contiguous index range
``[i, end[i])``, so the page lays out a zoomed subtree in one linear pass and skips whole
subtrees that are too narrow to draw. Frame labels are interned into a name table.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import chain

from kubeprof.model import Frame, FrameKind, Stack
from kubeprof.reportdata import WeightedStack

GROUPS = ("none", "process", "thread")


@dataclass(frozen=True, slots=True)
class CallTree:
    """Merged stacks; node 0 is the synthetic root, every array is indexed by node."""

    names: list[str]  # interned frame labels
    name_kinds: list[str]  # FrameKind value of each interned label
    node_name: list[int]  # index into names
    node_depth: list[int]  # 0 for the root
    node_value: list[int]  # inclusive value_ns
    node_samples: list[int]  # inclusive samples (CPU) or launches (GPU)
    node_end: list[int]  # one past the last node of this node's subtree

    def __len__(self) -> int:
        return len(self.node_name)

    def self_value(self, node: int) -> int:
        """Exclusive value_ns of a node: its value less its children's."""
        child_total = 0
        i = node + 1
        end = self.node_end[node]
        while i < end:
            child_total += self.node_value[i]
            i = self.node_end[i]
        return self.node_value[node] - child_total

    def children(self, node: int) -> list[int]:
        """Direct children of a node, in drawing order."""
        out = []
        i = node + 1
        while i < self.node_end[node]:
            out.append(i)
            i = self.node_end[i]
        return out


def group_frames(ws: WeightedStack, group: str) -> tuple[Frame, ...]:
    """Synthetic PROCESS frames put above a stack so processes (and threads) stay apart."""
    if group == "none":
        return ()
    proc = Frame(process_label(ws.process, ws.pid), FrameKind.PROCESS)
    if group == "process":
        return (proc,)
    return (proc, Frame(f"{ws.thread or 'thread'} [{ws.tid}]", FrameKind.PROCESS))


def process_label(name: str, pid: int) -> str:
    """ "python3 [732]", or "pid 732" for a process whose name was never seen (not "732 [732]")."""
    return f"{name} [{pid}]" if name and name != str(pid) else f"pid {pid}"


def build_tree(
    stacks: Iterable[WeightedStack], *, group: str = "process", root: str = "all"
) -> CallTree:
    """Merge weighted stacks into a CallTree; frames merge when label and kind are equal."""
    if group not in GROUPS:
        raise ValueError(f"unknown group {group!r}: expected one of {', '.join(GROUPS)}")
    names: list[str] = [root]
    name_kinds: list[str] = [FrameKind.PROCESS.value]
    name_ids: dict[tuple[str, str], int] = {(root, FrameKind.PROCESS.value): 0}
    frame_ids: dict[Frame, int] = {}
    node_name: list[int] = [0]
    value: list[int] = [0]
    samples: list[int] = [0]
    kids: list[dict[int, int] | None] = [None]  # per node: name id -> child node
    prefixes: dict[tuple[int, int, str, str], list[int]] = {}  # group frames, per thread

    def intern(frame: Frame) -> int:
        key = (frame.label(), frame.kind.value)
        nid = name_ids.get(key)
        if nid is None:
            nid = name_ids[key] = len(names)
            names.append(key[0])
            name_kinds.append(key[1])
        frame_ids[frame] = nid
        return nid

    # A stack's name ids by the tuple's identity (threads share stack tuples; hashing one
    # hashes every frame); the tuple is kept with them, so its id stays its own.
    stack_nids: dict[int, tuple[Stack, list[int]]] = {}
    for ws in stacks:
        v, s = ws.value_ns, ws.samples
        pkey = (ws.pid, ws.tid, ws.process, ws.thread)
        prefix = prefixes.get(pkey)
        if prefix is None:
            prefix = prefixes[pkey] = [intern(f) for f in group_frames(ws, group)]
        known = stack_nids.get(id(ws.stack))
        if known is None:
            nids = [frame_ids.get(f) or intern(f) for f in ws.stack]
            stack_nids[id(ws.stack)] = (ws.stack, nids)
        else:
            nids = known[1]
        value[0] += v
        samples[0] += s
        node = 0
        for nid in chain(prefix, nids):
            children = kids[node]
            if children is None:
                children = kids[node] = {}
            child = children.get(nid)
            if child is None:
                child = children[nid] = len(node_name)
                node_name.append(nid)
                value.append(0)
                samples.append(0)
                kids.append(None)
            value[child] += v
            samples[child] += s
            node = child
    return _preorder(names, name_kinds, kids, node_name, value, samples)


def _preorder(
    names: list[str],
    name_kinds: list[str],
    kids: list[dict[int, int] | None],
    node_name: list[int],
    value: list[int],
    samples: list[int],
) -> CallTree:
    """Renumber nodes depth-first, children sorted by label, and record subtree ends."""
    n = len(node_name)
    out_name: list[int] = []
    out_depth: list[int] = []
    out_value: list[int] = []
    out_samples: list[int] = []
    out_end = [0] * n
    open_nodes: list[int] = []  # new indices of ancestors still open, by depth
    todo: list[tuple[int, int]] = [(0, 0)]  # (old node, depth)
    while todo:
        old, depth = todo.pop()
        while len(open_nodes) > depth:
            out_end[open_nodes.pop()] = len(out_name)
        open_nodes.append(len(out_name))
        out_name.append(node_name[old])
        out_depth.append(depth)
        out_value.append(value[old])
        out_samples.append(samples[old])
        children = kids[old]
        if children:
            # reverse label order on the stack, so children come out in label order
            order = sorted(children, key=names.__getitem__, reverse=True)
            todo.extend((children[nid], depth + 1) for nid in order)
    for idx in open_nodes:
        out_end[idx] = n
    return CallTree(names, name_kinds, out_name, out_depth, out_value, out_samples, out_end)
