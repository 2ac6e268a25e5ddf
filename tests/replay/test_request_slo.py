"""Goodput and ``meets_slo`` judge each request against its own SLO when it has one, else
against the run's; a policy reads a request's SLO as ``request.slo``."""

from __future__ import annotations

import attrs

from engines import EngineConfig, FixedTiming
from loadgen import SLO, ArrivalRule, LoadMode, Request, Workload
from policies import PlacePolicy, PolicyContext, RoundRobin
from replay import Aggregated, ReplayResult, format_table, run


def _workload() -> Workload:
    """Ten requests a second apart (no interference): each one's TTFT is one 50 ms prefill."""
    own = [SLO(ttft_ms=40)] * 5 + [SLO(ttft_ms=60)] * 3 + [None] * 2
    requests = tuple(
        Request(
            id=f"r{i}",
            input_length=100,
            output_length=3,
            block_size=64,
            hash_ids=[10 * i, 10 * i + 1],
            arrival=ArrivalRule(not_before_ms=1000.0 * i),
            slo=slo,
        )
        for i, slo in enumerate(own)
    )
    return Workload(requests=requests, source="own", format="python")


def _run(*, slo: SLO | None = None, policy: object | None = None) -> ReplayResult:
    topology = Aggregated(
        workers=1,
        engine=EngineConfig(num_blocks=100, block_size=64),
        timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
    )
    return run(
        _workload(),
        topology=topology,
        policy=policy if policy is not None else RoundRobin(),
        load=LoadMode(),
        slo=slo,
    )


def test_requests_with_their_own_slo_give_goodput_without_a_run_slo() -> None:
    result = _run()
    assert [r.ttft_ms for r in result.requests] == [50.0] * 10
    assert [r.meets_slo for r in result.requests] == [False] * 5 + [True] * 3 + [None] * 2
    s = result.summary
    assert s.slo is None
    assert s.goodput is not None
    assert s.goodput.count == 3
    assert s.goodput.attainment == 0.3  # of the completed, judged or not
    assert "Request goodput (req/s) [own SLOs]" in format_table(result)


def test_the_run_slo_is_the_default_for_requests_without_their_own() -> None:
    result = _run(slo=SLO(ttft_ms=100))
    # r0..r4 keep their own tighter bound; r8, r9 take the run's
    assert [r.meets_slo for r in result.requests] == [False] * 5 + [True] * 5
    assert result.summary.goodput is not None
    assert result.summary.goodput.count == 5
    assert "Request goodput (req/s) [ttft=100]" in format_table(result)


def test_without_any_slo_there_is_no_goodput() -> None:
    plain = attrs.evolve(
        _workload(),
        requests=tuple(attrs.evolve(r, slo=None) for r in _workload().requests),
    )
    topology = Aggregated(
        workers=1,
        engine=EngineConfig(num_blocks=100, block_size=64),
        timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
    )
    result = run(plain, topology=topology, policy=RoundRobin(), load=LoadMode())
    assert result.summary.goodput is None
    assert all(r.meets_slo is None for r in result.requests)
    assert "goodput" not in format_table(result)


class SLOAdmission(PlacePolicy):
    """Rejects a request whose own TTFT bound is below one prefill pass; places the rest."""

    name = "slo_admission"

    async def place(self, request: Request, ctx: PolicyContext) -> None:
        bound = None if request.slo is None else request.slo.ttft_ms
        if bound is not None and bound < 50.0:
            ctx.reject(request, reason=f"ttft bound {bound} ms cannot be met")
            return
        await ctx.dispatch(request, 0)


def test_a_policy_reads_a_requests_slo() -> None:
    result = _run(policy=SLOAdmission())
    statuses = [r.status for r in result.requests]
    assert statuses == ["rejected"] * 5 + ["completed"] * 5
    assert result.requests[0].rejection_reason == "ttft bound 40 ms cannot be met"
    assert result.summary.goodput is not None
    assert result.summary.goodput.count == 3
    assert result.summary.goodput.attainment == 0.6  # 3 good of the 5 completed
