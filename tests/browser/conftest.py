"""Browser tests: the web UI served by `kubeprof ui`'s server over a real store, driven in
headless Chromium through the DevTools protocol. Screenshots go to the session's tmp dir."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubeprof.storage import Store
from kubeprof.ui.routes import Routes
from kubeprof.ui.server import make_server, warm
from tests.support.cdp import Browser, chromium_path
from tests.unit.ui.conftest import ui_store  # noqa: F401 - the shared store fixture


@pytest.fixture(scope="session")
def ui_url(ui_store: str) -> Iterator[str]:  # noqa: F811
    store = Store.open(ui_store)
    routes = Routes(store.engine)
    warm(routes)  # what `kubeprof ui` does in the background on start
    server = make_server(routes, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()
    store.close()


@pytest.fixture(scope="session")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("ui-screenshots")
    print(f"\nUI screenshots: {d}")
    return d


@pytest.fixture
def browser() -> Iterator[Browser]:
    if chromium_path() is None:
        pytest.skip("chromium is not installed: run scripts/setup.sh (apt-get install chromium)")
    with Browser(1400, 1000) as b:
        yield b
        errors = [c for c in b.console if c.startswith("exception")]
        assert not errors, errors
