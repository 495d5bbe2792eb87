"""CUPTI activity buffers: which record kinds CUPTI collects, and its records -> wire rows.

CUPTI delivers kernel, memcpy, memset, synchronization and NVTX records in buffers,
asynchronously, on its own thread. With the C launch hook, the hook owns the buffers and
packs records into int64 rows itself; otherwise ``convert`` does it here, in Python.
Timestamps stay in CUPTI's clock: the receiver adds each frame's clock offset.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from operator import attrgetter
from typing import Any

from kubeprof.agent.gpu.cupti_errors import Status, TracerError, cupti_error, one_line
from kubeprof.agent.gpu.wire import SCHEMAS, Sender, warn

ACTIVITY_KINDS = ("kernel", "memcpy", "memset", "sync", "nvtx")
BUFFER_BYTES = 8 << 20  # each buffer CUPTI asks for


def enable(
    cupti: Any,
    hook: Any,
    kinds: tuple[str, ...],
    completed: Callable[[list[Any]], None],
    *,
    register: bool,
    enabled: list[Any],
) -> None:
    """Enable the CUPTI activity kinds of ``kinds``, appending each to ``enabled`` (so a
    teardown after a failure disables those). ``register``: hand CUPTI its buffers first
    (to the C ``hook`` when there is one, else ``completed``). Raises TracerError when
    kernels cannot be collected; other kinds are warned about."""
    ak = cupti.ActivityKind
    wanted = {
        "kernel": [ak.CONCURRENT_KERNEL],  # KERNEL would serialise kernels
        "memcpy": [ak.MEMCPY],
        "memset": [ak.MEMSET],
        "sync": [ak.SYNCHRONIZATION],
        "nvtx": [ak.MARKER],
    }
    if register:
        if hook is not None:  # records -> packed rows in C, no Python objects
            try:
                rc = hook.activity()
            except (OSError, RuntimeError) as exc:
                raise TracerError(f"C activity buffers: {one_line(exc)}") from None
            if rc:
                raise TracerError(
                    f"CUPTI activity callbacks refused: {cupti_error(cupti, Status(rc))}"
                )
        else:
            cupti.activity_register_callbacks(_buffer_requested, completed)
    for kind in kinds:
        for k in wanted[kind]:
            try:
                cupti.activity_enable(k)
                enabled.append(k)
            except cupti.cuptiError as exc:
                if kind == "kernel":
                    raise TracerError(
                        f"CUPTI kernel activity unavailable: {cupti_error(cupti, exc)}"
                    ) from None
                warn(f"CUPTI {kind} activity unavailable: {cupti_error(cupti, exc)}")


def disable(cupti: Any, enabled: list[Any]) -> None:
    """Disable the kinds ``enable`` returned, ignoring errors (teardown)."""
    for k in enabled:
        with contextlib.suppress(Exception):
            cupti.activity_disable(k)


def _buffer_requested() -> tuple[int, int]:
    return BUFFER_BYTES, 0


def completed(cupti: Any, sender: Sender, activities: list[Any]) -> None:
    """A buffer CUPTI handed over: convert it; a bad record must not kill CUPTI's thread."""
    try:
        convert(cupti, sender, activities)
    except Exception as exc:  # noqa: BLE001 - a bad record must not kill CUPTI's thread
        sender.counters["convert_errors"] = sender.counters.get("convert_errors", 0) + 1
        warn(f"record conversion failed: {exc!r}")


def convert(cupti: Any, sender: Sender, activities: list[Any]) -> None:
    """CUPTI records -> wire tuples; runs on CUPTI's thread, holding the GIL, so it is lean.

    Fields are read with one ``attrgetter`` call per record (C, not bytecode) and
    timestamps stay in CUPTI's clock: the receiver adds the frame's clock offset.
    """
    ak = cupti.ActivityKind
    kern = (int(ak.CONCURRENT_KERNEL), int(ak.KERNEL))
    memcpy, memset = int(ak.MEMCPY), int(ak.MEMSET)
    sync, marker = int(ak.SYNCHRONIZATION), int(ak.MARKER)
    intern = sender.intern
    kernels: list[tuple[int, ...]] = []
    copies: list[tuple[int, ...]] = []
    sets: list[tuple[int, ...]] = []
    syncs: list[tuple[int, ...]] = []
    markers: list[tuple[int, ...]] = []
    get_k, get_c, get_m, get_s = _KERNEL_FIELDS, _MEMCPY_FIELDS, _MEMSET_FIELDS, _SYNC_FIELDS
    for a in activities:
        k = a.kind
        if k in kern:
            kernels.append((*get_k(a), intern(a.name)))
        elif k == memcpy:
            copies.append(get_c(a))
        elif k == memset:
            sets.append(get_m(a))
        elif k == sync:
            syncs.append(get_s(a))
        elif k == marker:
            tid = 0
            with contextlib.suppress(Exception):
                tid = a.object_id.pt.thread_id
            markers.append((a.timestamp, a.id, a.flags_, intern(a.name) if a.name else 0, tid))
    put = sender.put_many
    for kind, rows in (
        ("kernel", kernels),
        ("memcpy", copies),
        ("memset", sets),
        ("sync", syncs),
        ("marker", markers),
    ):
        if rows:
            put(kind, rows)


# wire.SCHEMAS field -> the cupti-python attribute holding it (the others are named alike)
_CUPTI_ATTRS = {
    "device": "device_id",
    "stream": "stream_id",
    "context": "context_id",
    "registers": "registers_per_thread",
    "static_smem": "static_shared_memory",
    "dynamic_smem": "dynamic_shared_memory",
}


def _fields(kind: str) -> attrgetter[tuple[int, ...]]:
    """One C-level call that reads a record's fields in wire order (a kernel's name aside:
    it is interned)."""
    return attrgetter(*(_CUPTI_ATTRS.get(f, f) for f in SCHEMAS[kind] if f != "name"))


_KERNEL_FIELDS = _fields("kernel")
_MEMCPY_FIELDS = _fields("memcpy")
_MEMSET_FIELDS = _fields("memset")
_SYNC_FIELDS = _fields("sync")
