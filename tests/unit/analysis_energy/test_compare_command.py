"""`kubeprof compare` end to end on a temporary SQLite store written through Store, and the
--label parsing that tags a session with its batch size."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from scaling_synth import MS, S, SynthRun, batch_of, cpu_samples, energy_metrics

from kubeprof import compare
from kubeprof.analysis.energy import CarbonSettings
from kubeprof.storage import Store

RUNS = (  # as in test_batch_scaling: compute-bound from 64, throughput flat from 128;
    # 300 steps so that each session spans several 2-second energy-counter readings
    SynthRun(32, 10 * MS, 0.35, steps=300, gpm=(30.0, 15.0)),
    SynthRun(64, 10 * MS, 0.60, steps=300, gpm=(35.0, 40.0)),
    SynthRun(128, 10 * MS, 0.97, steps=300, gpm=(30.0, 60.0)),
    SynthRun(256, 20 * MS, 0.98, steps=300, gpm=(28.0, 65.0)),
)
CARBON = {"carbon:cloudProvider": "aws", "carbon:region": "us-east-1"}
MACHINE = {"host:vcpus": "8", "host:memory_gb": "32"}


def write_session(store: Store, run: SynthRun, *, watts: float, meta: dict[str, str]) -> str:
    name = f"bs{run.batch}"
    sid = store.create_session(name, hz=100, start_ns=run.start_ns, meta=meta)
    seconds = int((run.end_ns - run.start_ns) // S)
    store.write_batch(
        sid,
        batch_of(
            run,
            extra=tuple(energy_metrics(run.start_ns, seconds, watts)),
            samples=cpu_samples(run.start_ns, 100 * seconds),
        ),
    )
    store.finish_session(sid, end_ns=run.start_ns + seconds * S)
    return name


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/kp.db"


def fill(store_url: str, meta: dict[str, str]) -> list[str]:
    store = Store.open(store_url)
    try:
        return [
            write_session(
                store,
                r,
                watts=100.0 + r.batch,
                meta={**meta, **compare.labels_meta([f"batch_size={r.batch}"])},
            )
            for r in RUNS
        ]
    finally:
        store.close()


def run_compare(refs: list[str], store_url: str, **kw: object) -> tuple[int, str]:
    out = io.StringIO()
    rc = compare.compare_command(refs, store_url, out=out, **kw)  # type: ignore[arg-type]
    return rc, out.getvalue()


def test_compare_prints_table_verdicts_and_energy(store_url):
    names = fill(store_url, {**CARBON, **MACHINE})
    rc, text = run_compare(names, store_url)
    assert rc == 0, text
    lines = text.splitlines()
    assert lines[0].split() == [
        "SESSION",
        "BATCH",
        "STEPS/S",
        "SAMPLES/S",
        "GPU",
        "BUSY",
        "DRAM",
        "%",
        "TENSOR",
        "%",
        "J/SAMPLE",
    ]
    rows = {line.split()[0]: line.split() for line in lines[1:5]}
    # bs64: 100 steps/s x 64 = 6400 samples/s; mean power: GPU 164 W (counter) + CPU + memory
    #   CPU: 100 samples/s of one thread at 100 Hz = 1 CPU-s per s over 8 vCPU = 0.125 util.
    #        8 x (0.74 + 0.125 x 2.76) = 8.68 W;  memory: 32 x 0.392 = 12.544 W
    #   (164 + 8.68 + 12.544) W x PUE 1.135 / 6400 samples/s = 0.03285 J/sample
    assert rows["bs64"][1:8] == ["64", "100", "6400", "60%", "35", "40", "0.0328"]
    assert rows["bs128"][1:4] == ["128", "100", "1.28e+04"]
    assert rows["bs256"][1:4] == ["256", "50", "1.28e+04"]
    assert (
        "  compute-bound from batch 64 (tensor 40 %, DRAM 35 %; at 32: tensor 15 %, DRAM 30 %)"
        in lines
    )
    assert any(x.startswith("  throughput stops improving at batch 128") for x in lines)
    assert (
        "J/SAMPLE = mean power (GPU measured + CCF CPU and memory) x PUE / samples per s" in lines
    )
    assert "  lowest energy per sample: bs128 (0.0221 J/sample)" in lines
    assert "missing signals:" not in lines
    energy_at = lines.index("energy (Cloud Carbon Footprint method):")
    assert lines[energy_at + 1].startswith("  bs32: ")
    assert "g CO2e" in lines[energy_at + 1]
    # bs32 lasts 1 s start-up + 3 s of steps + 0.2 s, stored as 4 s: counter read at 0, 2, 4 s
    assert lines[energy_at + 2] == (
        "    GPU 0: 528.0 J measured (NVML energy counter, 3 readings "
        "over 4.0 s of the session's 4.0 s, mean 132.0 W)"
    )


def test_compare_without_carbon_settings_shows_gpu_only_energy(store_url):
    names = fill(store_url, MACHINE)
    rc, text = run_compare(names, store_url)
    assert rc == 0
    row = next(x.split() for x in text.splitlines() if x.startswith("bs64 "))
    assert row[-1] == f"{164 / 6400:.3g}"  # GPU power only, no PUE
    assert "GPU only, no PUE" in text
    assert "no CO2e" in text and "not counted: CPU, memory, PUE and CO2e" in text


def test_carbon_flags_override_the_sessions_settings(store_url):
    names = fill(store_url, {**CARBON, **MACHINE})
    rc, text = run_compare(names, store_url, carbon=CarbonSettings("aws", "eu-north-1"))
    assert rc == 0
    assert "(aws eu-north-1) = " in text and "us-east-1" not in text


def test_compare_names_what_is_missing(store_url):
    store = Store.open(store_url)
    try:
        write_session(store, RUNS[0], watts=100.0, meta={})  # no label, no carbon, no size
    finally:
        store.close()
    rc, text = run_compare(["bs32"], store_url)
    assert rc == 0
    assert "  bs32: no batch_size label (record with --label batch_size=N)" in text
    assert "  no verdict: 0 batch size(s) with throughput; at least 3 are needed" in text


def test_unknown_session_and_unknown_region_are_user_errors(store_url, capsys):
    names = fill(store_url, {**MACHINE, "carbon:cloudProvider": "aws", "carbon:region": "moon-1"})
    rc, text = run_compare(["no-such-session"], store_url)
    assert rc == 2 and text == ""
    assert "no session named 'no-such-session'" in capsys.readouterr().err
    rc, _ = run_compare(names, store_url)
    assert rc == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "kubeprof compare: carbon.region: no CCF grid emission factor for aws "
        "region 'moon-1'; known aws regions: af-south-1,"
    )
    assert run_compare([], store_url)[0] == 2


def test_labels_parse_to_meta_entries():
    assert compare.parse_label("batch_size=64") == ("batch_size", "64")
    assert compare.parse_label("note=a=b") == ("note", "a=b")
    assert compare.labels_meta(["batch_size=64", "model=resnet50"]) == {
        "label:batch_size": "64",
        "label:model": "resnet50",
    }
    assert compare.session_labels({"label:batch_size": "64", "cpu": "True"}) == {"batch_size": "64"}
    for bad, why in (
        ("batch_size", "expected KEY=VALUE"),
        ("=64", "KEY must start"),
        ("9x=1", "KEY must start"),
        ("batch_size=", "VALUE must be 1 to 256"),
    ):
        with pytest.raises(compare.LabelError, match=why):
            compare.parse_label(bad)
    with pytest.raises(ValueError, match="--label batch_size given twice"):
        compare.labels_meta(["batch_size=1", "batch_size=2"])


def test_machine_size_of_a_session_recorded_here_is_read_here(store_url):
    import os

    names = fill(store_url, CARBON)  # no host:vcpus / host:memory_gb in meta
    rc, text = run_compare(names[:1], store_url)
    assert rc == 0
    assert f"    CPU: {os.cpu_count()} vCPU x (0.74 W + " in text
    assert "    memory: " in text and "not counted" not in text
