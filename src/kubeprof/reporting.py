"""`kubeprof report` and `kubeprof sessions`: load a session, analyse it, render, write it."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from kubeprof.analysis.gpu_summary import gpu_profile_stacks, gpu_summary
from kubeprof.model import GpuActivity, GpuMetricSample
from kubeprof.reportdata import Profile, Report
from kubeprof.storage import Store
from kubeprof.storage import queries as q


def build_report(profile: Profile, activities: Sequence[GpuActivity],
                 metrics: Sequence[GpuMetricSample], start_ns: int, end_ns: int) -> Report:
    """The whole report of a session from its CPU profile and GPU records (no I/O)."""
    if not (activities or metrics):
        return Report(profile)
    summary = gpu_summary(activities, metrics, start_ns, end_ns)
    return Report(replace(profile, gpu=gpu_profile_stacks(activities)), gpu=summary)


def load(store_url: str | None, ref: str | None) -> Report:
    """The report of session `ref` (the newest when None) in the store at `store_url`."""
    store = Store.open(store_url)
    try:
        with store.engine.connect() as conn:
            info = q.find_session(conn, ref)
            profile = q.load_profile(conn, info)
            activities = q.gpu_activities(conn, info.id)
            metrics = q.gpu_metrics(conn, info.id)
    finally:
        store.close()
    return build_report(profile, activities, metrics, info.start_ns, info.end_ns)


def report_command(ref: str | None, fmt: str, view: str, out: str | None,
                   store_url: str | None) -> int:
    report = load(store_url, ref)
    profile = report.profile
    if view == "gpu" and not profile.gpu:
        raise LookupError(f"session {profile.session!r} has no GPU data: record it with "
                          "`kubeprof record --gpu`, or drop --view gpu")
    if view == "cpu" and not profile.cpu:
        raise LookupError(f"session {profile.session!r} has no CPU samples (recorded with "
                          "--no-cpu?): use --view gpu")
    from kubeprof.report.formats import FORMATS, render

    data = render(report, fmt, view=view)
    if out is None and fmt in ("html", "pprof"):
        out = f"{profile.session}{FORMATS[fmt].suffix}"
    if out is None:
        sys.stdout.write(data if isinstance(data, str) else data.decode())
        return 0
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data)
    print(f"kubeprof: wrote {path}", file=sys.stderr)
    return 0


def sessions_command(store_url: str | None) -> int:
    store = Store.open(store_url)
    try:
        with store.engine.connect() as conn:
            sessions = q.list_sessions(conn)
    finally:
        store.close()
    if not sessions:
        print("no sessions stored yet; record one with `kubeprof record -- COMMAND`")
        return 0
    print(f"{'ID':>4}  {'NAME':<32} {'STATUS':<11} {'STARTED (UTC)':<19} {'SECS':>7} "
          f"{'SAMPLES':>8} {'GPU-RECS':>8}  COMMAND")
    for s in sessions:
        print(f"{s.id:>4}  {s.name:<32} {s.status:<11} "
              f"{s.started_at.strftime('%Y-%m-%d %H:%M:%S'):<19} {s.duration_s:>7.1f} "
              f"{s.samples:>8} {s.gpu_activities:>8}  {s.command[:60]}")
    return 0
