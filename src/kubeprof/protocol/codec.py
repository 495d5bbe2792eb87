"""Batch <-> JSON for the agent-to-ingest hop, gzip-compressed on the wire.

Each record travels as a JSON array of its dataclass fields in declaration order, so
`kubeprof.model` is the one place that spells them out; the wire types the decoder checks
are derived from the same fields. A stack travels as indexes into the batch's frame
table, so a batch of a thousand samples of the same hot loop carries each frame once.
The same module encodes on the agent and decodes in the operator's ingest API, so both
agree by construction.

Decoding is a schema check as well (msgspec, in C): every value must fit the column it is
stored in (a pid is 0..PID_MAX, a float finite, a name no longer than the limit and free of
NUL), and the body may not inflate past `IngestLimits` before it is even parsed. A refusal
is a `CodecError` naming the field, e.g. `samples[3].pid: Expected int <= 4194304`.

msgspec does the JSON and the type checks in C: it encodes 2.3x and decodes 2.1x faster
than the standard library's json with per-field conversion in Python (BENCHMARKS.md).
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import re
import zlib
from collections.abc import Callable, Sequence
from operator import attrgetter
from types import GenericAlias
from typing import Annotated, Any

import msgspec

from kubeprof.model import (
    Batch,
    CpuSample,
    Frame,
    FrameKind,
    GpuActivity,
    GpuMetricSample,
    GpuTracerState,
    OffCpuSample,
    ProcessInfo,
    Stack,
)
from kubeprof.protocol import limits as lim
from kubeprof.protocol.limits import IngestLimits
from kubeprof.protocol.reuse import Reuse

VERSION = 2  # bumped on any incompatible change; the ingest refuses versions not in READS
# Model fields added after version 1 (each at the end of its record), with the version that
# added it: an older agent's rows lack them and decode with their defaults.
ADDED = {"launch_ns": 2, "launch_tid": 2}
READS = (1, 2)  # versions the ingest decodes (an agent of the previous release still ships)
MAX_BATCH_ID = lim.BATCH_ID_MAX  # characters; batch ids are stored in an indexed column
REUSE = Reuse()  # frames and stacks decoded before, shared by every decode


class CodecError(ValueError):
    """A body that is not a valid kubeprof batch (a client bug, not retryable).

    `status` is the HTTP answer it deserves: 413 for its size alone, 422 for a value that
    breaks the schema (the message names the field), 400 for a body that is not JSON."""

    def __init__(self, message: str, *, too_large: bool = False) -> None:
        super().__init__(message)
        self.too_large = too_large

    @property
    def status(self) -> int:
        return 413 if self.too_large else 422 if str(self).startswith("invalid") else 400


def _int(hi: int) -> Any:
    return Annotated[int, msgspec.Meta(ge=0, le=hi)]


_I32T: Any = _int(lim.INT32_MAX)


def _text(max_chars: int, no_nul: bool) -> Any:
    # Only bodies that spell a NUL (\u0000) pay for the pattern: PostgreSQL text cannot hold it.
    if no_nul:
        return Annotated[str, msgspec.Meta(max_length=max_chars, pattern="^[^\x00]*$")]
    return Annotated[str, msgspec.Meta(max_length=max_chars)]


_STACK = "Stack"
_I64 = (
    "ts_ns",
    "start_ns",
    "end_ns",
    "correlation_id",
    "stream",
    "shared_mem",
    "bytes",
    "blocked_ns",
    "weight_ns",
    "launch_ns",
)
_PIDS = ("pid", "tid", "ppid", "launch_tid")
_I32 = ("cpu", "device", "line", "registers")
_SHORT_TEXT = {
    "kind": lim.KIND_MAX,
    "metric": lim.METRIC_MAX,
    "pod_uid": lim.POD_UID_MAX,
    "container_id": lim.CONTAINER_ID_MAX,
    "state": lim.KIND_MAX,
    "socket": lim.SOCKET_NAME_MAX,
    "reason": lim.REASON_MAX,
    "source": lim.KIND_MAX,
}


def _wire_type(name: str, annotation: str, limits: IngestLimits, no_nul: bool) -> Any:
    """The JSON shape (with its bounds) one model field must have on the wire."""
    if annotation == "int":
        if name in _I64:
            return _int(lim.INT64_MAX)
        if name in _PIDS:
            return _int(lim.PID_MAX)
        if name in _I32:
            return _int(lim.INT32_MAX)
    elif annotation == "str":
        return _text(_SHORT_TEXT.get(name, limits.max_string_chars), no_nul)
    elif annotation == "float" and name == "value":
        return Annotated[float, msgspec.Meta(ge=-lim.VALUE_MAX, le=lim.VALUE_MAX)]
    elif annotation == "FrameKind":
        return FrameKind
    elif annotation == "tuple[int, int, int]":
        return tuple[_I32T, _I32T, _I32T]
    elif annotation == _STACK:  # indexes into "frames"
        return Annotated[tuple[_I32T, ...], msgspec.Meta(max_length=limits.max_stack_depth)]
    raise TypeError(f"no wire type for field {name}: {annotation}")


@dataclasses.dataclass(frozen=True, slots=True)
class _Record:
    """How one record type travels: its fields in wire order and where its stacks are."""

    cls: type
    key: str  # the Batch attribute and the JSON key, e.g. "samples"
    get: Callable[[Any], tuple[Any, ...]]  # record -> its field values in wire order
    stacks: tuple[int, ...]  # positions of Stack fields
    names: tuple[str, ...]  # field names in wire order (for error messages)

    @classmethod
    def of(cls, record: type, key: str = "") -> _Record:
        fs = dataclasses.fields(record)
        for f in fs:  # a model field without a wire type fails at import: nothing unchecked
            _wire_type(f.name, str(f.type), lim.DEFAULT, False)
        return cls(
            record,
            key,
            attrgetter(*(f.name for f in fs)),
            tuple(i for i, f in enumerate(fs) if f.type == _STACK),
            tuple(f.name for f in fs),
        )

    def row_type(self, limits: IngestLimits, no_nul: bool, version: int = VERSION) -> Any:
        """The tuple type one row of a ``version`` batch must match."""
        return GenericAlias(
            tuple,
            tuple(
                _wire_type(f.name, str(f.type), limits, no_nul)
                for f in dataclasses.fields(self.cls)
                if ADDED.get(f.name, 1) <= version
            ),
        )


RECORDS = (
    _Record.of(CpuSample, "samples"),
    _Record.of(ProcessInfo, "processes"),
    _Record.of(GpuActivity, "gpu_activities"),
    _Record.of(GpuMetricSample, "gpu_metrics"),
    _Record.of(GpuTracerState, "gpu_tracers"),
    _Record.of(OffCpuSample, "offcpu_samples"),
)
_FRAME = _Record.of(Frame, "frames")
_BY_KEY = {r.key: r for r in (*RECORDS, _FRAME)}


@functools.lru_cache(maxsize=8)
def _doc_type(limits: IngestLimits, no_nul: bool, version: int = VERSION) -> Any:
    """The whole body's type. Missing record lists are empty; unknown keys are ignored."""

    def rows(rec: _Record) -> Any:
        return Annotated[
            GenericAlias(list, rec.row_type(limits, no_nul, version)),
            msgspec.Meta(max_length=limits.max_rows),
        ]

    counter: Any = Annotated[
        str, msgspec.Meta(min_length=1, max_length=lim.METRIC_MAX, pattern="^[^\x00]*$")
    ]
    increment: Any = _int(lim.COUNTER_MAX)
    return msgspec.defstruct(
        "_Doc",
        [
            ("v", int),
            (
                "batch_id",
                Annotated[
                    str, msgspec.Meta(min_length=1, max_length=lim.BATCH_ID_MAX, pattern="^[!-~]+$")
                ],
            ),
            (
                "node",
                Annotated[str, msgspec.Meta(max_length=lim.NODE_MAX, pattern="^[^\x00]*$")],
                "",
            ),
            *((r.key, rows(r), msgspec.field(default_factory=list)) for r in RECORDS),
            (
                "counters",
                Annotated[dict[counter, increment], msgspec.Meta(max_length=lim.COUNTERS_MAX)],
                msgspec.field(default_factory=dict),
            ),
            ("frames", rows(_FRAME)),
        ],
        kw_only=True,
    )


class _Head(msgspec.Struct):
    """Just the version, to say "wrong version" rather than "malformed" when it is so."""

    v: Any = None


class _Frames:
    """Assigns each distinct frame an index in the batch's frame table."""

    def __init__(self, clip: Callable[[tuple[Any, ...]], tuple[Any, ...]]) -> None:
        self.index: dict[Frame, int] = {}
        self.table: list[tuple[Any, ...]] = []
        self._clip = clip
        # A hot stack is usually one tuple object shared by many samples: look it up by id
        # (the batch keeps every stack alive while it is encoded).
        self._seen: dict[int, list[int]] = {}

    def stack(self, stack: Stack) -> list[int]:
        out = self._seen.get(id(stack))
        if out is not None:
            return out
        out = []
        for f in stack:
            i = self.index.get(f)
            if i is None:
                i = self.index[f] = len(self.table)
                self.table.append(self._clip(_FRAME.get(f)))
            out.append(i)
        self._seen[id(stack)] = out
        return out


def _clipper(max_chars: int) -> Callable[[tuple[Any, ...]], tuple[Any, ...]]:
    """Cut over-long text fields (names from the outside world) to what the ingest takes."""

    def clip(row: tuple[Any, ...]) -> tuple[Any, ...]:
        if any(isinstance(v, str) and len(v) > max_chars for v in row):
            return tuple(v[:max_chars] if isinstance(v, str) else v for v in row)
        return row

    return clip


def to_dict(
    batch: Batch, *, batch_id: str, node: str, limits: IngestLimits = lim.DEFAULT
) -> dict[str, Any]:
    """The JSON-ready form of one batch; text longer than `limits` allows is clipped so a
    legitimate batch is never refused for a long C++ name."""
    clip = _clipper(limits.max_string_chars)
    fr = _Frames(clip)
    doc: dict[str, Any] = {"v": VERSION, "batch_id": batch_id, "node": node}
    for rec in RECORDS:
        wide = rec.key != "samples" and rec.key != "gpu_metrics"  # names, cmdlines
        rows = [list(clip(rec.get(x)) if wide else rec.get(x)) for x in getattr(batch, rec.key)]
        for i in rec.stacks:
            for row in rows:
                row[i] = fr.stack(row[i])
        doc[rec.key] = rows
    doc["counters"] = dict(batch.counters)
    doc["frames"] = fr.table
    return doc


def _rows(
    rec: _Record, rows: Sequence[tuple[Any, ...]], stack: Callable[[tuple[int, ...]], Stack]
) -> tuple[Any, ...]:
    make = rec.cls
    if not rec.stacks:
        return tuple(make(*row) for row in rows)
    out = []
    for row in rows:
        vals = list(row)
        for i in rec.stacks:
            vals[i] = stack(vals[i])
        out.append(make(*vals))
    return tuple(out)


def _check_spans(rows: Sequence[tuple[Any, ...]]) -> None:
    """A GPU span must not end before it starts (durations are summed in aggregation)."""
    for i, row in enumerate(rows):
        if row[3] < row[2]:
            raise CodecError(
                f"invalid batch: gpu_activities[{i}].end_ns: {row[3]} is before "
                f"start_ns "
                f"{row[2]}; a span must end at or after its start"
            )


def _from_doc(doc: Any, limits: IngestLimits) -> tuple[str, str, Batch]:
    if doc.v not in READS:
        raise CodecError(_WRONG_VERSION)
    total = sum(len(getattr(doc, r.key)) for r in RECORDS)
    if total > limits.max_rows:
        raise CodecError(
            f"batch holds {total} records; at most {limits.max_rows} per batch "
            "(send smaller batches, or raise --ingest-max-rows)",
            too_large=True,
        )
    _check_spans(doc.gpu_activities)
    frames, serials = REUSE.frames(doc.frames)
    stacks: dict[tuple[int, ...], Stack] = {}

    def stack(ix: tuple[int, ...]) -> Stack:
        s = stacks.get(ix)
        if s is None:
            s = stacks[ix] = REUSE.stack(ix, frames, serials)
        return s

    try:
        parts = {rec.key: _rows(rec, getattr(doc, rec.key), stack) for rec in RECORDS}
    except IndexError as exc:
        raise CodecError(
            f"invalid batch: a stack refers to a frame not listed "
            f"(the frame table has {len(frames)}): {exc}"
        ) from exc
    return doc.batch_id, doc.node, Batch(**parts, counters=doc.counters)


_PATH = re.compile(r"\$\.(\w+)\[(\d+)\](?:\[(\d+)\])?(.*)")


def field_path(path: str) -> str:
    """msgspec's `$.samples[3][1]` as the field it names: `samples[3].pid`."""
    m = _PATH.fullmatch(path)
    if not m or m.group(1) not in _BY_KEY or m.group(3) is None:
        return path.removeprefix("$.") or "body"
    rec, col = _BY_KEY[m.group(1)], int(m.group(3))
    name = rec.names[col] if col < len(rec.names) else f"[{col}]"
    return f"{rec.key}[{m.group(2)}].{name}{m.group(4)}"


def _invalid(exc: msgspec.ValidationError) -> CodecError:
    msg = str(exc)
    text, sep, path = msg.rpartition(" - at `")
    if not sep:
        return CodecError(f"invalid batch: {msg}")
    if path.startswith("key` in `"):  # a dict key, e.g. a counter's name
        path = path.removeprefix("key` in `").rstrip("`") + " (a key)"
    return CodecError(
        f"invalid batch: {field_path(path.rstrip('`'))}: {text}",
        too_large=text.startswith("Expected `array` of length <="),
    )


_WRONG_VERSION = f"not a kubeprof batch of version {' or '.join(map(str, READS))}"


def _malformed(exc: msgspec.ValidationError, version: object) -> CodecError:
    if version not in READS:
        return CodecError(_WRONG_VERSION)
    return _invalid(exc)


def encode(batch: Batch, *, batch_id: str, node: str) -> bytes:
    """gzip(JSON) body of one batch."""
    raw = msgspec.json.encode(to_dict(batch, batch_id=batch_id, node=node))
    return gzip.compress(raw, compresslevel=5)


def is_gzip(body: bytes) -> bool:
    """gzip magic bytes: what the body is, whatever its Content-Encoding header says."""
    return body[:2] == b"\x1f\x8b"


def _gunzip(body: bytes, max_bytes: int) -> bytearray:
    """Decompress one gzip member, refusing bodies that inflate past max_bytes (a bomb).

    Inflated 1 MiB at a time into one growing buffer: the peak is the JSON itself, not the
    JSON plus zlib's pieces of it, and a bomb is cut off as soon as it passes the limit."""
    d = zlib.decompressobj(wbits=31)
    out = bytearray()
    data = body
    while not d.eof:
        chunk = d.decompress(data, _CHUNK)
        data = d.unconsumed_tail
        if not chunk and not data:
            break  # input used up before the end of the stream
        out += chunk
        if len(out) > max_bytes:
            out.clear()  # freed now, not when a traceback holding this frame is collected
            raise CodecError(
                f"compressed body inflates past {max_bytes} bytes (raise "
                "--ingest-max-json-bytes or send smaller batches)",
                too_large=True,
            )
    if not d.eof:
        raise CodecError("compressed body is truncated")
    if d.unused_data:
        raise CodecError("data after the end of the gzip stream")
    return out


_CHUNK = 1 << 20


def _count_values(raw: bytes | bytearray, limits: IngestLimits) -> None:
    """Refuse a body with more JSON values than allowed, before any object is built.

    Every array element but the first follows a comma, so commas + opening brackets bound
    the element count from above (commas inside strings only make it stricter)."""
    n = raw.count(b",") + raw.count(b"[")
    if n > limits.max_values:
        raise CodecError(
            f"body holds up to {n} JSON values; at most {limits.max_values} "
            "(send smaller batches, or raise --ingest-max-values)",
            too_large=True,
        )


def decode(
    body: bytes, *, gzipped: bool | None = None, limits: IngestLimits = lim.DEFAULT
) -> tuple[str, str, Batch]:
    """Inverse of encode (plain JSON when the body is not gzip; None: look at the bytes)."""
    if gzipped is None:
        gzipped = is_gzip(body)
    try:
        raw = _gunzip(body, limits.max_json_bytes) if gzipped else body
    except zlib.error as exc:
        raise CodecError(f"body is not gzip JSON: {exc}") from exc
    if len(raw) > limits.max_json_bytes:
        raise CodecError(
            f"body is {len(raw)} bytes of JSON; at most {limits.max_json_bytes}", too_large=True
        )
    try:
        _count_values(raw, limits)
        no_nul = b"\\u0000" in raw
        try:
            doc = msgspec.json.decode(raw, type=_doc_type(limits, no_nul))
        except msgspec.ValidationError:
            version = _version(raw)
            if type(version) is not int or version not in READS or version == VERSION:
                raise
            # an older agent's batch: its rows lack the fields added since
            doc = msgspec.json.decode(raw, type=_doc_type(limits, no_nul, version))
    except msgspec.ValidationError as exc:
        raise _malformed(exc, _version(raw)) from exc
    except msgspec.DecodeError as exc:
        raise CodecError(f"body is not {'gzip ' if gzipped else ''}JSON: {exc}") from exc
    except RecursionError:
        # No kubeprof batch nests more than a few levels: refused, not a server error.
        raise CodecError("body nests JSON arrays or objects too deeply to be a batch") from None
    finally:
        # Free the inflated JSON now: a refusal's traceback would otherwise keep it alive
        # until the garbage collector runs (decoded strings are copies).
        if isinstance(raw, bytearray):
            raw.clear()
    return _from_doc(doc, limits)


def _version(raw: bytes | bytearray) -> object:
    try:
        return msgspec.json.decode(raw, type=_Head).v
    except (msgspec.DecodeError, RecursionError):  # RecursionError: nested past any batch
        return None


def rows(batch: Batch) -> int:
    """Rows a batch will add to the store (the unit of the ingest metrics)."""
    return sum(len(getattr(batch, rec.key)) for rec in RECORDS)
