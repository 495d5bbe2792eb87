"""HTTP client of the operator's API (stdlib only: the agent image stays small).

`OperatorClient` is the one way an agent talks to the operator (a session's batches and
targets through `IngestClient`, the light agent's heartbeats through `call`).

Every answer is sorted into one of four outcomes the shipper acts on: stored, retry later
(network, 5xx, 429, 503 "database down"), reject this batch (4xx about the body), or the
session is over / we are not allowed (401, 403, 404, 409, 410).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from kubeprof.protocol import routes


class Outcome(Enum):
    """What the shipper should do with a batch after one attempt."""

    STORED = "stored"  # stored now, or already stored earlier (duplicate id)
    RETRY = "retry"  # keep it and try again after a backoff
    REJECTED = "rejected"  # the body itself is bad; set it aside
    FORBIDDEN = "forbidden"  # our token is not valid for this session
    SESSION_OVER = "session_over"  # the session no longer accepts data


@dataclass(frozen=True, slots=True)
class Answer:
    """One ingest answer."""

    outcome: Outcome
    status: int  # HTTP status, 0 for a network error
    detail: str  # server message or the network error, for the log
    data: dict[str, Any]


def classify(status: int) -> Outcome:
    """HTTP status -> outcome (pure, so the policy is unit-tested)."""
    if 200 <= status < 300:
        return Outcome.STORED
    if status in (401, 403):
        return Outcome.FORBIDDEN
    if status in (404, 409, 410):
        return Outcome.SESSION_OVER
    if status in (400, 413, 415, 422):
        return Outcome.REJECTED
    return Outcome.RETRY


class TokenFile:
    """A bearer token read from its file at every request: the kubelet rewrites a projected
    ServiceAccount token before it expires, so a copy read once would stop working. When
    the file cannot be read for a moment (being swapped), the last token read is used."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._last = ""
        self()

    def __call__(self) -> str:
        try:
            self._last = self.path.read_text().strip()
        except OSError:
            if not self._last:
                raise
        return self._last


class OperatorClient:
    """Calls the operator's API with one bearer token (a string, or a callable giving the
    current one); every answer is an `Answer`."""

    def __init__(
        self, base_url: str, token: str | Callable[[], str], *, timeout_s: float = 30.0
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._token = token
        self.timeout_s = timeout_s

    @property
    def _auth(self) -> str:
        token = self._token if isinstance(self._token, str) else self._token()
        return f"Bearer {token}"

    def call(self, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> Answer:
        """One request; a network error is an answer with status 0 (RETRY), never raised."""
        req = urllib.request.Request(
            self.base_url + path,
            data=body,
            method=method,
            headers={**headers, "Authorization": self._auth},
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as r:
                status, raw = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read()
        except (OSError, ValueError) as e:  # refused, reset, timeout, DNS
            return Answer(Outcome.RETRY, 0, f"{type(e).__name__}: {e}", {})
        try:
            data = json.loads(raw or b"{}")
        except ValueError:
            data = {"message": raw[:200].decode(errors="replace")}
        if not isinstance(data, dict):
            data = {}
        return Answer(classify(status), status, str(data.get("message", "")), data)


class IngestClient(OperatorClient):
    """Talks to one session's ingest endpoints with the session's bearer token."""

    def __init__(
        self,
        base_url: str,
        namespace: str,
        session: str,
        token: str | Callable[[], str],
        *,
        timeout_s: float = 30.0,
    ) -> None:
        super().__init__(base_url, token, timeout_s=timeout_s)
        self.namespace, self.session = namespace, session

    def post_batch(self, body: bytes, batch_id: str) -> Answer:
        """POST one gzip-compressed batch."""
        headers = {
            "Content-Type": "application/json",
            "Content-Encoding": "gzip",
            routes.BATCH_ID_HEADER: batch_id,
        }
        return self.call("POST", routes.batches_path(self.namespace, self.session), body, headers)

    def targets(self, node: str) -> Answer:
        """GET the session's target pods on `node` and its phase and end time."""
        return self.call("GET", routes.targets_path(self.namespace, self.session, node), None, {})
