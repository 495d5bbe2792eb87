"""The phase sets both sides act on."""

from kubeprof.protocol.phases import ACCEPTS_DATA, ACTIVE, TERMINAL, Phase


def test_sets_partition_as_the_machine_expects():
    assert set(Phase) == ACCEPTS_DATA | TERMINAL and not ACCEPTS_DATA & TERMINAL
    assert ACCEPTS_DATA - {Phase.AGGREGATING} == ACTIVE  # agents stop; late batches still land
    assert [p.value for p in Phase] == ["Pending", "Running", "Aggregating", "Completed", "Failed"]


def test_phase_strings_from_the_api_compare_equal():
    # The agent keeps the API's answer as a plain string.
    assert "Running" in ACTIVE and "Aggregating" not in ACTIVE and "Gone" not in ACTIVE
