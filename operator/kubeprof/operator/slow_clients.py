"""How long a client may take to send a request: slow or idle ones give their place back.

A request holds an ingest slot from its headers until its answer. Without a bound on the
time it may take, a few connections that send headers and a few body bytes and then idle
would hold every slot (the global limit) and refuse everybody else. So: headers must be
complete within `header_s` (aiohttp's keep-alive timer, armed from the first byte of a
connection); the body may pause at most `idle_s` between chunks, and after `grace_s` it must
have averaged at least `min_bytes_per_s`. A client that breaks either is answered 408 and
disconnected at once, and so is one without valid credentials (401, 403): the server does
not wait to read and discard the rest of their bodies. Other answers given before the body
was read (413, 429, ...) keep aiohttp's short lingering read, so an agent still sending its
batch reads the answer instead of a broken pipe; that holds a socket, never a slot.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import StreamReader, web


@dataclass(frozen=True, slots=True)
class ReadTimeouts:
    """Time limits of one request (operator defaults; tests shorten them)."""

    # Seconds from connecting (or from the last answer on a kept-alive connection) until a
    # request's headers are complete; also how long an idle kept-alive connection stays.
    header_s: float = 15.0
    # Longest pause between two chunks of a body, seconds.
    idle_s: float = 10.0
    # Seconds a body may take before the minimum rate applies (a TCP slow start, a GC).
    grace_s: float = 5.0
    # Slowest average a body may arrive at after the grace, bytes per second: an 8 MiB
    # batch (the largest accepted) may take 5 s + 128 s, and no slot is held longer.
    min_bytes_per_s: float = 64 * 1024
    # Seconds the server goes on reading (and discarding) a body it answered early (413,
    # 429, ...), so the agent reads the answer rather than a broken pipe.
    lingering_s: float = 5.0

    def server_options(self) -> dict[str, Any]:
        """aiohttp server keywords: the header timeout and the lingering read."""
        return {"keepalive_timeout": self.header_s, "lingering_time": self.lingering_s}


class TooSlow(Exception):
    """The body stalled or crawled; the message says which limit it broke."""


class TooLarge(Exception):
    """The body grew past the size limit while it was read."""


async def read_body(
    content: StreamReader,
    max_bytes: int,
    limits: ReadTimeouts,
    clock: Callable[[], float] | None = None,
) -> bytes:
    """The whole body, read chunk by chunk within `limits` (TooSlow) and `max_bytes`
    (TooLarge). Both are checked as bytes arrive, so no slow client holds a slot past them."""
    now = clock or asyncio.get_running_loop().time
    start = now()
    buf = bytearray()
    while True:
        # By when the next byte must come: the pause limit, and the time by which the
        # bytes so far would have met the minimum average rate.
        by_rate = start + limits.grace_s + len(buf) / limits.min_bytes_per_s
        wait = min(limits.idle_s, by_rate - now())
        if wait <= 0:
            raise TooSlow(
                f"body arrived at {len(buf) / max(now() - start, 1e-9):.0f} B/s; at "
                f"least {limits.min_bytes_per_s:.0f} B/s after {limits.grace_s:g} s"
            )
        try:
            async with asyncio.timeout(wait):
                chunk = await content.readany()
        except TimeoutError:
            what = (
                f"no body byte for {limits.idle_s:g} s"
                if wait >= limits.idle_s
                else f"body slower than {limits.min_bytes_per_s:.0f} B/s"
            )
            raise TooSlow(f"{what} ({len(buf)} bytes received)") from None
        if not chunk:
            return bytes(buf)
        buf += chunk
        if len(buf) > max_bytes:
            raise TooLarge(f"body larger than {max_bytes} bytes")


async def answer_and_close(request: web.Request, response: web.Response) -> web.Response:
    """Send `response`, then close the connection without reading the rest of the request."""
    response.force_close()
    await response.prepare(request)
    await response.write_eof()
    if request.protocol is not None:
        request.protocol.force_close()
    return response
