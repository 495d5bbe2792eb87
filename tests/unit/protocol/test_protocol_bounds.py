"""A node's records must fit in the session's span: refused naming the field otherwise."""

import pytest

from kubeprof.model import Batch, CpuSample, GpuActivity, GpuMetricSample, OffCpuSample
from kubeprof.protocol import bounds
from kubeprof.protocol.bounds import Extent, OutOfBounds

S = bounds.NS_PER_S
DAY = 86400 * S
LIMIT = bounds.max_span_ns(60, 30)  # a one-minute session + 30 s of drain and skew


def kernel(start: int, end: int) -> GpuActivity:
    return GpuActivity("kernel", "k", start, end, 0, 7, 1)


def sample(ts: int) -> CpuSample:
    return CpuSample(ts, 7, 7, "py", 0, ())


def test_the_limit_is_the_sessions_duration_plus_slack_and_never_past_the_crds_max():
    assert LIMIT == 90 * S
    assert bounds.max_span_ns(None, 0) == bounds.MAX_SESSION_S * S
    assert bounds.max_span_ns(10 * 86400, 0) == bounds.MAX_SESSION_S * S


@pytest.mark.parametrize("end", [115 * DAY, 2**63 - 1])
def test_a_kernel_longer_than_the_session_is_refused_naming_its_field(end):
    batch = Batch(
        samples=(sample(5 * S),), gpu_activities=(kernel(5 * S, 5 * S + 1), kernel(0, end))
    )
    with pytest.raises(OutOfBounds) as err:
        bounds.check(batch, LIMIT)
    assert err.value.field == "gpu_activities[1].end_ns"
    assert "90.0 s" in str(err.value)


def test_records_spread_wider_than_the_session_are_refused_at_the_first_one_out():
    batch = Batch(samples=(sample(100 * S), sample(150 * S), sample(191 * S), sample(120 * S)))
    with pytest.raises(OutOfBounds) as err:
        bounds.check(batch, LIMIT)
    assert err.value.field == "samples[2].ts_ns"


def test_the_extent_carries_over_batches_of_one_node():
    first = bounds.check(Batch(samples=(sample(1000 * S),)), LIMIT)
    assert first == Extent(1000 * S, 1000 * S)
    second = bounds.check(
        Batch(gpu_metrics=(GpuMetricSample(1080 * S, 0, "m", 1.0),)), LIMIT, first
    )
    assert second == Extent(1000 * S, 1080 * S)
    # 115 days later, one nanosecond long: fine alone, out of the node's window.
    with pytest.raises(OutOfBounds) as err:
        bounds.check(Batch(gpu_activities=(kernel(115 * DAY, 115 * DAY + 1),)), LIMIT, second)
    assert err.value.field == "gpu_activities[0].end_ns" and "115.0 days" in str(err.value)
    # ... and before it, too
    with pytest.raises(OutOfBounds):
        bounds.check(Batch(samples=(sample(900 * S),)), LIMIT, second)


def test_records_inside_an_extent_already_stored_are_taken_even_when_it_is_too_wide():
    wide = Extent(0, 10 * DAY)  # stored before these bounds existed
    assert bounds.check(Batch(samples=(sample(DAY),)), LIMIT, wide) == wide
    with pytest.raises(OutOfBounds):
        bounds.check(Batch(samples=(sample(10 * DAY + 1),)), LIMIT, wide)


def test_a_batch_without_timed_records_keeps_the_extent():
    assert bounds.check(Batch(), LIMIT) is None
    assert bounds.check(Batch(), LIMIT, Extent(1, 2)) == Extent(1, 2)


def test_an_off_cpu_wait_longer_than_the_session_is_refused():
    wait = OffCpuSample(S, 7, 7, "py", 100 * DAY, 100 * DAY, "futex", "bpf-sched", ())
    with pytest.raises(OutOfBounds) as err:
        bounds.check(Batch(offcpu_samples=(wait,)), LIMIT)
    assert err.value.field == "offcpu_samples[0].blocked_ns"
