"""A session whose agents delivered nothing ends saying so, and why, from its agent pods;
`.status.agents` counts the session's Ready agent pods."""

from __future__ import annotations

import copy

import pytest

from kubeprof.operator import no_data
from kubeprof.operator.agent_failures import AgentFailure
from tests.unit.operator.test_op_reconcile import BODY, _pass, _pod, env  # noqa: F401


def agent(name: str, node: str | None = "n1", **status) -> dict:
    return {
        "metadata": {
            "name": name,
            "labels": {"kubeprof.dev/session": "s", "app.kubernetes.io/component": "agent"},
        },
        "spec": {"nodeName": node} if node else {},
        "status": status,
    }


def test_no_pod_at_all_names_the_admission_refusal() -> None:
    psa = AgentFailure("AgentsForbiddenByPodSecurity", "Pod Security refused: label it")
    assert no_data.explain([], psa, 1, "ml", "s") == (
        "NoDataAgentsForbiddenByPodSecurity",
        "no data arrived: Pod Security refused: label it",
    )
    why, msg = no_data.explain([], None, 3, "ml", "s")
    assert why == "NoDataAgentsNotCreated" and "3 node(s)" in msg


@pytest.mark.parametrize(
    "pod,reason,words",
    [
        (
            agent(
                "a",
                None,
                conditions=[
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "0/4 nodes: Insufficient memory",
                    }
                ],
            ),
            "NoDataAgentsNotScheduled",
            "Insufficient memory",
        ),
        (
            agent(
                "a",
                containerStatuses=[
                    {
                        "name": "agent",
                        "state": {
                            "waiting": {
                                "reason": "ImagePullBackOff",
                                "message": "pull access denied",
                            }
                        },
                    }
                ],
            ),
            "NoDataAgentsNotStarted",
            "ImagePullBackOff: pull access denied",
        ),
        (
            agent(
                "a",
                containerStatuses=[
                    {
                        "name": "agent",
                        "restartCount": 4,
                        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                        "lastState": {
                            "terminated": {
                                "exitCode": 1,
                                "reason": "Error",
                                "message": "bpf: Operation not permitted",
                            }
                        },
                    }
                ],
            ),
            "NoDataAgentsCrashed",
            "exited 1 (Error): bpf: Operation not permitted, restarted 4",
        ),
        (
            agent("a", conditions=[{"type": "Ready", "status": "False"}]),
            "NoDataAgentsNotReady",
            "none of the 1 agent pod(s)",
        ),
        (
            agent("a", conditions=[{"type": "Ready", "status": "True"}]),
            "NoDataAgentsSentNothing",
            "1 of 1 agent pod(s) were ready but sent nothing",
        ),
    ],
)
def test_the_pods_say_why(pod: dict, reason: str, words: str) -> None:
    why, msg = no_data.explain([pod], None, 1, "ml", "s")
    assert why == reason and words in msg and msg.startswith("no data arrived: "), msg


def test_a_session_without_data_completes_saying_so_and_why(env) -> None:  # noqa: F811
    ctx, kube, clock, _ = env
    kube.pods = [_pod("p1", "n1", "uid-p1")]
    body = copy.deepcopy(BODY)
    st = _pass(ctx, body)
    assert st["agents"] == {"ready": 0, "expected": 1, "daemonSets": 1}
    kube.pods.append(
        agent(
            "kubeprof-s-agent-x",
            containerStatuses=[
                {
                    "name": "agent",
                    "restartCount": 2,
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                    "lastState": {
                        "terminated": {"exitCode": 1, "message": "no BTF, no kernel headers"}
                    },
                }
            ],
        )
    )
    clock[0] += 61  # the session's minute is over; nothing was ever sent
    _pass(ctx, body)
    clock[0] += 6  # past the drain
    st = _pass(ctx, body)
    assert st["phase"] == "Completed", st
    assert st["reason"] == "NoDataAgentsCrashed" and "results stored" not in st["message"]
    assert "no kernel headers" in st["message"] and st["topFinding"] == st["message"]
    done = {c["type"]: c for c in st["conditions"]}["Completed"]
    assert (done["status"], done["reason"]) == ("True", "NoDataAgentsCrashed")
