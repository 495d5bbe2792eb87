"""`kubeprof report` and `kubeprof sessions`: load a session, analyse it, render, write it."""

from __future__ import annotations

import gzip
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.engine import Connection, Engine

from kubeprof.analysis import energy, gpu_trace
from kubeprof.analysis.cpu_samples import SampleColumns
from kubeprof.analysis.cpu_window import samples_in, window_stacks
from kubeprof.analysis.findings import Window, analyse
from kubeprof.analysis.gpu_summary import gpu_profile_stacks, gpu_summary
from kubeprof.analysis.interpreter_frames import fold_stacks
from kubeprof.gc_pause import gc_paused
from kubeprof.model import GpuActivity, GpuMetricSample, OffCpuSample
from kubeprof.report.flame_page import stacks_page
from kubeprof.reportdata import CPU_WINDOW, Profile, Report, WeightedStack
from kubeprof.storage import Store, prepared_flames, prepared_views
from kubeprof.storage import queries as q
from kubeprof.storage.models import GpuActivityRow, OffCpuSampleRow, SampleRow
from kubeprof.storage.offcpu import offcpu_samples
from kubeprof.storage.side_read import SideRead

# Session meta written by `kubeprof record --gpu` (kubeprof.agent.record): whether the
# in-process CUDA tracer ran ("on"/"off") and, when off, why in one line.
GPU_TRACER = "gpu_tracer"
GPU_TRACER_REASON = "gpu_tracer_reason"


def fold_profile(profile: Profile) -> Profile:
    """The profile with CPU and GPU stacks folded (GPU stacks carry their CPU callers;
    analysis.interpreter_frames says which frames fold)."""
    return replace(profile, cpu=fold_stacks(profile.cpu), gpu=fold_stacks(profile.gpu))


def gpu_tracing(meta: Mapping[str, str], activities: Sequence[GpuActivity]) -> tuple[bool, str]:
    """Whether the GPU tracer ran in this session and, when it did not, why.

    Kernel records prove it ran; a tracer that said hello and recorded nothing also ran (the
    workload launched no kernel). Otherwise the reason the recorder stored, or the best
    reason the records themselves give.
    """
    if any(a.kind == "kernel" for a in activities) or meta.get(GPU_TRACER) == "on":
        return True, ""
    if meta.get(GPU_TRACER_REASON):
        return False, meta[GPU_TRACER_REASON]
    if meta.get("gpu") == "False":
        return False, "the session was recorded without --gpu"
    if meta.get("gpu") == "True":
        return False, "no kernel was recorded and the tracer reported no reason"
    if activities:
        return False, "no CUDA kernel records (only copies, syncs or markers)"
    return False, "no CUDA kernel records in this session"


def build_report(
    profile: Profile,
    activities: Sequence[GpuActivity],
    metrics: Sequence[GpuMetricSample],
    start_ns: int,
    end_ns: int,
    cpu: SampleColumns | None = None,
    *,
    process_names: Mapping[int, str] | None = None,
    offcpu: Sequence[OffCpuSample] = (),
) -> Report:
    """The whole report of a session from its CPU profile, GPU records and CPU sample
    columns (no I/O): the GPU summary, and the findings analysis for any session with GPU
    or CPU data (``offcpu``: its off-CPU samples, where the launching thread waited)."""
    analysis = None
    trace = gpu_trace.build(activities)  # one index of the records, for both parts
    if activities or metrics or cpu is not None:
        traced, why = gpu_tracing(profile.meta, activities)
        analysis = analyse(
            activities,
            metrics,
            cpu,
            Window(start_ns, end_ns),
            gpu_traced=traced,
            untraced_reason=why,
            offcpu=offcpu,
            trace=trace,
        )
    findings = analysis.findings if analysis is not None else ()
    est, note = session_energy(profile, metrics)
    if not (activities or metrics):
        return Report(profile, findings=findings, analysis=analysis, energy=est, energy_note=note)
    head = (
        analysis.headline if analysis is not None and analysis.headline.ratio is not None else None
    )
    summary = gpu_summary(activities, metrics, start_ns, end_ns, headline=head, trace=trace)
    gpu = gpu_profile_stacks(activities, process_names)
    return Report(
        replace(profile, gpu=gpu),
        gpu=summary,
        findings=findings,
        analysis=analysis,
        energy=est,
        energy_note=note,
    )


def session_energy(
    profile: Profile,
    metrics: Sequence[GpuMetricSample],
) -> tuple[energy.EnergyEstimate | None, str]:
    """The session's energy and CO2e by the CCF method (the same estimate `compare` shows).

    GPU energy from the NVML readings; CPU and memory only with the carbon settings (`record
    --cloud-provider/--region`, the CRD's `carbon`) and the machine size in the meta.
    """
    try:
        settings = energy.settings_from_meta(profile.meta)
        coeffs = energy.coefficients(settings) if settings else None
    except energy.CarbonError as exc:
        return None, f"energy not estimated: {exc}"
    readings = [m for m in metrics if m.metric in ("energy_mj", "power_mw") and m.pid == 0]
    if not readings and coeffs is None:
        return None, ""
    vcpus = _number(profile.meta.get("host:vcpus"))
    memory_gb = _number(profile.meta.get("host:memory_gb"))
    est = energy.estimate(
        {"": readings},
        wall_s=profile.duration_s,
        cpu_samples=sum(ws.samples for ws in profile.cpu),
        hz=profile.hz,
        vcpus=int(vcpus) if vcpus else None,
        memory_gb=memory_gb,
        coeffs=coeffs,
    )
    return est, ""


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        return None


def load(
    store_url: str | None,
    ref: str | None,
    *,
    keep_interpreter: bool = False,
    whole_session: bool = False,
) -> Report:
    """The report of session `ref` (the newest when None) in the store at `store_url`
    (`load_report` prepares it)."""
    store = Store.open(store_url)
    try:
        info = _touch(store, ref)
        with store.engine.connect() as conn:
            return load_report(
                conn, info, keep_interpreter=keep_interpreter, whole_session=whole_session
            )
    finally:
        store.close()


def _touch(store: Store, ref: str | None) -> q.SessionInfo:
    """Session `ref`, its samples no writer counted (a killed recording's) counted now,
    once, instead of added by every read of it."""
    with store.engine.connect() as conn:
        info = q.find_session(conn, ref)
    store.settle([info.id])
    return info


def load_report(
    conn: Connection,
    info: q.SessionInfo,
    *,
    keep_interpreter: bool = False,
    whole_session: bool = False,
) -> Report:
    """The one prepared view of a stored session that `kubeprof report`, `kubeprof diff`
    and the web UI all show, so they say the same numbers.

    CPython's own frames are folded out of stacks with Python frames unless
    `keep_interpreter` (analysis.interpreter_frames says why). The CPU view follows the
    window the GPU analysis judged unless `whole_session` (`cpu_follows_window`).

    A final session's view is stored the first time and read back after that
    (storage.prepared_views: only while the code and the session's row are unchanged);
    a whole-session view's CPU flame graph with it (`store_view`)."""
    options = prepared_views.Options(keep_interpreter, whole_session)
    with gc_paused():  # kubeprof.gc_pause says why
        stored = prepared_views.load(conn, info, options)
        if stored is not None:
            return stored
        report = _prepared(conn, info, keep_interpreter, whole_session)
    store_view(conn.engine, info, options, report)
    return report


def store_view(
    engine: Engine, info: q.SessionInfo, options: prepared_views.Options, report: Report
) -> bool:
    """Store a final session's view; a whole-session one with its CPU flame graph as the
    web UI answers it (storage.prepared_flames: the page's first graph, read back instead
    of the view's megabytes or `stack_counts`). True when the view was stored."""
    if not prepared_views.save(engine, info, options, report):
        return False
    if options.whole_session:
        with gc_paused():
            page = stacks_page("cpu", report.profile.cpu)
        prepared_flames.save(engine, info, "cpu", options.keep_interpreter, page)
    return True


def _prepared(
    conn: Connection, info: q.SessionInfo, keep_interpreter: bool, whole_session: bool
) -> Report:
    report, cpu = _whole(conn, info, keep_interpreter)
    if whole_session or cpu is None:
        return report
    return cpu_follows_window(report, cpu, fold=not keep_interpreter)


def _whole(
    conn: Connection, info: q.SessionInfo, keep_interpreter: bool
) -> tuple[Report, SampleColumns | None]:
    """The whole-session report and the sample columns a CPU window is cut from."""
    # the samples' server-side grouping runs while this thread loads the GPU records
    samples = SideRead(conn, lambda c: q.sample_columns(c, info))
    profile = q.load_profile(conn, info)
    if not keep_interpreter:
        profile = fold_profile(profile)
    activities = q.gpu_activities(conn, info.id)
    metrics = q.gpu_metrics(conn, info.id)
    names = {pid: name for (_, pid), name in q.process_names(conn, info.id).items()}
    waits = offcpu_samples(conn, info.id)
    cpu = samples.result()
    report = build_report(
        profile,
        activities,
        metrics,
        info.start_ns,
        info.end_ns,
        cpu,
        process_names=names,
        offcpu=waits,
    )
    return report, cpu


def store_views(conn: Connection, info: q.SessionInfo, *, keep_interpreter: bool = False) -> int:
    """Store a final session's two views, whole session and GPU window (what `kubeprof
    report` and the web UI's page ask for), from one computation; how many were stored.
    The operator runs it once a session's aggregation has finished."""
    if not prepared_views.final(info):
        return 0
    with gc_paused():
        whole, cpu = _whole(conn, info, keep_interpreter)
        window = whole if cpu is None else cpu_follows_window(whole, cpu, fold=not keep_interpreter)
    return sum(
        store_view(conn.engine, info, prepared_views.Options(keep_interpreter, w), r)
        for w, r in ((False, window), (True, whole))
    )


def fold_view(stacks: tuple[WeightedStack, ...], view: str) -> tuple[WeightedStack, ...]:
    """A view's stacks folded as `load_report` folds a profile (`fold_profile`: the CPU
    and GPU stacks; off-CPU waits keep their frames), for readers that build stacks
    themselves (the web UI's flame graphs over a time range, pod or GPU)."""
    return fold_stacks(stacks) if view in ("cpu", "gpu") else stacks


def cpu_follows_window(report: Report, cpu: SampleColumns, *, fold: bool = True) -> Report:
    """The report with its CPU view cut to the analysed GPU window (steady state, or the
    active window after warm-up); start-up, warm-up and tail are left out and the header
    says so (meta `cpu_window`). Unchanged without a GPU figure or samples in the window."""
    a = report.analysis
    if a is None or a.headline.ratio is None or a.phases.steady.duration_ns <= 0:
        return report
    w = a.phases.steady
    process = {ws.pid: ws.process for ws in report.profile.cpu}
    stacks = window_stacks(cpu, w, process)
    inside, every = samples_in(cpu, w)
    if not stacks or inside == every:
        return report
    cut = replace(report.profile, cpu=stacks, gpu=())
    if fold:
        cut = fold_profile(cut)
    what = "steady state" if a.phases.loop else "active window after warm-up"
    note = (
        f"{what} only ({w.duration_ns / 1e9:.2f} s, {inside:,} of {every:,} samples; "
        "--whole-session: all)"
    )
    profile = replace(report.profile, cpu=cut.cpu, meta={**report.profile.meta, CPU_WINDOW: note})
    return replace(report, profile=profile)


def report_command(
    ref: str | None,
    fmt: str,
    view: str,
    out: str | None,
    store_url: str | None,
    keep_interpreter: bool = False,
    *,
    text: TextOptions | None = None,
    whole_session: bool = False,
    node: str | None = None,
) -> int:
    if fmt == "perfetto":
        return timeline_command(store_url, ref, out, keep_interpreter=keep_interpreter, node=node)
    if node is not None:
        raise LookupError(
            "--node: only the timeline (-f perfetto) is drawn per node; the other formats "
            "cover every node of the session (drop --node)"
        )
    report = load(store_url, ref, keep_interpreter=keep_interpreter, whole_session=whole_session)
    profile = report.profile
    if view == "gpu" and not profile.gpu:
        raise LookupError(
            f"session {profile.session!r} has no GPU data: record it with "
            "`kubeprof record --gpu`, or drop --view gpu"
        )
    if view == "cpu" and not profile.cpu:
        raise LookupError(
            f"session {profile.session!r} has no CPU samples (recorded with "
            "--no-cpu?): use --view gpu"
        )
    from kubeprof.report.formats import FORMATS, render

    text = text or TextOptions()
    data = render(
        report,
        fmt,
        view=view,
        top=text.top,
        width=text.width if text.width is not None else _text_width(out),
        startup=text.startup,
    )
    if out is None and fmt in ("html", "pprof"):
        out = default_out(profile.session, FORMATS[fmt].suffix)
    return _write(data, out)


def default_out(session: str, suffix: str) -> str:
    """The file a report goes to without --out: the session's name in this folder (a
    cluster session's "NAMESPACE/NAME" as "NAMESPACE_NAME", not a folder)."""
    return session.replace("/", "_") + suffix


def _write(data: str | bytes, out: str | None) -> int:
    """Write to `out`, or to stdout when it is None or "-"."""
    if out is None or out == "-":  # `--out -`: stdout, also for html and pprof
        if isinstance(data, bytes):
            sys.stdout.flush()
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
        else:
            sys.stdout.write(data)
        return 0
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data)
    print(f"kubeprof: wrote {path}", file=sys.stderr)
    return 0


TIMELINE_MAX_RECORDS = 2_000_000
"""The most GPU records and CPU samples (on and off CPU) the web UI turns into a timeline:
loading them takes about 1 GB at this size; larger sessions are for the CLI."""


def timeline_size(conn: Connection, session_id: int) -> int:
    """GPU records, CPU samples and off-CPU samples of a session, counted in the database
    (each table has an index that starts with the session) before any is loaded."""
    return sum(
        int(conn.execute(select(func.count()).where(row.session_id == session_id)).scalar_one())
        for row in (GpuActivityRow, SampleRow, OffCpuSampleRow)
    )


class NodeChoice(LookupError):
    """A timeline asked of a session with several nodes without naming one, or naming one
    the session does not have; the message lists the session's nodes."""


def timeline_node(conn: Connection, info: q.SessionInfo, node: str | None) -> str:
    """The one node a timeline of ``info`` draws: ``node``, or the session's only node.

    Each node's pids and CLOCK_MONOTONIC are its own, so two nodes on one time axis would
    put unrelated times side by side and merge processes that share a pid."""
    nodes = q.session_nodes(conn, info.id)
    named = ", ".join(repr(n) for n in nodes)
    if node is None:
        if len(nodes) > 1:
            raise NodeChoice(
                f"session {info.name!r} has records from {len(nodes)} nodes ({named}); a "
                "timeline draws one node's clock: name one (--node NAME; in the web UI, "
                "?node=NAME)"
            )
        return nodes[0] if nodes else ""
    if node not in nodes:
        raise NodeChoice(
            f"node: session {info.name!r} has no records from node {node!r}; its "
            f"nodes: {named or 'none'}"
        )
    return node


def timeline_inputs(
    conn: Connection,
    info: q.SessionInfo,
    *,
    keep_interpreter: bool = False,
    node: str,
) -> dict[str, Any]:
    """The keyword arguments of `write_perfetto` for a stored session: one node's GPU
    records, CPU and off-CPU samples, process names and phases (the CLI and the web UI
    both); ``node`` as `timeline_node` picked it."""
    from kubeprof.analysis import gpu_trace, phases

    activities = q.gpu_activities(conn, info.id, node)
    cpu = q.sample_columns(conn, info, node)
    waits = offcpu_samples(conn, info.id, node)
    names = {pid: name for (n, pid), name in q.process_names(conn, info.id).items() if n == node}
    start = info.start_ns or min((a.start_ns for a in activities), default=0)
    end = info.end_ns or max((a.end_ns for a in activities), default=start)
    work = any(a.kind in ("kernel", "memcpy", "memset") for a in activities)
    ph = phases.detect(gpu_trace.build(activities), phases.Window(start, end)) if work else None
    return {
        "session": info.name,
        "start_ns": start,
        "activities": activities,
        "cpu": cpu,
        "offcpu": waits,
        "phases": ph,
        "process_names": names,
        "keep_interpreter": keep_interpreter,
    }


def timeline_command(
    store_url: str | None,
    ref: str | None,
    out: str | None,
    *,
    keep_interpreter: bool = False,
    node: str | None = None,
) -> int:
    """Session `ref` as Chrome trace-event JSON for Perfetto (report.perfetto), written
    event by event to `out` (SESSION.trace.json by default; gzip'd when it ends in .gz,
    which Perfetto and chrome://tracing open too, at about a tenth of the size)."""
    from kubeprof.report.perfetto import write_perfetto

    store = Store.open(store_url)
    try:
        info = _touch(store, ref)
        with store.engine.connect() as conn:
            picked = timeline_node(conn, info, node)
            args = timeline_inputs(conn, info, keep_interpreter=keep_interpreter, node=picked)
    finally:
        store.close()
    if out is None:  # one file per node when named: SESSION.NODE.trace.json
        out = default_out(info.name + (f".{node}" if node else ""), ".trace.json")
    if out == "-":
        write_perfetto(sys.stdout, **args)
        return 0
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    with (
        gzip.open(path, "wt", encoding="utf-8", compresslevel=6)
        if out.endswith(".gz")
        else path.open("w", encoding="utf-8")
    ) as stream:
        write_perfetto(stream, **args)
    print(f"kubeprof: wrote {path}", file=sys.stderr)
    return 0


def diff_command(
    a_ref: str,
    b_ref: str,
    fmt: str,
    out: str | None,
    store_url: str | None,
    *,
    keep_interpreter: bool = False,
    top: int = 20,
    by: str = "self",
    whole_session: bool = False,
) -> int:
    """`kubeprof diff A B`: the two sessions compared (report.session_diff), as text, json
    or html (A-vs-B.diff.html by default). The CPU rows follow each session's GPU window
    as `report` does unless `whole_session`; the output says which."""
    from kubeprof.report.diff_render import render_diff_html, render_diff_json, render_diff_text
    from kubeprof.report.session_diff import diff_reports

    d = diff_reports(
        load(store_url, a_ref, keep_interpreter=keep_interpreter, whole_session=whole_session),
        load(store_url, b_ref, keep_interpreter=keep_interpreter, whole_session=whole_session),
        by=by,
    )
    if fmt == "json":
        return _write(render_diff_json(d), out)
    if fmt == "html":
        name = default_out(f"{d.a.session}-vs-{d.b.session}", ".diff.html")
        return _write(render_diff_html(d, top=top), out if out is not None else name)
    return _write(render_diff_text(d, top=top, width=_text_width(out)), out)


@dataclass(frozen=True, slots=True)
class TextOptions:
    """How the text report is laid out (`report --top/--width/--startup-frames`)."""

    top: int = 10  # rows per table
    width: int | None = None  # columns; None: the terminal's width, no cut when not one
    startup: bool = False  # rank start-up frames (<module>, main, ...) by total time


def _text_width(out: str | None) -> int:
    """The terminal's width when the report goes to one, else 0 (no cut: a file or a
    pipe keeps whole stacks, down to the Python line that launched a kernel)."""
    if out not in (None, "-") or not sys.stdout.isatty():
        return 0
    return shutil.get_terminal_size().columns


def sessions_command(store_url: str | None) -> int:
    store = Store.open(store_url)
    try:
        store.settle()  # a killed recording's samples counted once, not at every listing
        with store.engine.connect() as conn:
            sessions = q.list_sessions(conn)
    finally:
        store.close()
    if not sessions:
        print("no sessions stored yet; record one with `kubeprof record -- COMMAND`")
        return 0
    print(
        f"{'ID':>4}  {'NAME':<32} {'STATUS':<11} {'STARTED (UTC)':<19} {'SECS':>7} "
        f"{'SAMPLES':>8} {'GPU-RECS':>8}  COMMAND"
    )
    for s in sessions:
        print(
            f"{s.id:>4}  {s.name:<32} {s.status:<11} "
            f"{s.started_at.strftime('%Y-%m-%d %H:%M:%S'):<19} {s.duration_s:>7.1f} "
            f"{s.samples:>8} {s.gpu_activities:>8}  {' '.join(s.command.split())[:60]}"
        )
    return 0
