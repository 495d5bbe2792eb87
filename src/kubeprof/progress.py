"""A one-line status for `kubeprof record` on a terminal: what it is doing right now.

Redrawn in place (carriage return, erase line) on stderr, and only when stderr is a
terminal: piped or redirected output stays free of control characters.
"""

from __future__ import annotations

from typing import TextIO

_WORDS = {
    "preparing": "preparing the sampler...",
    "storing": "storing the recording...",
}


def status_line(phase: str, elapsed_s: float = 0.0, records: int = 0) -> str:
    """The words shown for `phase` ("preparing", "recording", "storing")."""
    if phase == "recording":
        return f"recording: {elapsed_s:.0f} s, {records:,} samples so far (Ctrl-C stops)"
    return _WORDS.get(phase, phase)


class TerminalProgress:
    """`RecordOptions.progress` for a terminal; `done()` erases the line at the end."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.shown = False

    def __call__(self, phase: str, elapsed_s: float = 0.0, records: int = 0) -> None:
        self.stream.write(f"\r\x1b[2Kkubeprof: {status_line(phase, elapsed_s, records)}")
        self.stream.flush()
        self.shown = True

    def done(self) -> None:
        if self.shown:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()
            self.shown = False

    def log(self, message: str) -> None:
        """A log line printed above the status line, which is redrawn on the next call."""
        self.done()
        self.stream.write(message + "\n")
        self.stream.flush()
