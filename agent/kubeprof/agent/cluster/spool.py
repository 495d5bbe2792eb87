"""A disk spool: every batch is written here before it is sent, and removed once stored.

Writing first means nothing collected is lost when the ingest API or its database is down,
or when the agent itself is restarted: the next agent on the node ships what is left. A
batch keeps its id (in the file name) across retries and restarts, which is what lets the
ingest store it exactly once.

The spool never stops the agent: anything in the folder that is not a batch this code
wrote (a foreign file, a directory, a bad name, a body the ingest refuses) is moved to
`quarantine/` and counted, and a full disk drops the oldest batches (counted, reported in
the next batch's `agent_spool_dropped` counter) instead of raising.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

SUFFIX = ".batch.gz"
QUARANTINE = "quarantine"
_NAME = re.compile(r"(\d{12})-([!-~]{1,128})" + re.escape(SUFFIX))
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)

log = logging.getLogger("kubeprof.agent")


@dataclass(frozen=True, slots=True)
class Spooled:
    """One spooled batch: its file and its id."""

    path: Path
    batch_id: str

    def size(self) -> int:
        """The file's size now (a stat each call, so not a property); 0 once it is gone."""
        try:
            return self.path.stat().st_size
        except OSError:
            return 0


class Spool:
    """Files `<seq>-<batch id>.batch.gz` in `folder`, oldest first; `quarantine/` for the
    rest (at most a quarter of max_bytes, oldest removed first)."""

    def __init__(self, folder: Path, *, max_bytes: int = 1 << 30) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        # Root only: the host folder (a kubelet hostPath, created 0755) holds profile data.
        self.folder.chmod(0o700)
        self.max_bytes = max_bytes
        self.dropped = 0  # batches deleted because the spool or the disk was full
        self.quarantined = 0  # entries moved aside (refused by the ingest, or not batches)
        self.problem = ""  # the last disk problem, for the agent's log and summary
        for tmp in self.folder.glob(".*.tmp"):  # a write cut short by a crash
            tmp.unlink(missing_ok=True)
        existing = self.pending()  # names checked: each starts with 12 digits
        self._seq = int(existing[-1].path.name[:12]) + 1 if existing else 0

    def put(self, body: bytes, batch_id: str | None = None) -> Spooled | None:
        """Write one encoded batch atomically (tmp file + rename); None when the disk is
        full even after dropping every older batch (the batch is dropped and counted)."""
        bid = batch_id or uuid.uuid4().hex
        name = f"{self._seq:012d}-{bid}{SUFFIX}"
        self._seq += 1
        while True:
            try:
                final = self._write(name, body)
                break
            except OSError as exc:
                if exc.errno not in _DISK_FULL:
                    raise
                if not self._drop_oldest(f"disk full ({exc.strerror})"):
                    self.dropped += 1  # nothing older left to make room: lose this one
                    return None
        self._enforce_limit()
        return Spooled(final, bid)

    def _write(self, name: str, body: bytes) -> Path:
        tmp = self.folder / f".{name}.tmp"
        try:
            with open(tmp, "wb") as fh:
                fh.write(body)
                fh.flush()
                os.fsync(fh.fileno())
            final = self.folder / name
            os.replace(tmp, final)
            return final
        finally:
            tmp.unlink(missing_ok=True)

    def _drop_oldest(self, why: str) -> bool:
        items = self.pending()
        if not items:
            return False
        items[0].path.unlink(missing_ok=True)
        self.dropped += 1
        if self.problem != why:
            log.warning(
                "spool %s: %s; dropping the oldest batches (%d so far)",
                self.folder,
                why,
                self.dropped,
            )
        self.problem = why
        return True

    def pending(self) -> list[Spooled]:
        """Spooled batches, oldest first; anything else named like a batch is quarantined."""
        out = []
        for p in sorted(self.folder.glob(f"*{SUFFIX}")):
            m = _NAME.fullmatch(p.name)
            if m is None or p.is_symlink() or not p.is_file():
                self.quarantine(p, "not a batch file of this spool")
                continue
            out.append(Spooled(p, m.group(2)))
        return out

    def done(self, item: Spooled) -> None:
        """The batch is stored: forget it."""
        item.path.unlink(missing_ok=True)

    def reject(self, item: Spooled) -> Path | None:
        """The ingest refused this batch for good: keep it aside for a human, out of the queue."""
        return self.quarantine(item.path, "refused by the ingest")

    def quarantine(self, path: Path, why: str) -> Path | None:
        """Move `path` out of the queue into quarantine/ (deleted if even that fails)."""
        target, name = self.folder / QUARANTINE, path.name
        dest: Path | None
        try:
            if target.is_symlink():  # not made by us: the link goes, never what it names
                target.unlink()
            target.mkdir(exist_ok=True)
            if os.path.lexists(target / name):
                name += f".{uuid.uuid4().hex[:8]}"
            os.replace(path, target / name)
            dest = target / name
        except OSError as exc:
            log.warning("cannot quarantine %s (%s); removing it", path, exc.strerror)
            _remove(path)
            dest = None
        self.quarantined += 1
        log.warning("spool: %s %s; moved to %s", path.name, why, dest or "nowhere (removed)")
        self._trim_quarantine()
        return dest

    def _trim_quarantine(self) -> None:
        """Remove the oldest quarantined entries past a quarter of the spool's size.

        The folder is opened without following a symlink and its entries are removed
        relative to that handle, never through a path: a quarantine/ that is (or becomes)
        a link to somewhere else costs nothing outside the spool."""
        try:
            fd = os.open(self.folder / QUARANTINE, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            return
        try:
            entries = []
            with os.scandir(fd) as it:
                for e in it:
                    st = e.stat(follow_symlinks=False)
                    entries.append(
                        (st.st_mtime, e.name, st.st_size, e.is_dir(follow_symlinks=False))
                    )
            entries.sort()
            total = sum(size for _, _, size, _ in entries)
            while entries and total > self.max_bytes // 4:
                _, name, size, is_dir = entries.pop(0)
                total -= size
                try:
                    if is_dir:
                        shutil.rmtree(name, dir_fd=fd)
                    else:
                        os.unlink(name, dir_fd=fd)
                except OSError:
                    pass
        except OSError:
            return
        finally:
            os.close(fd)

    def _enforce_limit(self) -> None:
        """Drop the oldest batches past max_bytes, so a long outage cannot fill the node's disk."""
        items = self.pending()
        total = sum(s.size() for s in items)
        while total > self.max_bytes and len(items) > 1:
            oldest = items.pop(0)
            total -= oldest.size()
            oldest.path.unlink(missing_ok=True)
            self.dropped += 1


def _remove(path: Path) -> None:
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    except OSError:
        pass
