"""Distributions and SLOs (REFERENCE-engine §8, "Statistics" and "Goodput")."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay import SLO, Distribution, SLOError
from replay._metrics import _tied_percentiles


def test_distribution_of_four_values_matches_hand_computed_statistics() -> None:
    d = Distribution.of([4.0, 1.0, 3.0, 2.0])
    assert d.count == 4
    assert d.mean == 2.5
    assert d.std == math.sqrt(1.25)  # population std: mean of squared deviations 5/4
    assert (d.min, d.max) == (1.0, 4.0)
    # r = p/100 * 3: p50 r=1.5 -> 2.5; p75 r=2.25 -> 3.25; p90 r=2.7 -> 3.7 ...
    assert d.p50 == 2.5
    assert d.p75 == 3.25
    assert d.p90 == pytest.approx(3.7, abs=1e-12)
    assert d.p95 == pytest.approx(3.85, abs=1e-12)
    assert d.p99 == pytest.approx(3.97, abs=1e-12)


def test_distribution_percentiles_are_numpy_linear_interpolation() -> None:
    rng = np.random.default_rng(7)
    sample = rng.exponential(50.0, size=101)
    d = Distribution.of(sample)
    expected = np.percentile(sample, [50, 75, 90, 95, 99], method="linear")
    assert [d.p50, d.p75, d.p90, d.p95, d.p99] == [float(x) for x in expected]


def test_distribution_of_one_value_has_zero_std_and_every_percentile_equal() -> None:
    d = Distribution.of([7.5])
    assert d.as_dict() == {
        "count": 1,
        "mean": 7.5,
        "std": 0.0,
        "min": 7.5,
        "max": 7.5,
        "p50": 7.5,
        "p75": 7.5,
        "p90": 7.5,
        "p95": 7.5,
        "p99": 7.5,
    }


def test_empty_distribution_has_count_zero_and_no_statistics() -> None:
    d = Distribution.of([])
    assert d.count == 0
    assert {k: v for k, v in d.as_dict().items() if k != "count"} == dict.fromkeys(
        ["mean", "std", "min", "max", "p50", "p75", "p90", "p95", "p99"]
    )


def test_distribution_rejects_non_finite_values() -> None:
    with pytest.raises(ValueError, match=r"^Distribution.of: every value must be finite$"):
        Distribution.of([1.0, float("nan")])


def _runs_and_repeated(values: list[float], weights: list[int]) -> tuple[dict, dict]:
    v = np.asarray(values, dtype=np.float64)
    w = np.asarray(weights, dtype=np.int64)
    runs = Distribution._of_runs(v, w).as_dict()
    spelled = Distribution._of(np.repeat(v, w), owned=True).as_dict()
    return runs, spelled


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([0.0, -0.0, 0.1, 10.0, 10.0 / 3, 50.0, 60.0, 1e6]),
            st.integers(min_value=0, max_value=400),
        ),
        min_size=1,
        max_size=40,
    )
)
def test_a_distribution_of_weighted_runs_equals_the_one_of_the_runs_spelled_out(
    runs: list[tuple[float, int]],
) -> None:
    # few distinct values and heavy weights: percentiles read off the runs; ranks that
    # fall between two values go to numpy; both must give the very same floats
    got, expected = _runs_and_repeated([v for v, _ in runs], [w for _, w in runs])
    assert got == expected
    assert [math.copysign(1.0, x) if x is not None else None for x in got.values()] == [
        math.copysign(1.0, x) if x is not None else None for x in expected.values()
    ]


def test_weighted_runs_read_percentiles_from_ties_and_fall_back_between_values() -> None:
    # 99 gaps of 10 and one of 60: every rank's neighbours tie except p99's (98.01)
    tied, spelled = _runs_and_repeated([10.0, 60.0, 10.0], [50, 1, 49])
    assert tied == spelled
    assert (tied["p50"], tied["p95"]) == (10.0, 10.0)
    assert 10.0 < tied["p99"] < 60.0  # numpy's interpolation, on the runs spelled out
    assert _tied_percentiles(np.asarray([10.0, 60.0]), np.asarray([99, 1]), 100) is None
    assert _tied_percentiles(np.asarray([10.0, 60.0]), np.asarray([980, 20]), 1000) == [
        10.0,
        10.0,
        10.0,
        10.0,
        60.0,
    ]
    with pytest.raises(ValueError, match="finite"):
        Distribution._of_runs(np.asarray([1.0, math.nan]), np.asarray([2, 1]))
    assert Distribution._of_runs(np.asarray([math.nan]), np.asarray([0])).count == 0


def test_slo_parse_reads_every_key_in_milliseconds() -> None:
    assert SLO.parse("ttft=200,tpot=50,e2e=1500.5") == SLO(ttft_ms=200, tpot_ms=50, e2e_ms=1500.5)
    assert SLO.parse(" e2el = 10 ") == SLO(e2e_ms=10)
    assert SLO.parse("").is_empty


def test_slo_parse_reads_vllm_goodput_pairs() -> None:
    # vLLM's --goodput: space-separated KEY:VALUE pairs, e2el for the end-to-end bound
    assert SLO.parse("ttft:500 tpot:50") == SLO(ttft_ms=500, tpot_ms=50)
    assert SLO.parse("e2el:2000  ttft:0.5") == SLO(ttft_ms=0.5, e2e_ms=2000)
    assert SLO.parse("ttft : 500,tpot=50 e2e:9") == SLO(ttft_ms=500, tpot_ms=50, e2e_ms=9)
    assert SLO.parse("ttft:500 tpot:50").as_text() == "ttft=500,tpot=50"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ttft", "slo: 'ttft' is not key=milliseconds or key:milliseconds"),
        ("ttft:500 tpot", "slo: 'tpot' is not key=milliseconds or key:milliseconds"),
        ("ttft:500 ttft=2", "slo: ttft is given twice"),
        ("itl:5", "slo: unknown metric 'itl' (expected ttft, tpot, e2e)"),
        ("tpot:fast", "slo: tpot: 'fast' is not a number"),
        ("e2el:-3", "slo: e2el must be a finite number >= 0 (ms), got -3.0"),
        ("itl=5", "slo: unknown metric 'itl' (expected ttft, tpot, e2e)"),
        ("ttft=1,ttft=2", "slo: ttft is given twice"),
        ("e2e=1,e2el=2", "slo: e2el is given twice"),
        ("tpot=fast", "slo: tpot: 'fast' is not a number"),
        ("ttft=-1", "slo: ttft must be a finite number >= 0 (ms), got -1.0"),
        ("ttft=inf", "slo: ttft must be a finite number >= 0 (ms), got inf"),
    ],
)
def test_slo_parse_errors_name_the_problem(text: str, message: str) -> None:
    with pytest.raises(SLOError) as info:
        SLO.parse(text)
    assert str(info.value) == message
    assert isinstance(info.value, ValueError)


def test_slo_from_mapping_validates_like_parse() -> None:
    assert SLO.from_mapping({"ttft": 200, "e2el": 900}) == SLO(ttft_ms=200, e2e_ms=900)
    with pytest.raises(SLOError) as info:
        SLO.from_mapping({"ttft": True}, where="run.toml: slo")
    assert str(info.value) == "run.toml: slo: ttft must be a finite number >= 0 (ms), got True"


def test_slo_bounds_are_inclusive_and_tpot_is_skipped_without_a_value() -> None:
    slo = SLO(ttft_ms=200, tpot_ms=50, e2e_ms=1000)
    assert slo.met(ttft_ms=200, tpot_ms=50, e2e_ms=1000)
    assert not slo.met(ttft_ms=200.001, tpot_ms=50, e2e_ms=1000)
    assert not slo.met(ttft_ms=200, tpot_ms=50.001, e2e_ms=1000)
    assert not slo.met(ttft_ms=200, tpot_ms=50, e2e_ms=1000.001)
    assert slo.met(ttft_ms=10, tpot_ms=None, e2e_ms=10)


def test_slo_text_round_trips() -> None:
    slo = SLO(ttft_ms=200, e2e_ms=1500.5)
    assert slo.as_text() == "ttft=200,e2e=1500.5"
    assert SLO.parse(slo.as_text()) == slo
    assert slo.as_dict() == {"ttft_ms": 200, "e2e_ms": 1500.5}
