"""`kubeprof report` and `kubeprof sessions`: load a session, pick a renderer, write it."""

from __future__ import annotations

import sys
from pathlib import Path

from kubeprof.report.aggregate import Profile
from kubeprof.storage import Store
from kubeprof.storage import queries as q


def load(store_url: str | None, ref: str | None) -> tuple[Profile, list[tuple[str, str]], str]:
    """The session's profile, extra report sections (GPU) as (title, html), and GPU text."""
    store = Store.open(store_url)
    try:
        with store.engine.connect() as conn:
            info = q.find_session(conn, ref)
            profile = q.load_profile(conn, info)
            activities = q.gpu_activities(conn, info.id)
            metrics = q.gpu_metrics(conn, info.id)
    finally:
        store.close()
    sections: list[tuple[str, str]] = []
    gpu_text = ""
    if activities or metrics:
        from dataclasses import replace

        from kubeprof.analysis import gpu_report

        summary = gpu_report.gpu_summary(activities, metrics, info.start_ns, info.end_ns)
        profile = replace(profile, gpu=gpu_report.gpu_profile_stacks(activities))
        sections.append(("GPU", gpu_report.render_gpu_html(summary)))
        gpu_text = gpu_report.render_gpu_text(summary)
    return profile, sections, gpu_text


def report_command(ref: str | None, fmt: str, view: str, out: str | None,
                   store_url: str | None) -> int:
    profile, sections, gpu_text = load(store_url, ref)
    if view == "gpu" and not profile.gpu:
        raise LookupError(f"session {profile.session!r} has no GPU data: record it with "
                          "`kubeprof record --gpu`, or drop --view gpu")
    if view == "cpu" and not profile.cpu:
        raise LookupError(f"session {profile.session!r} has no CPU samples (recorded with "
                          "--no-cpu?): use --view gpu")
    from kubeprof.report.formats import FORMATS, render

    data = render(profile, fmt, view=view, extra_sections=sections)
    if isinstance(data, str) and gpu_text:  # text: the GPU summary follows the CPU tables
        data = f"{data}\n{gpu_text}"
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
