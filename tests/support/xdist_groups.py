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
from xdist.workermanage import WorkerController

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


HEAVY = ("group:cluster:", "group:serial")  # units of minutes: control-plane sessions, eBPF


def heavy(scope: str) -> bool:
    """A unit that runs for minutes (a control plane's module, the serial group)."""
    return scope.startswith(HEAVY)


class GroupScheduling(LoadScopeScheduling):
    """LoadScopeScheduling whose scope is the test's group, or the test itself.

    Heavy units go out first, one per worker at a time: xdist hands a worker a second unit
    while its first has two tests or fewer left, and a one-test control-plane module (the
    shards session, ~2.5 min) followed by another such module on the same worker left the
    others idle at the end. A worker that holds a heavy unit is given a light one (a unit
    test) instead, which keeps it fed (a worker runs a test only once it knows the next).
    """

    def __init__(self, config: pytest.Config, log: object, prefix: str) -> None:
        super().__init__(config, log)  # type: ignore[arg-type]
        self._prefix = prefix
        self._groups: dict[str, str] | None = None

    def _split_scope(self, nodeid: str) -> str:
        if self._groups is None:  # asked only after every worker has collected
            self._groups = read(self._prefix)
        group = self._groups.get(nodeid)
        return f"group:{group}" if group else nodeid

    def _holds_heavy(self, node: WorkerController) -> bool:
        return any(
            heavy(scope) and not all(unit.values())
            for scope, unit in self.assigned_work.get(node, {}).items()
        )

    def _assign_work_unit(self, node: WorkerController) -> None:
        want_heavy = not self._holds_heavy(node)
        pick = next((s for s in self.workqueue if heavy(s) == want_heavy), None)
        if pick is not None:
            self.workqueue.move_to_end(pick, last=False)
        super()._assign_work_unit(node)

    def _reschedule(self, node: WorkerController) -> None:
        if (
            not node.shutting_down
            and self.workqueue
            and self._holds_heavy(node)
            and self._pending_of(self.assigned_work[node]) >= 2
        ):
            return  # fed until its heavy unit is down to its last test
        super()._reschedule(node)


class Scheduler:
    """The plugin the main process registers: `--dist loadgroup` uses GroupScheduling; at
    the end it prints each worker's busy time, the figure to balance the groups by."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.busy: dict[str, list[float]] = {}  # worker id -> [seconds, tests]

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        node = getattr(report, "node", None)  # the worker that ran it (xdist's controller)
        if node is None:
            return
        busy = self.busy.setdefault(node.gateway.id, [0.0, 0])
        busy[0] += report.duration
        busy[1] += report.when == "call"

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.busy:
            terminalreporter.write_line(
                "busy time per xdist worker (setup + call + teardown): "
                + ", ".join(
                    f"{w} {s:.0f} s ({n:.0f} tests)" for w, (s, n) in sorted(self.busy.items())
                )
            )

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: object) -> object:
        if config.getvalue("dist") != "loadgroup":
            return None
        return GroupScheduling(config, log, self.prefix)
