"""Symbolization: a compiled test binary's live addresses, perf maps, kallsyms, maps."""

import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from kubeprof.agent.cpu.elf import ElfError, parse_symbols, read_symbols
from kubeprof.agent.cpu.symbolize import (
    UNKNOWN,
    VDSO,
    Symbolizer,
    _vdso_image,
    parse_kallsyms,
    parse_maps,
    parse_perf_map,
)
from kubeprof.model import FrameKind

C_PROGRAM = textwrap.dedent(
    """
    #include <stdio.h>
    #include <unistd.h>
    __attribute__((noinline)) int alpha_fn(int x) { return x * 3 + 1; }
    __attribute__((noinline)) int beta_fn(int x) { return alpha_fn(x) * 7; }
    int main(void) {
        printf("%p %p\\n", (void *)alpha_fn, (void *)beta_fn);
        fflush(stdout);
        pause();
        return beta_fn(2);
    }
    """
)


@pytest.fixture(scope="module")
def binary(tmp_path_factory) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc not installed: apt-get install gcc")
    d = tmp_path_factory.mktemp("elf")
    src = d / "prog.c"
    src.write_text(C_PROGRAM)
    out = d / "prog"
    subprocess.run(["gcc", "-O1", "-pie", "-fPIE", "-o", str(out), str(src)], check=True)
    return out


def test_read_symbols_finds_functions_of_a_compiled_binary(binary):
    syms = read_symbols(str(binary))
    assert {"alpha_fn", "beta_fn", "main"} <= set(syms.names)
    assert syms.is_dyn  # PIE
    i = syms.names.index("alpha_fn")
    assert syms.lookup(syms.starts[i]) == "alpha_fn"
    assert syms.lookup(syms.ends[i] - 1) == "alpha_fn"


def test_read_symbols_rejects_non_elf(tmp_path):
    p = tmp_path / "x"
    p.write_bytes(b"#!/bin/sh\n")
    with pytest.raises(ElfError):
        read_symbols(str(p))


def test_live_process_addresses_resolve_through_load_bias(binary):
    proc = subprocess.Popen([str(binary)], stdout=subprocess.PIPE, text=True)
    try:
        alpha, beta = (int(a, 16) for a in proc.stdout.readline().split())
        sym = Symbolizer()
        fa = sym.user_frame(proc.pid, alpha + 1)
        fb = sym.user_frame(proc.pid, beta)
        assert (fa.name, fa.kind, fa.file) == ("alpha_fn", FrameKind.NATIVE, str(binary))
        assert fb.name == "beta_fn"
        # Stacks come leaf first from the kernel and leave root first; callers are
        # looked up at return address - 1.
        frames = sym.user_stack(proc.pid, [alpha + 1, beta + 1])
        assert [f.name for f in frames] == ["beta_fn", "alpha_fn"]
        # A stack of callers only (the collector caches those apart from the leaf):
        # every address is a return address, the first one included.
        assert sym.user_stack(proc.pid, [alpha])[0].name == "alpha_fn"
        assert sym.user_stack(proc.pid, [alpha], callers=True)[0].name != "alpha_fn"
        assert [f.name for f in sym.user_stack(proc.pid, [beta + 1], callers=True)] == ["beta_fn"]
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    # Cached maps keep working after the process is gone.
    assert sym.user_frame(proc.pid, alpha + 1).name == "alpha_fn"


def test_per_process_caches_survive_bad_addresses_and_added_mappings(binary):
    """A broken walk's value (0x5) re-reads no maps, and a re-read that only finds
    added mappings (dlopen) keeps what was cached; a leaf inside a known function is
    named from the function's range, the same as looked up afresh."""
    proc = subprocess.Popen([str(binary)], stdout=subprocess.PIPE, text=True)
    try:
        alpha, _ = (int(a, 16) for a in proc.stdout.readline().split())
        sym = Symbolizer()
        assert sym.user_frame(proc.pid, alpha + 1).name == "alpha_fn"
        entry = sym._procs[proc.pid]
        entry.loaded_at = 0.0  # long ago: an unknown address may re-read the maps
        assert sym.user_frame(proc.pid, 0x5).name == UNKNOWN
        assert entry.loaded_at == 0.0  # not re-read for an impossible address
        assert sym.user_frame(proc.pid, 1 << 46).name == UNKNOWN  # unmapped, plausible
        assert entry.loaded_at > 0.0 and alpha + 1 in entry.frames  # re-read, kept
        before = len(entry.frames)
        assert sym.user_frame(proc.pid, alpha + 2) == sym._user_frame(proc.pid, alpha + 2)
        assert entry.frame_ranges.get(alpha + 2) is entry.frames[alpha + 1]
        assert len(entry.frames) == before + 1
        assert sym.unwind_rule(proc.pid, alpha + 2) == sym._unwind_rule(proc.pid, alpha + 2)
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


def test_perf_map_names_anonymous_code(tmp_path):
    import os

    pid = os.getpid()
    addr = 0x10_0000  # below any mapping of this process
    (tmp_path / f"perf-{pid}.map").write_text(f"{addr:x} 40 py::jitted:f\nzzz bad line\n")
    frame = Symbolizer(perf_map_dir=str(tmp_path)).user_frame(pid, addr + 0x10)
    assert frame.name == "py::jitted:f"
    assert frame.file.endswith(f"perf-{pid}.map")
    assert Symbolizer(perf_map_dir=str(tmp_path)).user_frame(pid, addr + 0x40).name == UNKNOWN


def test_parse_perf_map_later_entries_win():
    table = parse_perf_map("1000 10 old\n1000 20 new\n2000 8 other\n")
    assert table.lookup(0x1018) == "new"
    assert table.lookup(0x2007) == "other"
    assert table.lookup(0x2008) is None
    assert table.lookup(0xFFF) is None


def test_parse_kallsyms_keeps_text_symbols_and_hides_zeroed():
    text = (
        "ffffffff81000000 T _stext\n"
        "ffffffff81000100 t do_thing\n"
        "ffffffff81000200 D some_data\n"
        "ffffffff81000300 T next_fn\t[mod]\n"
    )
    table = parse_kallsyms(text)
    assert table.lookup(0xFFFFFFFF81000150) == "do_thing"
    assert table.lookup(0xFFFFFFFF81000250) == "do_thing"  # data is not a boundary
    assert table.lookup(0xFFFFFFFF81000300) == "next_fn"
    hidden = parse_kallsyms("0000000000000000 T _stext\n0000000000000000 t x\n")
    assert hidden.lookup(0x10) is None


def test_parse_maps_keeps_executable_mappings_sorted():
    text = (
        "7f0000002000-7f0000003000 r-xp 00002000 08:01 42 /usr/lib/libc.so.6\n"
        "55e000000000-55e000001000 r--p 00000000 08:01 7 /usr/bin/prog\n"
        "7f0000010000-7f0000011000 rwxp 00000000 00:00 0 \n"
    )
    maps = parse_maps(text)
    assert [m.path for m in maps] == ["/usr/lib/libc.so.6", ""]
    assert maps[0].offset == 0x2000 and maps[0].inode == 42


def test_kernel_stack_is_root_first_and_unknown_when_unresolvable(tmp_path):
    (tmp_path / "kallsyms").write_text(
        "ffffffff81000000 T entry_SYSCALL_64\nffffffff81000100 T do_sys\n"
    )
    sym = Symbolizer(proc=str(tmp_path))
    frames = sym.kernel_stack([0xFFFFFFFF81000105, 0xFFFFFFFF81000010])
    assert [f.name for f in frames] == ["entry_SYSCALL_64", "do_sys"]
    assert all(f.kind is FrameKind.KERNEL for f in frames)
    assert sym.kernel_stack([0x1])[0].name == UNKNOWN


def test_maps_read_mid_exec_wait_for_the_program_to_be_mapped(tmp_path):
    """Right after exec() the kernel may not have mapped the program yet; maps cached then
    would leave every sample of a process that exits before the next refresh [unknown]."""
    import threading

    pid = tmp_path / "4242"
    pid.mkdir()
    (pid / "exe").symlink_to("/usr/bin/prog")
    (pid / "maps").write_text("7ffd00000000-7ffd00001000 r-xp 00000000 00:00 0 [vdso]\n")
    full = (
        "55e000001000-55e000002000 r-xp 00001000 08:01 7 /usr/bin/prog\n"
        "7ffd00000000-7ffd00001000 r-xp 00000000 00:00 0 [vdso]\n"
    )
    later = threading.Timer(0.01, (pid / "maps").write_text, (full,))
    later.start()
    sym = Symbolizer(proc=str(tmp_path))
    assert sym.refresh(4242)
    later.join()
    (pid / "maps").unlink()  # the process exits: no refresh possible any more
    frame = sym.user_frame(4242, 0x55E000001010)
    assert frame.file == "/usr/bin/prog"


def test_the_vdso_is_named_and_unwound_from_its_image():
    # The vDSO has no file; its image (the kernel's, the same in every process) has
    # symbols and .eh_frame: a leaf in clock_gettime must not cut the stack.
    maps = parse_maps(Path("/proc/self/maps").read_text())
    vdso = next((m for m in maps if m.path == VDSO), None)
    if vdso is None:
        pytest.skip("no vDSO mapped in this process")
    elf = parse_symbols(VDSO, _vdso_image() or b"")
    start = elf.starts[elf.names.index("clock_gettime")]
    sym = Symbolizer()
    pid = os.getpid()
    assert sym.refresh(pid)
    frame = sym.user_frame(pid, vdso.start + start + 4)
    assert (frame.name, frame.file) == ("clock_gettime", VDSO)
    assert sym.unwind_rule(pid, vdso.start + start + 4) is not None
