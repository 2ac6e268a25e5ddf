"""``workload_stats`` (REFERENCE-workloads §7): hand-computed cases and the reference table."""

from __future__ import annotations

import numpy as np
import pytest

import loadgen
from loadgen import ArrivalRule, Dep, Request, Workload
from loadgen._stats import _prefix_hits

from .conftest import AZURE, MOONCAKE


def _request(
    i: int, ids: list[int], *, at: float = 0.0, size: int = 10, after: tuple[Dep, ...] = ()
) -> Request:
    return Request(
        id=f"r{i}",
        input_length=size,
        output_length=1,
        block_size=4,
        hash_ids=ids,
        arrival=ArrivalRule(not_before_ms=None if after else at, after=after),
    )


def test_prefix_hits_count_only_prefixes_of_earlier_requests() -> None:
    requests = (
        _request(0, [1, 2, 3], at=0.0),
        _request(1, [1, 2, 9], at=1.0),  # shares the prefix [1, 2]: 8 tokens
        _request(2, [2, 3, 4], at=2.0),  # ids seen, but not as a prefix: 0
        _request(3, [1, 2, 3], at=3.0),  # the whole prompt: min(12, 10) = 10 tokens
    )
    stats = loadgen.workload_stats(Workload(requests=requests, source="t", format="test"))
    assert stats.prefix_hit_ratio == pytest.approx(18 / 40)
    assert stats.requests_with_hit == 0.5


def test_nominal_order_not_file_order_decides_who_hits() -> None:
    requests = (_request(0, [1, 2, 3], at=5.0), _request(1, [1, 2, 3], at=1.0))
    order = np.array([1, 0])
    blocks, tokens = _prefix_hits(requests, order)
    assert blocks.tolist() == [3, 0]
    assert tokens.tolist() == [10, 0]


def test_span_rate_and_cv_follow_dependencies_on_the_nominal_schedule() -> None:
    requests = (
        _request(0, [1], at=0.0),
        _request(1, [2], after=(Dep("r0", "completion", 3000.0),)),
        _request(2, [3], at=1000.0),
    )
    stats = loadgen.workload_stats(Workload(requests=requests, source="t", format="test"))
    # Releases 0, 1000, 3000: gaps 1000 and 2000, mean 1500, population std 500.
    assert stats.span_ms == 3000.0
    assert stats.rate_per_s == 1.0
    assert stats.inter_arrival_cv == pytest.approx(1 / 3)
    assert loadgen.nominal_release_ms(requests).tolist() == [0.0, 3000.0, 1000.0]


def test_length_percentiles_use_numpy_linear_interpolation() -> None:
    requests = tuple(_request(i, [i], size=s) for i, s in enumerate([1, 2, 3, 4]))
    stats = loadgen.workload_stats(Workload(requests=requests, source="t", format="test"))
    assert (stats.input.p50, stats.input.p90, stats.input.p99) == pytest.approx((2.5, 3.7, 3.97))
    assert (stats.input.mean, stats.input.max) == (2.5, 4)


@pytest.fixture(scope="module")
def mooncake_stats() -> loadgen.WorkloadStats:
    return loadgen.workload_stats(loadgen.read_trace(MOONCAKE))


@pytest.fixture(scope="module")
def azure_stats() -> loadgen.WorkloadStats:
    return loadgen.workload_stats(loadgen.read_trace(AZURE))


def test_mooncake_reference_row(mooncake_stats: loadgen.WorkloadStats) -> None:
    s = mooncake_stats
    assert s.requests == 12031
    assert s.span_ms == 3536999.0
    assert round(s.rate_per_s, 2) == 3.40
    assert round(s.inter_arrival_cv, 2) == 3.03
    assert (s.input.p50, s.input.p90, round(s.input.p99, 1)) == (6909, 27367, 85400.4)
    assert (s.output.p50, s.output.p90, round(s.output.p99, 1)) == (350, 597, 1118.5)
    assert round(s.prefix_hit_ratio * 100, 2) == 37.36


def test_mooncake_share_hitting_two_blocks_and_distinct_timestamps() -> None:
    workload = loadgen.read_trace(MOONCAKE)
    release = loadgen.nominal_release_ms(workload.requests)
    assert len(set(release.tolist())) == 1180
    assert all(r.hash_ids[0] == 0 for r in workload.requests)
    blocks, _ = _prefix_hits(workload.requests, np.lexsort((np.arange(release.size), release)))
    assert round(float((blocks >= 2).mean()) * 100, 2) == 38.72


def test_azure_reference_row(azure_stats: loadgen.WorkloadStats) -> None:
    s = azure_stats
    assert s.requests == 19366
    assert round(s.span_ms, 1) == 3501721.9
    assert round(s.rate_per_s, 2) == 5.53
    assert round(s.inter_arrival_cv, 2) == 1.09
    assert (s.input.p50, s.input.p90, s.input.p99) == (1020, 2734.5, 4142)
    assert (s.output.p50, s.output.p90, s.output.p99) == (129, 424, 601)
    assert s.prefix_hit_ratio == 0.0


def test_weka_reference_row(weka_workload: loadgen.Workload) -> None:
    s = loadgen.workload_stats(weka_workload)
    assert s.requests == 34085
    assert (s.input.p50, round(s.input.p90, 1), round(s.input.p99, 1)) == (
        102178,
        214948.8,
        464426.7,
    )
    assert (s.output.p50, s.output.p90, round(s.output.p99, 1)) == (216, 912, 3933.2)
    assert round(s.prefix_hit_ratio * 100, 2) == 96.29
    assert (s.plays, s.subagents, s.subagents_relative, s.async_launched) == (498, 50, 50, 4)
    assert s.tolerated.surplus_ids == 0
