"""Rolling-window idle math of the light agent, on readings in NVML's shape.

There is no H200 recording of nvmlDeviceGetProcessUtilization in tests/fixtures/gpu (the
NvmlSampler fixtures hold device-wide samples only), so these readings are synthesized with
the NVML field names and semantics: a process in the running list without a sample since the
last poll ran no kernel then.
"""

from pathlib import Path

import pytest

from kubeprof.agent.light.exporter import WindowCollector
from kubeprof.agent.light.pods import Resolver, pod_names
from kubeprof.agent.light.readings import (
    DeviceReading,
    ProcessSample,
    ReadingError,
    RecordedSource,
    RunningProcess,
)
from kubeprof.agent.light.window import Owner, Window, attribute

A = Owner("ml", "trainer-0", "main")
B = Owner("ml", "infer-0", "srv")
OWNERS = {100: A, 101: A, 200: B}


def reading(samples: dict[int, int], procs=(100, 200), **kw) -> DeviceReading:
    return DeviceReading(
        gpu=0,
        uuid="GPU-x",
        util_gpu=50,
        mem_used=10,
        mem_total=100,
        processes=tuple(RunningProcess(p, 1 << 30) for p in procs),
        samples=tuple(ProcessSample(p, 1000, u) for p, u in samples.items()),
        **kw,
    )


def figures(w: Window) -> dict[Owner, float | None]:
    return {f.owner: f.idle_ratio for f in w.pods()}


def test_missing_sample_counts_as_idle_not_missing() -> None:
    w = Window(60)
    w.add(0, [attribute(reading({100: 80}), OWNERS.get)])
    w.add(1, [attribute(reading({}), OWNERS.get)])  # nothing ran: both idle this poll
    f = figures(w)
    assert f[A] == pytest.approx(1 - 0.40)
    assert f[B] == pytest.approx(1.0)


def test_processes_of_one_container_add_up_capped() -> None:
    w = Window(60)
    w.add(0, [attribute(reading({100: 70, 101: 60}, procs=(100, 101)), OWNERS.get)])
    (fig,) = w.pods()
    assert fig.busy_pct == 100.0 and fig.idle_ratio == 0.0
    assert fig.memory_bytes == 2 << 30


def test_old_polls_leave_the_window() -> None:
    w = Window(10)
    w.add(0, [attribute(reading({100: 0}), OWNERS.get)])
    w.add(5, [attribute(reading({100: 100}), OWNERS.get)])
    assert figures(w)[A] == pytest.approx(0.5)
    w.add(11, [attribute(reading({100: 100}), OWNERS.get)])  # the poll at 0 is gone
    assert figures(w)[A] == pytest.approx(0.0)


def test_process_outside_pods_is_left_out() -> None:
    w = Window(60)
    w.add(0, [attribute(reading({999: 90}, procs=(999, 100)), OWNERS.get)])
    assert set(figures(w)) == {A}


@pytest.mark.parametrize(
    "kw,reason",
    [
        ({"mig": True}, "mig"),
        ({"mps_processes": (RunningProcess(200, 5),)}, "mps"),
        ({"util_error": "Not Supported"}, "nvml_error"),
    ],
)
def test_unattributable_gpu_says_why_and_gives_no_idle(kw, reason) -> None:
    w = Window(60)
    w.add(0, [attribute(reading({100: 10}, **kw), OWNERS.get)])
    assert all(f.idle_ratio is None for f in w.pods())
    assert [g.reason for g in w.gpus()] == [reason]
    text = {m.name: m for m in WindowCollector(w, "n1").collect()}
    assert not text["kubeprof_gpu_idle_ratio"].samples
    assert text["kubeprof_gpu_memory_used_bytes"].samples  # memory is still per process
    (info,) = text["kubeprof_gpu_unattributable_info"].samples
    assert info.labels["reason"] == reason


def test_exported_labels_and_values() -> None:
    w = Window(60)
    w.add(0, [attribute(reading({100: 30, 200: 90}), OWNERS.get)])
    fams = {m.name: m for m in WindowCollector(w, "gpu-node-1").collect()}
    idle = {s.labels["pod"]: (s.labels, s.value) for s in fams["kubeprof_gpu_idle_ratio"].samples}
    assert idle["trainer-0"][1] == pytest.approx(0.7)
    assert idle["infer-0"][1] == pytest.approx(0.1)
    assert idle["trainer-0"][0] == {
        "namespace": "ml",
        "pod": "trainer-0",
        "container": "main",
        "node": "gpu-node-1",
        "gpu": "0",
    }
    (dev,) = fams["kubeprof_gpu_device_utilization_ratio"].samples
    assert dev.value == pytest.approx(0.5)


def test_window_rejects_nonpositive() -> None:
    with pytest.raises(ValueError, match="window"):
        Window(0)


def test_resolver_maps_cgroup_to_pod_names(tmp_path: Path) -> None:
    uid = "0d3c1e2a-1111-4222-8333-444455556666"
    cid = "ab" * 32
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "cgroup").write_text(
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
        f"{uid.replace('-', '_')}.slice/cri-containerd-{cid}.scope\n"
    )
    pods = pod_names(
        [
            {
                "metadata": {"uid": uid, "namespace": "ml", "name": "t-0"},
                "status": {
                    "containerStatuses": [{"name": "main", "containerID": f"containerd://{cid}"}]
                },
            }
        ]
    )
    r = Resolver(tmp_path, pods)
    assert r(42) == Owner("ml", "t-0", "main")
    assert r(43) is None  # gone
    r.pods = pod_names([{"metadata": {"uid": uid, "namespace": "ml", "name": "t-0"}}])
    assert r(42) == Owner("ml", "t-0", f"id:{cid[:12]}")  # no status yet: says so, no guess


def test_recorded_source_cycles_and_names_bad_field(tmp_path: Path) -> None:
    p = tmp_path / "r.jsonl"
    p.write_text(
        '{"devices": [{"gpu": 0, "samples": [{"pid": 1, "timeStamp": 5, "smUtil": 9}]}]}\n'
    )
    src = RecordedSource(p)
    first, second = src.read()[0], src.read()[0]
    assert second.samples[0].timeStamp > first.samples[0].timeStamp
    p.write_text('{"devices": [{"gpu": 0, "samples": [{"pid": 1}]}]}\n')
    with pytest.raises(ReadingError, match=r"r.jsonl:1.*timeStamp"):
        RecordedSource(p)
