"""Struct member offsets from the running kernel's BTF (/sys/kernel/btf/vmlinux).

The BPF program is compiled against the nearest kernel headers installed, which need not
match the running kernel's `task_struct`; the one offset it reads by hand (the user fs
base, which CPython 3.10 uses as its thread id) comes from the kernel's own type info.
"""

from __future__ import annotations

import struct

_KIND_STRUCT, _KIND_UNION = 4, 5
# Bytes after the 12-byte btf_type header, per kind: fixed, and per vlen entry.
_EXTRA = {1: (4, 0), 3: (12, 0), 4: (0, 12), 5: (0, 12), 6: (0, 8), 13: (0, 8), 14: (4, 0)}
_EXTRA |= {15: (0, 12), 17: (4, 0), 19: (0, 12)}


class BtfError(ValueError):
    """BTF missing, malformed, or without the asked member."""


_Type = tuple[int, int, int, int, list[tuple[int, int, int]]]  # kind, name, size, kflag, members


def _types(data: bytes) -> tuple[list[_Type], int]:
    magic, _ver, _flags, hdr_len = struct.unpack_from("<HBBI", data, 0)
    if magic != 0xEB9F:
        raise BtfError("not BTF (bad magic)")
    type_off, type_len, str_off, _str_len = struct.unpack_from("<IIII", data, 8)
    pos, end = hdr_len + type_off, hdr_len + type_off + type_len
    out: list[_Type] = [(0, 0, 0, 0, [])]  # type id 0 is void
    while pos < end:
        name_off, info, size_or_type = struct.unpack_from("<III", data, pos)
        kind, vlen, kflag = (info >> 24) & 0x1F, info & 0xFFFF, info >> 31
        pos += 12
        fixed, per = _EXTRA.get(kind, (0, 0))
        members = []
        if kind in (_KIND_STRUCT, _KIND_UNION):
            for i in range(vlen):
                m_name, m_type, m_off = struct.unpack_from("<III", data, pos + 12 * i)
                members.append((m_name, m_type, (m_off & 0xFFFFFF) if kflag else m_off))
        pos += fixed + per * vlen
        out.append((kind, name_off, size_or_type, kflag, members))
    return out, hdr_len + str_off


def member_offset(path: str, struct_name: str, members: list[str]) -> int:
    """Byte offset of struct_name.m1.m2... (each a nested struct/union member)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise BtfError(f"{path}: {e.strerror}") from e
    types, strings = _types(data)

    def name(off: int) -> str:
        return data[strings + off : data.index(b"\0", strings + off)].decode()

    def resolve(tid: int) -> int:  # through typedefs/const/volatile to the struct
        for _ in range(16):
            kind, _n, ref, _k, _m = types[tid]
            if kind in (8, 9, 10, 11, 18):
                tid = ref
            else:
                return tid
        return tid

    current = next(
        (i for i, t in enumerate(types) if t[0] == _KIND_STRUCT and name(t[1]) == struct_name),
        None,
    )
    if current is None:
        raise BtfError(f"no struct {struct_name} in {path}")

    def find(tid: int, want: str, depth: int = 0) -> tuple[int, int] | None:
        """(bit offset, type) of a member, looked for in anonymous structs and unions
        too (mm_struct keeps its fields in one since 6.2)."""
        for m_name, m_type, bits in types[tid][4]:
            if name(m_name) == want:
                return bits, m_type
        for m_name, m_type, bits in types[tid][4]:
            inner = resolve(m_type)
            if not name(m_name) and depth < 4 and types[inner][0] in (_KIND_STRUCT, _KIND_UNION):
                found = find(inner, want, depth + 1)
                if found is not None:
                    return bits + found[0], found[1]
        return None

    total = 0
    for want in members:
        hit = find(current, want)
        if hit is None:
            raise BtfError(f"struct {struct_name} has no member {want} in {path}")
        bits, mtype = hit
        total += bits // 8
        current = resolve(mtype)
    return total


def start_stack_offsets(path: str = "/sys/kernel/btf/vmlinux") -> tuple[int, int]:
    """Offsets of task_struct.mm and mm_struct.start_stack (the main thread's stack top),
    or (0, 0) when BTF cannot say."""
    try:
        return (
            member_offset(path, "task_struct", ["mm"]),
            member_offset(path, "mm_struct", ["start_stack"]),
        )
    except (BtfError, struct.error, IndexError, ValueError):
        return 0, 0


def fsbase_offset(path: str = "/sys/kernel/btf/vmlinux") -> int:
    """Offset of task_struct.thread.fsbase (x86-64), or 0 when BTF cannot say."""
    try:
        return member_offset(path, "task_struct", ["thread", "fsbase"])
    except (BtfError, struct.error, IndexError, ValueError):
        return 0
