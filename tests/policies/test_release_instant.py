"""``ctx.release_ns(request)``: the virtual instant the workload released a request, whatever
its arrival rule, however long the policy held it, behind a tokenization stage and in both pools
of a P/D run."""

from __future__ import annotations

import asyncio
from typing import Any

import attrs
import numpy as np
import pytest

import simclock
from engines import BlockKeyer, EngineConfig, FixedTiming, Journal, TokenizerStage
from loadgen import LoadMode, generate_synthetic, parse_synthetic
from policies import (
    BasePolicy,
    PDPolicy,
    PlacementError,
    PolicyContext,
    PolicyRuntime,
    RequestStream,
    RoundRobin,
)
from replay import Disaggregated, KVLink, run

from .support import MS, req, topology


@attrs.define(eq=False)
class Batching(BasePolicy):
    """Holds every request for 7 ms, then places it round robin; notes what it read."""

    name: str = "batching"
    seen: dict[str, tuple[int, int, int]] = attrs.field(factory=dict)
    _next: int = 0

    async def run(self, requests: RequestStream, ctx: PolicyContext) -> None:
        async for request in requests:
            ctx.spawn(self._later(request, ctx, ctx.now_ns()))

    async def _later(self, request: Any, ctx: PolicyContext, received_ns: int) -> None:
        await ctx.sleep_ms(7.0)
        self.seen[request.id] = (ctx.release_ns(request), received_ns, ctx.now_ns())
        assert ctx.release_ms(request) == ctx.release_ns(request) / 1e6
        k, self._next = self._next, (self._next + 1) % len(ctx.engines)
        await ctx.dispatch(request, ctx.engines[k].id)


def _sessions() -> Any:
    # later turns are released after the previous turn completes plus a think time: their
    # arrival rule holds no instant at all
    spec = parse_synthetic(
        "count=12 arrivals=poisson(10) input=200 turns=3 new_input=200 output=8 think_ms=40"
    )
    return generate_synthetic(spec, seed=5)


def test_release_instant_is_the_reported_arrival_for_held_dependent_requests() -> None:
    policy = Batching()
    result = run(_sessions(), topology=topology(), policy=policy, load=LoadMode())
    arrivals = {r.request_id: r.arrival_ms for r in result.requests}
    assert len(policy.seen) == len(arrivals) == 36
    later_turns = 0
    for rid, (release_ns, received_ns, read_ns) in policy.seen.items():
        assert release_ns / MS == arrivals[rid]
        assert release_ns == received_ns  # no tokenizer: the policy receives it at release
        assert read_ns == release_ns + 7 * MS  # read while the policy held it
        later_turns += not rid.endswith("/0")
    assert later_turns == 24


def test_release_instant_comes_before_a_tokenization_stage() -> None:
    policy = Batching()
    result = run(
        _sessions(),
        topology=topology(),
        policy=policy,
        load=LoadMode(),
        tokenizer=TokenizerStage(base_ms=3.0),
    )
    for record in result.requests:
        release_ns, received_ns, _ = policy.seen[record.request_id]
        assert release_ns / MS == record.arrival_ms
        assert received_ns - release_ns >= 3 * MS  # the policy got it after tokenization


def test_both_pools_of_a_pd_run_read_the_same_release_instant() -> None:
    prefill, decode = Batching(), Batching()
    topology_pd = Disaggregated(
        prefill_workers=1,
        decode_workers=2,
        prefill_engine=EngineConfig(num_blocks=600, block_size=16),
        decode_engine=EngineConfig(num_blocks=600, block_size=16),
        link=KVLink(bandwidth_gbps=50.0, kv_bytes_per_token=131072.0),
        prefill_timing=FixedTiming(prefill_ms=20.0, decode_ms=5.0),
        decode_timing=FixedTiming(prefill_ms=20.0, decode_ms=5.0),
    )
    result = run(
        _sessions(),
        topology=topology_pd,
        policy=PDPolicy(prefill=prefill, decode=decode),
        load=LoadMode(),
    )
    assert set(decode.seen) == set(prefill.seen) == {r.request_id for r in result.requests}
    for rid, (release_ns, _, _) in decode.seen.items():
        assert prefill.seen[rid][0] == release_ns
        assert decode.seen[rid][1] > release_ns  # the decode pool got it after the prefill


def _bare_runtime() -> PolicyRuntime:
    return PolicyRuntime(RoundRobin(), (), Journal(), BlockKeyer(), np.random.default_rng(0))


def test_a_runtime_fed_directly_takes_the_instant_it_received_the_request() -> None:
    async def main() -> tuple[int, str]:
        runtime = _bare_runtime()
        await asyncio.sleep(0.25)
        runtime.submit(req("a"))
        await asyncio.sleep(0.005)
        with pytest.raises(PlacementError) as error:
            runtime.context.release_ns(req("b"))
        return runtime.context.release_ns(req("a")), str(error.value)

    released, message = simclock.run(main())
    assert released == 250 * MS
    assert message == "request 'b' was never released to this policy"


def test_an_ended_request_without_a_trace_has_no_release_instant() -> None:
    async def main() -> str:
        runtime = _bare_runtime()
        runtime.submit(req("a"))
        runtime.context.reject(req("a"), reason="full")
        trace = runtime.journal.forget("a")
        assert trace is not None
        runtime.request_terminal(trace)
        with pytest.raises(PlacementError) as error:
            runtime.context.release_ns(req("a"))
        return str(error.value)

    assert simclock.run(main()) == "request 'a' has ended; its release instant is no longer kept"


def test_a_request_submitted_outside_the_loop_has_no_release_instant() -> None:
    runtime = _bare_runtime()
    runtime.submit(req("a"))  # no virtual loop runs, and no journal trace holds an arrival
    with pytest.raises(PlacementError) as error:
        runtime.context.release_ns(req("a"))
    assert str(error.value) == "request 'a' was submitted outside the virtual loop"
