"""xdist scheduling by test group: each group is one unit of work, run in order on one worker.

pytest-xdist's own `--dist loadgroup` groups by a suffix it writes into `item._nodeid`;
pytest 9 builds node ids from `item._id` and ignores it, so every test is scheduled alone
(tests of one group ran on three workers at once). Here the workers write the group of
each test id to a file the main process named, and the main process's scheduler reads it.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from xdist.scheduler import LoadScopeScheduling

ENV = "KUBEPROF_TEST_GROUPS"  # prefix of the files: <prefix>.<worker id>.json


def write(prefix: str, worker: str, groups: dict[str, str]) -> None:
    """A worker's {test id: group} for its collection (all workers collect the same)."""
    tmp = Path(f"{prefix}.{worker}.tmp")
    tmp.write_text(json.dumps(groups))
    os.replace(tmp, f"{prefix}.{worker}.json")


def read(prefix: str) -> dict[str, str]:
    """The groups one worker wrote; empty when none did (then every test is its own unit)."""
    for f in sorted(Path(prefix).parent.glob(f"{Path(prefix).name}.*.json")):
        return dict(json.loads(f.read_text()))
    return {}


def remove(prefix: str) -> None:
    """Remove the workers' files and their folder (made for them alone)."""
    shutil.rmtree(Path(prefix).parent, ignore_errors=True)


class GroupScheduling(LoadScopeScheduling):
    """LoadScopeScheduling whose scope is the test's group, or the test itself."""

    def __init__(self, config: pytest.Config, log: object, prefix: str) -> None:
        super().__init__(config, log)  # type: ignore[arg-type]
        self._prefix = prefix
        self._groups: dict[str, str] | None = None

    def _split_scope(self, nodeid: str) -> str:
        if self._groups is None:  # asked only after every worker has collected
            self._groups = read(self._prefix)
        group = self._groups.get(nodeid)
        return f"group:{group}" if group else nodeid


class Scheduler:
    """The plugin the main process registers: `--dist loadgroup` uses GroupScheduling."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: object) -> object:
        if config.getvalue("dist") != "loadgroup":
            return None
        return GroupScheduling(config, log, self.prefix)
