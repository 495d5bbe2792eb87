"""Typed ORM models. Queries live in `queries.py`; writes in `store.py` and `bulk.py`."""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import (
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, MappedColumn, mapped_column

from kubeprof.protocol.settings import DEFAULT_CPU_HZ

# Deterministic constraint names keep Alembic migrations identical on SQLite and Postgres.
NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def _row_id() -> MappedColumn[int]:
    """A row id: 64-bit on PostgreSQL (these tables outgrow 2**31 rows), SQLite's rowid."""
    return mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    )


def _session_id(*, primary_key: bool = False) -> MappedColumn[int]:
    """The owning session: its rows go when it is deleted."""
    return mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"), primary_key=primary_key)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map: ClassVar[dict[Any, Any]] = {int: BigInteger, str: Text}


class SessionRow(Base):
    """One profiling session: a local `kubeprof record` run or a cluster ProfilingSession."""

    __tablename__ = "sessions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(253), unique=True)
    kind: Mapped[str] = mapped_column(String(16), default="local")  # local | cluster
    command: Mapped[str] = mapped_column(default="")
    hz: Mapped[int] = mapped_column(Integer, default=DEFAULT_CPU_HZ)
    host: Mapped[str] = mapped_column(default="")
    status: Mapped[str] = mapped_column(String(32), default="running")
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # CLOCK_MONOTONIC bounds of the session, the time base of samples and GPU activity.
    start_ns: Mapped[int] = mapped_column(default=0)
    end_ns: Mapped[int] = mapped_column(default=0)
    meta: Mapped[str] = mapped_column(default="{}")  # JSON object of strings
    # The highest sample id counted into stack_counts (`kubeprof.storage.compaction`).
    counted_sample_id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), default=0, server_default="0"
    )


class FrameRow(Base):
    """An interned frame; `hash` is the key (long C++ names would not fit a text index)."""

    __tablename__ = "frames"
    id: Mapped[int] = _row_id()
    hash: Mapped[int] = mapped_column(unique=True)
    kind: Mapped[str] = mapped_column(String(16))
    name: Mapped[str]
    file: Mapped[str] = mapped_column(default="")
    line: Mapped[int] = mapped_column(Integer, default=0)


class StackRow(Base):
    """An interned stack: frame ids root first, as a comma-separated list."""

    __tablename__ = "stacks"
    id: Mapped[int] = _row_id()
    hash: Mapped[int] = mapped_column(unique=True)
    frame_ids: Mapped[str]
    depth: Mapped[int] = mapped_column(Integer)


class InternEpochRow(Base):
    """One row: raised by each garbage collection that deleted stacks or frames, so an
    Interner drops its cached ids when it changed (`kubeprof.storage.shared_gc`)."""

    __tablename__ = "intern_epochs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    epoch: Mapped[int] = mapped_column(default=0)


# Per-node timestamped rows open alike (id, session, node, ts_ns): each table spells its
# own columns in its class (alike in shape only).
class SampleRow(Base):
    """One CPU sample (per-sample rows keep timestamps for timelines and GPU correlation)."""

    __tablename__ = "samples"
    id: Mapped[int] = _row_id()
    session_id: Mapped[int] = _session_id()
    node: Mapped[str] = mapped_column(default="")
    ts_ns: Mapped[int]
    pid: Mapped[int] = mapped_column(Integer)
    tid: Mapped[int] = mapped_column(Integer)
    cpu: Mapped[int] = mapped_column(Integer)
    thread: Mapped[str]
    stack_id: Mapped[int] = mapped_column(ForeignKey("stacks.id"))
    __table_args__ = (
        Index("ix_samples_session_stack", "session_id", "stack_id"),
        # a session's samples past its count watermark, and nobody else's (compaction)
        Index("ix_samples_session_id_id", "session_id", "id"),
        Index("ix_samples_stack_id", "stack_id"),  # "still used?" of the shared-rows GC
    )


class ProcessRow(Base):
    """A process seen in a session, named even after it exits."""

    __tablename__ = "processes"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    session_id: Mapped[int] = _session_id()
    node: Mapped[str] = mapped_column(default="")
    pid: Mapped[int] = mapped_column(Integer)
    ppid: Mapped[int] = mapped_column(Integer, default=0)
    name: Mapped[str] = mapped_column(default="")
    cmdline: Mapped[str] = mapped_column(default="")
    container_id: Mapped[str] = mapped_column(default="")
    pod_uid: Mapped[str] = mapped_column(default="")
    __table_args__ = (UniqueConstraint("session_id", "node", "pid"),)


class GpuActivityRow(Base):
    """A kernel, memcpy or memset on a GPU, with its launching stack when known."""

    __tablename__ = "gpu_activities"
    id: Mapped[int] = _row_id()
    session_id: Mapped[int] = _session_id()
    node: Mapped[str] = mapped_column(default="")
    kind: Mapped[str] = mapped_column(String(16))
    name: Mapped[str]
    demangled: Mapped[str] = mapped_column(default="")
    start_ns: Mapped[int]
    end_ns: Mapped[int]
    device: Mapped[int] = mapped_column(Integer)
    pid: Mapped[int] = mapped_column(Integer)
    correlation_id: Mapped[int]
    stream: Mapped[int] = mapped_column(default=0)
    grid_x: Mapped[int] = mapped_column(Integer, default=0)
    grid_y: Mapped[int] = mapped_column(Integer, default=0)
    grid_z: Mapped[int] = mapped_column(Integer, default=0)
    block_x: Mapped[int] = mapped_column(Integer, default=0)
    block_y: Mapped[int] = mapped_column(Integer, default=0)
    block_z: Mapped[int] = mapped_column(Integer, default=0)
    registers: Mapped[int] = mapped_column(Integer, default=0)
    shared_mem: Mapped[int] = mapped_column(default=0)
    bytes: Mapped[int] = mapped_column(default=0)
    stack_id: Mapped[int | None] = mapped_column(ForeignKey("stacks.id"), nullable=True)
    # the launching call's entry (host CLOCK_MONOTONIC) and host thread id; 0: not recorded
    launch_ns: Mapped[int] = mapped_column(default=0, server_default="0")
    launch_tid: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    __table_args__ = (
        Index("ix_gpu_activities_session_start", "session_id", "start_ns"),
        Index("ix_gpu_activities_stack_id", "stack_id"),
    )


class GpuMetricRow(Base):
    """A device or per-process GPU metric reading (NVML, GPM, PM sampling)."""

    __tablename__ = "gpu_metrics"
    id: Mapped[int] = _row_id()
    session_id: Mapped[int] = _session_id()
    node: Mapped[str] = mapped_column(default="")
    ts_ns: Mapped[int]
    device: Mapped[int] = mapped_column(Integer)
    metric: Mapped[str] = mapped_column(String(64))
    value: Mapped[float] = mapped_column(Float)
    pid: Mapped[int] = mapped_column(Integer, default=0)
    correlation_id: Mapped[int] = mapped_column(default=0)
    __table_args__ = (Index("ix_gpu_metrics_session_metric", "session_id", "metric"),)


class CounterRow(Base):
    """Named counters per session and node (samples lost, GPU records dropped, ...)."""

    __tablename__ = "counters"
    session_id: Mapped[int] = _session_id(primary_key=True)
    node: Mapped[str] = mapped_column(String(253), primary_key=True, default="")
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[int] = mapped_column(default=0)


class GpuTracerRow(Base):
    """The latest answer of each injected GPU tracer a session's agent switched (or tried)."""

    __tablename__ = "gpu_tracers"
    session_id: Mapped[int] = _session_id(primary_key=True)
    node: Mapped[str] = mapped_column(String(253), primary_key=True, default="")
    pod_uid: Mapped[str] = mapped_column(String(64), primary_key=True)
    socket: Mapped[str] = mapped_column(String(128), primary_key=True)
    pid: Mapped[int] = mapped_column(Integer, default=0)
    state: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text, default="")


class IngestedBatchRow(Base):
    """Ids of batches already stored, so a retried batch is stored once."""

    __tablename__ = "ingested_batches"
    session_id: Mapped[int] = _session_id(primary_key=True)
    batch_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    agent: Mapped[str] = mapped_column(String(253), default="")
    rows: Mapped[int] = mapped_column(default=0)
    # Frames and stacks this batch added to the shared tables (the session's quota on them).
    frames: Mapped[int] = mapped_column(default=0, server_default="0")
    stacks: Mapped[int] = mapped_column(default=0, server_default="0")
    received_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class SessionAggregateRow(Base):
    """A cluster session's results at session end, per scope: session, node or pod.

    Written by the operator's aggregation (an upsert, so re-running it after a restart
    changes nothing); `detail` is a JSON object (top stacks, per-GPU idle ratios).
    """

    __tablename__ = "session_aggregates"
    session_id: Mapped[int] = _session_id(primary_key=True)
    scope: Mapped[str] = mapped_column(String(8), primary_key=True)  # session | node | pod
    key: Mapped[str] = mapped_column(String(253), primary_key=True)  # "" | node | pod uid
    samples: Mapped[int] = mapped_column(default=0)
    gpu_idle_ratio: Mapped[float | None] = mapped_column(Float, nullable=True)
    detail: Mapped[str] = mapped_column(default="{}")
    computed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class _PreparedRow:
    """A final session's result stored once: read back only while `fingerprint` (the code
    that shapes it) and `seal` (the session's row as it was) still match."""

    session_id: Mapped[int] = _session_id(primary_key=True)
    options: Mapped[str] = mapped_column(String(64), primary_key=True)  # what was asked
    fingerprint: Mapped[str] = mapped_column(String(64))
    seal: Mapped[str] = mapped_column(String(64))
    body: Mapped[bytes] = mapped_column(LargeBinary)
    stored_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class PreparedViewRow(_PreparedRow, Base):
    """A final session's prepared report view, stored once (`storage.prepared_views`);
    `options` is `Options.key()`, `body` msgspec's MessagePack of the view."""

    __tablename__ = "prepared_views"


class PreparedFlameRow(_PreparedRow, Base):
    """A final session's whole-session flame graph as the web UI answers it, stored once
    (`storage.prepared_flames`); `options` names the view and flags, `body` is JSON."""

    __tablename__ = "prepared_flames"


class StackCountRow(Base):
    """CPU samples pre-counted per (thread, stack): what a flame graph reads, not `samples`.

    Counted after the batches, not in them: `kubeprof.storage.compaction` adds the samples
    past ``sessions.counted_sample_id`` and raises it in one transaction; readers add the
    samples not counted yet (`stack_counts.stack_counts`).
    ``bucket`` is ``TOTAL_BUCKET`` (-1) for the whole session, else ``ts_ns // BUCKET_NS`` of
    the node's monotonic clock, so a time range reads only its buckets. The flame graph of
    10 M samples reads a few thousand of these rows instead of 10 M sample rows.

    Its session and stack are not foreign keys (checking them on each row was over a third
    of adding a batch's counts): the batch's sample rows, written in the same transaction,
    are checked; a trigger deletes a deleted session's rows (migration counts_unchecked),
    and ``info["refers_to"]`` names the stack column for the shared-rows GC.
    """

    __tablename__ = "stack_counts"
    session_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    bucket: Mapped[int] = mapped_column(primary_key=True)
    node: Mapped[str] = mapped_column(String(253), primary_key=True, default="")
    pid: Mapped[int] = mapped_column(Integer, primary_key=True)
    tid: Mapped[int] = mapped_column(Integer, primary_key=True)
    stack_id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"),
        primary_key=True,
        info={"refers_to": "stacks.id"},
    )
    thread: Mapped[str] = mapped_column(default="")
    samples: Mapped[int] = mapped_column(default=0)
    __table_args__ = (Index("ix_stack_counts_stack_id", "stack_id"),)


class OffCpuSampleRow(Base):
    """A span one thread spent off CPU, with the stack it waited in (`OffCpuSample`).

    Not pre-counted like `stack_counts`: the agent keeps only waits at least the minimum
    blocked time long, so a session holds far fewer of these than CPU samples.
    """

    __tablename__ = "offcpu_samples"
    id: Mapped[int] = _row_id()
    session_id: Mapped[int] = _session_id()
    node: Mapped[str] = mapped_column(default="")
    ts_ns: Mapped[int]  # CLOCK_MONOTONIC ns when the thread left the CPU
    pid: Mapped[int] = mapped_column(Integer)
    tid: Mapped[int] = mapped_column(Integer)
    thread: Mapped[str]
    blocked_ns: Mapped[int]  # measured (bpf-sched) or the sampling interval (sampled-wall)
    weight_ns: Mapped[int]  # wall time it stands for in a profile
    reason: Mapped[str] = mapped_column(default="")
    source: Mapped[str] = mapped_column(String(16))  # bpf-sched | sampled-wall
    stack_id: Mapped[int | None] = mapped_column(ForeignKey("stacks.id"), nullable=True)
    __table_args__ = (
        Index("ix_offcpu_samples_session_stack", "session_id", "stack_id"),
        Index("ix_offcpu_samples_stack_id", "stack_id"),
    )
