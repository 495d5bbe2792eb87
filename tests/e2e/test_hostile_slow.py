"""Slow and idle clients against the real ingest HTTP server over real sockets (issue 32, item 2).

Sixteen connections that send headers and a few body bytes and then idle used to hold all
sixteen slots, so every other session got 503 until they closed. What users rely on now:
such a client holds at most its session's and its address's share, another session's
batch is stored meanwhile, a stalled body is answered 408 and disconnected, headers that
never complete are cut off, and a request with a wrong token is answered and closed at
once, before its body.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from kubeprof.model import Batch, CpuSample, Frame, FrameKind
from kubeprof.operator.slow_clients import ReadTimeouts
from kubeprof.operator.targets import Target
from kubeprof.protocol import codec
from kubeprof.storage import Store
from tests.e2e import ingest_server

pytestmark = pytest.mark.e2e

NS, TOKEN, NODE = "slow", "tok-slow", "node-s"
POD = "0b6f2d3c-2222-4a4a-9c9c-000000000002"
STACK = (Frame("step", FrameKind.PYTHON, "/app/t.py", 3),)
# Short limits so the timeout cases stay quick; the same code paths as the defaults. The
# long lingering read makes "closed at once" unmistakable: closed long before it would end.
QUICK = ReadTimeouts(header_s=1.5, idle_s=1.0, grace_s=1.0, min_bytes_per_s=1024, lingering_s=600)


@pytest.fixture(scope="module")
def store(postgres_dsn) -> Iterator[Store]:
    s = Store.open(postgres_dsn.url)
    yield s
    s.close()


def _start(store: Store, timeouts: ReadTimeouts) -> ingest_server.IngestServer:
    srv = ingest_server.start(store.engine, timeouts=timeouts)
    for name in ("victim", *(f"attacker-{i}" for i in range(4))):
        srv.add_session(store.engine, NS, name, TOKEN, [Target(POD, "t", NS, NODE)])
    return srv


@pytest.fixture
def server(store: Store) -> Iterator[ingest_server.IngestServer]:
    """The default limits: idle uploads are held long enough to fill what they can."""
    srv = _start(store, ReadTimeouts())
    yield srv
    srv.stop()


@pytest.fixture
def quick(store: Store) -> Iterator[ingest_server.IngestServer]:
    srv = _start(store, QUICK)
    yield srv
    srv.stop()


def _wait_held(server, total: int) -> None:
    """Until `total` requests are past the checks and reading their bodies."""
    for _ in range(400):
        if server.api.pending == total:
            return
        time.sleep(0.025)
    raise AssertionError(f"{server.api.pending} requests in flight, expected {total}")


def _addr(server) -> tuple[str, int]:
    u = urlsplit(server.url)
    assert u.hostname is not None and u.port is not None
    return u.hostname, u.port


def _connect(server, source: str = "127.0.0.1") -> socket.socket:
    s = socket.socket()
    s.settimeout(30)
    s.bind((source, 0))  # every 127/8 address is this host's loopback: distinct clients
    s.connect(_addr(server))
    return s


def _head(session: str, length: int, token: str = TOKEN) -> bytes:
    return (
        f"POST /v1/sessions/{NS}/{session}/batches HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {token}\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def _answer(s: socket.socket, closes: bool = True) -> tuple[int, bool]:
    """(status, whether the server then closed the connection: only waited for when
    `closes`, since a kept-alive connection stays open after a 2xx)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            return 0, True
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(rest) < length:
        rest += s.recv(65536)
    return int(head.split(b" ", 2)[1]), closes and s.recv(1) == b""


def _post_batch(server, session: str, source: str, bid: str) -> int:
    body = codec.encode(
        Batch(samples=tuple(CpuSample(10**12 + i, 5, 5, "py", 0, STACK) for i in range(20))),
        batch_id=bid,
        node=NODE,
    )
    s = _connect(server, source)
    try:
        s.sendall(_head(session, len(body)) + body)
        return _answer(s, closes=False)[0]
    finally:
        s.close()


def _hold(server, session: str, source: str) -> socket.socket:
    """Headers and a few body bytes of a 100 kB body, then nothing."""
    s = _connect(server, source)
    s.sendall(_head(session, 100_000) + b"\x1f\x8b\x08\x00")
    return s


def test_sixteen_idle_uploads_of_one_session_do_not_block_another(server):
    held = [_hold(server, "attacker-0", f"127.0.1.{i + 1}") for i in range(16)]
    try:
        _wait_held(server, server.api.per_session)
        assert _post_batch(server, "victim", "127.0.2.1", "v-1") == 200
        # The session's share is taken: more of its requests are refused at once.
        assert _post_batch(server, "attacker-0", "127.0.3.1", "a-1") == 429
    finally:
        for s in held:
            s.close()


def test_sixteen_idle_uploads_from_one_address_do_not_block_another(server):
    held = [_hold(server, f"attacker-{i % 4}", "127.0.4.1") for i in range(16)]
    try:
        _wait_held(server, server.api.per_client)
        assert _post_batch(server, "attacker-3", "127.0.4.1", "a-2") == 429
        assert _post_batch(server, "victim", "127.0.5.1", "v-2") == 200
    finally:
        for s in held:
            s.close()


def test_a_stalled_body_is_answered_408_and_disconnected(quick):
    s = _hold(quick, "attacker-1", "127.0.6.1")
    try:
        assert _answer(s) == (408, True)
    finally:
        s.close()


def test_a_crawling_body_is_answered_408(quick):
    s = _connect(quick, "127.0.6.2")
    try:
        s.sendall(_head("attacker-2", 100_000))
        status = 0
        for _ in range(60):  # 100 B every 0.2 s: 500 B/s, under the 1 KiB/s minimum
            try:
                s.sendall(b"x" * 100)
            except OSError:
                break
            s.settimeout(0.2)
            try:
                if s.recv(1, socket.MSG_PEEK):
                    break
            except TimeoutError:
                continue
        s.settimeout(30)
        status, closed = _answer(s)
        assert (status, closed) == (408, True)
    finally:
        s.close()


def test_headers_that_never_complete_are_cut_off(quick):
    s = _connect(quick, "127.0.7.1")
    try:
        s.sendall(b"POST /v1/sessions/slow/victim/batches HTTP/1.1\r\nHost: x\r\n")
        assert s.recv(65536) == b""  # closed by the server, no answer to a half request
    finally:
        s.close()


@pytest.mark.parametrize("token", ["wrong", None])
def test_an_unauthenticated_request_is_answered_and_closed_before_its_body(quick, token):
    s = _connect(quick, "127.0.8.1")
    try:
        head = _head("victim", 1_000_000, token or "")
        if token is None:
            head = head.replace(b"Authorization: Bearer \r\n", b"")
        s.sendall(head + b"\x1f\x8b")  # the body never comes
        s.settimeout(5)  # at once: aiohttp's own lingering read alone would take 10 s
        status, closed = _answer(s)
        assert status == (403 if token else 401) and closed
    finally:
        s.close()
