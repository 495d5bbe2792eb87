"""Python stacks at CUDA launches, captured once per call site and reused.

Walking and interning the whole stack at every launch costs several µs on deep stacks (a
training step is 30-60 frames deep), more than CUPTI's own cost per kernel. A launch site
is instead keyed by the code objects and bytecode offsets of its innermost ``key_depth``
frames (cheap attribute reads, no line-number computation): the first launch from a site
walks the whole stack and interns it, later launches reuse its id.

Frames above ``key_depth`` may differ between launches with the same key (the same layer
reached from two callers). Every ``revalidate_every``-th hit therefore walks the whole stack
again; a key seen with two different stacks is marked ambiguous and always walked in full
from then on, so the attribution error is bounded by the launches between two checks of a
key that turned out ambiguous. ``mode="full"`` walks every launch (exact, slower);
``mode="off"`` records no stacks.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import CodeType, FrameType

PYTHON = 0  # frame kinds in stack definitions (see wire.py)
NATIVE = 1

_AMBIGUOUS = -1


class StackTable:
    """Interns stacks for the wire; ``capture(frame)`` returns a stack id (0 = none)."""

    def __init__(
        self,
        intern: Callable[[str], int],
        define: Callable[[list[list[int]]], int],
        *,
        mode: str = "callsite",
        key_depth: int = 8,
        revalidate_every: int = 64,
        max_depth: int = 256,
    ) -> None:
        if mode not in ("callsite", "full", "off"):
            raise ValueError(f"unknown stack mode {mode!r} (callsite, full or off)")
        self.mode = mode
        self.key_depth = key_depth
        self.revalidate_every = revalidate_every
        self.max_depth = max_depth
        self._intern = intern
        self._define = define
        # call-site key -> [stack id or _AMBIGUOUS, hits, code objects kept alive]
        self._sites: dict[tuple[int, ...], list] = {}
        self._stacks: dict[tuple, int] = {}  # full stack -> id
        self._keepalive: list[tuple[CodeType, ...]] = []
        self.stats = {"walks": 0, "hits": 0, "ambiguous_sites": 0, "revalidations": 0}

    def capture(self, frame: FrameType | None, *, marker: str = "") -> int:
        """Stack id for the stack ending at ``frame`` (leaf); ``marker`` adds a native leaf."""
        if frame is None or self.mode == "off":
            return 0
        if self.mode == "full" or marker:
            return self._walk(frame, marker)
        key = []
        f: FrameType | None = frame
        depth = self.key_depth
        while f is not None and depth:
            key.append(id(f.f_code))
            key.append(f.f_lasti)
            f = f.f_back
            depth -= 1
        tkey = tuple(key)
        site = self._sites.get(tkey)
        if site is None:
            sid = self._walk(frame, "")
            codes = []
            f = frame
            for _ in range(self.key_depth):
                if f is None:
                    break
                codes.append(f.f_code)  # keeps ids in the key from being reused
                f = f.f_back
            self._sites[tkey] = [sid, 0, codes]
            return sid
        sid = site[0]
        if sid == _AMBIGUOUS:
            return self._walk(frame, "")
        site[1] += 1
        if site[1] % self.revalidate_every == 0:
            self.stats["revalidations"] += 1
            fresh = self._walk(frame, "")
            if fresh != sid:
                site[0] = _AMBIGUOUS
                self.stats["ambiguous_sites"] += 1
            return fresh
        self.stats["hits"] += 1
        return sid

    def walk(self, frame: FrameType) -> int:
        """Stack id of the whole stack ending at ``frame``: the C launch hook's call-site
        table calls this on a new site, a revalidation or an ambiguous site."""
        if self.mode == "off":
            return 0
        return self._walk(frame, "")

    def _walk(self, frame: FrameType, marker: str) -> int:
        """Intern the whole stack (leaf first) and return its id."""
        self.stats["walks"] += 1
        entries: list[tuple[CodeType, int]] = []
        f: FrameType | None = frame
        n = self.max_depth
        while f is not None and n:
            entries.append((f.f_code, f.f_lineno or 0))
            f = f.f_back
            n -= 1
        key = (marker, *((id(c), line) for c, line in entries))
        sid = self._stacks.get(key)
        if sid is None:
            intern = self._intern
            frames = [
                [intern(_qualname(c)), intern(c.co_filename), line, PYTHON] for c, line in entries
            ]
            if marker:
                frames.insert(0, [intern(marker), 0, 0, NATIVE])
            sid = self._define(frames)
            self._stacks[key] = sid
            # keep the code objects alive so their ids in `key` stay unique
            self._keepalive.append(tuple(c for c, _ in entries))
        return sid


def _qualname(code: CodeType) -> str:
    return getattr(code, "co_qualname", code.co_name)


def main_thread_frame() -> FrameType | None:
    """The main thread's current frame, for launches made by threads with no Python frames.

    XLA and other runtimes launch from their own native threads; the Python code that asked
    for the work is usually the main thread's (dispatch is asynchronous, so this is an
    approximation and is labelled as such by the caller's marker).
    """
    import threading

    ident = threading.main_thread().ident
    if ident is None:
        return None
    return sys._current_frames().get(ident)
