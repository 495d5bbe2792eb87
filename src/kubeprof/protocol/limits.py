"""How big an ingest body may be: the bounds the decoder enforces before and while decoding.

A batch comes from a node agent holding a session token, but a token is no proof of good
intent (every user who creates a session gets one). These bounds keep one request's memory
and database work small whatever it claims: the body is refused *before* it can inflate,
and the decoded values must fit the columns they are stored in. The defaults sit far above
what a real agent sends in one poll interval (a few thousand rows, tens of KB compressed);
`kubeprof operator --help` names the flag of each.
"""

from __future__ import annotations

from dataclasses import dataclass

# Fixed by the database schema (kubeprof.storage.models), not settable: a longer value
# could not be stored.
NODE_MAX = 253  # node names: counters.node / ingested_batches.agent are varchar(253)
BATCH_ID_MAX = 128  # ingested_batches.batch_id is varchar(128)
KIND_MAX = 16  # gpu_activities.kind / frames.kind are varchar(16)
METRIC_MAX = 64  # gpu_metrics.metric / counters.name are varchar(64)
SOCKET_NAME_MAX = 128  # gpu_tracers.socket: "<pid>-<8 hex>.sock"
REASON_MAX = 1000  # gpu_tracers.reason: a tracer's one-line refusal (agents clip to this)
POD_UID_MAX = 64  # a Kubernetes UID is 36 characters (a static pod's hash 32)
CONTAINER_ID_MAX = 128  # a runtime's container id is 64 hex digits, plus a scheme prefix
INT32_MAX = 2**31 - 1  # Integer columns (pid, cpu, line, grid, ...)
INT64_MAX = 2**63 - 1  # BigInteger columns (timestamps, bytes, correlation ids)
PID_MAX = 4_194_304  # Linux PID_MAX_LIMIT on 64-bit: no pid or tid is larger
COUNTER_MAX = 2**40  # one batch's increment of a counter; sums stay far below INT64_MAX
VALUE_MAX = 1e18  # |metric value|: finite, and sums of many stay finite
COUNTERS_MAX = 64  # distinct counter names in one batch


@dataclass(frozen=True, slots=True)
class IngestLimits:
    """Settable bounds of one ingest request (operator flags --ingest-max-*)."""

    # Largest body on the wire (compressed), bytes. Refused with 413 before it is read.
    max_body_bytes: int = 8 << 20
    # Largest body after decompression, bytes, whatever Content-Encoding says: a gzip
    # body is inflated at most this far, then refused with 413.
    max_json_bytes: int = 32 << 20
    # Most JSON values (array elements, counted from the separators before decoding),
    # so the decoded objects stay bounded even for bodies of tiny values.
    max_values: int = 4_000_000
    # Most records (samples + processes + GPU activities + GPU metrics) in one batch;
    # also the most frames in its frame table.
    max_rows: int = 50_000
    # Most frames in one stack (the eBPF unwinder stops at 127; deep Python recursion
    # with native frames stays below this).
    max_stack_depth: int = 2048
    # Longest text value (function, file and kernel names, command lines, thread names),
    # in characters. The agent clips longer ones before sending (a C++ template kernel
    # name can reach a few KB).
    max_string_chars: int = 16384
    # Most records one session may store, all batches together (a day at 99 Hz on 100
    # busy threads with a GPU tracer stays below it); past it, batches are refused (413).
    max_session_rows: int = 100_000_000
    # Most frames and stacks one session may add to the tables all sessions share (a row
    # another session added first costs it nothing): a real training job interns a few
    # thousand to tens of thousands; the red team's 800,000 of each took 561 MiB of
    # PostgreSQL, these bound one session near half that. Past either, batches are refused
    # (413) and nothing of them is stored.
    max_session_frames: int = 500_000
    max_session_stacks: int = 1_000_000
    # Clock skew allowed between a node's records of one session, seconds: all of them
    # must fit in the session's duration + the drain after it + this
    # (`kubeprof.protocol.bounds`).
    max_skew_s: int = 60

    def check(self) -> None:
        """ValueError naming the setting that is not a positive number."""
        for name in (
            "max_body_bytes",
            "max_json_bytes",
            "max_values",
            "max_rows",
            "max_stack_depth",
            "max_string_chars",
            "max_session_rows",
            "max_session_frames",
            "max_session_stacks",
            "max_skew_s",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")


DEFAULT = IngestLimits()
