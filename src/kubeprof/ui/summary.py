"""A session's page in one answer: header, findings, GPU tables, top functions and kernels.

It runs the same analysis as `kubeprof report` (`reporting.build_report`) and returns the
HTML report's own escaped fragments next to the data, so the page and the report file
render findings identically. The analysis reads every sample, so finished sessions are
analysed once and cached.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import Connection

from kubeprof.model import FrameKind
from kubeprof.report.analysis_html import findings_html
from kubeprof.report.evidence import targets, title
from kubeprof.report.flame_page import top_functions
from kubeprof.report.formats import gpu_off_reason
from kubeprof.report.gpu import render_gpu_html
from kubeprof.report.header import items, process_names
from kubeprof.report.json_report import top_tables
from kubeprof.report.views import available_views
from kubeprof.reportdata import Report
from kubeprof.reporting import load_report
from kubeprof.storage import queries as q
from kubeprof.storage.stack_counts import BUCKET_NS
from kubeprof.ui.refs import pod_names, ref_of, safe_meta


@dataclass(frozen=True, slots=True)
class Prepared:
    """How a session's view is prepared: `kubeprof report`'s two flags, so the page shows
    what the CLI shows with the same flags (query `keep-interpreter=1`, `whole-session=1`)."""

    keep_interpreter: bool = False  # --keep-interpreter: CPython's own frames stay
    whole_session: bool = False  # --whole-session: the CPU view is not cut to the GPU window


# What the session page asks for: its flame graph and top functions cover the whole session
# (narrowed by time on the page), so its header and tables do too.
PAGE = Prepared(whole_session=True)


@dataclass
class Cache:
    """Summaries of finished sessions, computed once (the analysis reads every sample).

    One computation per session at a time: a request for a summary being computed (by the
    background warm-up, or another request) waits for it instead of analysing it again,
    which on a big session doubled the memory and halved everyone's share of the CPU."""

    summaries: dict[tuple[int, str, int, Prepared], dict[str, Any]]
    lock: threading.Lock
    pending: dict[tuple[int, str, int, Prepared], threading.Lock] = field(default_factory=dict)

    @classmethod
    def new(cls) -> Cache:
        return cls({}, threading.Lock())

    def get(self, info: q.SessionInfo, how: Prepared = Prepared()) -> dict[str, Any] | None:
        with self.lock:
            return self.summaries.get((info.id, info.status, info.end_ns, how))

    def put(self, info: q.SessionInfo, value: dict[str, Any], how: Prepared = Prepared()) -> None:
        if info.status == "running":
            return
        with self.lock:
            self.summaries[(info.id, info.status, info.end_ns, how)] = value

    def once(
        self,
        info: q.SessionInfo,
        how: Prepared,
        compute: Callable[[], dict[str, Any]],
    ) -> dict[str, Any]:
        """The cached summary, else ``compute()``'s, computed by one caller at a time per
        session and view (a running session's is not kept: it changes)."""
        if info.status == "running":
            return compute()
        key = (info.id, info.status, info.end_ns, how)
        with self.lock:
            if key in self.summaries:
                return self.summaries[key]
            gate = self.pending.get(key)
            mine = gate is None
            if gate is None:
                gate = self.pending[key] = threading.Lock()
                gate.acquire()
        if not mine:
            with gate:  # the one computing it is done (or failed: then compute here)
                pass
            return self.get(info, how) or compute()
        try:
            value = compute()
            self.put(info, value, how)
            return value
        finally:
            with self.lock:
                del self.pending[key]
            gate.release()


def _pods(conn: Connection, info: q.SessionInfo) -> list[dict[str, str]]:
    names = pod_names(info.meta)
    uids = sorted(set(q.pid_pods(conn, info.id).values()))
    return [{"uid": u, "name": names.get(u, u)} for u in uids]


def _gpus(conn: Connection, info: q.SessionInfo) -> list[dict[str, Any]]:
    """The GPUs the session's processes used (kernel records or NVML per-process rows)."""
    seen = sorted({(node, dev) for node, dev, _ in q.gpu_users(conn, info.id)})
    return [
        {"id": f"{node}:{dev}" if node else str(dev), "node": node, "device": dev}
        for node, dev in seen
    ]


def summary(
    conn: Connection,
    info: q.SessionInfo,
    cache: Cache | None = None,
    how: Prepared = Prepared(),
) -> dict[str, Any]:
    """The session page: header, findings (as data and as the report's own HTML), GPU
    section, top functions and kernels, and what the flame graph can be narrowed to; from
    the view `kubeprof report` prepares (`reporting.load_report`), with the same flags."""
    if cache is not None:
        return cache.once(info, how, lambda: _summary(conn, info, how))
    return _summary(conn, info, how)


def _summary(conn: Connection, info: q.SessionInfo, how: Prepared) -> dict[str, Any]:
    report = load_report(
        conn, info, keep_interpreter=how.keep_interpreter, whole_session=how.whole_session
    )
    profile = dataclasses.replace(report.profile, meta=safe_meta(report.profile.meta))
    report = dataclasses.replace(report, profile=profile)
    out = _summary_of(report, info)
    out["pods"] = _pods(conn, info)
    out["gpus"] = _gpus(conn, info)
    out["nodes"] = q.session_nodes(conn, info.id)  # a timeline per node when several
    out["prepared"] = {"keepInterpreter": how.keep_interpreter, "wholeSession": how.whole_session}
    return out


def _summary_of(report: Report, info: q.SessionInfo) -> dict[str, Any]:
    a = report.analysis
    ns, name = ref_of(info)
    findings = [
        {
            "kind": f.kind.value,
            "severity": f.severity.value,
            "title": title(f.kind),
            "message": f.message,
            "frames": [{"view": t.view, "search": t.search} for t in targets(f)],
            "gainSeconds": f.gain.saved_ns / 1e9 if f.gain is not None else None,
        }
        for f in (a.findings if a is not None else ())
    ]
    gpu_idle = a.headline.ratio if a is not None else None
    kernels = [
        {
            "function": k["function"].removesuffix("_[gpu]"),
            "selfNs": k["selfNs"],
            "selfShare": k["selfShare"],
        }
        for k in top_functions(report.profile.gpu)
        if k["kind"] == FrameKind.GPU.value
    ]
    timeline = None
    if a is not None and a.timeline.busy_ns and a.timeline.devices:
        tl = a.timeline
        timeline = {
            "bucketSeconds": tl.bucket_ns / 1e9,
            "startSeconds": (tl.start_ns - info.start_ns) / 1e9 if info.start_ns else 0,
            "busy": [round(b / (tl.bucket_ns * tl.devices), 4) for b in tl.busy_ns],
        }
    return {
        "namespace": ns,
        "name": name,
        "phase": info.status,
        "durationSeconds": round(info.duration_s, 3),
        "header": [[k, v] for k, v in items(report)],
        "findings": findings,
        "gpuIdle": gpu_idle,
        "topFinding": findings[0]["message"] if findings else "",
        "views": available_views(report.profile),
        "topFunctions": top_functions(report.profile.cpu),
        # `kubeprof report -f json`'s own `top_functions`: per view, by total time
        "reportTopFunctions": top_tables(report.profile)[0],
        "topKernels": kernels,
        "timeline": timeline,
        "bucketSeconds": BUCKET_NS / 1e9,
        "html": {
            "findings": findings_html(a) if a is not None else "",
            "gpu": render_gpu_html(
                report.gpu, off_reason=gpu_off_reason(report), names=process_names(report.profile)
            )
            if report.gpu is not None
            else "",
        },
    }
