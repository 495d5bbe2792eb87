"""Names are data, never control: terminal escapes in text shown to people are made visible.

Function, kernel, thread and pod names come from the profiled programs and from whoever
holds a session token. Printed raw, an ESC or C1 sequence in one could set the terminal's
title, rewrite what is on screen, or write the clipboard (OSC 52). Every text output, the
session's status and the log lines pass through `escape_controls`, which spells each C0/C1
control character, DEL and the bidirectional overrides ("Trojan Source") as a visible
`\\xNN` / `\\uNNNN` escape, so the bytes read the same and do nothing.
"""

from __future__ import annotations

import logging
import re

# C0 (incl. ESC), DEL, C1 (incl. CSI 0x9b and OSC 0x9d), and the bidi embeddings,
# overrides and isolates that reorder what a terminal shows.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _spell(c: str) -> str:
    n = ord(c)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}"


def escape_controls(text: str, keep: str = "") -> str:
    """`text` with every control character but those in `keep` (e.g. "\\n\\t" for a
    multi-line report) spelled out; unchanged, and not copied, when it has none."""
    if _CONTROL.search(text) is None:
        return text
    return _CONTROL.sub(lambda m: m.group() if m.group() in keep else _spell(m.group()), text)


def escape_tree(value: object) -> object:
    """Every string inside nested dicts and lists escaped (a CR status, a JSON answer)."""
    if isinstance(value, str):
        return escape_controls(value)
    if isinstance(value, dict):
        return {escape_tree(k): escape_tree(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [escape_tree(v) for v in value]
    return value


class EscapingFilter(logging.Filter):
    """A handler filter: each record's message (with its arguments) escaped, so a name
    cannot forge a log line or reach the terminal a log is tailed in. Tracebacks, which
    the formatter adds, are left as they are."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string: logging itself reports it
            return True
        safe = escape_controls(message)
        if safe is not message:
            record.msg, record.args = safe, None
        return True


def escape_logs(logger: logging.Logger | None = None) -> None:
    """Add `EscapingFilter` to every handler of `logger` (the root logger by default)."""
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, EscapingFilter) for f in handler.filters):
            handler.addFilter(EscapingFilter())
