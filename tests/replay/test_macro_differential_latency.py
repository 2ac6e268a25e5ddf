"""Macro-stepping agrees with per-pass steps when the handshake takes time and offers hold
pins: a dispatch latency, offers left open across passes, offer timeouts."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engines import EngineConfig, FixedTiming, LinearTiming, PolynomialTiming
from policies import BasePolicy, KVAware, PolicyContext, RequestStream, RoundRobin
from replay import Aggregated

from .test_macro_differential import _replay, assert_same, scenarios, workload


class Deliberate(BasePolicy):
    """Picks the engine with the earliest estimated first token (views), offers it, waits a
    little with the offer open (its hits pinned), then commits; an offer left open too long
    expires and the request is dispatched to engine 0."""

    offer_timeout_ms = 7.0

    def __init__(self) -> None:
        self.seen: list[tuple[object, ...]] = []

    async def _place(self, request: Any, ctx: PolicyContext) -> None:
        best = None
        for index, view in enumerate(ctx.engines):
            cached = ctx.prefix_overlap_tokens(request, index)
            guess = view.estimate(request.input_length, cached_tokens=cached)
            key = (guess.first_token_ns if guess is not None else 2**62, index)
            if best is None or key < best:
                best = key
        assert best is not None
        view = ctx.engines[best[1]]
        keys = ctx.block_keys(request, view.block_size)
        self.seen.append(
            (ctx.now_ns(), best, view.expected_prefix_overlap(keys), view.pass_in_flight)
        )
        async with ctx.offer(request, best[1]) as offer:
            t = offer.tentative
            if t is not None:
                seen = ("offer", ctx.now_ns(), t.hit_tokens, t.queue_position, t.estimate)
                self.seen.append(seen)
                await ctx.sleep_ms(float(len(request.id) % 3) * 4.0)
                if offer.state == "open":
                    await offer.commit()
        if offer.state in ("expired", "rejected"):
            placement = await ctx.dispatch(request, 0)
            if placement.rejected:
                ctx.reject(request, reason="rejected")

    async def run(self, requests: RequestStream, ctx: PolicyContext) -> None:
        async for request in requests:
            ctx.spawn(self._place(request, ctx))


TIMINGS = [
    lambda: FixedTiming(prefill_ms=50.0, decode_ms=10.0),
    lambda: PolynomialTiming(),
    lambda: LinearTiming(c0=4.0, c_p=0.02, c_d=0.3, c_kv=0.0001),
]
POLICIES = [RoundRobin, KVAware, Deliberate]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.sampled_from([0.0, 0.5, 3.0]), st.integers(0, 2), st.integers(0, 2))
def test_macro_matches_per_pass_with_latency_and_pins(
    scenario: dict[str, Any], latency_ms: float, timing: int, policy: int
) -> None:
    topology = Aggregated(
        workers=scenario["workers"], engine=scenario["config"], timing=TIMINGS[timing]()
    )
    assert_same(
        workload(scenario["requests"]),
        POLICIES[policy],
        topology=topology,
        seed=scenario["seed"],
        dispatch_latency_ms=latency_ms,
    )


def test_pinned_offers_under_kv_pressure_match() -> None:
    from ..policies.support import req

    requests = [
        req(f"r{i}", prompt=300 + 50 * (i % 4), output=30 + 7 * i, at_ms=3.0 * i, ids=None)
        for i in range(12)
    ]
    shared = [
        req(f"s{i}", prompt=640, output=20, at_ms=2.0 + 5.0 * i, ids=list(range(10)))
        for i in range(6)
    ]
    topology = Aggregated(
        workers=2,
        engine=EngineConfig(num_blocks=40, block_size=64, max_num_batched_tokens=512),
        timing=FixedTiming(prefill_ms=20.0, decode_ms=5.0),
    )
    assert_same(
        workload([*requests, *shared]), Deliberate, topology=topology, dispatch_latency_ms=1.0
    )


@pytest.mark.parametrize("latency_ms", [0.5, 3.0])
@pytest.mark.parametrize("order", ["source_first", "destination_first"])
def test_pd_pools_take_the_latency_and_both_steppings_agree(order: str, latency_ms: float) -> None:
    from .test_macro_differential import pd_policy, pd_requests, pd_topology

    requests = pd_requests(11, max_output=120, max_at_ms=200)
    topology = pd_topology(order)

    def policy() -> Any:
        return pd_policy("round_robin")

    assert_same(workload(requests), policy, topology=topology, dispatch_latency_ms=latency_ms)
    # each pool's handshake took the latency: every request reached a decode engine later
    slow = _replay(
        workload(requests), "macro", policy, topology=topology, dispatch_latency_ms=latency_ms
    )[0]["requests.jsonl"]
    fast = _replay(workload(requests), "macro", policy, topology=topology)[0]["requests.jsonl"]
    lines = [
        (json.loads(a), json.loads(b))
        for a, b in zip(slow.splitlines(), fast.splitlines(), strict=True)
    ]
    assert all(a["status"] == b["status"] == "completed" for a, b in lines)
    # offer, answer and commit on the prefill pool: the first admission is 3 latencies later
    # when the engine was idle, never earlier
    assert all(a["first_admit_ms"] >= b["first_admit_ms"] for a, b in lines)
    assert any(a["first_admit_ms"] - b["first_admit_ms"] >= 3 * latency_ms - 1e-9 for a, b in lines)
