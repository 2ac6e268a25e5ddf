"""What a policy can do through its context: clock, sleeps, tasks, dispatch, offers, hooks."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from engines import BlockKeyer, EngineConfig, Journal, KVEvent, RequestTrace
from loadgen import Request
from policies import (
    BasePolicy,
    InvalidWakeupError,
    Placement,
    PlacementError,
    PlacePolicy,
    PolicyContext,
    PolicyRuntime,
    RequestStream,
    RoundRobin,
    policy_name,
)
from simclock import WakeupKind

from .support import MS, KeepingTopology, engines_of, req, run_policy, statuses, topology


class Recorder(PlacePolicy):
    """Runs ``body(request, ctx)`` per request and keeps what it returns or raises."""

    name = "recorder"

    def __init__(self, body: Any) -> None:
        self.body = body
        self.seen: list[object] = []

    async def place(self, request: Request, ctx: PolicyContext) -> None:
        try:
            self.seen.append(await self.body(request, ctx))
        except Exception as error:
            self.seen.append(error)
            await ctx.dispatch(request, 0)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda ctx: ctx.sleep_until_ns(-5),
            "policy 'recorder': wakeup at -5 ns is earlier than now (0 ns)",
        ),
        (
            lambda ctx: ctx.sleep_until_ns(1.5),
            "policy 'recorder': wakeup time must be an int of nanoseconds, got 1.5",
        ),
        (
            lambda ctx: ctx.sleep_until_ns(True),
            "policy 'recorder': wakeup time must be an int of nanoseconds, got True",
        ),
        (lambda ctx: ctx.sleep_ns(-1), "policy 'recorder': delay must be >= 0 ns, got -1 ns"),
        (
            lambda ctx: ctx.sleep_ns(2.0),
            "policy 'recorder': delay must be an int of nanoseconds, got 2.0",
        ),
        (
            lambda ctx: ctx.sleep_ms(float("nan")),
            "policy 'recorder': delay must be finite and >= 0 ms, got nan",
        ),
        (
            lambda ctx: ctx.sleep_ms(-0.5),
            "policy 'recorder': delay must be finite and >= 0 ms, got -0.5",
        ),
    ],
)
def test_invalid_wakeups_raise_at_the_call_site_naming_the_policy(call: Any, message: str) -> None:
    async def body(request: Request, ctx: PolicyContext) -> None:
        await call(ctx)

    policy = Recorder(body)
    result = run_policy(policy, [req("a")])
    [error] = policy.seen
    assert isinstance(error, InvalidWakeupError)
    assert isinstance(error, ValueError)
    assert str(error) == message
    assert statuses(result) == {"a": "completed"}


def test_sleeps_move_virtual_time_and_are_policy_wakeups() -> None:
    kinds: list[tuple[str | None, WakeupKind | None]] = []

    async def body(request: Request, ctx: PolicyContext) -> tuple[int, float]:
        async def probe() -> None:
            snapshot = asyncio.get_running_loop().snapshot()  # type: ignore[attr-defined]
            kinds.extend((t.waiter, t.kind) for t in snapshot.pending_timers)

        ctx.spawn(probe())
        await ctx.sleep_ms(2.5)
        await ctx.sleep_ns(500_000)
        await ctx.sleep_until_ns(ctx.now_ns() + 1_000_000)
        await ctx.dispatch(request, 0)
        return ctx.now_ns(), ctx.now_ms()

    policy = Recorder(body)
    result = run_policy(policy, [req("a")])
    assert policy.seen == [(4 * MS, 4.0)]
    assert ("policy:recorder", WakeupKind.POLICY_WAKEUP) in kinds
    [record] = result.requests
    assert (record.arrival_ms, record.engine_arrival_ms, record.ttft_ms) == (0.0, 4.0, 54.0)


def test_spawned_tasks_run_in_the_background_and_are_cancelled_at_the_end() -> None:
    ticks: list[int] = []
    cancelled: list[bool] = []

    class Ticking(RoundRobin):
        async def run(self, requests: RequestStream, ctx: PolicyContext) -> None:
            async def tick() -> None:
                try:
                    while True:
                        ticks.append(ctx.now_ns() // MS)
                        await ctx.sleep_ms(25)
                except asyncio.CancelledError:
                    cancelled.append(True)
                    raise

            ctx.spawn(tick(), name="tick")
            await super().run(requests, ctx)

    result = run_policy(Ticking(), [req("a", output=2)])
    assert statuses(result) == {"a": "completed"}
    assert result.requests[0].terminal_ms == 60.0
    assert ticks == [0, 25, 50]
    assert cancelled == [True]


class Batching(BasePolicy):
    """A queueing router: holds requests and places them every ``period_ms`` in one batch."""

    name = "batching"

    def __init__(self, period_ms: float) -> None:
        self.period_ms = period_ms
        self.held: list[Request] = []

    async def run(self, requests: RequestStream, ctx: PolicyContext) -> None:
        async def flush() -> None:
            while True:
                await ctx.sleep_ms(self.period_ms)
                batch, self.held = self.held, []
                for i, request in enumerate(batch):
                    await ctx.dispatch(request, i % len(ctx.engines))

        ctx.spawn(flush())
        async for request in requests:
            self.held.append(request)


def test_held_requests_are_placed_later_and_none_is_lost() -> None:
    requests = [req("a", at_ms=0), req("b", at_ms=5), req("c", at_ms=30)]
    result = run_policy(Batching(20), requests)
    assert statuses(result) == dict.fromkeys("abc", "completed")
    assert [r.engine_arrival_ms for r in result.requests] == [20.0, 20.0, 40.0]
    assert [r.arrival_ms for r in result.requests] == [0.0, 5.0, 30.0]


class Hoarder(BasePolicy):
    """Takes every request and never places any."""

    async def run(self, requests: RequestStream, ctx: PolicyContext) -> None:
        async for _ in requests:
            pass


class Waiter(BasePolicy):
    """Places the first request, then waits forever on an event nobody sets."""

    async def run(self, requests: RequestStream, ctx: PolicyContext) -> None:
        first = True
        async for request in requests:
            if first:
                await ctx.dispatch(request, 0)
                first = False
        await asyncio.Event().wait()


def test_requests_a_policy_never_places_end_unplaced_by_id() -> None:
    result = run_policy(Hoarder(), [req("a"), req("b", at_ms=100)])
    assert statuses(result) == {"a": "unplaced", "b": "unplaced"}
    assert [r.arrival_ms for r in result.requests] == [0.0, 100.0]


def test_a_policy_blocked_forever_ends_the_run_with_its_held_requests_unplaced() -> None:
    result = run_policy(Waiter(), [req("a"), req("b", at_ms=1)])
    assert statuses(result) == {"a": "completed", "b": "unplaced"}


def test_reject_ends_a_held_request_as_rejected_with_the_reason() -> None:
    async def body(request: Request, ctx: PolicyContext) -> None:
        if request.id == "b":
            ctx.reject(request, reason="over quota")
        else:
            await ctx.dispatch(request, 0)

    result = run_policy(Recorder(body), [req("a"), req("b")])
    assert statuses(result) == {"a": "completed", "b": "rejected"}
    assert result.requests[1].rejection_reason == "over quota"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            lambda r, ctx: ctx.dispatch(r, 5),
            "unknown engine 5; engines are 0..1",
        ),
        (
            lambda r, ctx: ctx.dispatch(r, -1),
            "unknown engine -1; engines are 0..1",
        ),
        (
            lambda r, ctx: ctx.dispatch(req("zzz"), 0),
            "request 'zzz' was never released to this policy",
        ),
    ],
)
def test_bad_dispatches_raise_placement_errors(body: Any, message: str) -> None:
    policy = Recorder(body)
    result = run_policy(policy, [req("a")])
    [error] = policy.seen
    assert isinstance(error, PlacementError)
    assert isinstance(error, ValueError)
    assert str(error) == message
    assert statuses(result) == {"a": "completed"}


def test_dispatching_a_committed_request_again_raises() -> None:
    async def body(request: Request, ctx: PolicyContext) -> None:
        await ctx.dispatch(request, 0)
        try:
            await ctx.dispatch(request, 1)
        except PlacementError as error:
            return str(error)  # type: ignore[return-value]

    policy = Recorder(body)
    result = run_policy(policy, [req("a")])
    assert policy.seen == ["request 'a' cannot be offered to engine 1: it is committed on engine 0"]
    assert engines_of(result) == {"a": 0}


class Hooked(PlacePolicy):
    """Records every hook call."""

    name = "hooked"

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def on_committed(self, placement: Placement) -> None:
        self.calls.append(("committed", (placement.request_id, placement.engine)))

    def on_aborted(self, placement: Placement) -> None:
        self.calls.append(("aborted", (placement.request_id, placement.engine, placement.reason)))

    def on_finished(self, trace: RequestTrace) -> None:
        self.calls.append(("finished", (trace.request_id, trace.terminal_status)))

    async def place(self, request: Request, ctx: PolicyContext) -> None:
        async with ctx.offer(request, 1) as offer:
            assert offer.state == "open"
        assert offer.state == "aborted"
        assert offer.placement.outcome == "aborted"
        placement = await ctx.dispatch(request, 0)
        self.calls.append(("dispatch", (placement.outcome, placement.time_ns)))


def test_hooks_tell_tentative_placement_from_engine_acceptance() -> None:
    policy = Hooked()
    result = run_policy(policy, [req("a", output=1)])
    assert policy.calls == [
        ("aborted", ("a", 1, "scope exit")),
        ("committed", ("a", 0)),
        ("dispatch", ("committed", 0)),
        ("finished", ("a", "completed")),
    ]
    assert statuses(result) == {"a": "completed"}


def test_an_offer_left_open_by_an_error_is_aborted_naming_the_error() -> None:
    class Raising(Hooked):
        async def place(self, request: Request, ctx: PolicyContext) -> None:
            try:
                async with ctx.offer(request, 1):
                    raise KeyError("boom")
            except KeyError:
                pass
            await ctx.dispatch(request, 0)

    policy = Raising()
    result = run_policy(policy, [req("a", output=1)])
    assert policy.calls[0] == ("aborted", ("a", 1, "scope exit: KeyError"))
    assert engines_of(result) == {"a": 0}


def test_a_rejected_offer_lets_the_policy_try_another_engine() -> None:
    reasons: list[str | None] = []

    async def body(request: Request, ctx: PolicyContext) -> None:
        first = await ctx.dispatch(request, 0)
        reasons.append(first.reason)
        assert first.rejected and not first.committed
        second = await ctx.dispatch(request, 1)
        assert second.committed

    topo = KeepingTopology(configs={0: EngineConfig(num_blocks=256, context_length=100)})
    result = run_policy(Recorder(body), [req("a", prompt=128)], topo=topo)
    assert reasons == ["prompt_too_long"]
    assert statuses(result) == {"a": "completed"}
    assert engines_of(result) == {"a": 1}


def test_a_choice_policy_rejects_a_request_its_engine_refuses() -> None:
    topo = KeepingTopology(
        inner=topology(1), configs={0: EngineConfig(num_blocks=256, context_length=100)}
    )
    result = run_policy(RoundRobin(), [req("a", prompt=128), req("b", prompt=64)], topo=topo)
    assert statuses(result) == {"a": "rejected", "b": "completed"}
    assert result.requests[0].rejection_reason == "prompt_too_long"


def test_kv_events_reach_the_policy_and_prefix_overlap_is_visible() -> None:
    events: list[KVEvent] = []
    overlaps: list[int] = []

    class Watching(PlacePolicy):
        def on_kv_event(self, event: KVEvent) -> None:
            events.append(event)

        async def place(self, request: Request, ctx: PolicyContext) -> None:
            overlaps.append(ctx.prefix_overlap_tokens(request, 0))
            await ctx.dispatch(request, 0)

    shared = [1, 2, 3]
    requests = [
        req("a", prompt=192, ids=shared, output=2),
        req("b", prompt=192, ids=shared, output=2, at_ms=200),
    ]
    run_policy(Watching(), requests)
    assert overlaps == [0, 128]  # 3 full blocks cached; capped at floor((192-1)/64) = 2 blocks
    assert events[0].kind == "stored" and events[0].engine == 0
    assert len(events[0].block_keys) == 3


def test_policy_name_is_the_name_attribute_or_the_class_name() -> None:
    assert policy_name(RoundRobin()) == "round_robin"
    assert policy_name(Hoarder()) == "Hoarder"


def test_an_offer_cannot_be_committed_after_it_was_aborted() -> None:
    async def body(request: Request, ctx: PolicyContext) -> str:
        async with ctx.offer(request, 0) as offer:
            await offer.abort("changed my mind")
            try:
                await offer.commit()
            except PlacementError as error:
                message = str(error)
        await ctx.dispatch(request, 1)
        return message

    policy = Recorder(body)
    result = run_policy(policy, [req("a")])
    assert policy.seen == ["offer of request 'a' to engine 0 cannot be committed: it is aborted"]
    assert engines_of(result) == {"a": 1}


def test_a_committed_request_cannot_be_rejected() -> None:
    async def body(request: Request, ctx: PolicyContext) -> str:
        await ctx.dispatch(request, 0)
        try:
            ctx.reject(request, reason="too late")
        except PlacementError as error:
            return str(error)
        return "no error"

    policy = Recorder(body)
    result = run_policy(policy, [req("b")])
    assert policy.seen == ["request 'b' cannot be rejected: it is committed"]
    assert statuses(result) == {"b": "completed"}


def test_on_finished_also_tells_of_requests_the_policy_rejected() -> None:
    finished: list[tuple[str, str | None]] = []

    class Picky(PlacePolicy):
        def on_finished(self, trace: RequestTrace) -> None:
            finished.append((trace.request_id, trace.terminal_status))

        async def place(self, request: Request, ctx: PolicyContext) -> None:
            if request.id == "a":
                ctx.reject(request, reason="no")
            else:
                await ctx.dispatch(request, 0)

    run_policy(Picky(), [req("a", output=1), req("b", output=1)])
    assert finished == [("a", "rejected"), ("b", "completed")]


def test_several_coroutines_can_share_the_request_stream() -> None:
    took: list[tuple[str, str]] = []

    class TwoWorkers(BasePolicy):
        async def run(self, requests: RequestStream, ctx: PolicyContext) -> None:
            async def worker(name: str, engine: int) -> None:
                async for request in requests:
                    took.append((name, request.id))
                    await ctx.sleep_ms(1)
                    await ctx.dispatch(request, engine)

            async with asyncio.TaskGroup() as group:
                group.create_task(worker("w0", 0))
                group.create_task(worker("w1", 1))

    result = run_policy(TwoWorkers(), [req("a"), req("b"), req("c", at_ms=0.5)])
    assert statuses(result) == dict.fromkeys("abc", "completed")
    assert sorted(took) == [("w0", "a"), ("w0", "c"), ("w1", "b")]


def test_an_open_offer_has_no_outcome_yet() -> None:
    async def body(request: Request, ctx: PolicyContext) -> str:
        async with ctx.offer(request, 0) as offer:
            try:
                offer.placement  # noqa: B018
            except PlacementError as error:
                message = str(error)
            await offer.commit()
        return message

    policy = Recorder(body)
    run_policy(policy, [req("a")])
    assert policy.seen == ["offer of request 'a' to engine 0 has no outcome yet"]


class Revisiting(PlacePolicy):
    """Dispatches each request; before the last, tries to place and reject the earlier ones."""

    name = "revisiting"

    def __init__(self) -> None:
        self.earlier: list[Request] = []
        self.seen: list[tuple[str, str]] = []
        self.states: list[object] = []

    async def place(self, request: Request, ctx: PolicyContext) -> None:
        if request.id == "last":
            runtime = ctx._runtime
            for old in self.earlier:
                self.states.append(runtime._requests[old.id])
                self.seen.append((old.id, str(runtime.status(old.id))))
                try:
                    await ctx.dispatch(old, 1)
                except PlacementError as error:
                    self.seen.append((old.id, str(error)))
                try:
                    await ctx.offer(old, 1).__aenter__()
                except PlacementError as error:
                    self.seen.append((old.id, str(error)))
                try:
                    ctx.reject(old, reason="late")
                except PlacementError as error:
                    self.seen.append((old.id, str(error)))
        self.earlier.append(request)
        await ctx.dispatch(request, 0)


def test_a_finished_request_keeps_no_state_of_its_own_and_is_refused_as_before() -> None:
    policy = Revisiting()
    result = run_policy(policy, [req("a"), req("b", at_ms=1.0), req("last", at_ms=5000.0)])
    assert statuses(result) == {"a": "completed", "b": "completed", "last": "completed"}
    # both ended committed on engine 0: one shared stand-in state answers for both
    assert len(policy.states) == 2
    assert policy.states[0] is policy.states[1]
    for rid in ("a", "b"):
        on = f"request {rid!r} cannot be offered to engine 1: it is terminal on engine 0"
        assert [text for r, text in policy.seen if r == rid] == [
            "terminal",
            on,
            on,
            f"request {rid!r} cannot be rejected: it is terminal",
        ]


def test_a_finished_request_submitted_again_is_still_refused() -> None:
    topo = KeepingTopology()
    result = run_policy(RoundRobin(), [req("a")], topo=topo)
    assert statuses(result) == {"a": "completed"}
    runtime = PolicyRuntime(
        RoundRobin(), topo.engines, Journal(), BlockKeyer(), np.random.default_rng(0)
    )
    runtime.submit(req("a"))
    runtime.request_terminal(RequestTrace("a"))
    assert runtime.status("a") == "terminal"
    with pytest.raises(PlacementError, match="request 'a' was submitted twice"):
        runtime.submit(req("a"))
