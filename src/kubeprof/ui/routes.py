"""URL paths of the web UI and its JSON API, served the same way by `kubeprof ui` and the
operator: `Routes.handle(method, path, query)` -> `Response`, no web framework involved.

  GET /api/v1/sessions                                   the sessions list
  GET /api/v1/sessions/{ns}/{name}                       summary: header, findings, tops
  GET /api/v1/sessions/{ns}/{name}/flamegraph?view=cpu|gpu&from=S&to=S&pod=P&gpu=G
  GET /api/v1/sessions/{ns}/{name}/timeline             the Perfetto trace, .trace.json.gz
  GET /api/v1/diff?base={ns}/{name}&new={ns}/{name}&view=cpu|gpu
  GET /api/v1/diff/numbers?base=..&new=..&sort=self|total   `kubeprof diff -f json`'s answer

The summary, flame graphs and diffs take `kubeprof report`'s flags as `keep-interpreter=1`
(CPython's own frames stay) and, for the summary, `whole-session=1`.
  GET /sessions, /sessions/{ns}/{name}, /diff            the pages (one HTML shell)
  GET /static/{file}                                     the pages' JS and CSS

Everything is GET: the UI never writes. Answers carry a strict Content-Security-Policy
(same origin only) and are not cached by proxies.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any
from urllib.parse import unquote

from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from kubeprof.report.flamegraph import graph_markup
from kubeprof.reporting import TIMELINE_MAX_RECORDS
from kubeprof.storage import queries as q
from kubeprof.ui import api
from kubeprof.ui.timeline import filename, timeline_gz

API = "/api/v1"
STATIC = {  # file name -> (package, resource, content type)
    "app.js": ("kubeprof.ui", "static/app.js", "text/javascript; charset=utf-8"),
    "app.css": ("kubeprof.ui", "static/app.css", "text/css; charset=utf-8"),
    "flamegraph.js": ("kubeprof.report", "flamegraph.js", "text/javascript; charset=utf-8"),
    "flamegraph.css": ("kubeprof.report", "flamegraph.css", "text/css; charset=utf-8"),
}
HEADERS = {
    "Content-Security-Policy": "default-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


@dataclass(frozen=True, slots=True)
class Response:
    """An answer: status, content type, body and the security headers."""

    status: int
    content_type: str
    body: bytes
    headers: dict[str, str] = field(default_factory=lambda: dict(HEADERS))


def json_response(status: int, data: object) -> Response:
    return Response(
        status, "application/json", json.dumps(data, separators=(",", ":"), default=str).encode()
    )


def _error(status: int, message: str) -> Response:
    return json_response(status, {"message": message})


def _float(query: Mapping[str, str], key: str) -> float | None:
    raw = query.get(key, "")
    if raw == "":
        return None
    try:
        return float(raw)
    except ValueError:
        raise api.ApiError(
            400, f"{key}={raw!r}: expected seconds from the session start, e.g. 12.5"
        ) from None


def _flag(query: Mapping[str, str], key: str) -> bool:
    """A CLI flag as a query parameter: 1/true (on), 0/false or absent (off)."""
    raw = query.get(key, "").lower()
    if raw in ("1", "true"):
        return True
    if raw in ("", "0", "false"):
        return False
    raise api.ApiError(400, f"{key}={query[key]!r}: expected 1 (on) or 0 (off)")


def _ref(text: str, key: str) -> tuple[str, str]:
    ns, _, name = text.partition("/")
    if not ns or not name:
        raise api.ApiError(
            400, f"{key}={text!r}: expected NAMESPACE/NAME (local/NAME for a local session)"
        )
    return ns, name


class Routes:
    """The UI's routes over one database (read-only; a cache of finished summaries)."""

    def __init__(
        self,
        engine: Engine,
        cache: api.Cache | None = None,
        *,
        timeline_limit: int = TIMELINE_MAX_RECORDS,
    ) -> None:
        self.engine = engine
        self.cache = cache or api.Cache.new()
        self.timeline_limit = timeline_limit  # records; above it the CLI writes the timeline

    def handle(self, method: str, path: str, query: Mapping[str, str]) -> Response:
        """Answer one request; errors are JSON with a message saying what to change."""
        if method not in ("GET", "HEAD"):
            return _error(405, "the kubeprof UI is read-only: only GET is served")
        parts = [unquote(p) for p in path.split("/") if p]
        try:
            if parts[:2] == ["api", "v1"]:
                data = self._api(parts[2:], query)
                return data if isinstance(data, Response) else json_response(200, data)
            return self._page(parts)
        except api.ApiError as exc:
            return _error(exc.status, str(exc))
        except SQLAlchemyError as exc:
            first = str(getattr(exc, "orig", exc)).splitlines()[0][:200]
            return _error(503, f"database unavailable: {type(exc).__name__}: {first}")

    def _api(self, parts: list[str], query: Mapping[str, str]) -> Any:
        with self.engine.connect() as conn:
            if parts == ["sessions"]:
                return api.sessions(conn, self.cache)
            if len(parts) in (3, 4) and parts[0] == "sessions":
                info = api.find(conn, parts[1], parts[2])
                keep = _flag(query, "keep-interpreter")
                if len(parts) == 3:
                    how = api.Prepared(keep, _flag(query, "whole-session"))
                    return api.summary(conn, info, self.cache, how)
                if parts[3] == "flamegraph":
                    return api.flamegraph(
                        conn,
                        info,
                        view=query.get("view", "cpu"),
                        from_s=_float(query, "from"),
                        to_s=_float(query, "to"),
                        pod=query.get("pod", ""),
                        gpu=query.get("gpu", ""),
                        keep_interpreter=keep,
                    )
                if parts[3] == "timeline":
                    return self._timeline(conn, info, query.get("node"))
            if parts[:1] == ["diff"] and parts[1:] in ([], ["numbers"]):
                return self._diff(conn, parts[1:] == ["numbers"], query)
        raise api.ApiError(404, "no such API path; see the README's Web UI part")

    def _diff(self, conn: Connection, numbers: bool, query: Mapping[str, str]) -> Any:
        """The diff page's numbers (`kubeprof diff -f json`) or its flame graph; the request
        is checked before both sessions are analysed."""
        base = api.find(conn, *_ref(query.get("base", ""), "base"))
        new = api.find(conn, *_ref(query.get("new", ""), "new"))
        keep = _flag(query, "keep-interpreter")
        if numbers:
            by = api.check_sort(query.get("sort", "self"))
            return api.diff_numbers(api.prepare(conn, base, new, keep_interpreter=keep), by=by)
        view = api.check_view(query.get("view", "cpu"))
        return api.diff(api.prepare(conn, base, new, keep_interpreter=keep), view=view)

    def _timeline(self, conn: Connection, info: q.SessionInfo, node: str | None) -> Response:
        """The session's (one node's) Perfetto trace as a gzip'd file to save (not a
        Content-Encoding: the file stays .json.gz, which ui.perfetto.dev and
        chrome://tracing open)."""
        body = timeline_gz(conn, info, limit=self.timeline_limit, node=node)
        headers = {
            **HEADERS,
            "Content-Disposition": f'attachment; filename="{filename(info, node)}"',
        }
        return Response(200, "application/gzip", body, headers)

    def _page(self, parts: list[str]) -> Response:
        if parts[:1] == ["static"] and len(parts) == 2 and parts[1] in STATIC:
            pkg, name, ctype = STATIC[parts[1]]
            return Response(200, ctype, resources.files(pkg).joinpath(name).read_bytes())
        if (
            not parts
            or parts == ["sessions"]
            or parts == ["diff"]
            or (parts[0] == "sessions" and len(parts) == 3)
        ):
            return Response(200, "text/html; charset=utf-8", _index_page())
        return _error(404, "no such page; start at /sessions")


@functools.cache
def _index_page() -> bytes:
    """The single page, with the flame graph's markup from the report's own page."""
    page = resources.files("kubeprof.ui").joinpath("static/index.html").read_text("utf-8")
    return page.replace("{{GRAPH}}", graph_markup()).encode()


Handler = Callable[[str, str, Mapping[str, str]], Response]
