"""The `kubeprof` command line: record, report, sessions, ui, operator, agent."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from kubeprof.progress import TerminalProgress
from kubeprof.protocol.settings import (
    DEFAULT_CPU_HZ,
    DEFAULT_OFFCPU_EVERY,
    DEFAULT_OFFCPU_MIN_US,
)

EPILOG_RECORD = """examples:
  kubeprof record -- python train.py            profile a command until it exits
  kubeprof record --duration 30 --pid 4242      profile a running process for 30 s
  kubeprof record --gpu -- python train.py      add CUDA kernels, NVML metrics
"""


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _int_where(name: str, ok: Callable[[int], bool], wording: str) -> Callable[[str], int]:
    """An argparse type: an int for which `ok` holds, else "must be <wording>, got ..."
    (named `name`, which argparse prints for text that is not a number)."""

    def parse(text: str) -> int:
        value = int(text)
        if not ok(value):
            raise argparse.ArgumentTypeError(f"must be {wording}, got {text}")
        return value

    parse.__name__ = name
    return parse


_hz = _int_where("_hz", lambda v: 1 <= v <= 10_000, "between 1 and 10000")
_count = _int_where("_count", lambda v: v >= 1, "1 or more")


def _add_top(parser: argparse.ArgumentParser, default: int, rows: str) -> None:
    """--top N, the rows per table, as `report` and `diff` both take it."""
    parser.add_argument(
        "--top", type=_count, default=default, metavar="N", help=f"{rows} (default %(default)s)"
    )


_columns = _int_where("_columns", lambda v: v == 0 or v >= 40, "0 (no cut) or at least 40")
_nonnegative = _int_where("_nonnegative", lambda v: v >= 0, "0 or more")


def _label(text: str) -> str:
    """A valid KEY=VALUE, kept as text (argparse names the flag when parse_label refuses)."""
    from kubeprof.labels import parse_label

    parse_label(text)
    return text


def _carbon_flags(p: argparse.ArgumentParser) -> None:
    """Where the workload runs, for the energy and CO2 estimate (Cloud Carbon Footprint)."""
    p.add_argument(
        "--cloud-provider",
        choices=["aws", "gcp", "azure"],
        help="cloud provider, for CO2e (with --region)",
    )
    p.add_argument("--region", help="the provider's region, e.g. us-east-1 (with --cloud-provider)")
    p.add_argument(
        "--pue",
        type=_positive_float,
        help="data centre PUE (default: the provider's, as Cloud Carbon Footprint publishes it)",
    )


def _carbon_meta(args: argparse.Namespace) -> dict[str, str]:
    if bool(args.cloud_provider) != bool(args.region):
        raise ValueError("--cloud-provider and --region go together: give both or neither")
    if not args.cloud_provider:
        return {}
    meta = {"carbon:cloudProvider": args.cloud_provider, "carbon:region": args.region}
    if args.pue:
        meta["carbon:pue"] = str(args.pue)
    return meta


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"kubeprof {version('kubeprof')}"
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "kubeprof (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kubeprof", description="GPU+CPU profiler for AI workloads."
    )
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="cmd", required=True)

    rec = sub.add_parser(
        "record",
        help="profile a command or a running process",
        epilog=EPILOG_RECORD,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    rec.add_argument(
        "--duration",
        type=_positive_float,
        metavar="SECONDS",
        help="stop after this many seconds (default: when the target exits)",
    )
    rec.add_argument(
        "--hz", type=_hz, default=DEFAULT_CPU_HZ, help="CPU sampling rate (default %(default)s)"
    )
    rec.add_argument(
        "--offcpu-min-us",
        type=_nonnegative,
        default=DEFAULT_OFFCPU_MIN_US,
        metavar="US",
        help="off-CPU waits shorter than this get no stack, only "
        "counted (default %(default)s; BENCHMARKS.md has the cost per setting)",
    )
    rec.add_argument(
        "--offcpu-every",
        type=_nonnegative,
        default=DEFAULT_OFFCPU_EVERY,
        metavar="N",
        help="follow 1 in N switch-outs for off-CPU waits, each "
        "kept wait counting N times (default %(default)s: all; 0: no off-CPU "
        "profile)",
    )
    rec.add_argument(
        "--output", "-o", metavar="NAME", help="session name (default: command name and time)"
    )
    rec.add_argument(
        "--store",
        metavar="URL",
        help="database URL (default: embedded SQLite "
        "in ~/.local/share/kubeprof, or $KUBEPROF_STORE); postgresql+psycopg:// "
        "URLs also work",
    )
    rec.add_argument("--pid", type=int, help="profile this running process (and children)")
    rec.add_argument(
        "--gpu",
        action="store_true",
        help="trace CUDA kernels with their Python stacks and sample NVML",
    )
    rec.add_argument(
        "--no-cpu",
        dest="cpu",
        action="store_false",
        help="record no CPU samples (GPU only); not needed where BPF is not "
        "allowed: CPU sampling then falls back to py-spy by itself",
    )
    rec.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        type=_label,
        help="attach a label to the session, e.g. batch_size=64 "
        "(repeatable; `kubeprof compare` reads batch_size)",
    )
    _carbon_flags(rec)
    rec.add_argument(
        "command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...] to run and profile"
    )

    rep = sub.add_parser("report", help="show a stored session")
    rep.add_argument("session", nargs="?", help="session name or id (default: the newest)")
    rep.add_argument(
        "--format",
        "-f",
        default="text",
        choices=["text", "json", "html", "collapsed", "pprof", "speedscope", "perfetto"],
        help="text (findings first), json (the whole report, machine-readable), "
        "html (findings panel and flame graphs), a flame-graph export, or "
        "perfetto (a timeline for ui.perfetto.dev / chrome://tracing: "
        "SESSION.trace.json)",
    )
    rep.add_argument(
        "--view",
        choices=["cpu", "gpu", "off-cpu", "wall"],
        default=None,
        help="which stacks to show: cpu (on CPU), gpu, off-cpu (where threads "
        "waited, by time), wall (on + off CPU per thread); text/html show all "
        "views by default; collapsed/pprof/speedscope export CPU unless only GPU "
        "data exist",
    )
    rep.add_argument(
        "--out",
        metavar="FILE",
        help="write here; - is stdout (default: "
        "stdout for text formats, SESSION.html / SESSION.pb.gz for html / pprof)",
    )
    rep.add_argument("--store", metavar="URL", help="database URL (as for record)")
    _add_top(rep, 10, "rows per table in the text report")
    rep.add_argument(
        "--width",
        type=_columns,
        metavar="COLS",
        help="cut text lines at COLS "
        "columns, 0 for never (default: the terminal's width; no cut into a "
        "file or pipe)",
    )
    rep.add_argument(
        "--startup-frames",
        action="store_true",
        help="rank start-up frames (<module>, main, __libc_start_main, ...) in 'top by total' too",
    )
    rep.add_argument(
        "--keep-interpreter",
        action="store_true",
        help="keep CPython's own frames (_PyEval_EvalFrameDefault, ...) between "
        "and below Python frames; by default they are folded away so self time "
        "lands on Python functions",
    )
    rep.add_argument(
        "--node",
        metavar="NAME",
        help="with -f perfetto: the node whose timeline to write; a cluster session "
        "with several nodes needs it (each node's pids and clock are its own)",
    )
    rep.add_argument(
        "--whole-session",
        action="store_true",
        help="CPU view over the whole session; by default it follows the window "
        "the GPU analysis judged (steady state, or the active window after "
        "warm-up), start-up and warm-up left out",
    )

    dif = sub.add_parser(
        "diff",
        help="compare two sessions function by function (and per "
        "kernel and launching line with GPU data), with GPU idle and "
        "findings side by side",
        epilog="example:\n  kubeprof diff "
        "before after          rows by |change of self time|, B - A",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    dif.add_argument("a", metavar="A", help="the session before (name or id)")
    dif.add_argument("b", metavar="B", help="the session after (name or id)")
    dif.add_argument(
        "--format",
        "-f",
        default="text",
        choices=["text", "json", "html"],
        help="text, json (every row), or html (A-vs-B.diff.html)",
    )
    dif.add_argument("--out", metavar="FILE", help="write here; - is stdout")
    _add_top(dif, 20, "rows per table in text and html")
    dif.add_argument(
        "--sort",
        choices=["self", "total"],
        default="self",
        help="rank rows by the absolute change of self time (default) or of total time",
    )
    dif.add_argument("--store", metavar="URL", help="database URL (as for record)")
    dif.add_argument(
        "--keep-interpreter", action="store_true", help="keep CPython's own frames (as for report)"
    )
    dif.add_argument(
        "--whole-session",
        action="store_true",
        help="CPU rows over each whole session; by default they follow each session's GPU "
        "window as in `report` (the output says which)",
    )

    cmp_ = sub.add_parser(
        "compare",
        help="compare sessions of one workload (e.g. at several "
        "batch sizes): throughput, GPU busy, energy per sample",
    )
    cmp_.add_argument("sessions", nargs="+", metavar="SESSION", help="session names or ids")
    cmp_.add_argument("--store", metavar="URL", help="database URL (as for record)")
    _carbon_flags(cmp_)

    ses = sub.add_parser("sessions", help="list stored sessions (`sessions rm` removes)")
    ses.add_argument("--store", metavar="URL", help="database URL (as for record)")
    ses_sub = ses.add_subparsers(dest="ses_cmd")
    rm = ses_sub.add_parser(
        "rm",
        help="remove sessions and all their data",
        epilog="examples:\n  kubeprof sessions rm quick quick-2\n"
        "  kubeprof sessions rm --older-than 7d --dry-run",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    rm.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help="session names or ids (NAMESPACE/NAME for a cluster session)",
    )
    rm.add_argument(
        "--older-than",
        metavar="AGE",
        help="also every session started more than AGE ago (30m, 12h, 7d, 2w)",
    )
    rm.add_argument("--dry-run", action="store_true", help="only list what would go")
    rm.add_argument("--store", dest="rm_store", metavar="URL", help="database URL")

    ui = sub.add_parser(
        "ui", help="serve the web UI (sessions, flame graphs, diffs) over a store, read-only"
    )
    ui.add_argument("--store", metavar="URL", help="database URL (as for record)")
    ui.add_argument(
        "--listen",
        metavar="HOST:PORT",
        default="127.0.0.1:8686",
        help="where to serve (default %(default)s: this machine only; the UI "
        "has no login, so bind another address only behind your own auth)",
    )

    sub.add_parser(
        "operator",
        help="run the Kubernetes operator (see `kubeprof operator --help`)",
        add_help=False,
    )
    sub.add_parser(
        "agent", help="run one node's profiling agent (see `kubeprof agent --help`)", add_help=False
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list and args_list[0] in ("operator", "agent"):
        return _run_component(args_list[0], args_list[1:])
    args = build_parser().parse_args(args_list)
    code = _guarded(args)
    if args.cmd == "record" and argv is None:  # the `kubeprof` command itself
        _exit_now(code)
    return code


def _guarded(args: argparse.Namespace) -> int:
    """`_dispatch`, with a closed pipe and Ctrl-C ending as shells expect."""
    try:
        return _dispatch(args)
    except BrokenPipeError:
        # The reader went away (`kubeprof sessions | head -1`): stop quietly, as `ls` does.
        # Point stdout at /dev/null so the interpreter's flush at exit does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a tool killed by the pipe
    except KeyboardInterrupt:
        print("kubeprof: interrupted", file=sys.stderr)
        return 130


def _exit_now(code: int) -> None:
    """End `kubeprof record` without the interpreter's teardown (~0.2 s of freeing modules
    and objects, a twentieth of a 3 s recording): the session is written and closed, the
    collectors stopped; what is left (a BPF compile never used) goes with the process."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


# Each command's flags handed to its function: alike in shape only (different commands).
def _dispatch(args: argparse.Namespace) -> int:
    try:
        if args.cmd == "record":  # before the storage imports (~0.4 s): the command starts
            return _record(args)
        return _stored(args)
    except LookupError as exc:
        print(f"kubeprof: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        if not _is_store_error(exc):
            raise
        print(f"kubeprof: error: {exc}", file=sys.stderr)
        return 2


def _is_store_error(exc: Exception) -> bool:
    """A `StoreError`, told without importing the storage package where it was not used."""
    storage = sys.modules.get("kubeprof.storage")
    return storage is not None and isinstance(exc, storage.StoreError)


def _read_options(args: argparse.Namespace) -> dict[str, Any]:
    """The flags `report` and `diff` share, as both commands' keywords: one spelling of
    where the store is, what is written where, and which CPU rows count."""
    return {
        "fmt": args.format,
        "out": args.out,
        "store_url": args.store,
        "keep_interpreter": args.keep_interpreter,
        "whole_session": args.whole_session,
    }


def _stored(args: argparse.Namespace) -> int:
    """The commands that read the store."""
    from kubeprof import reporting

    if args.cmd == "report":
        return reporting.report_command(
            args.session,
            view=args.view,
            node=args.node,
            text=reporting.TextOptions(args.top, args.width, args.startup_frames),
            **_read_options(args),
        )
    if args.cmd == "compare":
        return _compare(args)
    if args.cmd == "diff":
        return reporting.diff_command(
            args.a, args.b, top=args.top, by=args.sort, **_read_options(args)
        )
    if args.cmd == "sessions" and args.ses_cmd == "rm":
        from kubeprof.session_removal import rm_command

        return rm_command(
            args.names, args.older_than, args.rm_store or args.store, dry_run=args.dry_run
        )
    if args.cmd == "sessions":
        return reporting.sessions_command(args.store)
    if args.cmd == "ui":
        return _ui(args)
    return 1


def _ui(args: argparse.Namespace) -> int:
    host, _, port = args.listen.rpartition(":")
    if not port.isdigit():
        print(f"kubeprof ui: error: --listen wants HOST:PORT, got {args.listen!r}", file=sys.stderr)
        return 2
    from kubeprof.ui.server import ui_command

    try:
        return ui_command(args.store, host or "127.0.0.1", int(port))
    except OSError as exc:
        print(
            f"kubeprof ui: error: cannot listen on {args.listen}: {exc.strerror}; pick "
            "another --listen HOST:PORT",
            file=sys.stderr,
        )
        return 2


def _compare(args: argparse.Namespace) -> int:
    from kubeprof.analysis.energy import CarbonSettings
    from kubeprof.compare import compare_command

    try:
        meta = _carbon_meta(args)
    except ValueError as exc:
        print(f"kubeprof: error: {exc}", file=sys.stderr)
        return 2
    carbon = (
        CarbonSettings(meta["carbon:cloudProvider"], meta["carbon:region"], args.pue)
        if meta
        else None
    )
    return compare_command(args.sessions, args.store, carbon=carbon)


def _record(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if bool(command) == (args.pid is not None):
        print(
            "kubeprof: error: give exactly one of --pid PID or -- COMMAND [ARGS...]",
            file=sys.stderr,
        )
        return 2
    # Loaded here, not at the top: the core never imports the agent at module level.
    from kubeprof.agent.record import RecordError, RecordOptions, record
    from kubeprof.labels import labels_meta

    try:
        meta = {**labels_meta(args.label), **_carbon_meta(args)}
    except ValueError as exc:
        print(f"kubeprof: error: {exc}", file=sys.stderr)
        return 2
    # flag -> option, one line each (alike in shape with queries' column -> field copies)
    opts = RecordOptions(
        command=command,
        pid=args.pid,
        duration_s=args.duration,
        hz=args.hz,
        name=args.output,
        store_url=args.store,
        cpu=args.cpu,
        gpu=args.gpu,
        meta=meta,
        offcpu_min_us=args.offcpu_min_us,
        offcpu_every=args.offcpu_every,
    )
    shown = TerminalProgress(sys.stderr) if sys.stderr.isatty() else None
    if shown is not None:  # a status line on a terminal; nothing extra when piped
        opts.progress, opts.log = shown, shown.log
    try:
        result = record(opts)
    except RecordError as exc:
        print(f"kubeprof: error: {exc}", file=sys.stderr)
        return 2
    finally:
        if shown is not None:
            shown.done()
    for warning in result.warnings:
        print(f"kubeprof: warning: {warning}", file=sys.stderr)
    print(
        f"kubeprof: session {result.session_name!r}: {result.rows} rows stored; "
        f"see `kubeprof report {result.session_name}`",
        file=sys.stderr,
    )
    if result.status == "interrupted":
        return 130  # Ctrl-C, after saving: what shells and other tools report for SIGINT
    if result.records == 0:
        return result.exit_code or 3
    return result.exit_code


def _run_component(name: str, argv: list[str]) -> int:
    if name == "operator":
        from kubeprof.operator.main import main as component_main
    elif argv[:1] == ["--light"]:  # the always-on NVML-only agent (kubeprof.agent.light)
        from kubeprof.agent.light.main import main as component_main

        argv = argv[1:]
    else:
        from kubeprof.agent.cluster.main import main as component_main
    return int(component_main(argv) or 0)


if __name__ == "__main__":
    sys.exit(main())
