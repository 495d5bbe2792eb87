"""Selectors and pod -> target resolution."""

import pytest

from kubeprof.operator.spec import parse_duration
from kubeprof.operator.targets import nodes_of, resolve


def _pod(name, node, phase="Running", **meta):
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", **meta},
        "spec": {"nodeName": node} if node else {},
        "status": {"phase": phase},
    }


def test_resolve_skips_unscheduled_finished_deleting_and_wrong_nodes():
    pods = [
        _pod("a", "n1"),
        _pod("b", None),
        _pod("c", "n2", "Succeeded"),
        _pod("d", "n2", deletionTimestamp="x"),
        _pod("e", "n3"),
        _pod("f", "n1"),
    ]
    labels = {"n1": {"gpu": "yes"}, "n3": {"gpu": "no"}}
    got = resolve(pods, labels, {"gpu": "yes"})
    assert [t.name for t in got] == ["a", "f"] and nodes_of(got) == ["n1"]
    assert [t.name for t in resolve(pods, {})] == ["a", "f", "e"]


@pytest.mark.parametrize(
    ("text", "secs"), [("90s", 90), ("5m", 300), ("1h30m", 5400), ("1.5s", 1.5), ("250ms", 0.25)]
)
def test_parse_duration(text, secs):
    assert parse_duration(text) == secs


@pytest.mark.parametrize("bad", ["", "5", "-5m", "5d", "m5", "5m x"])
def test_parse_duration_rejects(bad):
    with pytest.raises(ValueError):
        parse_duration(bad)
