"""The ingest refuses what the session does not allow (time span, rows, frames, stacks),
storing none of it."""

import asyncio
from datetime import UTC, datetime

import pytest
from aiohttp.test_utils import TestClient, TestServer
from sqlalchemy import func, select

from kubeprof.model import Batch, CpuSample, Frame, FrameKind, GpuActivity
from kubeprof.operator.db import BatchWriter, ensure_session
from kubeprof.operator.ingest import SERVER_OPTIONS, IngestApi
from kubeprof.operator.phases import Phase
from kubeprof.operator.registry import Registry, SessionEntry
from kubeprof.operator.targets import Target
from kubeprof.protocol.codec import encode
from kubeprof.protocol.limits import IngestLimits
from kubeprof.storage import Store
from kubeprof.storage.models import (
    FrameRow,
    GpuActivityRow,
    IngestedBatchRow,
    SampleRow,
    StackRow,
)

S = 1_000_000_000
T0 = 5_000 * S  # a node's monotonic clock, some time after boot


@pytest.fixture
def store(tmp_path):
    s = Store.open(f"sqlite:///{tmp_path}/k.db")
    yield s
    s.close()


def _entry(store: Store, reg: Registry, name: str) -> SessionEntry:
    sid = ensure_session(
        store.engine, "ns", name, f"uid-{name}", hz=99, started_at=datetime.now(UTC), meta={}
    )
    e = SessionEntry(
        "ns",
        name,
        f"uid-{name}",
        sid,
        "tok",
        Phase.RUNNING,
        1000.0 + 60,
        [Target("uid-p", "pod", "ns", "n1")],
        start_time=1000.0,
    )
    reg.put(e)
    return e


LIMITS = IngestLimits(max_skew_s=20)


def _poster(client: TestClient):
    """post(session name, batch, batch id) -> (status, answer) with the sessions' token."""

    async def post(name: str, batch: Batch, bid: str):
        r = await client.post(
            f"/v1/sessions/ns/{name}/batches",
            data=encode(batch, batch_id=bid, node="n1"),
            headers={"Authorization": "Bearer tok", "Content-Encoding": "gzip"},
        )
        return r.status, await r.json()

    return post


def _run(store, fn, limits=LIMITS):
    reg = Registry()
    api = IngestApi(
        reg, BatchWriter(store.engine), writers=1, startup_grace_s=0, drain_s=10, limits=limits
    )

    async def go():
        async with TestClient(TestServer(api.app(), **SERVER_OPTIONS)) as client:
            return await fn(_poster(client), reg)

    try:
        return asyncio.run(go())
    finally:
        api.pool.shutdown()


def _rows(store: Store, table) -> int:
    with store.engine.connect() as c:
        return int(c.scalar(select(func.count()).select_from(table)))


def _samples(t: int, n: int = 3) -> tuple[CpuSample, ...]:
    return tuple(CpuSample(t + i, 7, 7, "py", 0, ()) for i in range(n))


@pytest.mark.parametrize("end", [T0 + 115 * 86400 * S, 2**63 - 1])
def test_a_kernel_spanning_more_than_the_session_is_refused_and_nothing_is_stored(store, end):
    async def fn(post, reg):
        _entry(store, reg, "s")
        bad = Batch(
            samples=_samples(T0), gpu_activities=(GpuActivity("kernel", "k", T0, end, 0, 7, 1),)
        )
        return await post("s", bad, "b-1"), await post("s", Batch(samples=_samples(T0)), "b-2")

    (status, ans), (ok, _) = _run(store, fn)
    assert status == 422, ans
    assert "gpu_activities[0].end_ns" in ans["message"] and "90.0 s" in ans["message"], ans
    assert ok == 200
    assert _rows(store, GpuActivityRow) == 0 and _rows(store, SampleRow) == 3
    assert _rows(store, IngestedBatchRow) == 1


def test_a_later_batch_outside_the_nodes_window_is_refused(store):
    async def fn(post, reg):
        _entry(store, reg, "s")
        first = await post("s", Batch(samples=_samples(T0)), "b-1")
        inside = await post("s", Batch(samples=_samples(T0 + 80 * S)), "b-2")
        later = await post("s", Batch(samples=_samples(T0 + 91 * S)), "b-3")
        return first, inside, later

    first, inside, (status, ans) = _run(store, fn)
    assert first[0] == inside[0] == 200
    assert status == 422 and ans["message"].startswith("invalid batch: samples[0].ts_ns"), ans
    assert _rows(store, SampleRow) == 6


def test_the_window_survives_a_restart_of_the_ingest(store):
    async def first(post, reg):
        _entry(store, reg, "s")
        return await post("s", Batch(samples=_samples(T0)), "b-1")

    async def second(post, reg):
        reg.put(
            SessionEntry(
                "ns",
                "s",
                "uid-s",
                1,
                "tok",
                Phase.RUNNING,
                1060.0,
                [Target("uid-p", "pod", "ns", "n1")],
                start_time=1000.0,
            )
        )
        return await post("s", Batch(samples=_samples(T0 + 100 * S)), "b-2")

    assert _run(store, first)[0] == 200
    status, ans = _run(store, second)
    assert status == 422 and "samples[0].ts_ns" in ans["message"], ans


def test_rows_per_session_are_capped_and_a_duplicate_does_not_count_twice(store):
    async def fn(post, reg):
        _entry(store, reg, "s")
        _entry(store, reg, "t")
        out = [
            await post("s", Batch(samples=_samples(T0, 4)), "b-1"),
            await post("s", Batch(samples=_samples(T0, 4)), "b-1"),  # retried
            await post("s", Batch(samples=_samples(T0, 4)), "b-2"),
            await post("s", Batch(samples=_samples(T0, 3)), "b-3"),
            await post("t", Batch(samples=_samples(T0, 4)), "b-1"),
        ]  # another session
        return out

    reg_out = _run(store, fn, IngestLimits(max_skew_s=20, max_session_rows=10))
    assert [s for s, _ in reg_out] == [200, 200, 200, 413, 200], reg_out
    assert "limit of 10 per session" in reg_out[3][1]["message"]
    assert _rows(store, SampleRow) == 12


def test_the_quota_figures_are_what_the_session_stored(store):
    reg = Registry()
    entry = _entry(store, reg, "s")
    api = IngestApi(
        reg,
        BatchWriter(store.engine),
        writers=1,
        startup_grace_s=0,
        limits=IngestLimits(max_session_rows=1000),
    )

    async def go():
        async with TestClient(TestServer(api.app(), **SERVER_OPTIONS)) as client:
            for n, bid in ((4, "b-1"), (4, "b-1"), (3, "b-2")):  # b-1 twice: a duplicate
                r = await client.post(
                    "/v1/sessions/ns/s/batches",
                    data=encode(Batch(samples=_samples(T0, n)), batch_id=bid, node="n1"),
                    headers={"Authorization": "Bearer tok", "Content-Encoding": "gzip"},
                )
                assert r.status == 200

    try:
        assert api.usage.quota(entry) is None  # nothing seen yet: no figure to show
        asyncio.run(go())
        assert api.usage.quota(entry) == {
            "records": 7,
            "maxRecords": 1000,
            "frames": 0,  # _samples' one (empty) stack, added by b-1 alone
            "maxFrames": 500_000,
            "stacks": 1,
            "maxStacks": 1_000_000,
        }
    finally:
        api.pool.shutdown()


def _stacks(t: int, names: list[str], depth: int = 2) -> Batch:
    """One sample per stack `name`, each stack `depth` frames of its own."""
    return Batch(
        samples=tuple(
            CpuSample(
                t + i,
                7,
                7,
                "py",
                0,
                tuple(Frame(f"{n}.{d}", FrameKind.PYTHON) for d in range(depth)),
            )
            for i, n in enumerate(names)
        )
    )


def test_frames_and_stacks_a_session_adds_are_capped_and_a_refused_batch_leaves_nothing(store):
    limits = IngestLimits(max_skew_s=20, max_session_frames=12, max_session_stacks=5)
    reg = Registry()
    api = IngestApi(
        reg, BatchWriter(store.engine), writers=1, startup_grace_s=0, drain_s=10, limits=limits
    )
    s, t = _entry(store, reg, "s"), _entry(store, reg, "t")

    async def go():
        async with TestClient(TestServer(api.app(), **SERVER_OPTIONS)) as client:
            post = _poster(client)
            out = {"s1": await post("s", _stacks(T0, ["a", "b", "c"]), "b-1")}
            shared = (_rows(store, StackRow), _rows(store, FrameRow), _rows(store, SampleRow))
            # 6 stacks > 5 (its 12 frames would fit)
            out["s2"] = await post("s", _stacks(T0, ["d", "e", "f"]), "b-2")
            out["after_s2"] = (
                _rows(store, StackRow),
                _rows(store, FrameRow),
                _rows(store, SampleRow),
                _rows(store, IngestedBatchRow),
            )
            out["shared"] = shared
            # stacks it added before cost it nothing to use again
            out["s3"] = await post("s", _stacks(T0, ["a", "b", "c"] * 20), "b-3")
            # another session adds d, e, f (its own quota); then s uses them for free
            out["t1"] = await post("t", _stacks(T0, ["d", "e", "f"]), "b-1")
            out["s4"] = await post("s", _stacks(T0, ["d", "e", "f"]), "b-4")
            # 2 new stacks would fit (3 + 2 <= 5), but their 8 frames would not (6 + 8 > 12)
            out["s5"] = await post("s", _stacks(T0, ["g", "h"], depth=4), "b-5")
            return out

    try:
        out = asyncio.run(go())
        assert out["s1"][0] == 200 and out["t1"][0] == 200, out
        status, ans = out["s2"]
        assert status == 413, ans
        assert ans["message"].startswith("stacks: session ns/s added 3 stacks"), ans
        assert "this batch's 3 new ones would pass the limit of 5 per session" in ans["message"]
        assert "(--ingest-max-session-stacks)" in ans["message"]
        # nothing of the refused batch: no stack, frame, sample or batch id
        assert out["after_s2"] == (*out["shared"], 1), out
        assert out["s3"][0] == out["s4"][0] == 200, out
        status, ans = out["s5"]
        assert status == 413 and ans["message"].startswith("frames: session ns/s added 6"), ans
        assert "(--ingest-max-session-frames)" in ans["message"], ans
        used = {"maxRecords": 100_000_000, "maxFrames": 12, "maxStacks": 5}
        assert api.usage.quota(s) == {"records": 66, "frames": 6, "stacks": 3, **used}
        assert api.usage.quota(t) == {"records": 3, "frames": 6, "stacks": 3, **used}
    finally:
        api.pool.shutdown()
    # An operator restarted mid-session reads what each session added from the database.
    again = IngestApi(
        reg, BatchWriter(store.engine), writers=1, startup_grace_s=0, drain_s=10, limits=limits
    )
    try:
        again.usage.admit(s, "n1", Batch())
        assert again.usage.quota(s) == {"records": 66, "frames": 6, "stacks": 3, **used}
    finally:
        again.pool.shutdown()
