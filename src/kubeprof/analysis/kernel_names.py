"""Short, readable kernel labels from demangled C++ names."""

from __future__ import annotations


def short_name(name: str) -> str:
    """Name without template arguments, parameters or return type (``void f<...>(...)`` → f)."""
    depth = 0
    buf = []
    for ch in name:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth = max(0, depth - 1)
        elif depth == 0:
            buf.append(ch)
    label = " ".join("".join(buf).split())
    if " " in label:  # drop a leading return type such as "void"
        label = label.rsplit(" ", 1)[-1]
    return label or name
