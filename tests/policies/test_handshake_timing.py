"""Offer timeouts and the router-to-engine dispatch latency."""

from __future__ import annotations

import pytest

from engines import EventKind, LifecycleEvent
from loadgen import Request
from policies import (
    BasePolicy,
    ChoicePolicy,
    Placement,
    PlacementError,
    PolicyContext,
    RequestStream,
    RoundRobin,
)
from replay import ReplaySession, WorkloadValidationError

from .support import KeepingTopology, req, run_policy, statuses, workload


class SlowCommitter(BasePolicy):
    """Offers, waits ``wait_ms``, then commits; records what it saw."""

    def __init__(self, wait_ms: float, *, timeout_ms: float | None = None) -> None:
        self.wait_ms = wait_ms
        self.timeout_ms = timeout_ms
        self.placements: list[Placement] = []
        self.aborted: list[Placement] = []
        self.tentatives: list[tuple[int, int, int | None]] = []

    async def run(self, requests: RequestStream, ctx: PolicyContext) -> None:
        async for request in requests:
            async with ctx.offer(request, 0, timeout_ms=self.timeout_ms) as offer:
                t = offer.tentative
                assert t is not None
                self.tentatives.append((t.hit_tokens, t.queue_position, t.first_token_ns))
                await ctx.sleep_ms(self.wait_ms)
                placement = await offer.commit()
                self.placements.append(placement)
                if placement.outcome == "aborted":
                    await ctx.dispatch(request, 1)

    def on_aborted(self, placement: Placement) -> None:
        self.aborted.append(placement)


def test_an_offer_left_open_past_its_timeout_expires() -> None:
    policy = SlowCommitter(10.0, timeout_ms=5.0)
    result = run_policy(policy, [req("a", prompt=100, output=2)])
    assert [(p.outcome, p.reason, p.time_ns) for p in policy.placements] == [
        ("aborted", "expired", 5_000_000)
    ]
    assert [(p.reason, p.time_ns) for p in policy.aborted] == [("expired", 5_000_000)]
    assert statuses(result) == {"a": "completed"}
    assert result.requests[0].engine == 1  # placed again after the expiry


def test_an_offer_committed_in_time_does_not_expire() -> None:
    policy = SlowCommitter(4.0, timeout_ms=5.0)
    result = run_policy(policy, [req("a", prompt=100, output=2)])
    assert [(p.outcome, p.engine) for p in policy.placements] == [("committed", 0)]
    assert policy.aborted == []
    assert result.requests[0].ttft_ms == 54.0


def test_the_policy_default_timeout_applies_to_every_offer() -> None:
    policy = SlowCommitter(10.0)
    policy.offer_timeout_ms = 2.5  # type: ignore[attr-defined]
    run_policy(policy, [req("a", prompt=100, output=2)])
    assert [(p.reason, p.time_ns) for p in policy.aborted] == [("expired", 2_500_000)]


def test_expiry_is_recorded_as_an_aborted_event() -> None:
    events: list[LifecycleEvent] = []
    session = ReplaySession.build(
        workload([req("a", prompt=100, output=2)]),
        topology=KeepingTopology(),
        policy=SlowCommitter(10.0, timeout_ms=5.0),
    )
    session.journal.subscribe(events.append, kinds=[EventKind.ABORTED])
    session.run()
    assert [(e.time_ns, e.engine, dict(e.detail)["reason"]) for e in events] == [
        (5_000_000, 0, "expired")
    ]


def test_a_bad_timeout_is_refused() -> None:
    class Bad(BasePolicy):
        offer_timeout_ms = -1.0

    with pytest.raises(PlacementError, match="offer_timeout_ms must be a finite number"):
        run_policy(Bad(), [req("a")])


def test_dispatch_latency_delays_each_phase_of_the_handshake() -> None:
    # offer 2 ms + answer 2 ms + commit 2 ms: the engine takes the request at 6 ms
    result = run_policy(RoundRobin(), [req("a", prompt=100, output=2)], dispatch_latency_ms=2.0)
    record = result.requests[0]
    assert (record.first_admit_ms, record.ttft_ms) == (6.0, 56.0)


def test_the_tentative_is_made_after_one_latency_and_holds_the_estimate() -> None:
    policy = SlowCommitter(0.0)
    result = run_policy(policy, [req("a", prompt=100, output=2)], dispatch_latency_ms=2.0)
    # made at 2 ms on an idle engine: admission then, first token 50 ms later; the commit
    # arrives at 6 ms, so the real first token is at 56 ms
    assert policy.tentatives == [(0, 0, 52_000_000)]
    assert result.requests[0].ttft_ms == 56.0


def test_a_negative_dispatch_latency_is_refused() -> None:
    with pytest.raises(WorkloadValidationError, match="dispatch_latency_ms: must be a finite"):
        run_policy(RoundRobin(), [req("a")], dispatch_latency_ms=-1.0)


class _Choice(ChoicePolicy):
    def choose(self, request: Request, ctx: PolicyContext) -> int:
        return 0


def test_zero_latency_keeps_the_synchronous_path() -> None:
    plain = run_policy(_Choice(), [req(f"r{i}", at_ms=float(i)) for i in range(5)])
    zero = run_policy(
        _Choice(), [req(f"r{i}", at_ms=float(i)) for i in range(5)], dispatch_latency_ms=0.0
    )
    assert plain.requests == zero.requests
