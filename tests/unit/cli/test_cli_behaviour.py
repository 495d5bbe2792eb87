"""The CLI behaves like the tools people know, run as they run it: the installed `kubeprof`
command in a subprocess (a real pty for the status line), with real recordings."""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from importlib.metadata import version
from pathlib import Path

import pytest
from sqlalchemy import inspect, text, update
from sqlalchemy import select as sql_select

from kubeprof.model import Batch, CpuSample, Frame, FrameKind, ProcessInfo
from kubeprof.storage import Store, sessions
from kubeprof.storage.models import SessionRow

KUBEPROF = str(Path(sys.executable).parent / "kubeprof")
# A CPU-bound command that runs for about `n` seconds, then exits 0.
BUSY = "import sys, time\nt = time.time()\nwhile time.time() - t < float(sys.argv[1]): pass"
# The same, ending quietly on Ctrl-C (so any traceback seen would be kubeprof's own).
BUSY_QUIET = "try:\n    " + BUSY.replace("\n", "\n    ") + "\nexcept KeyboardInterrupt:\n    pass"


def kp(*args: str, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run([KUBEPROF, *args], capture_output=True, text=True, timeout=180, **kw)


def _store_with(url: str, names: list[str], *, samples: bool = False) -> None:
    store = Store.open(url)
    for name in names:
        sid = store.create_session(name, command=f"python {name}.py", start_ns=1)
        if samples:
            stack = (
                Frame("main", FrameKind.PYTHON, "m.py", 1),
                Frame("work", FrameKind.PYTHON, "m.py", 2),
            )
            store.write_batch(
                sid,
                Batch(
                    samples=tuple(
                        CpuSample(ts_ns=1_000 + i, pid=7, tid=7, thread="py", cpu=0, stack=stack)
                        for i in range(5)
                    ),
                    processes=(ProcessInfo(7, 1, "py", "python m.py"),),
                ),
            )
        store.finish_session(sid, end_ns=2_000_000_000)
    store.close()


def _no_traceback(err: str) -> None:
    assert "Traceback" not in err and "Exception ignored" not in err, err


def test_version_names_the_installed_package():
    out = kp("--version")
    assert out.returncode == 0
    assert out.stdout.strip() == f"kubeprof {version('kubeprof')}"


def test_sessions_into_a_closed_pipe_exits_quietly(tmp_path):
    url = f"sqlite:///{tmp_path}/s.db"
    _store_with(url, ["a", "b"])
    # The reader is gone before the first write: every write then fails with EPIPE.
    with subprocess.Popen(
        [KUBEPROF, "sessions", "--store", url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as p:
        assert p.stdout is not None and p.stderr is not None
        p.stdout.close()
        err = p.stderr.read()
        assert p.wait(timeout=60) == 141
    _no_traceback(err)
    assert err == ""


def test_sessions_piped_to_head_prints_one_line_and_no_traceback(tmp_path):
    url = f"sqlite:///{tmp_path}/many.db"
    store = Store.open(url)
    with store.engine.begin() as conn:  # > 64 KiB of listing: more than a pipe buffers
        for i in range(1200):
            sessions.create(conn, f"session-number-{i:05d}", command="python " + "x" * 50)
    store.close()
    out = subprocess.run(
        ["bash", "-c", f"'{KUBEPROF}' sessions --store '{url}' | head -1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.stdout.startswith("  ID  NAME") and out.stdout.count("\n") == 1
    _no_traceback(out.stderr)
    assert out.stderr == ""


@pytest.mark.parametrize(
    "kind", ["garbage file", "directory", "read-only filesystem", "folder is a file"]
)
def test_bad_store_path_is_one_clear_line(tmp_path, kind):
    path = {
        "garbage file": tmp_path / "g.db",
        "directory": tmp_path,
        "read-only filesystem": Path("/proc/kubeprof.db"),
        "folder is a file": tmp_path / "g.db" / "x.db",
    }[kind]
    (tmp_path / "g.db").write_text("this is not a database\n")
    for args in (["sessions"], ["report"], ["sessions", "rm", "x"]):
        out = kp(*args, "--store", f"sqlite:///{path}")
        assert out.returncode == 2, out.stderr
        _no_traceback(out.stderr)
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("kubeprof: error:"), out.stderr
        assert "--store" in lines[0] or "check the URL" in lines[0]


def test_out_dash_is_stdout_for_text_and_binary_formats(tmp_path):
    url = f"sqlite:///{tmp_path}/o.db"
    _store_with(url, ["run"], samples=True)
    html = kp("report", "run", "-f", "html", "--out", "-", "--store", url, cwd=tmp_path)
    assert html.returncode == 0 and html.stdout.lstrip().lower().startswith("<!doctype html")
    pb = subprocess.run(
        [KUBEPROF, "report", "run", "-f", "pprof", "--out", "-", "--store", url],
        capture_output=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert pb.returncode == 0 and pb.stdout[:2] == b"\x1f\x8b"  # gzip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.db"]  # no file named "-"


def test_sessions_rm_by_name_removes_every_row_of_the_session(tmp_path):
    url = f"sqlite:///{tmp_path}/r.db"
    _store_with(url, ["keep", "drop"], samples=True)
    out = kp("sessions", "rm", "drop", "--store", url)
    assert out.returncode == 0 and "removed 1 session: drop" in out.stderr
    store = Store.open(url)
    with store.engine.connect() as conn:
        names = list(conn.scalars(sql_select(SessionRow.name)))
        ids = {n: i for n, i in conn.execute(sql_select(SessionRow.name, SessionRow.id))}
        left: dict[str, int] = {}
        for table in inspect(conn).get_table_names():
            cols = {c["name"] for c in inspect(conn).get_columns(table)}
            if "session_id" in cols:
                left[table] = conn.scalar(text(f'SELECT count(*) FROM "{table}"'))
    store.close()
    assert names == ["keep"]
    assert left["samples"] == 5 and ids["keep"]  # the other session's rows stay
    out = kp("sessions", "rm", "keep", "--store", url)
    assert out.returncode == 0
    store = Store.open(url)
    with store.engine.connect() as conn:
        for table in left:
            assert conn.scalar(text(f'SELECT count(*) FROM "{table}"')) == 0, table
    store.close()


def test_sessions_rm_unknown_name_removes_nothing(tmp_path):
    url = f"sqlite:///{tmp_path}/u.db"
    _store_with(url, ["a", "b"])
    out = kp("sessions", "rm", "a", "nope", "--store", url)
    assert out.returncode == 2 and "no session named 'nope'" in out.stderr
    assert "a" in kp("sessions", "--store", url).stdout.split()


def test_sessions_rm_by_age(tmp_path):
    url = f"sqlite:///{tmp_path}/age.db"
    _store_with(url, ["old", "older", "new"])
    store = Store.open(url)
    with store.engine.begin() as conn:
        now = datetime.now(UTC)
        for name, age in (("old", timedelta(days=8)), ("older", timedelta(days=30))):
            conn.execute(
                update(SessionRow).where(SessionRow.name == name).values(started_at=now - age)
            )
    store.close()
    dry = kp("sessions", "rm", "--older-than", "7d", "--dry-run", "--store", url)
    assert dry.returncode == 0 and "would remove 2 sessions: old, older" in dry.stderr
    out = kp("sessions", "rm", "--older-than", "7d", "--store", url)
    assert "removed 2 sessions" in out.stderr
    listed = kp("sessions", "--store", url).stdout
    assert " new " in listed and " old " not in listed and " older " not in listed
    bad = kp("sessions", "rm", "--older-than", "soon", "--store", url)
    assert bad.returncode == 2 and "--older-than" in bad.stderr and "7d" in bad.stderr


def test_cluster_session_found_by_namespace_and_name(tmp_path):
    url = f"sqlite:///{tmp_path}/k.db"
    store = Store.open(url)
    with store.engine.begin() as conn:
        for name in ("ml/train@1a2b3c4d", "ml/eval@5e6f7a8b", "ml/eval@9c0d1e2f"):
            sessions.ensure(
                conn,
                name,
                kind="cluster",
                command="ProfilingSession",
                hz=99,
                started_at=datetime.now(UTC),
            )
    store.close()
    found = kp("report", "ml/train", "-f", "json", "--store", url)
    assert found.returncode == 0, found.stderr
    assert '"ml/train@1a2b3c4d"' in found.stdout
    two = kp("report", "ml/eval", "--store", url)
    assert two.returncode == 2
    assert "ml/eval@5e6f7a8b" in two.stderr and "ml/eval@9c0d1e2f" in two.stderr


def test_reused_name_hint_names_the_stored_session(tmp_path):
    url = f"sqlite:///{tmp_path}/h.db"
    for expected in ("quick", "quick-2"):
        out = kp("record", "-o", "quick", "--store", url, "--", sys.executable, "-c", BUSY, "1.0")
        assert out.returncode == 0, out.stderr
        assert f"session {expected!r}" in out.stderr
        assert f"see `kubeprof report {expected}`" in out.stderr
    # Not a terminal: no status line, no control characters.
    assert "\x1b" not in out.stderr and "\r" not in out.stderr
    assert "preparing" not in out.stderr and "samples so far" not in out.stderr


def _samples_stored(url: str, name: str) -> int:
    store = Store.open(url)
    try:
        with store.engine.connect() as conn:
            return int(
                conn.scalar(
                    text(
                        "SELECT count(*) FROM samples JOIN sessions ON sessions.id = session_id "
                        "WHERE sessions.name = :n"
                    ),
                    {"n": name},
                )
                or 0
            )
    finally:
        store.close()


def _record_then_ctrl_c(url: str, name: str, *command: str) -> tuple[int, str, str]:
    """`kubeprof record -o NAME -- COMMAND` in its own process group, signalled as a
    terminal signals the foreground job on Ctrl-C once a sample is stored: (exit code,
    stdout, stderr)."""
    p = subprocess.Popen(
        [KUBEPROF, "record", "-o", name, "--store", url, "--", *command],
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not _samples_stored(url, name):
        time.sleep(0.5)
    assert _samples_stored(url, name), "no sample stored before Ctrl-C"
    os.killpg(p.pid, signal.SIGINT)
    out, err = p.communicate(timeout=60)
    return p.returncode, out, err


def test_ctrl_c_saves_then_exits_130(tmp_path):
    url = f"sqlite:///{tmp_path}/c.db"
    code, _, err = _record_then_ctrl_c(url, "cc", sys.executable, "-c", BUSY_QUIET, "120")
    assert code == 130, err
    _no_traceback(err)
    assert "session 'cc'" in err
    listed = kp("sessions", "--store", url).stdout
    assert " interrupted " in listed
    assert _samples_stored(url, "cc") > 0


# Ends on Ctrl-C after 0.5 s of its own clean-up, and says so.
BUSY_CLEANUP = (
    "import time\ntry:\n    "
    + BUSY.replace("\n", "\n    ")
    + "\nexcept KeyboardInterrupt:\n    time.sleep(0.5)\n    print('CLEANED UP', flush=True)"
)


def test_ctrl_c_lets_the_command_clean_up_without_a_second_sigint(tmp_path):
    """Ctrl-C reaches the command too (one process group); kubeprof used to send it another
    SIGINT at once, which landed in the command's own clean-up: a KeyboardInterrupt
    traceback from the user's program, and its clean-up cut short."""
    url = f"sqlite:///{tmp_path}/c.db"
    code, out, err = _record_then_ctrl_c(url, "cl", sys.executable, "-c", BUSY_CLEANUP, "120")
    _no_traceback(err)
    assert "CLEANED UP" in out and code == 130, (out, err)


def test_record_on_a_terminal_shows_what_it_is_doing(tmp_path):
    url = f"sqlite:///{tmp_path}/t.db"
    master, slave = pty.openpty()
    p = subprocess.Popen(
        [KUBEPROF, "record", "-o", "tty", "--store", url, "--", sys.executable, "-c", BUSY, "2.5"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
    )
    os.close(slave)
    seen = b""
    while True:
        ready, _, _ = select.select([master], [], [], 120)
        if not ready:
            break
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the pty's other side closed
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    assert p.wait(timeout=60) == 0
    shown = seen.decode(errors="replace")
    assert "preparing the sampler" in shown
    assert "storing the recording" in shown
    recording = [part for part in shown.split("\r") if "recording:" in part]
    assert recording, shown
    assert any(" 2 s," in part for part in recording), recording  # elapsed time counts up
    assert "samples so far" in recording[-1]
    assert "see `kubeprof report tty`" in shown


def test_a_cluster_sessions_default_file_names_are_files_in_this_folder(tmp_path):
    # a cluster session is named NAMESPACE/NAME: its html, pprof and Perfetto files land
    # here as NAMESPACE_NAME.*, not in a NAMESPACE/ folder
    url = f"sqlite:///{tmp_path}/c.db"
    _store_with(url, ["team-a/train"], samples=True)
    for fmt, suffix in (("html", ".html"), ("pprof", ".pb.gz"), ("perfetto", ".trace.json")):
        out = kp("report", "team-a/train", "-f", fmt, "--store", url, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        assert (tmp_path / f"team-a_train{suffix}").is_file(), sorted(tmp_path.iterdir())
    assert not (tmp_path / "team-a").exists()
