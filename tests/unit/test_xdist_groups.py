"""`make test`'s xdist scheduler (tests/support/xdist_groups.py), driven through xdist's own
LoadScopeScheduling by a small event simulation of workers: a group stays on one worker,
every test runs, and two minutes-long control-plane modules never queue on one worker
while another worker has only unit tests."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.support import xdist_groups


@dataclass(eq=False)
class FakeWorker:
    """What the scheduler calls on an xdist WorkerController; a worker runs a test only
    once it knows the next one or is told to shut down, as xdist's workers do."""

    name: str
    queue: list[int] = field(default_factory=list)
    shutting_down: bool = False

    @property
    def gateway(self) -> SimpleNamespace:
        return SimpleNamespace(id=self.name)

    def send_runtest_some(self, indexes: list[int]) -> None:
        self.queue.extend(indexes)

    def shutdown(self) -> None:
        self.shutting_down = True

    def runnable(self) -> bool:
        return len(self.queue) >= 2 or (self.shutting_down and bool(self.queue))


def simulate(
    tmp_path: Path, tests: dict[str, float], groups: dict[str, str], workers: int
) -> tuple[dict[str, str], dict[str, float]]:
    """Run `tests` (id -> seconds) on `workers` workers: which worker ran each test, and
    each worker's busy seconds."""
    prefix = str(tmp_path / "groups")
    xdist_groups.write(prefix, "gw0", groups)
    config = SimpleNamespace(
        option=SimpleNamespace(loadscopereorder=True),
        getvalue=lambda name: {"tx": [f"{workers}*popen"], "dist": "loadgroup"}[name],
    )
    sched = xdist_groups.GroupScheduling(
        config, SimpleNamespace(loadscopesched=lambda *_a: None), prefix
    )

    ids = list(tests)
    nodes = [FakeWorker(f"gw{i}") for i in range(workers)]
    for n in nodes:
        sched.add_node(n)
        sched.add_node_collection(n, ids)
    sched.schedule()

    ran: dict[str, str] = {}
    busy = {n.name: 0.0 for n in nodes}
    clock = 0.0
    running: list[tuple[float, int, str]] = []  # (ends at, order, worker name)
    by_name = {n.name: n for n in nodes}
    order = 0

    def start_ready() -> None:
        nonlocal order
        for n in nodes:
            if n.runnable() and not any(w == n.name for _, _, w in running):
                index = n.queue[0]
                heapq.heappush(running, (clock + tests[ids[index]], order, n.name))
                order += 1

    start_ready()
    while running:
        clock, _, name = heapq.heappop(running)
        n = by_name[name]
        index = n.queue.pop(0)
        ran[ids[index]] = name
        busy[name] += tests[ids[index]]
        sched.mark_test_complete(n, index)
        if sched.tests_finished:  # what xdist's DSession checks before shutting all down
            for m in nodes:
                m.shutdown()
        start_ready()
    stuck = {n.name: [ids[i] for i in n.queue] for n in nodes if n.queue}
    assert not stuck and not sched.workqueue, f"workers wait for a next test forever: {stuck}"
    return ran, busy


def test_every_test_runs_and_a_group_stays_on_one_worker(tmp_path):
    tests = {f"tests/e2e/test_a.py::t{i}": 10.0 for i in range(3)}
    tests |= {f"tests/unit/test_u.py::u{i}": 1.0 for i in range(20)}
    groups = {t: "cluster:tests/e2e/test_a.py" for t in tests if "e2e" in t}
    ran, _ = simulate(tmp_path, tests, groups, workers=3)
    assert set(ran) == set(tests)
    assert len({ran[t] for t in groups}) == 1


def test_two_long_one_test_modules_run_on_two_workers_not_one(tmp_path):
    """xdist's order (units with more tests first) started a module database's three quick
    tests on one worker and both minutes-long one-test sessions back to back on the other,
    which its first unit left with one test to go; the heavy units now go out first."""
    tests = {f"tests/e2e/test_ui_postgres.py::q{i}": 1.0 for i in range(3)}
    tests |= {
        "tests/e2e/test_operator_shards.py::t": 150.0,
        "tests/e2e/test_light_deep.py::t": 130.0,
    }
    tests |= {f"tests/unit/test_u{i}.py::u": 2.0 for i in range(120)}
    groups = {t: "tests/e2e/test_ui_postgres.py" for t in tests if "postgres" in t}
    groups |= {
        "tests/e2e/test_operator_shards.py::t": "cluster:tests/e2e/test_operator_shards.py",
        "tests/e2e/test_light_deep.py::t": "cluster:tests/e2e/test_light_deep.py",
    }
    ran, busy = simulate(tmp_path, tests, groups, workers=2)
    assert set(ran) == set(tests)
    assert ran["tests/e2e/test_operator_shards.py::t"] != ran["tests/e2e/test_light_deep.py::t"]
    assert max(busy.values()) - min(busy.values()) <= 4.0, busy


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_no_worker_waits_forever_on_its_last_test(tmp_path, workers):
    """A worker holding one heavy test and nothing after it would never start it: it is
    fed a light unit (or shut down) so that every test runs, for any number of workers."""
    tests = {f"tests/e2e/test_m{i}.py::t": 50.0 for i in range(5)}
    tests |= {f"tests/unit/test_u{i}.py::u": 1.0 for i in range(3)}
    groups = {t: f"cluster:{t.split('::')[0]}" for t in tests if "e2e" in t}
    ran, _ = simulate(tmp_path, tests, groups, workers=workers)
    assert set(ran) == set(tests)


def _item(nodeid: str, scopes: dict[str, str]) -> SimpleNamespace:
    """What tests/conftest.py's group_of reads of a collected test."""
    defs = {name: [SimpleNamespace(scope=scope)] for name, scope in scopes.items()}
    return SimpleNamespace(
        nodeid=nodeid,
        fixturenames=list(scopes),
        get_closest_marker=lambda _name: None,
        _fixtureinfo=SimpleNamespace(name2fixturedefs=defs),
    )


def test_a_module_fixture_is_set_up_on_one_worker_not_on_each():
    """test_cli_diff's module fixture records two sessions (~27 s): its three tests spread
    over three workers recorded them three times."""
    from tests.conftest import group_of

    shared = _item(
        "tests/unit/cli/test_cli_diff.py::t", {"two_runs": "module", "tmp_path": "function"}
    )
    alone = _item("tests/unit/cli/test_x.py::t", {"tmp_path": "function", "pg": "session"})
    assert group_of(shared) == "tests/unit/cli/test_cli_diff.py"
    assert group_of(alone) is None
