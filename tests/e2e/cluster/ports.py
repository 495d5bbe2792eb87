"""Free TCP ports on 127.0.0.1, so a test cluster and a hand-started one can coexist."""

import random
import socket

# Below Linux's default ephemeral range (32768+), so outgoing connections never hold them.
_LOW, _HIGH = 20000, 32000


def is_free(port: int) -> bool:
    """True when nothing listens on 127.0.0.1:port right now.

    SO_REUSEADDR, as servers set it: a port whose last connections sit in TIME_WAIT (a
    server just restarted on it) is free for a listener, and must count as free here.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
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
