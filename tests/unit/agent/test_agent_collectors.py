"""Building collectors by name: failures reported and skipped, the child's env."""

from __future__ import annotations

import pytest

from kubeprof.agent import collectors
from kubeprof.agent.collectors import Built, CollectorOptions, start
from kubeprof.model import Batch


class Fake:
    def __init__(self, label: str) -> None:
        self.label, self.stopped = label, False

    def poll(self) -> Batch:
        return Batch()

    def stop(self) -> Batch:
        self.stopped = True
        return Batch()


def _fails(msg: str):
    def factory(_opts: CollectorOptions) -> Built:
        raise RuntimeError(msg)

    return factory


def test_one_failing_collector_does_not_stop_the_others():
    table = {"cpu": _fails("no BPF here"), "nvml": lambda o: Built(Fake(f"nvml@{o.hz}"))}
    out = start(["cpu", "nvml", "nope"], CollectorOptions(hz=49), factories=table)
    assert list(out.running) == ["nvml"] and out.running["nvml"].label == "nvml@49"
    assert str(out.failed["cpu"]) == "no BPF here"
    assert isinstance(out.failed["nope"], LookupError) and "known: cpu, nvml" in str(
        out.failed["nope"]
    )


def test_env_for_the_child_is_collected_and_stop_all_stops():
    table = {
        "gpu": lambda o: Built(Fake("gpu"), {"SOCK": str(o.gpu_socket)}),
        "nvml": lambda _o: Built(Fake("nvml")),
    }
    out = start(["gpu", "nvml"], CollectorOptions(gpu_socket="/tmp/s"), factories=table)
    assert out.env == {"SOCK": "/tmp/s"}
    out.stop_all()
    assert all(c.stopped for c in out.running.values())


def test_real_table_names_and_gpu_needs_a_socket():
    assert {"cpu", "gpu", "nvml"} <= set(collectors.FACTORIES)
    with pytest.raises(ValueError, match="socket"):
        collectors.FACTORIES["gpu"](CollectorOptions())
