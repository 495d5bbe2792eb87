"""The session page of a two-node session offers one timeline per node, and each link
downloads that node's trace."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from kubeprof.storage import Store
from kubeprof.ui.routes import Routes
from kubeprof.ui.server import make_server
from tests.unit.ui.test_timeline_nodes import two_node_store


@pytest.fixture(scope="module")
def nodes_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    store = Store.open(two_node_store(f"sqlite:///{tmp_path_factory.mktemp('n') / 'kp.db'}"))
    server = make_server(Routes(store.engine), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()
    store.close()


def test_one_timeline_link_per_node(browser, nodes_url):
    browser.goto(
        nodes_url + "/sessions/team-b/serve",
        "document.querySelectorAll('.kp-perfetto-node').length > 0",
    )
    links = browser.eval(
        "[...document.querySelectorAll('.kp-perfetto-node')]"
        ".map(a => [a.textContent, a.getAttribute('href'), a.hasAttribute('download')])"
    )
    base = "/api/v1/sessions/team-b/serve/timeline?node="
    assert links == [["node-a", base + "node-a", True], ["node-b", base + "node-b", True]]
    assert browser.eval("document.getElementById('kp-perfetto')") is None  # no merged one
    got = browser.eval(
        f"fetch('{base}node-b').then(r => [r.status, r.headers.get('content-type'),"
        " r.headers.get('content-disposition')])"
    )
    assert got[:2] == [200, "application/gzip"], got
    assert 'filename="team-b_serve.node-b.trace.json.gz"' in got[2]
