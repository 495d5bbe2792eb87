"""How whole the CPU stacks are: the BPF sampler's per-sample counters, in numbers and words.

The sampler (agent/kubeprof/agent/cpu/collector.py) counts, per on-CPU sample:
stacks cut short of their thread's first frame, marked there with one
``[native frames not unwound]`` frame, by where the native unwind stopped (the end of
the 64 KiB stack copy, or a frame without usable unwind tables); of those, the ones put
back under their thread's root through their Python stack (the same outermost Python
function entered the same way); samples of threads a C library started (no Python thread
state: native frames only, which is all they have); samples of Python threads whose frame
walk came back empty; and samples without any user stack. A reader sees these numbers in
the header (text and HTML) and in the JSON report's ``cpu.stacks``.
"""

from __future__ import annotations

from collections.abc import Mapping

# JSON key -> the collector's counter name (stored as meta "counter.NAME")
STACK_COUNTERS = {
    "cut_at_copy_end": "cpu_unwind_cut_stack",
    "cut_without_unwind_tables": "cpu_unwind_cut_cfi",
    "rooted_by_python_stack": "cpu_unwind_rooted",
    "native_thread_samples": "cpu_native_threads",
    "python_frames_missing": "cpu_python_missing",
    "no_user_stack": "cpu_ustack_missing",
}


def stack_counts(meta: Mapping[str, str]) -> dict[str, int]:
    """The counters by their JSON names, and ``cut`` (both causes); 0 where not counted."""

    def n(name: str) -> int:
        try:
            return int(meta.get(f"counter.{name}", "0") or 0)
        except ValueError:
            return 0

    out = {key: n(name) for key, name in STACK_COUNTERS.items()}
    return {"cut": out["cut_at_copy_end"] + out["cut_without_unwind_tables"], **out}


def _samples(n: int) -> str:
    return f"{n:,} sample" + ("" if n == 1 else "s")


def stack_note(meta: Mapping[str, str]) -> str:
    """The header's words for the counters; "" when every stack was whole."""
    c = stack_counts(meta)
    parts = []
    if c["cut"]:
        causes = []
        if c["cut_at_copy_end"]:
            causes.append(f"{c['cut_at_copy_end']:,} deeper than the 64 KiB stack copy")
        if c["cut_without_unwind_tables"]:
            causes.append(
                f"{c['cut_without_unwind_tables']:,} through code without usable unwind tables"
            )
        words = (
            f"{_samples(c['cut'])} cut short of the thread's first frame, marked "
            f"[native frames not unwound] ({', '.join(causes)})"
        )
        if c["rooted_by_python_stack"]:
            words += (
                f"; {c['rooted_by_python_stack']:,} of them put back under their thread's "
                "root by their Python stack"
            )
        parts.append(words)
    if c["native_thread_samples"]:
        parts.append(
            f"{_samples(c['native_thread_samples'])} of threads a C library started "
            "(e.g. a BLAS pool: native frames only, nothing missing)"
        )
    if c["python_frames_missing"]:
        parts.append(
            f"{_samples(c['python_frames_missing'])} of Python threads without Python "
            "frames (caught before or after the interpreter ran them)"
        )
    if c["no_user_stack"]:
        parts.append(f"{_samples(c['no_user_stack'])} without a user stack (kernel only)")
    return "; ".join(parts)
