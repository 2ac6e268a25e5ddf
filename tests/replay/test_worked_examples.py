"""REFERENCE-engine §9 worked examples, end to end through replay.run and finalize.

Fixed timing 50/10 ms, engine block size 64, trace block size 512, ample KV unless stated.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from engines import EngineConfig, FixedTiming
from loadgen import ArrivalRule, Request, Workload
from policies import RoundRobin
from replay import Aggregated, ReplayResult, run


def _request(rid: str, *, at_ms: float, p: int, n: int, ids: Sequence[int]) -> Request:
    return Request(
        id=rid,
        input_length=p,
        output_length=n,
        block_size=512,
        hash_ids=list(ids),
        arrival=ArrivalRule(not_before_ms=at_ms),
    )


def _replay(*requests: Request, num_blocks: int = 10_000, budget: int = 8192) -> ReplayResult:
    topology = Aggregated(
        workers=1,
        engine=EngineConfig(num_blocks=num_blocks, max_num_batched_tokens=budget),
        timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
    )
    workload = Workload(requests=requests, source="ex", format="test")
    return run(workload, topology=topology, policy=RoundRobin(), seed=0)


def test_a_isolated_request_ttft_50_e2e_140() -> None:
    result = _replay(_request("a", at_ms=0, p=1000, n=10, ids=[1, 2]))
    (a,) = result.requests
    assert (a.ttft_ms, a.e2e_ms, a.tpot_ms, a.ttst_ms) == (50.0, 140.0, 10.0, 10.0)
    assert a.token_times_ms == tuple(50.0 + 10 * i for i in range(10))
    s = result.summary
    assert s.itl_ms.count == 9
    assert s.itl_ms.mean == 10.0
    assert s.duration_s == 0.14


def test_b_chunked_prefill_ttft_100_e2e_190() -> None:
    result = _replay(_request("a", at_ms=0, p=1000, n=10, ids=[1, 2]), budget=512)
    (a,) = result.requests
    assert (a.ttft_ms, a.e2e_ms) == (100.0, 190.0)


def test_c_prefix_reuse_960_tokens_ttft_109_ratio_048() -> None:
    result = _replay(
        _request("A", at_ms=0, p=1000, n=10, ids=[1, 2]),
        _request("B", at_ms=1, p=1000, n=10, ids=[1, 2]),
    )
    a, b = result.requests
    assert b.reused_input_tokens == 960
    assert b.first_admit_ms == 50.0
    assert (b.ttft_ms, b.e2e_ms) == (109.0, 199.0)
    assert a.token_times_ms == (50.0, 110.0, *(120.0 + 10 * i for i in range(8)))
    assert result.summary.prefix_reuse_ratio == 0.48
    assert result.summary.queueing_delay_ms.max == 49.0  # B: engine arrival 1, admitted 50


def test_e_preemption_readmission_hit_448_last_token_3740() -> None:
    result = _replay(
        _request("A", at_ms=0, p=600, n=200, ids=[1, 2]),
        _request("B", at_ms=1, p=600, n=200, ids=[3, 4]),
        num_blocks=20,
    )
    a, b = result.requests
    assert a.last_token_ms == 2090.0
    assert b.num_preemptions == 1
    assert [(x.at_ms, x.reused_tokens, x.is_readmission) for x in b.admissions] == [
        (50.0, 0, False),
        (2090.0, 448, True),
    ]
    assert b.last_token_ms == 3740.0
    assert b.e2e_ms == 3739.0
    s = result.summary
    assert s.preemptions == 1
    assert s.engines[0].preemptions == 1
    assert s.reused_input_tokens == 0
    assert s.reused_input_tokens_with_readmissions == 448
    assert s.prefix_reuse_ratio_with_readmissions == pytest.approx(448 / 1200)
    assert result.evidence.event_counts["preempted"] == 1
