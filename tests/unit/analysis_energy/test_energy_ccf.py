"""Energy and CO2e by the CCF method: golden numbers worked out by hand, the counter vs power
fallback, and the errors for providers and regions without coefficients."""

from __future__ import annotations

import json

import pytest

from kubeprof.analysis import energy
from kubeprof.analysis.energy import CarbonError, CarbonSettings, GpuEnergy
from kubeprof.model import GpuMetricSample

S = 1_000_000_000
CCF_COMMIT = "b7a049c7d25c0022919ab9010199dd9e77aa4577"


def m(ts_s: float, device: int, metric: str, value: float, pid: int = 0) -> GpuMetricSample:
    return GpuMetricSample(int(ts_s * S), device, metric, value, pid=pid)


# GPU 0: counter read every 2 s, 2 800 000 - 1 000 000 mJ = 1800 J over 6 s = 300 W, and
# power readings at 350 W (2100 J) that must be ignored because the counter is there.
# GPU 1: no counter; power 100 W at 0 s, 200 W at 1 s and 3 s -> 150 J + 400 J = 550 J.
TRACE = [
    m(0, 0, "energy_mj", 1_000_000),
    m(2, 0, "energy_mj", 1_600_000),
    m(4, 0, "energy_mj", 2_200_000),
    m(6, 0, "energy_mj", 2_800_000),
    *(m(t, 0, "power_mw", 350_000) for t in range(7)),
    m(0, 1, "power_mw", 100_000),
    m(1, 1, "power_mw", 200_000),
    m(3, 1, "power_mw", 200_000),
    m(1, 1, "energy_mj", 9e9, pid=123),  # a per-process row: not a device reading
    m(1, 0, "gpu_util_pct", 100.0),
]


def test_counter_difference_is_used_and_power_integrated_only_without_counter():
    gpus = {g.device: g for g in energy.gpu_energy({"": TRACE})}
    assert gpus[0].joules == pytest.approx(1800.0)
    assert gpus[0].method == energy.COUNTER
    assert gpus[0].readings == 4 and gpus[0].seconds == pytest.approx(6.0)
    assert gpus[0].mean_watts == pytest.approx(300.0)
    assert gpus[1].joules == pytest.approx(550.0)
    assert gpus[1].method == energy.POWER
    assert gpus[1].mean_watts == pytest.approx(550.0 / 3)


def test_single_counter_reading_falls_back_to_power():
    trace = [m(0, 0, "energy_mj", 5e6), m(0, 0, "power_mw", 200_000), m(2, 0, "power_mw", 200_000)]
    (g,) = energy.gpu_energy({"": trace})
    assert g.method == energy.POWER and g.joules == pytest.approx(400.0)


def test_counter_reset_loses_the_interval_instead_of_going_negative():
    trace = [
        m(0, 0, "energy_mj", 10_000),
        m(1, 0, "energy_mj", 110_000),
        m(2, 0, "energy_mj", 5_000),
        m(3, 0, "energy_mj", 105_000),
    ]
    (g,) = energy.gpu_energy({"": trace})
    assert g.joules == pytest.approx(200.0)  # 100 J + (reset: 0) + 100 J


def test_nodes_keep_their_devices_apart():
    trace = [m(0, 0, "energy_mj", 0), m(2, 0, "energy_mj", 100_000)]
    gpus = energy.gpu_energy({"node-a": trace, "node-b": trace})
    assert [(g.node, g.device, g.joules) for g in gpus] == [
        ("node-a", 0, pytest.approx(100.0)),
        ("node-b", 0, pytest.approx(100.0)),
    ]


def test_golden_session_estimate_aws_us_east_1():
    coeffs = energy.coefficients(CarbonSettings("aws", "us-east-1"))
    assert (coeffs.min_watts_per_vcpu, coeffs.max_watts_per_vcpu) == (0.74, 3.5)
    assert coeffs.memory_kwh_per_gb_hour == 0.000392
    assert coeffs.pue == 1.135 and coeffs.pue_basis == "CCF aws average"
    assert coeffs.t_co2e_per_kwh == 0.000379069  # NERC SERC, eGRID2020
    e = energy.estimate(
        {"": TRACE}, wall_s=10.0, cpu_samples=2000, hz=100, vcpus=8, memory_gb=32.0, coeffs=coeffs
    )
    # CPU: 2000 samples / 100 Hz = 20 CPU-s; 20 / 10 s / 8 vCPU = 0.25 utilisation;
    # 8 x (0.74 + 0.25 x (3.5 - 0.74)) = 8 x 1.43 = 11.44 W; x 10 s = 114.4 J
    assert e.cpu is not None
    assert e.cpu.utilisation == pytest.approx(0.25)
    assert e.cpu.watts == pytest.approx(11.44)
    assert e.cpu.joules == pytest.approx(114.4)
    # memory: 32 GB x 0.392 W/GB = 12.544 W; x 10 s = 125.44 J
    assert e.memory is not None and e.memory.joules == pytest.approx(125.44)
    # total at the machine: 1800 + 550 + 114.4 + 125.44 = 2589.84 J
    assert e.it_joules == pytest.approx(2589.84)
    # x PUE 1.135 = 2939.4684 J = 0.00081651900 kWh
    assert e.facility_kwh == pytest.approx(2939.4684 / 3.6e6)
    assert e.facility_kwh == pytest.approx(0.000816519, rel=1e-6)
    # CO2e: 0.000816519 kWh x 379.069 g/kWh = 0.309517 g
    assert e.co2e_g == pytest.approx(0.309517, rel=1e-5)
    assert e.missing == ()
    text = "\n".join(energy.explain(e))
    assert "8 vCPU x (0.74 W + 0.250 x (3.5 - 0.74) W) = 11.44 W" in text
    assert "PUE 1.135 (CCF aws average)" in text
    assert "379.1 g/kWh (aws us-east-1, US NERC region SERC) = 0.310 g" in text
    assert "GPU 1: 550.0 J measured (NVML power readings, integrated" in text


def test_cpu_utilisation_is_capped_at_one():
    c = energy.CpuEnergy(
        vcpus=2, wall_s=1.0, samples=1000, hz=100, min_watts_per_vcpu=1.0, max_watts_per_vcpu=3.0
    )
    assert c.utilisation == 1.0 and c.watts == pytest.approx(6.0)


def test_given_pue_and_gcp_region_pue():
    given = energy.coefficients(CarbonSettings("gcp", "us-central1", pue=1.5))
    assert given.pue == 1.5 and given.pue_basis == "given"
    regional = energy.coefficients(CarbonSettings("gcp", "europe-west4"))
    assert regional.pue == 1.07 and "europe-west4" in regional.pue_basis
    fleet = energy.coefficients(CarbonSettings("gcp", "us-west1"))
    assert fleet.pue == 1.1 and fleet.pue_basis == "CCF gcp average"
    assert (fleet.min_watts_per_vcpu, fleet.max_watts_per_vcpu) == (0.68, 4.11)
    assert fleet.t_co2e_per_kwh == 0.00006


def test_azure_region_names_match_regardless_of_case():
    c = energy.coefficients(CarbonSettings("azure", "eastus"))
    assert c.region == "EastUS" and c.t_co2e_per_kwh == 0.000379069
    assert c.pue == 1.185 and (c.min_watts_per_vcpu, c.max_watts_per_vcpu) == (0.74, 3.54)


def test_unknown_region_names_the_field_and_the_known_regions():
    with pytest.raises(CarbonError) as err:
        energy.coefficients(CarbonSettings("aws", "us-east-9"))
    msg = str(err.value)
    assert err.value.field == "carbon.region"
    assert msg.startswith("carbon.region: no CCF grid emission factor for aws region 'us-east-9'")
    assert "known aws regions: af-south-1, " in msg and "us-west-2" in msg


def test_unknown_provider_names_the_field_and_the_known_providers():
    with pytest.raises(
        CarbonError,
        match=r"^carbon\.cloudProvider: no CCF coefficients for "
        r"'onprem'; known providers: aws, azure, gcp$",
    ):
        energy.coefficients(CarbonSettings("onprem", "dc-1"))


def test_pue_out_of_range_is_refused():
    with pytest.raises(CarbonError, match=r"carbon\.pue: must be from 1 to 3, got 0\.9"):
        energy.coefficients(CarbonSettings("aws", "eu-west-1", pue=0.9))


def test_settings_from_session_meta_as_the_operator_stores_them():
    meta = {"carbon:cloudProvider": "gcp", "carbon:region": "europe-north1", "carbon:pue": "1.2"}
    assert energy.settings_from_meta(meta) == CarbonSettings("gcp", "europe-north1", 1.2)
    assert energy.settings_from_meta({"cpu": "True"}) is None
    with pytest.raises(CarbonError, match=r"^carbon\.pue: not a number: .high.$"):
        energy.settings_from_meta({**meta, "carbon:pue": "high"})


def test_without_provider_only_measured_gpu_energy_and_it_says_so():
    e = energy.estimate(
        {"": TRACE}, wall_s=10.0, cpu_samples=2000, hz=100, vcpus=8, memory_gb=32.0, coeffs=None
    )
    assert e.it_joules == pytest.approx(2350.0)
    assert e.facility_kwh is None and e.co2e_g is None and e.cpu is None
    assert any("no cloud provider and region" in x for x in e.missing)
    assert "total: 2350.0 J at the machine (no PUE, no CO2e)" in energy.explain(e)


def test_missing_gpu_readings_and_machine_size_are_named():
    coeffs = energy.coefficients(CarbonSettings("aws", "eu-north-1"))
    e = energy.estimate(
        {}, wall_s=5.0, cpu_samples=0, hz=99, vcpus=None, memory_gb=None, coeffs=coeffs
    )
    assert e.gpus == () and e.cpu is None and e.memory is None
    assert len(e.missing) == 3
    assert e.missing[0].startswith("GPU: no NVML energy-counter or power readings")
    assert "vCPU count" in e.missing[1] and "memory size" in e.missing[2]
    assert e.it_joules == 0.0


def test_coefficient_file_cites_a_source_for_every_value():
    table = json.loads(energy.DATA_FILE.read_text())
    assert table["ccf_commit"] == CCF_COMMIT
    assert set(table["providers"]) == {"aws", "gcp", "azure"}
    for name, p in table["providers"].items():
        for key in ("min_watts_per_vcpu", "max_watts_per_vcpu", "memory_kwh_per_gb_hour", "pue"):
            assert p[key]["value"] > 0, (name, key)
            assert CCF_COMMIT in p[key]["source"], (name, key)
        factors = p["emission_factors"]
        assert CCF_COMMIT in factors["source"]
        assert factors["unit"] == "metric tons CO2e per kWh"
        assert len(factors["regions"]) >= 25
        assert "Unknown" not in factors["regions"]  # no averages standing in for a region
        for region, row in factors["regions"].items():
            assert 0 <= row["t_co2e_per_kwh"] < 0.002, (name, region)
    assert table["providers"]["aws"]["emission_factors"]["regions"]["eu-north-1"] == {
        "t_co2e_per_kwh": 0.0000088
    }
    assert energy.load_table() == table


def test_gpu_energy_dataclass_window():
    g = GpuEnergy("", 0, 10.0, energy.COUNTER, 0, 0, 1)
    assert g.seconds == 0 and g.mean_watts == 0.0
