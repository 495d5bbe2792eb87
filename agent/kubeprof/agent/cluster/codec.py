"""Batch <-> JSON for the agent-to-ingest hop, gzip-compressed on the wire.

Frames are listed once per batch and stacks refer to them by index, so a batch of a
thousand samples of the same hot loop carries each frame name once. The same module
encodes on the agent and decodes in the operator's ingest API, so both agree by
construction.
"""

from __future__ import annotations

import gzip
import json
import zlib
from typing import Any

from kubeprof.model import (
    Batch,
    CpuSample,
    Frame,
    FrameKind,
    GpuActivity,
    GpuMetricSample,
    ProcessInfo,
    Stack,
)

VERSION = 1  # bumped on any incompatible change; the ingest refuses other versions


class CodecError(ValueError):
    """A body that is not a kubeprof batch of a known version (a client bug, not retryable)."""


class _Frames:
    """Assigns each distinct frame an index in the batch's frame table."""

    def __init__(self) -> None:
        self.index: dict[Frame, int] = {}
        self.table: list[list[Any]] = []

    def stack(self, stack: Stack) -> list[int]:
        out = []
        for f in stack:
            i = self.index.get(f)
            if i is None:
                i = self.index[f] = len(self.table)
                self.table.append([f.name, f.kind.value, f.file, f.line])
            out.append(i)
        return out


def to_dict(batch: Batch, *, batch_id: str, node: str) -> dict[str, Any]:
    """The JSON-ready form of one batch."""
    fr = _Frames()
    return {
        "v": VERSION,
        "batch_id": batch_id,
        "node": node,
        "samples": [[s.ts_ns, s.pid, s.tid, s.thread, s.cpu, fr.stack(s.stack)]
                    for s in batch.samples],
        "processes": [[p.pid, p.ppid, p.name, p.cmdline, p.container_id, p.pod_uid]
                      for p in batch.processes],
        "gpu_activities": [
            [a.kind, a.name, a.start_ns, a.end_ns, a.device, a.pid, a.correlation_id, a.stream,
             a.demangled, list(a.grid), list(a.block), a.registers, a.shared_mem, a.bytes,
             fr.stack(a.stack)]
            for a in batch.gpu_activities
        ],
        "gpu_metrics": [[m.ts_ns, m.device, m.metric, m.value, m.pid, m.correlation_id]
                        for m in batch.gpu_metrics],
        "counters": dict(batch.counters),
        "frames": fr.table,
    }


def from_dict(doc: dict[str, Any]) -> tuple[str, str, Batch]:
    """(batch_id, node, batch) from the JSON form; CodecError on anything malformed."""
    if not isinstance(doc, dict) or doc.get("v") != VERSION:
        raise CodecError(f"not a kubeprof batch of version {VERSION}")
    try:
        frames = [Frame(str(n), FrameKind(k), str(f), int(ln)) for n, k, f, ln in doc["frames"]]

        def stack(ix: list[int]) -> Stack:
            return tuple(frames[i] for i in ix)

        batch = Batch(
            samples=tuple(CpuSample(int(t), int(p), int(tid), str(th), int(c), stack(st))
                          for t, p, tid, th, c, st in doc.get("samples", ())),
            processes=tuple(ProcessInfo(int(p), int(pp), str(n), str(cl), str(cid), str(uid))
                            for p, pp, n, cl, cid, uid in doc.get("processes", ())),
            gpu_activities=tuple(
                GpuActivity(str(k), str(n), int(s), int(e), int(d), int(p), int(cor), int(sm),
                            str(dm), tuple(g), tuple(b), int(r), int(sh), int(by), stack(st))
                for k, n, s, e, d, p, cor, sm, dm, g, b, r, sh, by, st
                in doc.get("gpu_activities", ())
            ),
            gpu_metrics=tuple(GpuMetricSample(int(t), int(d), str(m), float(v), int(p), int(c))
                              for t, d, m, v, p, c in doc.get("gpu_metrics", ())),
            counters={str(k): int(v) for k, v in dict(doc.get("counters", {})).items()},
        )
        batch_id, node = str(doc["batch_id"]), str(doc.get("node", ""))
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise CodecError(f"malformed batch: {exc}") from exc
    if not batch_id or len(batch_id) > 128:
        raise CodecError("batch_id must be 1-128 characters")
    return batch_id, node, batch


def encode(batch: Batch, *, batch_id: str, node: str) -> bytes:
    """gzip(JSON) body of one batch."""
    raw = json.dumps(to_dict(batch, batch_id=batch_id, node=node), separators=(",", ":"))
    return gzip.compress(raw.encode(), compresslevel=5)


def _gunzip(body: bytes, max_bytes: int) -> bytes:
    """Decompress, refusing bodies that inflate past max_bytes (a gzip bomb)."""
    d = zlib.decompressobj(wbits=31)
    out = d.decompress(body, max_bytes)
    if d.unconsumed_tail or not d.eof:
        raise CodecError(f"compressed body is truncated or inflates past {max_bytes} bytes")
    return out


def decode(body: bytes, *, gzipped: bool = True,
           max_bytes: int = 256 << 20) -> tuple[str, str, Batch]:
    """Inverse of encode (plain JSON when gzipped is False)."""
    try:
        raw = _gunzip(body, max_bytes) if gzipped else body
        doc = json.loads(raw)
    except (zlib.error, ValueError) as exc:
        raise CodecError(f"body is not {'gzip ' if gzipped else ''}JSON: {exc}") from exc
    return from_dict(doc)


def rows(batch: Batch) -> int:
    """Rows a batch will add to the store (the unit of the ingest metrics)."""
    return (len(batch.samples) + len(batch.processes) + len(batch.gpu_activities)
            + len(batch.gpu_metrics))
