"""ctypes mirrors of the BPF program's structs, read from its own C text: each layout is
spelled once, in C, so the Python side that reads the maps and records cannot fall out
of step with what the kernel writes."""

from __future__ import annotations

import ctypes
import re
from collections.abc import Mapping
from typing import Any

_SCALARS: dict[str, Any] = {
    "u8": ctypes.c_uint8,
    "char": ctypes.c_char,
    "u32": ctypes.c_uint32,
    "s32": ctypes.c_int32,
    "u64": ctypes.c_uint64,
    "s64": ctypes.c_int64,
}
_COMMENT = re.compile(r"/\*.*?\*/", re.S)
_MEMBER = re.compile(r"(?:struct\s+)?(\w+)\s+(\w+)(?:\[(\w+)\])?")


def fields(
    c_text: str,
    struct: str,
    *,
    sizes: Mapping[str, int] | None = None,
    nested: Mapping[str, Any] | None = None,
    until: str | None = None,
) -> list[tuple[str, Any]]:
    """The ctypes `_fields_` of `struct <struct>` in `c_text`. Array lengths are numbers
    or names in `sizes`; `nested` maps a struct member's C type to its mirror; `until`
    ends the mirror before that member (a record's fixed part)."""
    found = re.search(rf"struct {struct} \{{(.*?)\n\}};", c_text, re.S)
    if found is None:
        raise ValueError(f"no `struct {struct} {{ ... }};` in the BPF program text")
    out: list[tuple[str, Any]] = []
    for member in _COMMENT.sub("", found.group(1)).split(";"):
        if not member.strip():
            continue
        m = _MEMBER.fullmatch(member.strip())
        if m is None:
            raise ValueError(f"struct {struct}: cannot mirror the member {member.strip()!r}")
        ctype, name, length = m.groups()
        if name == until:
            break
        kind = {**_SCALARS, **(nested or {})}.get(ctype)
        if kind is None:
            raise ValueError(
                f"struct {struct}.{name}: type {ctype!r} has no ctypes mirror; "
                "add it to c_mirror._SCALARS or pass it in `nested`"
            )
        if length is not None:
            n = int(length) if length.isdigit() else (sizes or {}).get(length)
            if n is None:
                raise ValueError(f"struct {struct}.{name}: array length {length} not in `sizes`")
            kind = kind * n
        out.append((name, kind))
    return out
