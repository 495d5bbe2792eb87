"""Stripped binaries are named through their separate debug file; C++ names demangled."""

import shutil
import subprocess

import pytest

from kubeprof.agent.cpu.demangle import demangle
from kubeprof.agent.cpu.elf import debug_file, read_symbols
from kubeprof.agent.cpu.symbolize import Mapping, Symbolizer, _Process

FIXTURES = __import__("pathlib").Path(__file__).resolve().parents[2] / "fixtures" / "cpu"
METHOD = "shapes::Circle::area(int) const"


def test_demangle():
    assert demangle("_ZNK6shapes6Circle4areaEi") == METHOD
    assert demangle("PyObject_Call") == "PyObject_Call"
    assert demangle("_Znot-a-valid-name") == "_Znot-a-valid-name"


@pytest.fixture(scope="module")
def stripped(tmp_path_factory):
    """(stripped binary, debug root with .build-id/, debuglink folder copy, full binary)."""
    if not (shutil.which("g++") and shutil.which("objcopy")):
        pytest.skip("g++/objcopy not installed")
    d = tmp_path_factory.mktemp("cxx")
    full, prog, dbg = d / "full", d / "prog", d / "prog.debug"
    subprocess.run(
        ["g++", "-O1", "-g", "-Wl,--build-id", "-o", str(full), str(FIXTURES / "cxx_methods.cpp")],
        check=True,
    )
    subprocess.run(["objcopy", "--only-keep-debug", str(full), str(dbg)], check=True)
    subprocess.run(["objcopy", "--strip-all", str(full), str(prog)], check=True)
    subprocess.run(["objcopy", f"--add-gnu-debuglink={dbg}", str(prog)], check=True)
    elf = read_symbols(str(prog))
    root = d / "debugroot"
    by_id = root / ".build-id" / elf.build_id[:2] / f"{elf.build_id[2:]}.debug"
    by_id.parent.mkdir(parents=True)
    shutil.copy(dbg, by_id)
    return prog, root, dbg, full


def _frame_at(sym, path, vaddr):
    """Name a link-time address of the ELF as mapped whole at 0x400000."""
    base = 0x400000
    maps = [Mapping(base, base + (1 << 40), 0, 1, str(path))]
    sym._procs[1] = _Process(maps, 1e18, starts=[base])
    elf = read_symbols(str(path))
    seg = elf.segments[0]
    return sym.user_frame(1, base + vaddr - seg.vaddr + seg.offset)


def test_stripped_binary_is_named_through_build_id_and_debuglink(stripped, tmp_path):
    prog, root, dbg, full = stripped
    assert METHOD not in read_symbols(str(prog)).names  # really stripped
    mangled = read_symbols(str(full))
    vaddr = mangled.starts[mangled.names.index("_ZNK6shapes6Circle4areaEi")] + 2
    assert debug_file(read_symbols(str(prog)), str(root)).startswith(str(root / ".build-id"))
    named = _frame_at(Symbolizer(debug_root=str(root)), prog, vaddr)
    assert named.name == METHOD and named.file == str(prog)
    # no build-id copy: the .gnu_debuglink file next to the binary is found
    assert _frame_at(Symbolizer(debug_root=str(tmp_path)), prog, vaddr).name == METHOD
    # neither: the address stays unknown rather than wrongly named
    dbg.rename(dbg.with_suffix(".moved"))
    try:
        assert _frame_at(Symbolizer(debug_root=str(tmp_path)), prog, vaddr).name != METHOD
    finally:
        dbg.with_suffix(".moved").rename(dbg)
