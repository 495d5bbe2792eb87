"""The operator's ingest HTTP server, in this process, on a free port, over a real database.

`serve()` is the production entry point (the operator calls it from kopf's loop); here it
runs on its own event-loop thread with sessions put straight into the registry, so a test
or a bench can aim any body at it without a control plane.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy.engine import Engine

from kubeprof.operator.db import BatchWriter, ensure_session
from kubeprof.operator.ingest import IngestApi, serve
from kubeprof.operator.registry import Registry, SessionEntry
from kubeprof.operator.targets import Target
from kubeprof.protocol.limits import IngestLimits
from kubeprof.protocol.phases import Phase
from tests.e2e.cluster.ports import pick


@dataclass
class IngestServer:
    """A running ingest API; `stop()` closes it."""

    url: str
    api: IngestApi
    registry: Registry
    loop: asyncio.AbstractEventLoop
    _thread: threading.Thread = field(repr=False)

    def add_session(
        self, engine: Engine, namespace: str, name: str, token: str, targets: list[Target]
    ) -> SessionEntry:
        """A Running session with its database row and target pods."""
        uid = f"{name}-uid-{id(targets):x}"
        sid = ensure_session(
            engine, namespace, name, uid, hz=99, started_at=datetime.now(UTC), meta={}
        )
        entry = SessionEntry(namespace, name, uid, sid, token, Phase.RUNNING, 0.0, targets)
        self.registry.put(entry)
        return entry

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.api.pool.shutdown(wait=False)


def start(
    engine: Engine,
    *,
    writers: int = 2,
    limits: IngestLimits | None = None,
    port: int = 0,
    **kw: object,
) -> IngestServer:
    """Start the ingest API on 127.0.0.1 (a free port unless `port`)."""
    registry = Registry()
    api = IngestApi(
        registry, BatchWriter(engine), writers=writers, limits=limits, startup_grace_s=0, **kw
    )  # type: ignore[arg-type]
    port = port or pick(1)[0]
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    failed: list[BaseException] = []

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            runner = loop.run_until_complete(serve(api, "127.0.0.1", port))
        except BaseException as exc:  # noqa: BLE001 - reported to the caller below
            failed.append(exc)
            ready.set()
            loop.close()
            return
        ready.set()
        loop.run_forever()
        # stop(): the server's sockets and connections closed, then the loop itself.
        loop.run_until_complete(runner.cleanup())
        loop.close()

    thread = threading.Thread(target=run, name="ingest-server", daemon=True)
    thread.start()
    ready.wait(30)
    if failed:
        raise failed[0]
    return IngestServer(f"http://127.0.0.1:{port}", api, registry, loop, thread)
