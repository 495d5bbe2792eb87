"""A disk spool: every batch is written here before it is sent, and removed once stored.

Writing first means nothing collected is lost when the ingest API or its database is down,
or when the agent itself is restarted: the next agent on the node ships what is left. A
batch keeps its id (in the file name) across retries and restarts, which is what lets the
ingest store it exactly once.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path

SUFFIX = ".batch.gz"


@dataclass(frozen=True, slots=True)
class Spooled:
    """One spooled batch: its file and its id."""

    path: Path
    batch_id: str

    @property
    def size(self) -> int:
        try:
            return self.path.stat().st_size
        except OSError:
            return 0


class Spool:
    """Files `<seq>-<batch id>.batch.gz` in `folder`, oldest first; `rejected/` for poison."""

    def __init__(self, folder: Path, *, max_bytes: int = 1 << 30) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        # Root only: the host folder (a kubelet hostPath, created 0755) holds profile data.
        self.folder.chmod(0o700)
        self.max_bytes = max_bytes
        self.dropped = 0  # batches deleted because the spool was full (counted, reported)
        existing = self.pending()
        self._seq = (int(existing[-1].path.name.split("-", 1)[0]) + 1) if existing else 0

    def put(self, body: bytes, batch_id: str | None = None) -> Spooled:
        """Write one encoded batch atomically (tmp file + rename); returns its entry."""
        bid = batch_id or uuid.uuid4().hex
        name = f"{self._seq:012d}-{bid}{SUFFIX}"
        self._seq += 1
        tmp = self.folder / f".{name}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(body)
            fh.flush()
            os.fsync(fh.fileno())
        final = self.folder / name
        os.replace(tmp, final)
        self._enforce_limit()
        return Spooled(final, bid)

    def pending(self) -> list[Spooled]:
        """Spooled batches, oldest first."""
        out = []
        for p in sorted(self.folder.glob(f"*{SUFFIX}")):
            seq_id = p.name.removesuffix(SUFFIX)
            if "-" in seq_id:
                out.append(Spooled(p, seq_id.split("-", 1)[1]))
        return out

    def done(self, item: Spooled) -> None:
        """The batch is stored: forget it."""
        item.path.unlink(missing_ok=True)

    def reject(self, item: Spooled) -> Path:
        """The ingest refused this batch for good: keep it aside for a human, out of the queue."""
        target = self.folder / "rejected"
        target.mkdir(exist_ok=True)
        dest = target / item.path.name
        os.replace(item.path, dest)
        return dest

    def total_bytes(self) -> int:
        return sum(s.size for s in self.pending())

    def _enforce_limit(self) -> None:
        """Drop the oldest batches past max_bytes, so a long outage cannot fill the node's disk."""
        items = self.pending()
        total = sum(s.size for s in items)
        while total > self.max_bytes and len(items) > 1:
            oldest = items.pop(0)
            total -= oldest.size
            oldest.path.unlink(missing_ok=True)
            self.dropped += 1
