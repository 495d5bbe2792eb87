"""`kubeprof report --format json`: the whole report, machine-readable.

Top-level keys (``"schema": "kubeprof.report/1"``; times in ns on the recording's
CLOCK_MONOTONIC, ratios 0..1, ``null`` where no data backs a figure):

- ``session``: name, duration_s, cpu_hz, command.
- ``meta``: the session's stored meta as recorded (counters as ``counter.NAME``).
- ``cpu``: sampler ``source`` (bpf / py-spy / null), ``hz``, ``samples``, ``stacks``: how
  many samples' stacks were cut short of their thread's first frame (``cut``, by cause
  ``cut_at_copy_end`` / ``cut_without_unwind_tables``; marked ``[native frames not
  unwound]``), ``rooted_by_python_stack`` of those, ``native_thread_samples`` (threads a
  C library started), ``python_frames_missing``, ``no_user_stack`` (report/cpu_stacks.py).
- ``gpu_tracing``: ``traced`` (true, false, or null for a session without GPU data) and
  ``reason`` when not traced.
- ``headline``: THE GPU idle figure: ``idle_ratio`` (null when not measured), ``source``
  ("cupti": no kernel, copy or memset over the analysed window; "nvml" the labelled
  fallback; null), ``window`` {start_ns, end_ns}, ``window_kind`` ("steady_state", or
  "active_after_warmup" without a steady loop), ``kernel_busy`` / ``copy_busy`` (shares of
  the window), ``devices``, ``reason`` when null.
- ``phases``: ``method``, ``loop`` (false: no steady loop), ``anchor``, ``steps`` (bursts
  without a loop), ``step_ns``, and for each of startup / warmup / steady / tail / session:
  start_ns, end_ns, idle_ratio, busy_ns, kernel_busy_ns, copy_busy_ns, reason.
- ``timeline``: start_ns, bucket_ns (100 ms; wider past 4,096 buckets), devices, ``busy_ns``
  per bucket (summed over devices) and ``idle_ratio`` per bucket.
- ``breakdown``: steady-state idle by cause: idle_ns, host_ns, host_on_cpu_ns, other_ns,
  sync_ns, launch_ns, cpu_source, ``shares`` (of the idle time); null without kernels.
- ``cpu_during_idle``: the launching thread (pid, tid, thread), CPU ``source``, samples,
  stretches, idle_ns, on_cpu_share, ``hot`` frame and top ``frames`` / ``leaves`` (label,
  samples, share); null with ``cpu_note`` saying why.
- ``verdict``: null when findings were looked for, else why not (the analysed window is
  shorter than the minimum for a verdict).
- ``findings``: most severe first: kind, severity, message, evidence {numbers, frames,
  kernels, lines}, gain {saved_ns, share, model} or null, ``targets`` [{view, search}]: the
  flame-graph frames the finding points at.
- ``top_functions`` / ``top_stacks``: per view (cpu, gpu): functions by self and total time,
  stacks (root first) by value.
- ``gpu``: the GPU summary (kernels, kernel_ns, attributed_share and the parts of it through the
  main-thread fallback and through backward -> forward links, the unattributed share of
  backward kernels whose forward op launched no kernel, memcpy/memset/sync time,
  session_idle_ratio, ``top_kernels``, NVML ``metrics``), null without GPU records.
"""

from __future__ import annotations

import json
from typing import Any

from kubeprof.analysis.cpu_during_idle import CpuDuringIdle, FrameShare
from kubeprof.analysis.findings import Analysis, Finding
from kubeprof.analysis.gpu_summary import GpuSummary
from kubeprof.analysis.steady_idle import IdleFigure
from kubeprof.report.cpu_stacks import stack_counts
from kubeprof.report.evidence import targets
from kubeprof.report.header import gpu_tracing
from kubeprof.report.text import function_label, function_times
from kubeprof.report.views import available_views, view_stacks
from kubeprof.reportdata import Profile, Report

SCHEMA = "kubeprof.report/1"
TOP = 20


def _figure(f: IdleFigure) -> dict[str, Any]:
    return {
        "start_ns": f.window.start_ns,
        "end_ns": f.window.end_ns,
        "idle_ratio": f.ratio,
        "busy_ns": f.busy_ns,
        "kernel_busy_ns": f.kernel_busy_ns,
        "copy_busy_ns": f.copy_busy_ns,
        "devices": f.devices,
        "reason": f.reason or None,
    }


def _headline(report: Report) -> dict[str, Any] | None:
    a, s = report.analysis, report.gpu
    if a is not None and a.headline.ratio is not None:
        h = a.headline
        return {
            "idle_ratio": h.ratio,
            "source": "cupti",
            "window": {"start_ns": h.window.start_ns, "end_ns": h.window.end_ns},
            "window_kind": "steady_state" if a.phases.loop else "active_after_warmup",
            "kernel_busy": h.kernel_busy,
            "copy_busy": h.copy_busy,
            "devices": h.devices,
            "reason": None,
        }
    if s is not None and s.headline is not None and s.headline.source == "nvml":
        h2 = s.headline
        return {
            "idle_ratio": h2.ratio,
            "source": "nvml",
            "window": {"start_ns": h2.window.start_ns, "end_ns": h2.window.end_ns},
            "devices": h2.devices,
            "reason": "no CUDA kernel records: NVML device utilisation stands in",
        }
    if a is not None:
        return {
            "idle_ratio": None,
            "source": None,
            "window": {"start_ns": a.headline.window.start_ns, "end_ns": a.headline.window.end_ns},
            "devices": 0,
            "reason": a.headline.reason or "not measured",
        }
    return None


def _frame_share(f: FrameShare) -> dict[str, Any]:
    return {"frame": f.frame.label(), "samples": f.samples, "share": f.share}


def _cpu_during_idle(c: CpuDuringIdle | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return {
        "source": c.source,
        "pid": c.pid,
        "tid": c.tid,
        "thread": c.thread,
        "idle_ns": c.idle_ns,
        "stretches": c.stretches,
        "samples": c.samples,
        "on_cpu_share": c.on_cpu_share,
        "hot": _frame_share(c.hot) if c.hot is not None else None,
        "frames": [_frame_share(f) for f in c.frames],
        "leaves": [_frame_share(f) for f in c.leaves],
        "stacks": [
            {"stack": [fr.label() for fr in s.stack], "samples": s.samples, "share": s.share}
            for s in c.stacks
        ],
    }


def _finding(f: Finding) -> dict[str, Any]:
    ev = f.evidence
    return {
        "kind": f.kind.value,
        "severity": f.severity.value,
        "message": f.message,
        "evidence": {
            "numbers": dict(ev.numbers),
            "frames": list(ev.frames),
            "kernels": list(ev.kernels),
            "lines": list(ev.lines),
        },
        "gain": (
            {"saved_ns": f.gain.saved_ns, "share": f.gain.share, "model": f.gain.model}
            if f.gain is not None
            else None
        ),
        "targets": [{"view": t.view, "search": t.search} for t in targets(f)],
    }


def _analysis(a: Analysis) -> dict[str, Any]:
    ph, tl, b = a.phases, a.timeline, a.breakdown
    phases: dict[str, Any] = {
        "method": ph.method,
        "loop": ph.loop,
        "anchor": ph.anchor or None,
        "steps": ph.steps,
        "step_ns": ph.step_ns,
    }
    for name in ("startup", "warmup", "steady", "tail", "session"):
        phases[name] = _figure(getattr(a.figures, name))
    return {
        "phases": phases,
        "timeline": {
            "start_ns": tl.start_ns,
            "bucket_ns": tl.bucket_ns,
            "devices": tl.devices,
            "busy_ns": list(tl.busy_ns),
            "idle_ratio": [tl.idle_ratio(i) for i in range(len(tl.busy_ns))],
        },
        "breakdown": None
        if b is None
        else {
            "start_ns": b.window.start_ns,
            "end_ns": b.window.end_ns,
            "idle_ns": b.idle_ns,
            "host_ns": b.host_ns,
            "host_on_cpu_ns": b.host_on_cpu_ns,
            "other_ns": b.other_ns,
            "sync_ns": b.sync_ns,
            "launch_ns": b.launch_ns,
            "cpu_source": b.cpu_source or None,
            "shares": b.shares(),
        },
        "cpu_during_idle": _cpu_during_idle(a.cpu_during_idle),
        "cpu_note": a.cpu_note or None,
        "verdict": a.verdict or None,
        "findings": [_finding(f) for f in a.findings],
    }


def top_tables(profile: Profile) -> tuple[dict[str, Any], dict[str, Any]]:
    """`top_functions` and `top_stacks` per view (the web UI's summary shows the same)."""
    functions: dict[str, Any] = {}
    stacks: dict[str, Any] = {}
    for view in available_views(profile):
        ws = view_stacks(profile, view)
        self_ns, total_ns = function_times(ws)
        ranked = sorted(total_ns, key=lambda k: (-total_ns[k], k))[:TOP]
        functions[view] = [
            {"function": function_label(k), "self_ns": self_ns.get(k, 0), "total_ns": total_ns[k]}
            for k in ranked
        ]
        merged: dict[tuple[str, ...], list[int]] = {}
        for w in ws:
            acc = merged.setdefault(tuple(f.label() for f in w.stack), [0, 0])
            acc[0] += w.value_ns
            acc[1] += w.samples
        top = sorted(merged, key=lambda k: (-merged[k][0], k))[:TOP]
        stacks[view] = [
            {"stack": list(k), "value_ns": merged[k][0], "count": merged[k][1]} for k in top
        ]
    return functions, stacks


def _gpu(s: GpuSummary | None) -> dict[str, Any] | None:
    if s is None:
        return None
    traced = bool(s.kernels)

    def share(ns: int) -> float | None:
        """`ns` as a share of kernel time; None without kernels."""
        return ns / s.kernel_ns if traced and s.kernel_ns else None

    return {
        "kernels": s.kernels,
        "kernel_ns": s.kernel_ns,
        "attributed_share": s.attributed_share if traced else None,
        # of kernel time: shown under the main thread's stack (launched by a native thread,
        # the approximate fallback), and backward kernels charged to their forward op's line
        "attributed_via_main_share": share(s.attributed_via_main_ns),
        "attributed_via_backward_share": share(s.attributed_via_backward_ns),
        "attributed_via_xla_share": share(s.attributed_via_xla_ns),
        # not attributed: backward kernels of autograd nodes whose forward op launched none
        "unattributed_no_forward_share": share(s.unattributed_no_forward_ns),
        "session_idle_ratio": s.session.idle_ratio if traced else None,
        "memcpy_ns": s.memcpy_ns,
        "memcpy_bytes": s.memcpy_bytes,
        "memset_ns": s.memset_ns,
        "sync_ns": s.sync_ns,
        "nvtx_ranges": s.nvtx_ranges,
        "top_kernels": [
            {
                "name": k.name,
                "demangled": k.demangled,
                "count": k.count,
                "total_ns": k.total_ns,
                "mean_ns": k.mean_ns,
                "share": k.share,
                "grid": list(k.grid),
                "block": list(k.block),
            }
            for k in s.top_kernels
        ],
        "metrics": [
            {
                "device": m.device,
                "metric": m.metric,
                "pid": m.pid,
                "mean": m.mean,
                "max": m.max,
                "samples": m.samples,
            }
            for m in s.metrics
        ],
    }


def report_dict(report: Report) -> dict[str, Any]:
    """The report as plain JSON-able data (see the module docstring for the keys)."""
    prof, meta = report.profile, report.meta
    traced, words = gpu_tracing(report)
    functions, stacks = top_tables(prof)
    out: dict[str, Any] = {
        "schema": SCHEMA,
        "session": {
            "name": prof.session,
            "duration_s": prof.duration_s,
            "cpu_hz": prof.hz,
            "command": meta.get("command"),
        },
        "meta": dict(sorted(meta.items())),
        "cpu": {
            "source": meta.get("cpu_source") or ("bpf" if prof.cpu else None),
            "hz": prof.hz,
            "samples": sum(ws.samples for ws in prof.cpu),
            "stacks": stack_counts(meta),
        },
        "gpu_tracing": {"traced": traced, "reason": None if traced else words},
        "headline": _headline(report),
        "phases": None,
        "timeline": None,
        "breakdown": None,
        "cpu_during_idle": None,
        "cpu_note": None,
        "verdict": None,
        "findings": [],
    }
    if report.analysis is not None:
        out.update(_analysis(report.analysis))
    out["top_functions"] = functions
    out["top_stacks"] = stacks
    out["gpu"] = _gpu(report.gpu)
    out["energy"] = _energy(report)
    return out


def _energy(report: Report) -> dict[str, Any] | None:
    """kWh and CO2e (None without carbon settings), joules per part, what was not counted."""
    e = report.energy
    if e is None:
        return {"note": report.energy_note} if report.energy_note else None
    return {
        "it_joules": e.it_joules,
        "facility_kwh": e.facility_kwh,
        "co2e_g": e.co2e_g,
        "pue": e.pue,
        "gpus": [
            {"node": g.node, "device": g.device, "joules": g.joules, "method": g.method}
            for g in e.gpus
        ],
        "cpu_joules": e.cpu.joules if e.cpu else None,
        "memory_joules": e.memory.joules if e.memory else None,
        "missing": list(e.missing),
    }


def render_json(report: Report) -> str:
    return json.dumps(report_dict(report), indent=1, ensure_ascii=False) + "\n"
