"""The cyclic garbage collector paused while a report loads and analyses a session.

A big session becomes millions of objects at once (GPU records, interval tuples, stacks),
and the allocations alone trigger collector passes that walk all of them again and again:
a third of loading and analysing 1 M kernels (38 s -> 21 s for the records, 34 s -> 27 s
for the analysis, at a load average of 10). None of them form reference cycles, so
reference counting frees them as before; memory is unchanged.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic collection inside the block; the collector as it was after it."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
