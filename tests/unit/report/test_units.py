"""One percent and duration formatter: each house style the reports print, pinned."""

from kubeprof.report.units import duration, in_unit, percent


def test_percent_styles():
    assert percent(0.125) == "12.5 %"
    assert percent(None) == "-" and percent(None, missing="not measured") == "not measured"
    assert percent(1, 8, digits=2, width=6, sign="%") == " 12.50%"
    assert percent(3, 0, sign="") == "0.0"  # 0 of 0 is 0
    assert percent(0.5, digits=0, sign="%") == "50%"


def test_durations():
    assert in_unit(1_234_500_000, "ms", 2, grouped=True) == "1,234.50 ms"
    assert in_unit(1_500, "µs", 1) == "1.5 µs"
    assert [duration(n) for n in (1_230_000_000, 45_600_000, 789_000, 12)] == [
        "1.23 s",
        "45.6 ms",
        "789 us",
        "12 ns",
    ]
