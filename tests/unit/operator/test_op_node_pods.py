"""Pods a batch may name (issue 32): the per-node listing cache of `NodePods`, and the flags
that say which light agents may go deep under each `--agent-auth`. The API server itself is
exercised by tests/e2e/test_light_identity.py and test_agent_identity.py."""

import pytest

from kubeprof.operator.flags import config
from kubeprof.operator.main import build_parser
from kubeprof.operator.node_pods import NodePods


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _pod(uid: str, node: str) -> dict:
    return {"metadata": {"uid": uid}, "spec": {"nodeName": node}}


def test_an_unknown_uid_lists_the_node_again_at_most_once_per_interval_and_is_remembered():
    clock, listings = Clock(), {"n1": [_pod("a", "n1"), _pod("x", "n2")]}
    asked: list[str] = []

    def list_pods(node: str) -> list[dict]:
        asked.append(node)
        return list(listings[node])

    pods = NodePods(list_pods, min_refresh_s=5, remember_s=60, clock=clock)
    assert pods.on_node("a", "n1") is True and asked == ["n1"]
    assert pods.on_node("a", "n1") is True and asked == ["n1"]  # known: no call
    assert pods.on_node("x", "n1") is None  # listed just now: retry later, not refused
    clock.now += 5
    assert pods.on_node("x", "n1") is False  # a fresh listing: another node's pod
    assert asked == ["n1", "n1"]
    listings["n1"] = [_pod("b", "n1")]  # "a" ended, "b" started
    clock.now += 5
    assert pods.on_node("b", "n1") is True
    assert pods.on_node("a", "n1") is True  # seen 10 s ago: its late batches still land
    clock.now += 61
    listings["n1"] = []
    assert pods.on_node("a", "n1") is False  # forgotten after remember_s, not listed


def test_api_errors_reach_the_caller():
    def broken(_node: str) -> list[dict]:
        raise OSError("connection refused")

    with pytest.raises(OSError):
        NodePods(broken).on_node("a", "n1")


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["--light-token-file", "/t"], "--light-token-file is for --agent-auth session-token"),
        (
            ["--light-daemonset", "kp-light"],
            "--light-daemonset 'kp-light': expected NAMESPACE/NAME",
        ),
        (
            ["--agent-auth", "session-token", "--light-daemonset", "sys/kp-light"],
            "under session-token use --light-token-file",
        ),
    ],
)
def test_light_flags_must_fit_the_agent_auth(argv: list[str], problem: str):
    args = build_parser().parse_args(["--database-url", "sqlite://", *argv])
    with pytest.raises(ValueError) as err:
        config(args)
    assert problem in str(err.value)


def test_light_daemonset_under_serviceaccount_and_token_file_under_session_token_pass():
    ok = config(build_parser().parse_args(["--light-daemonset", "sys/kp-light"]))
    assert (ok.light_daemonset, ok.agent_auth) == ("sys/kp-light", "serviceaccount")
    shared = ["--agent-auth", "session-token", "--light-token-file", "/t"]
    assert config(build_parser().parse_args(shared)).light_token_file == "/t"
