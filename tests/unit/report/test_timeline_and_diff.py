"""The busy/idle timeline draws what the idle figure says; the diff tree keeps both sessions;
an unnamed process reads "pid N"."""

from __future__ import annotations

import re

import pytest

from kubeprof import reporting
from kubeprof.model import Frame, FrameKind
from kubeprof.report.analysis_html import BAR_H, BUSY_COLOUR, IDLE_COLOUR, timeline_svg
from kubeprof.report.diff import base_values, diff_payload
from kubeprof.report.tree import build_tree, process_label
from kubeprof.reportdata import WeightedStack

from .truth_store import TRUTH, store_fixture

A = Frame("main", FrameKind.PYTHON, "/t.py", 1)
B = Frame("copy", FrameKind.PYTHON, "/t.py", 2)
C = Frame("load", FrameKind.PYTHON, "/t.py", 3)


def ws(stack, ns, pid=1):
    return WeightedStack(stack, pid, pid, "t", "python3", ns // 10, ns)


@pytest.mark.skipif(not TRUTH.is_dir(), reason="no tests/fixtures/gpu/truth")
def test_timeline_columns_show_idle_as_the_session_figure_says(tmp_path):
    url = f"sqlite:///{tmp_path / 'kp.db'}"
    store_fixture(url, "pageable")
    a = reporting.load(url, "pageable").analysis
    svg = timeline_svg(a)
    idle = [float(h) for h in re.findall(rf'height="([0-9.]+)" fill="{IDLE_COLOUR}"', svg)]
    busy = [float(h) for h in re.findall(rf'height="([0-9.]+)" fill="{BUSY_COLOUR}"', svg)]
    assert len(idle) == len(busy) == len(a.timeline.busy_ns)
    assert all(abs(i + b - BAR_H) < 0.2 for i, b in zip(idle, busy, strict=True))
    drawn_idle = sum(idle) / (BAR_H * len(idle))
    assert drawn_idle == pytest.approx(a.figures.session.ratio, abs=0.02)


def test_an_unnamed_process_is_pid_n():
    assert process_label("732", 732) == "pid 732"
    assert process_label("", 732) == "pid 732"
    assert process_label("python3", 732) == "python3 [732]"
    tree = build_tree([WeightedStack((A,), 732, 732, "t", "732", 1, 10)])
    assert "pid 732" in tree.names and "732 [732]" not in tree.names


def test_diff_tree_keeps_each_sessions_time_per_frame():
    base = [ws((A, B), 100), ws((A, C), 300)]
    new = [ws((A, B), 600, pid=2), ws((A,), 100, pid=2)]
    tree = build_tree([*base, *new], group="none")
    before = base_values(tree, base)
    by = {tree.names[tree.node_name[i]]: (tree.node_value[i], before[i]) for i in range(len(tree))}
    assert by["copy (t.py:2)"] == (700, 100)
    assert by["load (t.py:3)"] == (300, 300)  # gone in the new session: all of it is base
    assert by["main (t.py:1)"] == (1100, 400)
    p = diff_payload(base, new, view="cpu", base_name="a", new_name="b")
    assert p["baseTotal"] * p["scale"] == 400 and p["newTotal"] * p["scale"] == 700


def test_header_phrases_cluster_machine_and_carbon_meta():
    from kubeprof.report.header import other_items
    from kubeprof.reportdata import Profile

    meta = {
        "namespace": "ml",
        "session": "trainer",
        "uid": "0123-4567",
        "pod:u1": "ml/trainer-0",
        "pod:u2": "ml/trainer-1",
        "host:vcpus": "16",
        "host:memory_gb": "62.5",
        "carbon:cloudProvider": "aws",
        "carbon:region": "eu-west-1",
        "label:batch": "64",
        "counter.gpu_kernels": "9",
        "team": "vision",
    }
    items = dict(other_items(Profile("s", 99, 1.0, meta=meta)))
    assert items == {
        "ProfilingSession": "ml/trainer",
        "pods": "ml/trainer-0, ml/trainer-1",
        "labels": "batch=64",
        "machine": "16 vCPUs, 62.5 GB memory",
        "carbon settings": "aws eu-west-1",
        "team": "vision",
    }
