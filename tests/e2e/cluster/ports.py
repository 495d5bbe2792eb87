"""Free TCP ports on 127.0.0.1, so a test cluster and a hand-started one can coexist."""

import random
import socket

# Below Linux's default ephemeral range (32768+), so outgoing connections never hold them.
_LOW, _HIGH = 20000, 32000


def is_free(port: int) -> bool:
    """True when nothing listens on 127.0.0.1:port right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def pick(n: int) -> list[int]:
    """n distinct ports that are free now (a small race remains; start-up errors name it)."""
    chosen: list[int] = []
    rng = random.Random()
    while len(chosen) < n:
        p = rng.randrange(_LOW, _HIGH)
        if p not in chosen and is_free(p):
            chosen.append(p)
    return chosen
