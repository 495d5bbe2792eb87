"""`kubeprof ui`: the web UI over a store, served with the standard library's http.server.

Binds 127.0.0.1 by default: the store's contents (function names, command lines) are for
the people who can read the store. One thread per request; the database engine pools.
"""

from __future__ import annotations

import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

from kubeprof.storage import Store
from kubeprof.storage import queries as q
from kubeprof.ui import api
from kubeprof.ui.activity import Activity
from kubeprof.ui.routes import Response, Routes

# The warm-up starts a session's analysis after this long without a request in flight,
# and waits no longer than WARM_MOST_S for it (kubeprof.ui.activity says why).
WARM_QUIET_S = 0.5
WARM_MOST_S = 10.0


def make_server(
    routes: Routes, host: str, port: int, activity: Activity | None = None
) -> ThreadingHTTPServer:
    """An HTTP server answering with `routes` (port 0: any free port); each request is
    counted in `activity` when given."""
    counted = activity or Activity()

    class Handler(BaseHTTPRequestHandler):
        server_version = "kubeprof-ui"

        def _answer(self, head: bool) -> None:
            url = urlsplit(self.path)
            with counted.request():
                resp = routes.handle("GET", url.path, dict(parse_qsl(url.query)))
                self._send(resp, head)

        def _send(self, resp: Response, head: bool = False) -> None:
            self.send_response(resp.status)
            self.send_header("Content-Type", resp.content_type)
            self.send_header("Content-Length", str(len(resp.body)))
            for k, v in resp.headers.items():
                self.send_header(k, v)
            self.end_headers()
            if not head:
                self.wfile.write(resp.body)

        def do_GET(self) -> None:
            self._answer(head=False)

        def do_HEAD(self) -> None:
            self._answer(head=True)

        def _refuse(self) -> None:
            self._send(routes.handle(self.command, self.path, {}))

        do_POST = do_PUT = do_DELETE = do_PATCH = _refuse

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            return  # quiet: the CLI prints its URL once; errors are in the answers

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server


def warm(routes: Routes, activity: Activity | None = None) -> None:
    """Analyse finished sessions in the background, newest first, so the sessions list
    shows their GPU idle and top finding (a local session has no session-end aggregate);
    each once the server's requests (`activity`) leave a quiet moment."""
    with routes.engine.connect() as conn:
        infos = [s for s in reversed(q.list_sessions(conn, counts=False)) if s.status != "running"]
    for info in infos:
        if activity is not None:
            activity.wait_quiet(WARM_QUIET_S, WARM_MOST_S)
        try:
            with routes.engine.connect() as conn:
                api.summary(conn, info, routes.cache, api.PAGE)
        except Exception:  # noqa: BLE001 - a session that cannot be analysed stays "—"
            continue


def ui_command(store_url: str | None, host: str, port: int) -> int:
    """Serve the UI until interrupted."""
    store = Store.open(store_url)
    routes = Routes(store.engine)
    activity = Activity()
    try:
        server = make_server(routes, host, port, activity)
    except OSError:
        store.close()
        raise
    print(
        f"kubeprof ui: serving {store.engine.url.render_as_string(hide_password=True)} "
        f"read-only at http://{host}:{server.server_port}/sessions (Ctrl-C stops)",
        file=sys.stderr,
        flush=True,
    )
    threading.Thread(target=warm, args=(routes, activity), name="ui-warm", daemon=True).start()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        store.close()
    return 0
