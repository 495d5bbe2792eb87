"""Prepared views: a finished session's report, computed once, stored, and read back.

`reporting.load_report` prepares the one view that `kubeprof report`, `kubeprof diff` and
the web UI show; on a big session that takes seconds (GPU records into objects, sample
columns, the findings analysis, the GPU summary) and the work is the same every time once
the session's data can no longer change. This module keeps that view in `prepared_views`,
one row per (session, options), and hands it back while three things still hold:

- the session is final (`FINAL`: completed, interrupted or failed; a running or deleted
  one may still receive rows: the operator refuses batches once it aggregates, `kubeprof
  record` writes none after its end), and its row reads as it did then (`seal`: status,
  end, name, meta; a session reopened and finished again, or renamed, is recomputed);
- the code that shapes the view is the same (`fingerprint`: a hash of the package's
  source files), so a changed analysis never shows a stale view;
- the row decodes strictly into the typed report (msgspec, never pickle: the database may
  be shared, and a row must never run code); one that does not is ignored.

Deleting a session deletes its rows (foreign key, ON DELETE CASCADE). Storing is best
effort: a store that refuses the write (read-only role, busy) is logged, and the view is
computed as before.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path

import msgspec
from sqlalchemy import select
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

import kubeprof.reportdata
from kubeprof.analysis.energy import EnergyEstimate
from kubeprof.analysis.findings import Analysis
from kubeprof.analysis.gpu_summary import GpuSummary
from kubeprof.reportdata import Profile, Report
from kubeprof.storage.bulk import dialect_insert
from kubeprof.storage.models import PreparedFlameRow, PreparedViewRow
from kubeprof.storage.queries import SessionInfo

log = logging.getLogger(__name__)

# Statuses after which nothing is written to a session (record's and the operator's ends).
FINAL = frozenset({"completed", "interrupted", "failed"})


@dataclass(frozen=True, slots=True)
class Options:
    """The flags `load_report` prepares a view with; each set is its own stored view."""

    keep_interpreter: bool = False
    whole_session: bool = False

    def key(self) -> str:
        return f"keep_interpreter={int(self.keep_interpreter)},whole={int(self.whole_session)}"


@dataclass(frozen=True, slots=True)
class _View:
    """What a row's body holds: a `Report` less its findings (they are the analysis's)."""

    profile: Profile
    gpu: GpuSummary | None
    analysis: Analysis | None
    energy: EnergyEstimate | None
    energy_note: str


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(_View)  # strict: every value must fit its field


def encode(report: Report) -> bytes:
    """The report as a row body."""
    return _encoder.encode(
        _View(report.profile, report.gpu, report.analysis, report.energy, report.energy_note)
    )


def decode(body: bytes) -> Report:
    """The report a row body holds; msgspec.ValidationError/DecodeError when it does not."""
    v = _decoder.decode(body)
    findings = v.analysis.findings if v.analysis is not None else ()
    return Report(v.profile, v.gpu, findings, v.analysis, v.energy, v.energy_note)


@lru_cache(maxsize=1)
def fingerprint() -> str:
    """A hash of every source file of the core package (where this view's loading,
    analysis and types live) and of the codec's version: once per process."""
    root = Path(kubeprof.reportdata.__file__).resolve().parent
    h = hashlib.blake2b(digest_size=16)
    h.update(msgspec.__version__.encode())
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()


def final(info: SessionInfo) -> bool:
    """Whether the session's data can no longer change, so its view may be stored."""
    return info.status in FINAL


def seal(info: SessionInfo) -> str:
    """What the stored view was made from, on the session's row: a view stored before the
    session was finished again, renamed or annotated no longer matches."""
    ended = info.ended_at.isoformat() if info.ended_at else ""
    # Not the row counts: the web UI's list leaves them 0 (`list_sessions(counts=False)`).
    parts = [info.status, ended, info.name, *map(str, (info.hz, info.start_ns, info.end_ns))]
    text = "\0".join(parts) + "\0" + json.dumps(info.meta, sort_keys=True)
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def load(conn: Connection, info: SessionInfo, options: Options) -> Report | None:
    """The stored view of a final session with these options, or None (not stored, stale,
    or not readable: then it is computed)."""
    body = read_body(conn, info, PreparedViewRow, options.key())
    if body is None:
        return None
    try:
        return decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        log.warning("prepared view of session %d ignored (does not decode): %s", info.id, exc)
        return None


def save(engine: Engine, info: SessionInfo, options: Options, report: Report) -> bool:
    """Store the view of a final session (replacing an older one) in its own short
    transaction; True when stored. Failures are logged, never raised."""
    return write_body(engine, info, PreparedViewRow, options.key(), encode(report))


Table = type[PreparedViewRow] | type[PreparedFlameRow]


def read_body(conn: Connection, info: SessionInfo, table: Table, key: str) -> bytes | None:
    """The body stored for a final session under `key` while the code fingerprint and the
    session's seal match, else None (also when the table cannot be read)."""
    if not final(info):
        return None
    try:  # on a connection of its own: a failed read must not end the caller's transaction
        with conn.engine.connect() as own:
            body = own.scalar(
                select(table.body).where(
                    table.session_id == info.id,
                    table.options == key,
                    table.fingerprint == fingerprint(),
                    table.seal == seal(info),
                )
            )
    except SQLAlchemyError as exc:  # a store older than this table, or no right to read it
        log.debug("%s of session %d not read: %s", table.__tablename__, info.id, type(exc).__name__)
        return None
    return None if body is None else bytes(body)


def write_body(engine: Engine, info: SessionInfo, table: Table, key: str, body: bytes) -> bool:
    """Store `body` for a final session under `key` (replacing an older one) in its own
    short transaction; True when stored. Failures are logged, never raised."""
    if not final(info):
        return False
    row = {
        "session_id": info.id,
        "options": key,
        "fingerprint": fingerprint(),
        "seal": seal(info),
        "body": body,
        "stored_at": datetime.now(UTC),
    }
    try:
        with engine.begin() as conn:
            stmt = dialect_insert(conn, table).values(**row)
            conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=["session_id", "options"],
                    set_={
                        k: stmt.excluded[k] for k in ("fingerprint", "seal", "body", "stored_at")
                    },
                )
            )
    except SQLAlchemyError as exc:  # read-only role, busy, or the session just went
        what = table.__tablename__
        log.info("%s of session %d not stored: %s", what, info.id, type(exc).__name__)
        return False
    return True
