"""Spool folders left from before spools were keyed by the session's UID.

Agents used to spool under `<root>/<namespace>_<session>`, so a session re-created under
the same name received the old one's batches. Spools are now
`<namespace>_<session>_<uid>` (`kubeprof.protocol.settings.spool_folder`): no agent of a
cluster session uses a folder without a UID again, and what such a folder holds belongs to
a session instance that is gone. Folders of that old form idle for `LEGACY_IDLE_S` are
removed whenever an agent starts with the spool root in view (a light agent going deep;
an agent started by hand with `--spool-dir` at the root; a per-session agent sees only its
own folder and finds nothing to do).

Nothing here follows a symbolic link: the root is opened with O_NOFOLLOW, entries are
examined with lstat and removed relative to that handle (`shutil.rmtree` with `dir_fd`,
which never descends through a link), so a link among the folders, or inside one, is
removed itself and never what it points to.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import stat
import time
from pathlib import Path

log = logging.getLogger("kubeprof.agent")

LEGACY_IDLE_S = 7 * 86400.0  # untouched this long: no agent is still writing there
_UID = re.compile(r"_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_NAMESPACED = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?_.+")  # <namespace>_<session>


def is_legacy(name: str) -> bool:
    """Whether `name` is a spool folder name of the old form (no session UID)."""
    return _NAMESPACED.fullmatch(name) is not None and _UID.search(name) is None


def sweep_legacy(
    root: Path, *, keep: str = "", idle_s: float = LEGACY_IDLE_S, now: float | None = None
) -> list[str]:
    """Remove old-form folders (and links so named) under `root` idle for `idle_s`, except
    `keep` (the caller's own folder); returns the names removed. Never raises."""
    now = time.time() if now is None else now
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return []
    removed: list[str] = []
    try:
        with os.scandir(fd) as it:
            names = [e.name for e in it if e.name != keep and is_legacy(e.name)]
        for name in names:
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if now - st.st_mtime < idle_s:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    shutil.rmtree(name, dir_fd=fd)
                elif stat.S_ISLNK(st.st_mode):
                    os.unlink(name, dir_fd=fd)
                else:
                    continue  # a plain file is no spool folder: not ours to judge
            except OSError as exc:
                log.info("spool: cannot remove old folder %s: %s", name, exc.strerror)
                continue
            removed.append(name)
    except OSError:
        pass
    finally:
        os.close(fd)
    if removed:
        log.info(
            "spool: removed %d folder(s) of the old form without a session UID, idle for "
            "%.0f days: %s",
            len(removed),
            idle_s / 86400,
            ", ".join(removed[:5]) + (" ..." if len(removed) > 5 else ""),
        )
    return removed
