"""A minimal HTTPS client for the apiserver (stdlib only) used while bootstrapping.

The kubernetes Python package is for tests; the launcher must work without the venv.
"""

import json
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class ApiError(RuntimeError):
    """Non-2xx answer from the apiserver."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:500]}")
        self.status = status


@dataclass
class KubeApi:
    """Admin-authenticated access to one apiserver URL."""

    server: str
    ca: Path
    cert: Path
    key: Path

    def __post_init__(self) -> None:
        ctx = ssl.create_default_context(cafile=str(self.ca))
        ctx.load_cert_chain(str(self.cert), str(self.key))
        self._ctx = ctx

    def request(
        self, method: str, path: str, body: Any = None, timeout: float = 10, accept: str = ""
    ) -> Any:
        """Send one request; returns decoded JSON (or text for non-JSON answers).

        `accept` asks for another representation, e.g. metadata-only lists, which keep
        counting thousands of objects cheap for the apiserver and the caller."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if accept:
            req.add_header("Accept", accept)
        try:
            with urllib.request.urlopen(req, context=self._ctx, timeout=timeout) as r:
                raw = r.read().decode()
        except urllib.error.HTTPError as e:
            raise ApiError(e.code, e.read().decode(errors="replace")) from None
        try:
            return json.loads(raw)
        except ValueError:
            return raw

    def get(self, path: str) -> Any:
        """GET path."""
        return self.request("GET", path)

    def create(self, path: str, obj: dict) -> bool:
        """POST obj; False (not an error) when it already exists, so callers stay idempotent."""
        try:
            self.request("POST", path, obj)
        except ApiError as e:
            if e.status == 409:
                return False
            raise
        return True

    def ready(self) -> bool:
        """apiserver /readyz says ok."""
        return self.request("GET", "/readyz", timeout=3) == "ok"
