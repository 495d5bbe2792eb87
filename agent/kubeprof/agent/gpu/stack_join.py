"""The stack join: which Python stack a GPU record's launch had, by correlation id.

The tracer sends, per connection, interned strings and stacks and a launch row (correlation
id, stack id, API) at each CUDA call that starts GPU work. A record's stack is its launch's;
a PyTorch backward kernel (launched from the autograd engine's thread, no Python stack) gets
its forward op's, found by autograd sequence number (autograd.py); an XLA kernel its HLO op's
Python line (xla_hlo); a sync record with no launch of its own the waiting call it is nested
in. ``ConnState`` is what one connection has told us so far.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubeprof.agent.gpu.xla_hlo import XlaIndex, XlaOp, is_library_kernel, xla_stack
from kubeprof.model import Frame, FrameKind, Stack

MAX_LAUNCHES = 1_000_000  # remembered launches per process; oldest forgotten first
# A backward node N is charged to the forward launch read with peek N + 1: the op that made
# N launched it. A node whose op launched nothing (a view: ``unbind``'s backward is a ``cat``)
# has no such launch; the next one belongs to another op, so it is not guessed: the kernel
# keeps no Python stack, under NO_FORWARD (on the H200's train_torch: 1.8 % of backward time)
MAX_SEQ_GAP = 1
BACKWARD_PREFIX = "backward of "
NO_FORWARD = "[backward of an autograd node whose forward launch was not recorded]"
# API names that wait for the GPU; a sync record may carry the id of a call nested in one
_WAITING_APIS = ("Synchronize", "ElapsedTime")
_NESTED_IDS = 8  # how far back (in correlation ids) the enclosing call is looked for


@dataclass
class ConnState:
    """What one traced process has told us so far (one tracer connection)."""

    pid: int = 0
    peer_pid: int = 0  # the connecting process in our pid namespace (SO_PEERCRED); 0: replay
    tracer_pid: int = 0  # the same process in its own pid namespace (its hello's)
    host_tids: dict[int, int] = field(default_factory=dict)  # its thread ids -> the host's
    strings: list[str] = field(default_factory=list)
    raw_stacks: dict[int, list[list[int]]] = field(default_factory=dict)
    stacks: dict[int, Stack] = field(default_factory=dict)
    # correlation id -> (stack id, api, entry time or 0, kernel thread id or 0)
    launches: dict[int, tuple[int, int, int, int]] = field(default_factory=dict)
    ctx_device: dict[int, int] = field(default_factory=dict)
    open_markers: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    # autograd (see autograd.py): per forward thread, the peeks sent (increasing) and the
    # launches they were read at; per backward launch, its node's sequence number
    fwd_peeks: dict[int, list[int]] = field(default_factory=dict)
    fwd_corrs: dict[int, list[int]] = field(default_factory=dict)
    bwd_seq: dict[int, int] = field(default_factory=dict)
    bwd_stacks: dict[tuple[int, int], Stack] = field(default_factory=dict)
    # stream -> where its last XLA kernel stands in its module's schedule (xla_hlo)
    xla_last: dict[int, tuple[str, int]] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)  # target's cumulative counters
    said_bye: bool = False
    closed: bool = False


def string(conn: ConnState, sid: int) -> str:
    """String ``sid`` of ``conn`` (a placeholder naming the id when it was never defined)."""
    return conn.strings[sid] if 0 <= sid < len(conn.strings) else f"[string {sid}]"


class StackJoin:
    """Stacks for records, from the launches and autograd rows of their connection."""

    def __init__(self, count: Callable[[str, int], None], xla: XlaIndex | None) -> None:
        """``count(key, n)``: the join's counters; ``xla``: the HLO modules, if any."""
        self.count = count
        self.xla = xla
        self._xla_stacks: dict[tuple[XlaOp, Frame | None], Stack] = {}

    def launches(self, conn: ConnState, rows: Any) -> None:
        """Remember a frame's launch rows (the oldest forgotten past MAX_LAUNCHES)."""
        for rec in rows:
            conn.launches[rec[0]] = (rec[1], rec[2], rec[4], rec[5])
        if len(conn.launches) > MAX_LAUNCHES:
            for key in list(conn.launches)[: len(conn.launches) - MAX_LAUNCHES]:
                del conn.launches[key]

    def autograd(self, conn: ConnState, rows: Any) -> None:
        """Index a frame's autograd rows: forward peeks per thread, backward launches' seqs."""
        for corr, seq, tid, backward in rows:
            if backward:
                conn.bwd_seq[corr] = seq
                continue
            peeks = conn.fwd_peeks.setdefault(tid, [])
            if peeks and seq <= peeks[-1]:
                continue  # a thread's counter only grows; keep the index sorted
            peeks.append(seq)
            conn.fwd_corrs.setdefault(tid, []).append(corr)
        if len(conn.bwd_seq) > MAX_LAUNCHES:
            for key in list(conn.bwd_seq)[: len(conn.bwd_seq) - MAX_LAUNCHES]:
                del conn.bwd_seq[key]
        for tid, peeks in conn.fwd_peeks.items():
            if len(peeks) > MAX_LAUNCHES:
                del peeks[: len(peeks) - MAX_LAUNCHES]
                del conn.fwd_corrs[tid][: len(conn.fwd_corrs[tid]) - MAX_LAUNCHES]

    def _forward_launch(self, conn: ConnState, seq: int) -> int:
        """Correlation id of the forward launch of the op that made autograd node ``seq``.

        Sequence numbers count per thread: of the forward threads with a launch in range,
        the latest one (a backward pass follows its own forward pass) wins; 0 if none.
        """
        best = 0
        for tid, peeks in conn.fwd_peeks.items():
            i = bisect.bisect_right(peeks, seq)
            if i < len(peeks) and peeks[i] - seq <= MAX_SEQ_GAP:
                best = max(best, conn.fwd_corrs[tid][i])
        return best

    def _backward_stack(self, conn: ConnState, seq: int, api: int) -> Stack:
        """``forward op's Python frames | backward of <its leaf> (file:line) | API``."""
        fwd = conn.launches.get(self._forward_launch(conn, seq))
        if fwd is None:
            self.count("gpu_backward_unmatched", 1)
            return (
                Frame(NO_FORWARD, FrameKind.NATIVE),
                Frame(string(conn, api), FrameKind.CUDA_API),
            )
        key = (fwd[0], api)
        stack = conn.bwd_stacks.get(key)
        if stack is None:
            python = [f for f in self.stack(conn, 0, fwd) if f.kind is FrameKind.PYTHON]
            if python:
                leaf = python[-1]
                label = f"{BACKWARD_PREFIX}{leaf.name} ({os.path.basename(leaf.file)}:{leaf.line})"
            else:
                label = f"{BACKWARD_PREFIX}an op launched without a Python stack"
            stack = conn.bwd_stacks[key] = (
                *python,
                Frame(label, FrameKind.NATIVE),
                Frame(string(conn, api), FrameKind.CUDA_API),
            )
        return stack

    def stack(
        self, conn: ConnState, corr: int, launch: tuple[int, int, int, int] | None = None
    ) -> Stack:
        """The stack of the launch with correlation id ``corr`` (or of ``launch``); ()."""
        if launch is None:
            launch = conn.launches.get(corr)
        if launch is None:
            return ()
        sid, api = launch[0], launch[1]
        if not sid:
            seq = conn.bwd_seq.get(corr)
            if seq is not None:
                return self._backward_stack(conn, seq, api)
        key = sid * 1_000_003 + api
        stack = conn.stacks.get(key)
        if stack is None:
            frames = []
            for name, file, line, kind in reversed(conn.raw_stacks.get(sid, [])):
                if kind == 0:
                    frames.append(
                        Frame(
                            string(conn, name),
                            FrameKind.PYTHON,
                            string(conn, file),
                            line,
                        )
                    )
                else:
                    frames.append(Frame(string(conn, name), FrameKind.NATIVE))
            frames.append(Frame(string(conn, api), FrameKind.CUDA_API))
            stack = conn.stacks[key] = tuple(frames)
        return stack

    def xla_stack(self, conn: ConnState, stream: int, kernel: str, stack: Stack) -> Stack:
        """An XLA kernel's stack from its HLO op: the step of the stream's module schedule
        it is by name, or (a library kernel) the custom call after the stream's last step."""
        assert self.xla is not None
        last = conn.xla_last.get(stream)
        pos = self.xla.place(kernel, last)
        if pos is None and last is not None and is_library_kernel(kernel):
            pos = self.xla.after(last)
            if pos is not None:
                self.count("gpu_xla_library_kernels", 1)
        if pos is None:
            return stack
        conn.xla_last[stream] = pos
        op = self.xla.op(pos)
        if op is None or not op.stack:
            return stack
        api = stack[-1] if stack and stack[-1].kind is FrameKind.CUDA_API else None
        key = (op, api)
        out = self._xla_stacks.get(key)
        if out is None:
            out = self._xla_stacks[key] = xla_stack(op, api)
        self.count("gpu_xla_attributed_kernels", 1)
        return out

    def enclosing_wait(self, conn: ConnState, corr: int) -> Stack:
        """The stack of the waiting API call a sync record's id is nested in.

        On the H200, ``cudaEventElapsedTime`` produced event-sync records carrying ids of
        driver calls made inside it, which have no callback of their own. Ids are handed
        out in call order, so the enclosing call is the nearest launch record before the
        id; it is used only when it is itself a waiting API (else: no stack, no guess).
        """
        for c in range(corr - 1, max(corr - _NESTED_IDS, 0) - 1, -1):
            launch = conn.launches.get(c)
            if launch is not None:
                if any(w in string(conn, launch[1]) for w in _WAITING_APIS):
                    self.count("gpu_syncs_joined_to_enclosing_call", 1)
                    return self.stack(conn, c)
                return ()
        return ()
