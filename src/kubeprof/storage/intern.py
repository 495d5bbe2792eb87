"""Frame and stack interning: hash -> id, so samples store one integer per stack.

Concurrent writers (several agents ingesting into one Postgres) may intern the same stack
at once; inserts use ON CONFLICT DO NOTHING and then read the winner's id.

Rows no session uses any more are deleted by `shared_gc`. The two agree through a lock and
an epoch: a transaction that interns holds the lock shared until it ends (PostgreSQL: an
advisory lock; SQLite: its one write lock), a collection holds it exclusively while it
deletes and raises `intern_epochs.epoch` when it did, and an Interner that sees the epoch
changed forgets its cached ids before it uses any.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence

from sqlalchemy import select, text, update
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import TextClause

from kubeprof.model import Frame, FrameKind, Stack, stack_hash
from kubeprof.storage.bulk import dialect_insert
from kubeprof.storage.models import FrameRow, InternEpochRow, StackRow

# Any constant works; the same for every kubeprof process on one database (not migrate's).
_PG_INTERN_LOCK = 0x6B7570_6763_6C6B & 0x7FFFFFFFFFFFFFFF


def frame_hash(frame: Frame) -> int:
    """Signed 64-bit hash of a frame's identity."""
    digest = hashlib.blake2b(frame.key().encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


Interned = type[FrameRow] | type[StackRow]


def _insert(conn: Connection, table: Interned, rows: Sequence[Mapping[str, object]]) -> None:
    """INSERT .. ON CONFLICT (hash) DO NOTHING: another writer may have interned it first."""
    conn.execute(
        dialect_insert(conn, table).on_conflict_do_nothing(index_elements=["hash"]), list(rows)
    )


def _hold(conn: Connection, *, shared: bool) -> None:
    if conn.dialect.name == "postgresql":
        fn = "pg_advisory_xact_lock_shared" if shared else "pg_advisory_xact_lock"
        conn.execute(text(f"SELECT {fn}(:k)"), {"k": _PG_INTERN_LOCK})
    else:  # SQLite: a no-op write takes its one write lock now, not at the first insert
        conn.execute(update(InternEpochRow).values(epoch=InternEpochRow.epoch))


_SHARED = {
    "postgresql": text("SELECT pg_advisory_xact_lock_shared(:k)"),
    # SQLite: a no-op write takes its one write lock now, not at the first insert
    "sqlite": text(f"UPDATE {InternEpochRow.__tablename__} SET epoch = epoch"),
}
_EPOCH = text(f"SELECT epoch FROM {InternEpochRow.__tablename__}")


def interning_statements(conn: Connection) -> list[tuple[TextClause, dict[str, int]]]:
    """What `hold_interning` runs, to send with other statements (`batch_tx`): the lock
    shared, then the epoch, read in its own statement after the lock is granted (a
    statement reads the snapshot of its start). The epoch is the last one's first column."""
    return [(_SHARED[conn.dialect.name], {"k": _PG_INTERN_LOCK}), (_EPOCH, {})]


def hold_interning(conn: Connection) -> int:
    """Take the interning lock shared until `conn`'s transaction ends, so no collection
    deletes rows meanwhile; the current epoch."""
    _hold(conn, shared=True)
    return int(conn.scalar(select(InternEpochRow.epoch)) or 0)


def hold_collecting(conn: Connection) -> None:
    """Take the interning lock exclusively until `conn`'s transaction ends: no transaction
    that interns is in flight, none starts."""
    _hold(conn, shared=False)


def raise_epoch(conn: Connection) -> None:
    """Tell every Interner its cached ids may name deleted rows (in the deleting transaction)."""
    conn.execute(update(InternEpochRow).values(epoch=InternEpochRow.epoch + 1))


# Stacks (1 each) and their frames (1 each) an Interner keeps to find hashes by identity:
# ~8 MB of references at most.
HASH_SLOTS_MAX = 1 << 20


def _chunks(items: list[int], size: int = 500) -> Iterable[list[int]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


class Interner:
    """Caches hash -> id for frames and stacks of one store, valid while the epoch holds."""

    def __init__(self) -> None:
        self.frame_ids: dict[int, int] = {}
        self.stack_ids: dict[int, int] = {}
        self.epoch: int | None = None
        # Rows this Interner inserted (a session's share of the shared tables, which its
        # quota bounds); a row two writers insert at the same instant counts for both.
        self.added_frames = 0
        self.added_stacks = 0
        # id(stack) -> (stack, its hash): the entry keeps the stack alive, so no other
        # object can have its id while the entry exists.
        self._hashes: dict[int, tuple[Stack, int]] = {}
        self._slots = 0  # stacks kept, and frames referenced by them

    def kept_slots(self) -> int:
        """Stacks kept for `hash_of`, and the frames they reference."""
        return self._slots

    def hash_of(self, stack: Stack) -> int:
        """`stack_hash(stack)`, found by identity for a stack object seen before (the
        ingest's decoder hands out the same tuple for a stack decoded again): hashing a
        stack calls Python once per frame, and as often again to compare on a hit."""
        hit = self._hashes.get(id(stack))
        if hit is not None:
            return hit[1]
        h = stack_hash(stack)
        if self._slots > HASH_SLOTS_MAX:  # start over: the stacks kept are bounded
            self._hashes.clear()
            self._slots = 0
        self._hashes[id(stack)] = (stack, h)
        self._slots += 1 + len(stack)
        return h

    def stack_ids_for(self, conn: Connection, stacks: Iterable[Stack]) -> dict[int, int]:
        """Intern `stacks`; returns stack hash -> stack id for all of them. Holds the
        interning lock until the transaction ends (the ids must not be collected before
        the rows that use them are committed)."""
        return self.hashed_ids_for(conn, {stack_hash(s): s for s in stacks})

    def hashed_ids_for(
        self, conn: Connection, stacks: Mapping[int, Stack], *, epoch: int | None = None
    ) -> dict[int, int]:
        """`stack_ids_for` of stacks already hashed (hash -> stack: hashing a deep stack
        costs a Python call per frame). `epoch`: this transaction already holds the
        interning lock and read that epoch under it (`interning_statements`)."""
        if epoch is None:
            epoch = hold_interning(conn)
        if epoch != self.epoch:
            self.frame_ids.clear()
            self.stack_ids.clear()
            self.epoch = epoch
        by_hash = {h: s for h, s in stacks.items() if h not in self.stack_ids}
        if by_hash:
            frames = {f for s in by_hash.values() for f in s}
            self._intern_frames(conn, frames)
            self._fetch(conn, StackRow, list(by_hash), self.stack_ids)
            rows: list[dict[str, object]] = []
            new_hashes: list[int] = []
            for h, stack in by_hash.items():
                if h in self.stack_ids:
                    continue
                ids = ",".join(str(self.frame_ids[frame_hash(f)]) for f in stack)
                rows.append({"hash": h, "frame_ids": ids, "depth": len(stack)})
                new_hashes.append(h)
            if rows:
                _insert(conn, StackRow, rows)
                self.added_stacks += len(rows)
                self._fetch(conn, StackRow, new_hashes, self.stack_ids)
        return self.stack_ids

    def _intern_frames(self, conn: Connection, frames: set[Frame]) -> None:
        missing = {frame_hash(f): f for f in frames if frame_hash(f) not in self.frame_ids}
        if not missing:
            return
        self._fetch(conn, FrameRow, list(missing), self.frame_ids)
        new_hashes = [h for h in missing if h not in self.frame_ids]
        rows = [
            {
                "hash": h,
                "kind": missing[h].kind.value,
                "name": missing[h].name,
                "file": missing[h].file,
                "line": missing[h].line,
            }
            for h in new_hashes
        ]
        if rows:
            _insert(conn, FrameRow, rows)
            self.added_frames += len(rows)
            self._fetch(conn, FrameRow, new_hashes, self.frame_ids)

    @staticmethod
    def _fetch(conn: Connection, table: Interned, hashes: list[int], into: dict[int, int]) -> None:
        for chunk in _chunks(hashes):
            for row in conn.execute(select(table.hash, table.id).where(table.hash.in_(chunk))):
                into[row.hash] = row.id


def load_stacks(conn: Connection, stack_ids: Iterable[int]) -> dict[int, Stack]:
    """Rebuild stacks (root first) from their ids."""
    ids = sorted(set(stack_ids))
    frame_lists: dict[int, list[int]] = {}
    for chunk in _chunks(ids):
        sq = select(StackRow.id, StackRow.frame_ids).where(StackRow.id.in_(chunk))
        for srow in conn.execute(sq):
            frame_lists[srow.id] = [int(x) for x in srow.frame_ids.split(",") if x]
    frame_ids = sorted({f for fl in frame_lists.values() for f in fl})
    frames: dict[int, Frame] = {}
    for chunk in _chunks(frame_ids):
        fq = select(FrameRow.id, FrameRow.kind, FrameRow.name, FrameRow.file, FrameRow.line)
        for row in conn.execute(fq.where(FrameRow.id.in_(chunk))):
            frames[row.id] = Frame(row.name, FrameKind(row.kind), row.file, row.line)
    return {sid: tuple(frames[f] for f in fl) for sid, fl in frame_lists.items()}
