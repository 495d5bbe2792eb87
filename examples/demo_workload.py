"""The bundled example `make demo` records: a CPU-bound program with a known call tree.

main() spends about 80 % of its time in hot() and 20 % in cold(); both call a shared
helper, so the flame graph shows the same function under two parents.
"""

from __future__ import annotations

import hashlib
import sys
import time


def mix(data: bytes, rounds: int) -> bytes:
    """Shared helper: a little hashing so native (libcrypto) frames appear too."""
    for _ in range(rounds):
        data = hashlib.sha256(data).digest()
    return data


def spin(seconds: float) -> int:
    """Pure-Python arithmetic for `seconds` of CPU time."""
    end = time.process_time() + seconds
    n = 0
    while time.process_time() < end:
        n += sum(i * i for i in range(200))
    return n


def hot(seconds: float) -> None:
    spin(seconds * 0.9)
    deadline = time.process_time() + seconds * 0.1
    while time.process_time() < deadline:
        mix(b"hot", 2000)


def cold(seconds: float) -> None:
    spin(seconds * 0.9)
    deadline = time.process_time() + seconds * 0.1
    while time.process_time() < deadline:
        mix(b"cold", 2000)


def main(total: float) -> None:
    slice_s = 0.05
    for _ in range(int(total / slice_s)):
        hot(slice_s * 0.8)
        cold(slice_s * 0.2)


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 5.0)
