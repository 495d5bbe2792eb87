"""A session's timeline for download: the Perfetto trace `kubeprof report -f perfetto`
writes (the same `write_perfetto` over the same `timeline_inputs`), gzip'd.

The operator serves many users, so memory stays bounded: a session is counted in the
database before anything is loaded and refused (413) above a limit, with the CLI command
that writes it instead; the events are written one by one through gzip into a temporary
file, so only the compressed trace is held whole (about a tenth of the JSON).
"""

from __future__ import annotations

import gzip
import io
import re
import tempfile

from sqlalchemy.engine import Connection

from kubeprof.report.perfetto import write_perfetto
from kubeprof.reporting import NodeChoice, timeline_inputs, timeline_node, timeline_size
from kubeprof.storage import queries as q
from kubeprof.ui.refs import LOCAL, ApiError, ref_of

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")  # kept out of the Content-Disposition file name


def filename(info: q.SessionInfo, node: str | None = None) -> str:
    """The download's name, NAMESPACE_NAME[.NODE].trace.json.gz (as the CLI names a
    cluster session's files), with anything but letters, digits, '.', '_' and '-' as '_'."""
    ns, name = ref_of(info)
    return _UNSAFE.sub("_", f"{ns}_{name}" + (f".{node}" if node else "")) + ".trace.json.gz"


def cli_ref(info: q.SessionInfo) -> str:
    """How `kubeprof report` names the session: NAMESPACE/NAME, a local one by its name."""
    ns, name = ref_of(info)
    return name if ns == LOCAL else f"{ns}/{name}"


def timeline_gz(
    conn: Connection, info: q.SessionInfo, *, limit: int, node: str | None = None
) -> bytes:
    """The session's (one node's) trace-event JSON, gzip'd; ApiError(413) above `limit`
    records, ApiError(400) when the session has several nodes and ``node`` names none of
    them."""
    try:
        node = timeline_node(conn, info, node)
    except NodeChoice as exc:
        raise ApiError(400, str(exc)) from None
    n = timeline_size(conn, info.id)
    if n > limit:
        raise ApiError(
            413,
            f"{'/'.join(ref_of(info))} has {n:,} GPU records and CPU samples, more than the "
            f"{limit:,} the web UI turns into a timeline; write it with the CLI instead: "
            f"kubeprof report {cli_ref(info)} -f perfetto",
        )
    args = timeline_inputs(conn, info, node=node)
    with tempfile.TemporaryFile() as raw:
        with (
            gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) as packed,
            io.TextIOWrapper(packed, encoding="utf-8") as text,
        ):
            write_perfetto(text, **args)
        raw.seek(0)
        return raw.read()
