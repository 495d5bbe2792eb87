"""The text report's layout options: start-up frames, one-thread processes, --top, width."""

from __future__ import annotations

import dataclasses

from kubeprof.model import Frame, FrameKind
from kubeprof.report.text import render_text, startup_keys

from .sample_profile import HOT, MAIN, ws


def _section(text: str, start: str) -> list[str]:
    lines = text.splitlines()
    i = next(n for n, line in enumerate(lines) if line.startswith(start))
    out = []
    for line in lines[i + 2 :]:
        if not line.strip() or line.lstrip().startswith(("Top ", "--", "thread")):
            break
        out.append(line)
    return out


def test_startup_frames_leave_top_by_total_and_the_report_says_so(profile):
    text = render_text(profile, view="cpu")
    by_total = _section(text, "Top functions by total time")
    assert not any(row.endswith("main (app.py)") for row in by_total)
    assert "(start-up frames not ranked: main; --startup-frames ranks them)" in by_total[-1]
    assert any(row.endswith("hot (app.py)") for row in by_total)
    sha = text[text.index("-- process sha256sum") :]
    assert "_start" not in "\n".join(_section(sha, "Top functions by total time")[:-1])
    with_startup = render_text(profile, view="cpu", startup=True)
    assert "main (app.py)" in "\n".join(_section(with_startup, "Top functions by total time"))


def test_a_startup_name_doing_real_work_is_kept(profile):
    # `main` as a leaf (its own loop) and below other code is work, not start-up.
    helper = Frame("helper", FrameKind.PYTHON, "/srv/app.py", 50)
    stacks = (ws((MAIN,), 30), ws((helper, MAIN, HOT), 10), ws((MAIN, HOT), 5))
    assert startup_keys(stacks) == set()
    lib = Frame("__libc_start_main", FrameKind.NATIVE, "/lib/libc.so.6")
    assert {k[1] for k in startup_keys((ws((lib, MAIN, HOT), 1),))} == {
        "__libc_start_main",
        "main",
    }


def test_single_threaded_process_has_no_duplicate_thread_section(profile):
    text = render_text(profile, view="cpu")
    assert "thread sha256sum [20]" not in text  # one thread: the process tables are its own
    assert "   thread MainThread [10]" in text and "   thread worker [11]" in text
    assert "more threads not shown" not in text


def test_top_limits_every_table(profile):
    text = render_text(profile, view="cpu", top=1)
    python = text[text.index("-- process python") : text.index("   thread")]
    assert len(_section(python, "Top functions by self time")) == 1
    assert len(_section(python, "Top stacks")) == 1


def test_width_zero_cuts_nothing(profile):
    deep = tuple(Frame(f"layer_{i:02d}", FrameKind.PYTHON, "/srv/model.py", i) for i in range(30))
    long = dataclasses.replace(profile, cpu=(ws(deep, 10),))
    whole = render_text(long, view="cpu", width=0)
    stack_row = next(line for line in whole.splitlines() if "layer_29" in line and "<-" in line)
    assert stack_row.endswith("layer_00 (model.py)") and "..." not in stack_row
    cut = render_text(long, view="cpu", width=100)
    assert max(len(line) for line in cut.splitlines()) <= 100
