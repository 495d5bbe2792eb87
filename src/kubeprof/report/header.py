"""The report's header in words: what ran, how it was sampled, whether the GPU was traced.

Text and HTML show the same items; raw meta keys (``counter.gpu_kernels``, ``cpu: False``)
never reach the reader: known keys are phrased, counters stay in the JSON output.
"""

from __future__ import annotations

from kubeprof.report.cpu_stacks import stack_note
from kubeprof.report.evidence import figure_text
from kubeprof.report.views import format_ns
from kubeprof.reportdata import Profile, Report

CPU_SOURCES = {
    "bpf": "eBPF sampler",
    "py-spy": "py-spy (fallback: BPF is not allowed here)",
}
_PHRASED = {
    "command",
    "cpu",
    "gpu",
    "cpu_source",
    "exit_code",
    "gpu_tracer",
    "gpu_tracer_reason",
    "cpu_hz",
    "cpu_handover_s",
    "cpu_bpf",
}


def cpu_sampler(prof: Profile) -> str:
    """Which CPU sampler ran and at what rate, or why there are no CPU samples."""
    meta = prof.meta
    n = sum(ws.samples for ws in prof.cpu)
    if meta.get("cpu") == "False":
        return "off (recorded with --no-cpu)"
    source = meta.get("cpu_source", "bpf" if n else "")
    name = CPU_SOURCES.get(source, source or "none")
    if meta.get("cpu_handover_s"):  # `record`'s quick start (agent/.../cpu/handover.py)
        name += f" (py-spy, Python frames only, for the first {meta['cpu_handover_s']} s)"
    elif source == "py-spy" and meta.get("cpu_bpf") == "compiling":
        name = "py-spy (Python frames only: the run ended before the BPF sampler compiled)"
    return f"{name} at {prof.hz} Hz, {n:,} samples" if n else f"{name}: no samples"


def gpu_tracing(report: Report) -> tuple[bool | None, str]:
    """(traced, words): True when CUDA kernels were traced, False with why, None: no GPU."""
    a, s = report.analysis, report.gpu
    if s is not None and s.kernels:
        return True, f"CUDA tracing on: {s.kernels:,} kernels traced"
    if a is not None and a.headline.ratio is None and a.cpu_note == "no GPU data":
        reason = a.headline.reason
        if report.meta.get("gpu") != "True" and s is None:
            return None, reason.removeprefix("GPU tracing was off: ")
        return False, reason
    if s is not None:
        return False, "no CUDA kernel records"
    return None, "no GPU data"


def process_names(prof: Profile) -> dict[int, str]:
    """pid -> process name, busiest process first (a bare pid where no name is known)."""
    totals: dict[tuple[int, str], int] = {}
    for ws in (*prof.cpu, *prof.gpu):
        key = (ws.pid, ws.process)
        totals[key] = totals.get(key, 0) + ws.value_ns
    seen: dict[int, str] = {}
    for (pid, name), _ in sorted(totals.items(), key=lambda kv: (-kv[1], kv[0])):
        if pid not in seen or seen[pid] == str(pid):
            seen[pid] = name
    return seen


def processes(prof: Profile) -> list[str]:
    """Processes seen, "name [pid]", busiest first."""
    return [
        f"{name} [{pid}]" if name != str(pid) else f"pid {pid}"
        for pid, name in process_names(prof).items()
    ]


def profile_items(prof: Profile) -> list[tuple[str, str]]:
    """(label, value) pairs known from the profile alone, in reading order."""
    meta = prof.meta
    out: list[tuple[str, str]] = []
    if meta.get("command"):
        out.append(("command", meta["command"]))
    out.append(("duration", f"{prof.duration_s:.1f} s"))
    procs = processes(prof)
    if procs:
        shown = ", ".join(procs[:4]) + (f" and {len(procs) - 4} more" if len(procs) > 4 else "")
        out.append(("processes", shown))
    out.append(("CPU", cpu_sampler(prof)))
    stacks = stack_note(meta)
    if stacks:
        out.append(("CPU stacks", stacks))
    if prof.cpu:
        out.append(("CPU time", format_ns(sum(ws.value_ns for ws in prof.cpu))))
    if prof.gpu:
        out.append(("GPU time", format_ns(sum(ws.value_ns for ws in prof.gpu))))
    offcpu = offcpu_item(prof)
    if offcpu:
        out.append(("off-CPU", offcpu))
    return out


def offcpu_item(prof: Profile) -> str:
    """The off-CPU waits shown, and every wait left out of the view with its time (the
    probe's counters): "" when the session has neither."""
    meta = prof.meta

    def n(key: str) -> int:
        return int(meta.get(f"counter.offcpu_{key}", "0") or 0)

    shown = sum(ws.samples for ws in prof.offcpu)
    left = []
    if n("short"):
        left.append(f"{n('short'):,} shorter than the minimum ({format_ns(n('short_ns'))})")
    if n("skipped"):
        left.append(f"{n('skipped'):,} switch-outs not followed (1-in-N sampling)")
    if n("unattributed"):
        left.append(
            f"{n('unattributed'):,} outside a syscall, e.g. preempted "
            f"({format_ns(n('unattributed_ns'))}, no stack)"
        )
    lost = n("ring_full") + n("table_full")
    if lost:
        left.append(f"{lost:,} lost (ring buffer or table full)")
    if not shown and not left:
        return ""
    words = f"{shown:,} waits, {format_ns(sum(ws.value_ns for ws in prof.offcpu))}"
    return words + (f"; not shown: {'; '.join(left)}" if left else "")


def _listed(values: list[str], shown: int = 4) -> str:
    more = len(values) - shown
    return ", ".join(values[:shown]) + (f" and {more} more" if more > 0 else "")


def _grouped(meta: dict[str, str]) -> tuple[list[tuple[str, str]], set[str]]:
    """Meta written in parts (a cluster session's name and pods, the machine, the carbon
    settings, labels), phrased as one item each; and the keys they used."""
    out: list[tuple[str, str]] = []
    used: set[str] = set()
    if meta.get("namespace") and meta.get("session"):
        out.append(("ProfilingSession", f"{meta['namespace']}/{meta['session']}"))
        used |= {"namespace", "session", "uid"}
    pods = sorted(v for k, v in meta.items() if k.startswith("pod:"))
    if pods:
        out.append(("pods", _listed(pods)))
    labels = sorted(
        f"{k.removeprefix('label:')}={v}" for k, v in meta.items() if k.startswith("label:")
    )
    if labels:
        out.append(("labels", ", ".join(labels)))
    if meta.get("host:vcpus"):
        machine = f"{meta['host:vcpus']} vCPUs"
        if meta.get("host:memory_gb"):
            machine += f", {meta['host:memory_gb']} GB memory"
        out.append(("machine", machine))
    if meta.get("carbon:cloudProvider"):
        carbon = f"{meta['carbon:cloudProvider']} {meta.get('carbon:region', '')}".strip()
        if meta.get("carbon:pue"):
            carbon += f", PUE {meta['carbon:pue']}"
        out.append(("carbon settings", carbon))
    used |= {
        k for k in meta if k.split(":", 1)[0] in ("pod", "label", "host", "carbon") and ":" in k
    }
    return out, used


def other_items(prof: Profile) -> list[tuple[str, str]]:
    """The exit code when not 0, a cluster session's name and pods, the machine, labels,
    and meta this module does not phrase, in words; never a raw ``prefix:key``."""
    meta = prof.meta
    out: list[tuple[str, str]] = []
    if meta.get("exit_code") not in (None, "", "0"):
        out.append(("exit code", meta["exit_code"]))
    grouped, used = _grouped(meta)
    out += grouped
    for k, v in sorted(meta.items()):
        if k not in _PHRASED and k not in used and not k.startswith("counter."):
            out.append((k.replace("_", " "), v))
    return out


def gpu_item(report: Report) -> tuple[str, str]:
    traced, words = gpu_tracing(report)
    gpu = words if traced is not False else f"not traced: {words}"
    if report.analysis is not None and traced:
        gpu += f"; idle {figure_text(report.analysis.headline)} of the steady state"
    return ("GPU", gpu)


def items(report: Report) -> list[tuple[str, str]]:
    """(label, value) pairs of the whole header, in reading order."""
    prof = report.profile
    return [*profile_items(prof), gpu_item(report), *other_items(prof)]
