from __future__ import annotations

import dataclasses

from kubeprof.report.text import render_text


def _section(text: str, start: str, stop: str = "Top ") -> list[str]:
    """Lines after the first line starting with `start`, up to the next heading."""
    lines = text.splitlines()
    i = next(n for n, line in enumerate(lines) if line.startswith(start))
    out = []
    for line in lines[i + 2 :]:
        if line.lstrip().startswith(stop) or not line.strip():
            break
        out.append(line)
    return out


def _row(rows: list[str], needle: str) -> list[str]:
    return next(r for r in rows if needle in r).split()


def test_processes_and_threads_with_percentages(profile):
    text = render_text(profile, view="cpu")
    procs = _section(text, "Processes")
    assert _row(procs, "python [10]")[0] == "80.00%"
    assert _row(procs, "sha256sum [20]")[0] == "20.00%"
    assert procs[0].endswith("python [10]")  # largest first
    assert "   thread MainThread [10]: 50.00%" in text
    assert "   thread worker [11]: 30.00%" in text


def test_function_self_and_total(profile):
    text = render_text(profile, view="cpu")
    by_self = _section(text, "Top functions by self time")  # process python comes first
    assert _row(by_self, "hot (app.py)")[:2] == ["40.00%", "70.00%"]
    assert _row(by_self, "memcpy")[:2] == ["30.00%", "30.00%"]
    assert _row(by_self, "cold (app.py)")[:2] == ["10.00%", "10.00%"]
    assert by_self[0].endswith("hot (app.py)")
    by_total = _section(text, "Top functions by total time")
    assert by_total[0].endswith("hot (app.py)")
    with_startup = render_text(profile, view="cpu", startup=True)
    by_total = _section(with_startup, "Top functions by total time")
    assert _row(by_total, "main (app.py)")[:2] == ["0.00%", "50.00%"]
    assert "page_fault_[k]" in text


def test_top_stacks_leaf_first(profile):
    text = render_text(profile, view="cpu")
    stacks = _section(text, "Top stacks")
    assert stacks[0].split()[:2] == ["40.00%", "80"]
    assert stacks[0].endswith("hot (app.py:12) <- main (app.py:3)")


def test_gpu_view_is_included_when_present(profile):
    text = render_text(profile)
    assert "== CPU time: 2.00 s in 200 samples ==" in text
    assert "== GPU time: 4.0 ms in 40 launches ==" in text
    gpu = text[text.index("== GPU time") :]
    assert _row(_section(gpu, "Top functions by self time"), "sgemm_[gpu]")[0] == "75.00%"
    assert "GPU time" not in render_text(profile, view="cpu")


def test_width_limit_and_determinism(profile):
    long = dataclasses.replace(profile, session="s" * 300)
    text = render_text(long, width=60)
    assert max(len(line) for line in text.splitlines()) <= 60
    reordered = dataclasses.replace(profile, cpu=profile.cpu[::-1], gpu=profile.gpu[::-1])
    assert render_text(reordered) == render_text(profile)


def test_empty_profile(profile):
    empty = dataclasses.replace(profile, cpu=(), gpu=())
    assert "(no data)" in render_text(empty)
