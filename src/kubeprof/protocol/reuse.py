"""Frames and stacks decoded before, handed out again: a node's batches repeat its hot
stacks, and the store keys its cache of stack hashes on the stack object.

Storing a batch hashes each distinct stack (`kubeprof.model.stack_hash`: a Python call
per frame, and as many equality calls on a cache hit): for a decoded 1,000-sample batch of
24-frame stacks that was a tenth of the ingest. A stack decoded again here is the same
tuple object as before, so the store finds its hash by identity
(`storage.intern.Interner.hash_of`), and it is built without a Frame per frame.

Bounded: a client sending new frames and stacks only makes the tables start over (the
text of the frames kept and the stack slots are budgeted, not just counted). Frames are
frozen and stacks are tuples, so sharing them across batches, threads and sessions is
safe; a table starting over while another thread decodes only loses entries.
"""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Sequence
from typing import Any

from kubeprof.model import Frame, Stack

# ~16 MB at most together: a session's few thousand distinct stacks fit many times over.
MAX_TEXT = 2 << 20  # characters of frame names and files kept, 64 more per frame
MAX_SLOTS = 1 << 19  # frames referenced by the stacks kept (a 24-frame stack takes 24)


class Reuse:
    """Frame rows -> Frame objects and frame-serial strings -> stacks, both bounded."""

    def __init__(self, max_text: int = MAX_TEXT, max_slots: int = MAX_SLOTS) -> None:
        self.max_text, self.max_slots = max_text, max_slots
        self._frames: dict[tuple[Any, ...], tuple[Frame, int]] = {}
        self._stacks: dict[bytes, Stack] = {}
        self._text = self._slots = 0
        # Serials never repeat (a stack's key names its frames by serial), even after the
        # frame table starts over.
        self._serial = itertools.count()

    def kept(self) -> tuple[int, int]:
        """How many frames and stacks are kept now."""
        return len(self._frames), len(self._stacks)

    def frames(self, rows: Sequence[tuple[Any, ...]]) -> tuple[list[Frame], list[int]]:
        """The Frame of each wire row (name, kind, file, line) and its serial."""
        frames, serials = [], []
        for row in rows:
            hit = self._frames.get(row)
            if hit is None:
                if self._text > self.max_text:
                    self._frames.clear()
                    self._text = 0
                hit = self._frames[row] = (Frame(*row), next(self._serial))
                self._text += 64 + len(row[0]) + len(row[2])
            frames.append(hit[0])
            serials.append(hit[1])
        return frames, serials

    def stack(self, ix: Sequence[int], frames: list[Frame], serials: list[int]) -> Stack:
        """The stack of the frames at indexes `ix` (an IndexError for one not listed)."""
        key = array("Q", [serials[i] for i in ix]).tobytes()
        s = self._stacks.get(key)
        if s is None:
            s = tuple(frames[i] for i in ix)
            if self._slots > self.max_slots:
                self._stacks.clear()
                self._slots = 0
            self._stacks[key] = s
            self._slots += 1 + len(s)
        return s
