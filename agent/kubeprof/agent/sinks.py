"""The local store's sink (`kubeprof record`); the node agent's is cluster/spool_sink.py.

It keeps data when the store fails: batches are held in memory while the store refuses
writes and, if it still refuses at the end, left on disk in the agent's batch format.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from kubeprof.agent import invalid_records
from kubeprof.agent.cluster.spool import Spool
from kubeprof.agent.driver import merge
from kubeprof.model import Batch
from kubeprof.protocol import codec

if TYPE_CHECKING:  # the node agent needs no database driver
    from kubeprof.storage import Store


class StoreSink:
    """Writes batches to the store; keeps them in memory while the store fails.

    When the store still fails at `close()`, the batches go to a `Spool` in `fallback`
    (gzip JSON in the cluster agent's batch codec) and `kept_in` names that folder.
    """

    def __init__(
        self, store: Store, session_id: int, *, fallback: Path, log: Callable[[str], None]
    ) -> None:
        self.store, self.session_id, self.log = store, session_id, log
        self.fallback = fallback
        self.pending: list[Batch] = []
        self.rows = 0
        self.records = 0  # CPU samples, waits + GPU activities: what a profile is made of
        self.kept_in: Path | None = None  # set when the last resort was used
        self.refused: list[str] = []  # records left out: the store refused their values

    def write(self, batch: Batch) -> None:
        if (
            batch.samples
            or batch.gpu_activities
            or batch.gpu_metrics
            or batch.processes
            or batch.counters
            or batch.offcpu_samples
        ):
            self.pending.append(batch)
        self.flush()

    def flush(self) -> bool:
        """Write what is pending, oldest first; False (data kept) when the store fails."""
        while self.pending:
            try:
                self.rows += self.store.write_batch(self.session_id, self.pending[0])
                self.records += (
                    len(self.pending[0].samples)
                    + len(self.pending[0].gpu_activities)
                    + len(self.pending[0].offcpu_samples)
                )
            except Exception as exc:  # noqa: BLE001 - keep the data, report the cause
                if not _store_down(exc) and self._drop_invalid():
                    continue  # the rest of the batch, without the records it refused
                self.log(f"kubeprof: store write failed, keeping data in memory: {exc}")
                return False
            self.pending.pop(0)
        return True

    def _drop_invalid(self) -> bool:
        """Take out of the first pending batch the records the ingest would refuse (a
        value past its column fails the whole batch's transaction); True if any were."""
        good, reasons = invalid_records.split(self.pending[0])
        if not reasons:
            return False
        self.refused += reasons
        shown = "; ".join(reasons[:3]) + (
            f"; and {len(reasons) - 3} more" if len(reasons) > 3 else ""
        )
        self.log(f"kubeprof: {len(reasons)} record(s) refused, the rest of the batch kept: {shown}")
        self.pending[0] = good
        return True

    def close(self) -> None:
        """Last flush; what the store still refuses goes to disk (see `kept_in`)."""
        if self.flush():
            return
        spool = Spool(self.fallback, max_bytes=1 << 62)  # the last copy: never drop any
        batch_id = f"local-{self.session_id}-{uuid.uuid4().hex}"
        spool.put(
            codec.encode(merge(self.pending), batch_id=batch_id, node=socket.gethostname()),
            batch_id,
        )
        self.kept_in = spool.folder


def _store_down(exc: Exception) -> bool:
    """The store could not be reached or used (retry later), as opposed to a refused value."""
    from sqlalchemy import exc as sa  # only here: the node agent has no database driver

    return isinstance(exc, (sa.OperationalError, sa.InterfaceError, sa.DisconnectionError)) or (
        isinstance(exc, sa.DBAPIError) and exc.connection_invalidated
    )
