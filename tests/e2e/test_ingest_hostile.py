"""Hostile bodies against the real ingest HTTP server and a real PostgreSQL.

Whoever holds a session token can send anything. What users rely on: every request is
answered 2xx or 4xx (never 5xx, which an agent would retry forever), a refused batch leaves
nothing in the database, a batch that decodes is one PostgreSQL can store, and a poison
batch does not stop the good ones behind it (the real agent shipper against the server).
"""

from __future__ import annotations

import copy
import gzip
import http.client
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select

from kubeprof.agent.cluster.client import IngestClient
from kubeprof.agent.cluster.shipper import Shipper
from kubeprof.agent.cluster.spool import QUARANTINE, SUFFIX, Spool
from kubeprof.model import (
    Batch,
    CpuSample,
    Frame,
    FrameKind,
    GpuActivity,
    GpuMetricSample,
    ProcessInfo,
)
from kubeprof.operator.db import BatchWriter
from kubeprof.operator.registry import SessionEntry
from kubeprof.operator.targets import Target
from kubeprof.protocol import codec
from kubeprof.protocol.limits import IngestLimits
from kubeprof.storage import Store
from kubeprof.storage.models import (
    CounterRow,
    GpuActivityRow,
    GpuMetricRow,
    IngestedBatchRow,
    ProcessRow,
    SampleRow,
)
from tests.e2e import ingest_server

pytestmark = pytest.mark.e2e

NS = "hostile"
TOKEN = "tok-hostile"
POD, NODE = "0b6f2d3c-1111-4a4a-9c9c-000000000001", "node-a"
STACK = (
    Frame("train_step", FrameKind.PYTHON, "/app/train.py", 12),
    Frame("memcpy", FrameKind.NATIVE, "libc.so.6"),
)
# Small limits so the size cases stay quick; the same code paths as the defaults.
LIMITS = IngestLimits(
    max_body_bytes=4 << 20, max_json_bytes=16 << 20, max_values=1_000_000, max_rows=50_000
)
TABLES = (SampleRow, ProcessRow, GpuActivityRow, GpuMetricRow, CounterRow, IngestedBatchRow)


@pytest.fixture(scope="module")
def store(postgres_dsn) -> Iterator[Store]:
    s = Store.open(postgres_dsn.url)
    yield s
    s.close()


@pytest.fixture(scope="module")
def server(store: Store) -> Iterator[ingest_server.IngestServer]:
    srv = ingest_server.start(store.engine, limits=LIMITS)
    yield srv
    srv.stop()


@pytest.fixture
def session(server, store, request) -> SessionEntry:
    name = request.node.name.split("[")[0].replace("_", "-")[:60]
    if server.registry.get(NS, name) is None:
        server.add_session(store.engine, NS, name, TOKEN, [Target(POD, "trainer", NS, NODE)])
    entry = server.registry.get(NS, name)
    assert entry is not None
    return entry


def _good(n: int = 20, t0: int = 0) -> Batch:
    return Batch(
        samples=tuple(CpuSample(t0 + i, 100, 101, "python", 1, STACK) for i in range(n)),
        processes=(ProcessInfo(100, 1, "python", "python train.py", "c" * 64, POD),),
        gpu_activities=(
            GpuActivity(
                "kernel",
                "_Z3fooi",
                10,
                20,
                0,
                100,
                7,
                3,
                "foo(int)",
                (1, 2, 3),
                (32, 1, 1),
                40,
                128,
                0,
                STACK,
            ),
        ),
        gpu_metrics=(GpuMetricSample(5, 0, "gpu_util_pct", 42.5),),
        counters={"lost": 2},
    )


def _doc(batch_id: str, node: str = NODE) -> dict:
    return json.loads(json.dumps(codec.to_dict(_good(), batch_id=batch_id, node=node)))


def post(
    server,
    session: SessionEntry,
    body: bytes,
    *,
    token: str = TOKEN,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict]:
    """POST a body as given (no client-side compression or checks); (status, json)."""
    u = urlsplit(server.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    try:
        conn.request(
            "POST",
            f"/v1/sessions/{session.namespace}/{session.name}/batches",
            body=body,
            headers={
                "Authorization": f"Bearer {token}",
                "Content-Type": "application/json",
                **(headers or {}),
            },
        )
        r = conn.getresponse()
        raw = r.read()
    finally:
        conn.close()
    assert r.status < 500, (r.status, raw[:500])
    try:
        return r.status, json.loads(raw)
    except ValueError:
        return r.status, {"message": raw[:200].decode(errors="replace")}


def stored(store: Store, session: SessionEntry) -> int:
    """Rows of every table the ingest writes, for this session."""
    with store.engine.connect() as conn:
        return sum(
            conn.scalar(select(func.count()).select_from(t).where(t.session_id == session.db_id))
            or 0
            for t in TABLES
        )


def refused(server, store, session, body: bytes, expect: int, match: str = "", **kw) -> dict:
    before = stored(store, session)
    status, data = post(server, session, body, **kw)
    assert status == expect, (status, data)
    assert match in data["message"], data
    assert stored(store, session) == before, "a refused batch left rows behind"
    return data


def gz(doc: object) -> bytes:
    return gzip.compress(json.dumps(doc, allow_nan=True).encode())


# -- size: nothing inflates past the limits, whatever the headers say --------------------


@pytest.mark.parametrize("header", [{}, {"Content-Encoding": "gzip"}])
def test_gzip_bomb_is_refused_with_or_without_content_encoding(server, store, session, header):
    samples = b'[0,1,1,"",0,[]],' * 1_500_000  # 24 MB of JSON in ~50 KB of gzip
    bomb = gzip.compress(
        b'{"v":1,"batch_id":"bomb","node":"node-a","frames":[],"samples":['
        + samples
        + b'[0,1,1,"",0,[]]]}',
        compresslevel=9,
    )
    assert len(bomb) < 200_000
    refused(server, store, session, bomb, 413, "inflates past", headers=header)


def test_a_million_tiny_rows_in_a_small_body_are_refused(server, store, session):
    rows = b'[0,1,1,"",0,[]],' * 1_000_000
    body = gzip.compress(
        b'{"v":1,"batch_id":"rows","node":"node-a","frames":[],"samples":['
        + rows
        + b'[0,1,1,"",0,[]]]}',
        compresslevel=9,
    )
    refused(server, store, session, body, 413, "JSON values")


def test_too_many_rows_and_long_strings_are_refused(server, store, session):
    many = codec.encode(
        Batch(samples=tuple(CpuSample(i, 1, 1, "t", 0, ()) for i in range(LIMITS.max_rows + 1))),
        batch_id="many",
        node=NODE,
    )
    refused(server, store, session, many, 413, "samples: Expected `array` of length <= 50000")
    doc = _doc("longname")
    doc["frames"][0][0] = "f" * (1 << 20)  # a 1 MB function name
    refused(server, store, session, gz(doc), 422, "frames[0].name: Expected `str` of length")


def test_wire_size_and_unknown_encodings_are_refused(server, store, session):
    refused(server, store, session, b"\0" * (LIMITS.max_body_bytes + 1), 413, "at most")
    refused(
        server,
        store,
        session,
        gz(_doc("br")),
        415,
        "not supported",
        headers={"Content-Encoding": "br"},
    )


# -- values: every one must fit its column --------------------------------------------


@pytest.mark.parametrize(
    ("mutate", "status", "field"),
    [
        (lambda d: d["frames"][0].__setitem__(0, "a\x00b"), 422, "frames[0].name"),
        (lambda d: d["samples"][0].__setitem__(1, 2**31), 422, "samples[0].pid"),
        (lambda d: d.__setitem__("node", "n" * 254), 422, "node"),
        (lambda d: d["processes"][0].__setitem__(5, "u" * 300), 422, "processes[0].pod_uid"),
        (lambda d: d["gpu_metrics"][0].__setitem__(3, float("nan")), 400, "malformed"),
        (lambda d: d["gpu_metrics"][0].__setitem__(3, float("inf")), 400, "malformed"),
        (lambda d: d["gpu_metrics"][0].__setitem__(3, -1e308), 422, "gpu_metrics[0].value"),
        (lambda d: d.__setitem__("batch_id", None), 422, "batch_id"),
        (lambda d: d.__setitem__("batch_id", {"a": 1}), 422, "batch_id"),
        (lambda d: d["gpu_activities"][0].__setitem__(3, 1), 422, "gpu_activities[0].end_ns"),
        (lambda d: d["counters"].__setitem__("lost", 2**63), 422, "counters"),
        (lambda d: d["samples"][0].__setitem__(5, [99]), 422, "frame not listed"),
    ],
)
def test_out_of_range_values_are_refused_naming_the_field(
    server, store, session, mutate, status, field
):
    doc = _doc("bad-" + "".join(c for c in field if c.isalnum()))
    mutate(doc)
    refused(server, store, session, gz(doc), status, field)


def test_json_infinity_spelled_as_a_number_is_refused(server, store, session):
    raw = json.dumps(_doc("inf")).replace("42.5", "1e999").encode()
    refused(server, store, session, gzip.compress(raw), 422, "gpu_metrics[0].value")


# -- who may send what --------------------------------------------------------------------


def test_node_and_pods_must_be_the_sessions(server, store, session):
    refused(
        server,
        store,
        session,
        gz(_doc("othernode", node="node-z")),
        422,
        "node: 'node-z' runs no target pod",
    )
    doc = _doc("movedpod", node="node-b")
    session.targets.append(Target("0b6f2d3c-2222-4a4a-9c9c-000000000002", "b", NS, "node-b"))
    refused(
        server,
        store,
        session,
        gz(doc),
        422,
        f"processes[0].pod_uid: pod {POD} runs on node node-a, not on node-b",
    )
    assert post(server, session, gz(_doc("fine")))[0] == 200


def test_unknown_session_and_bad_token_look_the_same(server, store, session):
    body = gz(_doc("auth"))
    ghost = SessionEntry(NS, "no-such-session", "u", -1, "x")
    s1, d1 = post(server, session, body, token="wrong")
    s2, d2 = post(server, ghost, body, token="wrong")
    assert (s1, s2) == (403, 403)
    assert d1["message"].replace(session.name, "X") == d2["message"].replace(ghost.name, "X")
    assert stored(store, session) == 0


def test_non_utf8_authorization_header_is_403_not_500(server, session):
    u = urlsplit(server.url)
    req = (
        f"POST /v1/sessions/{NS}/{session.name}/batches HTTP/1.1\r\nHost: x\r\n"
        "Content-Length: 2\r\nAuthorization: Bearer "
    ).encode() + b"t\xf6\xff\r\n\r\n{}"
    with socket.create_connection((u.hostname, u.port), timeout=30) as s:
        s.sendall(req)
        answer = s.recv(4096)
    assert answer.split(b"\r\n", 1)[0] in (b"HTTP/1.1 403 Forbidden", b"HTTP/1.1 400 Bad Request")


def test_refused_tokens_do_not_flood_the_log(server, session, caplog):
    caplog.set_level("WARNING", logger="kubeprof.operator.ingest")
    for _ in range(50):
        assert post(server, session, b"{}", token="wrong")[0] == 403
    lines = [r for r in caplog.records if "refused a request" in r.getMessage()]
    assert len(lines) <= 1


# -- a session closing while a batch arrives --------------------------------------------


def _slow_post(server, session: SessionEntry, body: bytes) -> tuple[socket.socket, bytes]:
    """Send the headers and all but the last byte; the rest comes later."""
    u = urlsplit(server.url)
    s = socket.create_connection((u.hostname, u.port), timeout=60)
    head = (
        f"POST /v1/sessions/{NS}/{session.name}/batches HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {TOKEN}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    s.sendall(head + body[:-1])
    return s, body[-1:]


def _status(s: socket.socket, rest: bytes) -> int:
    s.sendall(rest)
    answer = s.recv(65536)
    s.close()
    return int(answer.split(b" ", 2)[1])


def test_a_batch_still_arriving_when_the_session_is_sealed_is_refused(server, store, session):
    s, rest = _slow_post(server, session, gz(_doc("late")))
    poll_inflight(session)
    left = session.close(timeout_s=0.3)  # as the reconciler does before aggregating
    assert left == 1
    assert _status(s, rest) == 409
    assert stored(store, session) == 0
    assert post(server, session, gz(_doc("later")))[0] == 409


def test_aggregation_waits_for_a_batch_already_arriving(server, store, session):
    s, rest = _slow_post(server, session, gz(_doc("inflight")))
    poll_inflight(session)
    closer = threading.Thread(target=session.close, kwargs={"timeout_s": 30})
    closer.start()
    assert _status(s, rest) == 200
    closer.join(30)
    assert session.sealed and stored(store, session) > 0  # stored before the seal


def poll_inflight(session: SessionEntry) -> None:
    import time

    for _ in range(400):
        if session.inflight:
            return
        time.sleep(0.025)
    raise AssertionError("the slow upload was never counted in flight")


# -- fairness ---------------------------------------------------------------------------


def test_one_sessions_big_batches_do_not_hold_back_anothers_small_one(server, store):
    big = server.add_session(store.engine, NS, "fair-big", TOKEN, [Target(POD, "t", NS, NODE)])
    small = server.add_session(store.engine, NS, "fair-small", TOKEN, [Target(POD, "t", NS, NODE)])
    bodies = [
        codec.encode(_good(LIMITS.max_rows - 10, t0=i * 10**6), batch_id=f"big-{i}", node=NODE)
        for i in range(4)
    ]
    done: list[str] = []
    lock = threading.Lock()

    def send(entry, body, tag):
        assert post(server, entry, body)[0] == 200
        with lock:
            done.append(tag)

    threads = [
        threading.Thread(target=send, args=(big, b, f"big-{i}")) for i, b in enumerate(bodies)
    ]
    for t in threads:
        t.start()
    poll_inflight(big)
    send(small, codec.encode(_good(5), batch_id="small-0", node=NODE), "small")
    for t in threads:
        t.join(300)
    # Round robin with a worker left free: the small batch is not queued behind all four.
    assert done.index("small") < 3, done


# -- property: the decoder accepts only what PostgreSQL can store ------------------------

_EDGES = [0, 1, -1, 2**31 - 1, 2**31, 4_194_304, 4_194_305, 2**40, 2**63 - 1, 2**63, -(2**63)]
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.text(max_size=40),
    st.sampled_from(["", "\x00", "python", "kernel", "x" * 300]),
)


def _like(value: object) -> st.SearchStrategy:
    """A value of the same JSON type, near the bounds its column may hold."""
    if isinstance(value, bool) or value is None:
        return _scalars
    if isinstance(value, int):
        return st.one_of(st.sampled_from(_EDGES), st.integers(0, 2**31))
    if isinstance(value, float):
        return st.one_of(st.floats(-1e18, 1e18), st.sampled_from([1e18, -1e18, 5e-324, 1e19]))
    if isinstance(value, str):
        return st.one_of(
            st.text(max_size=70),
            st.sampled_from(["x" * 253, "y" * 254]),
            st.text(alphabet='\x00\u00e9\U0001f600 ,[]{}\\"', max_size=10),
        )
    return st.lists(st.one_of(st.integers(0, 3), st.sampled_from(_EDGES)), max_size=6)


@st.composite
def mutated_docs(draw) -> dict:
    """A valid batch with a few values replaced: mostly by a value of the same JSON type
    near its column's bounds (so many mutants decode, and must then be storable),
    sometimes by an arbitrary JSON value (nested lists, null, booleans)."""
    doc = _doc("prop")
    for _ in range(draw(st.integers(1, 4))):
        key = draw(
            st.sampled_from(
                [
                    "samples",
                    "processes",
                    "gpu_activities",
                    "gpu_metrics",
                    "frames",
                    "counters",
                    "node",
                ]
            )
        )
        if key == "node":
            doc[key] = draw(st.one_of(_like(""), _scalars))
        elif key == "counters":
            doc["counters"][draw(st.text(max_size=70))] = draw(st.one_of(_like(0), _scalars))
        else:
            row = doc[key][0]
            col = draw(st.integers(0, len(row) - 1))
            row[col] = draw(
                st.one_of(
                    _like(row[col]),
                    _like(row[col]),
                    _like(row[col]),
                    _scalars,
                    st.lists(_scalars, max_size=4),
                )
            )
    if draw(st.sampled_from([False] * 15 + [True])):
        doc["v"] = draw(_scalars)
    doc["batch_id"] = draw(
        st.text(
            alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=128
        )
    )
    return doc


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(doc=mutated_docs())
def test_decoder_accepts_only_storable_batches(store, doc):
    """Either a CodecError naming a field, or a batch PostgreSQL stores without error."""
    raw = json.dumps(copy.deepcopy(doc)).encode()
    try:
        batch_id, node, batch = codec.decode(raw, limits=LIMITS)
    except codec.CodecError as exc:
        assert str(exc)
        return
    sid = _prop_session(store)
    BatchWriter(store.engine).store(sid, batch_id + "-" + str(id(doc)), node[:253], batch)


_PROP: dict[str, int] = {}


def _prop_session(store: Store) -> int:
    if "sid" not in _PROP:
        from datetime import UTC, datetime

        from kubeprof.operator.db import ensure_session

        _PROP["sid"] = ensure_session(
            store.engine, NS, "prop", "prop-uid", hz=99, started_at=datetime.now(UTC), meta={}
        )
    return _PROP["sid"]


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(doc=mutated_docs(), gzipped=st.booleans(), encoding=st.sampled_from(["", "gzip"]))
def test_server_answers_2xx_or_4xx_and_stores_nothing_it_refuses(
    server, store, session, doc, gzipped, encoding
):
    raw = json.dumps(doc).encode()
    body = gzip.compress(raw) if gzipped else raw
    before = stored(store, session)
    status, data = post(
        server, session, body, headers={"Content-Encoding": encoding} if encoding else {}
    )
    if status == 200:
        return
    assert status in (400, 409, 413, 415, 422), (status, data)
    assert stored(store, session) == before


# -- the agent side: a poison batch does not wedge the real shipper ------------------------


def test_poison_batch_then_good_batches_all_delivered(server, store, session, tmp_path: Path):
    spool = Spool(tmp_path / "spool")
    good_ids = []
    for i in range(6):
        if i == 1:  # a batch the server refuses as invalid
            doc = _doc("poison")
            doc["samples"][0][1] = 2**31
            spool.put(gz(doc), "poison")
        elif i == 3:  # a foreign file named like a batch
            (spool.folder / f"000000000099-foreign{SUFFIX}").write_bytes(b"hello")
        else:
            bid = f"good-{i}"
            spool.put(codec.encode(_good(10, t0=i * 1000), batch_id=bid, node=NODE), bid)
            good_ids.append(bid)
    (spool.folder / f"000000000100-adir{SUFFIX}").mkdir()
    shipper = Shipper(spool, IngestClient(server.url, NS, session.name, TOKEN, timeout_s=30))
    assert shipper.drain(60)
    assert spool.pending() == []
    with store.engine.connect() as conn:
        ids = set(
            conn.scalars(
                select(IngestedBatchRow.batch_id).where(
                    IngestedBatchRow.session_id == session.db_id
                )
            )
        )
        samples = conn.scalar(
            select(func.count()).select_from(SampleRow).where(SampleRow.session_id == session.db_id)
        )
    assert ids == set(good_ids) and samples == 10 * len(good_ids)
    # The poison batch and the foreign file refused, the directory moved aside unread.
    assert shipper.stats.sent == len(good_ids) and shipper.stats.rejected == 2
    assert spool.quarantined == 3 and len(list((spool.folder / QUARANTINE).iterdir())) == 3
