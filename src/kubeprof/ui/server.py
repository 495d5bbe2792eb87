"""`kubeprof ui`: the web UI over a store, served with the standard library's http.server.

Binds 127.0.0.1 by default: the store's contents (function names, command lines) are for
the people who can read the store. One thread per request; the database engine pools.
"""

from __future__ import annotations

import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

from kubeprof.storage import Store
from kubeprof.ui.routes import Response, Routes


def make_server(routes: Routes, host: str, port: int) -> ThreadingHTTPServer:
    """An HTTP server answering with `routes` (port 0: any free port)."""

    class Handler(BaseHTTPRequestHandler):
        server_version = "kubeprof-ui"

        def _answer(self, head: bool) -> None:
            url = urlsplit(self.path)
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

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self._answer(head=False)

        def do_HEAD(self) -> None:  # noqa: N802
            self._answer(head=True)

        def _refuse(self) -> None:
            self._send(routes.handle(self.command, self.path, {}))

        do_POST = do_PUT = do_DELETE = do_PATCH = _refuse  # noqa: N815

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            return  # quiet: the CLI prints its URL once; errors are in the answers

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server


def ui_command(store_url: str | None, host: str, port: int) -> int:
    """Serve the UI until interrupted."""
    store = Store.open(store_url)
    server = make_server(Routes(store.engine), host, port)
    h, p = server.server_address[:2]
    print(f"kubeprof ui: serving {store.engine.url.render_as_string(hide_password=True)} "
          f"read-only at http://{h}:{p}/sessions (Ctrl-C stops)", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        store.close()
    return 0
