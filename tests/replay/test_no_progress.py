"""Runs that cannot finish say so: no progress while requests are unsettled, loop failures,
and wakeups past the clock's range all end as a failed replay with its report."""

from __future__ import annotations

import asyncio
import gc

import pytest

import simclock
from engines import EngineConfig, FixedTiming
from loadgen import ArrivalRule, Request, Workload
from policies import InvalidWakeupError, PolicyContext, RequestStream, RoundRobin
from replay import Aggregated, ReplayFailedError, run
from replay._run import abandon_loop
from replay._watch import NO_PROGRESS_S, NO_PROGRESS_WAKEUPS, NoProgressError

TOPOLOGY = Aggregated(
    workers=1,
    engine=EngineConfig(num_blocks=64, block_size=64),
    timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
)


def _workload(count: int = 3) -> Workload:
    requests = tuple(
        Request(
            id=f"r{i}",
            input_length=64,
            output_length=2,
            block_size=64,
            hash_ids=[i],
            arrival=ArrivalRule(not_before_ms=10.0 * i),
        )
        for i in range(count)
    )
    return Workload(requests=requests, source="t", format="synthetic")


class HoldWhileTicking:
    """Holds every request for ever while a background task wakes every ``step_ns``."""

    name = "hold"

    def __init__(self, step_ns: int) -> None:
        self.step_ns = step_ns

    async def run(self, stream: RequestStream, ctx: PolicyContext) -> None:
        async def tick() -> None:
            while True:
                await ctx.sleep_ns(self.step_ns)

        ctx.spawn(tick(), name="tick")
        async for _ in stream:
            pass


def test_a_policy_holding_requests_while_a_periodic_task_runs_fails_after_the_budget() -> None:
    with pytest.raises(ReplayFailedError) as info:
        run(_workload(), topology=TOPOLOGY, policy=HoldWhileTicking(100_000_000))
    cause = info.value.__cause__
    assert isinstance(cause, NoProgressError)
    assert cause.unsettled == ("r0", "r1", "r2")
    assert str(info.value) == (
        "replay failed: NoProgressError: no progress for 3600 s of virtual time and 36,000 "
        "policy wakeups, the latest of policy:hold, with 3 request(s) unsettled: r0, r1, r2; "
        "other pending timers: none"
    )
    result = info.value.result
    assert result.summary.status_counts["unplaced"] == 3
    # The last request arrived at 20 ms; the budget ran from there.
    assert result.meta.virtual_duration_ms == pytest.approx(20 + NO_PROGRESS_S * 1000, abs=100)


def test_a_one_nanosecond_poller_fails_after_the_wakeup_budget() -> None:
    with pytest.raises(ReplayFailedError) as info:
        run(_workload(), topology=TOPOLOGY, policy=HoldWhileTicking(1))
    cause = info.value.__cause__
    assert isinstance(cause, NoProgressError)
    assert f"and {NO_PROGRESS_WAKEUPS:,} policy wakeups" in str(cause)


class HoldThenPlace:
    """Holds requests for a while (ticking every 10 ms), then places them all."""

    name = "hold_then_place"

    def __init__(self, hold_ms: float) -> None:
        self.hold_ms = hold_ms

    async def run(self, stream: RequestStream, ctx: PolicyContext) -> None:
        held: list[Request] = []

        async def tick() -> None:
            while True:
                await ctx.sleep_ms(10.0)

        ctx.spawn(tick(), name="tick")
        async for request in stream:
            held.append(request)
            if len(held) == 3:
                await ctx.sleep_ms(self.hold_ms)
                for one in held:
                    await ctx.dispatch(one, 0)


def test_holding_within_the_budget_is_not_a_failure() -> None:
    result = run(_workload(), topology=TOPOLOGY, policy=HoldThenPlace(hold_ms=60_000.0))
    assert result.summary.status_counts["completed"] == 3


class SpinAtOneInstant:
    """Places nothing and spins at one virtual instant: the loop's livelock check fires."""

    name = "spin"

    async def run(self, stream: RequestStream, ctx: PolicyContext) -> None:
        async for _ in stream:
            while True:
                await asyncio.sleep(0)


def test_a_livelock_of_the_loop_is_a_failed_replay_with_its_report(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(ReplayFailedError) as info:
        run(_workload(1), topology=TOPOLOGY, policy=SpinAtOneInstant())
    assert isinstance(info.value.__cause__, simclock.LivelockError)
    assert str(info.value).startswith("replay failed: LivelockError: ")
    assert info.value.result.summary.requests == 1
    gc.collect()  # no task is left pending to be reported when it is collected
    captured = capsys.readouterr()
    assert "Task was destroyed" not in captured.err + captured.out


class SleepPastTheClock:
    name = "far"

    async def run(self, stream: RequestStream, ctx: PolicyContext) -> None:
        async for _ in stream:
            await ctx.sleep_ms(1e300)


def test_a_wakeup_past_the_clock_range_names_the_policy() -> None:
    with pytest.raises(ReplayFailedError) as info:
        run(_workload(1), topology=TOPOLOGY, policy=SleepPastTheClock())
    cause = info.value.__cause__
    assert isinstance(cause, InvalidWakeupError)
    assert str(cause).startswith("policy 'far': wakeup at ")
    assert str(cause).endswith(
        " ns is past the virtual clock's range (9223372036854775807 ns, about 292 years)"
    )


def test_an_ordinary_run_is_unchanged_by_the_watch() -> None:
    result = run(_workload(), topology=TOPOLOGY, policy=RoundRobin())
    assert result.summary.status_counts["completed"] == 3


class SleepTenToTheNineteen:
    name = "p"

    async def run(self, stream: RequestStream, ctx: PolicyContext) -> None:
        async for _ in stream:
            await ctx.sleep_ns(10**19)


def test_the_documented_wakeup_message_is_exact() -> None:
    with pytest.raises(ReplayFailedError) as info:
        run(_workload(1), topology=TOPOLOGY, policy=SleepTenToTheNineteen())
    assert str(info.value.__cause__) == (
        "policy 'p': wakeup at 10000000000000000000 ns is past the virtual clock's range "
        "(9223372036854775807 ns, about 292 years)"
    )


def _abandon_many(count: int, budget: int) -> list[bool]:
    loop = simclock.VirtualEventLoop(livelock_budget=budget)

    async def never_runs() -> None:
        raise AssertionError("never runs")

    tasks = [loop.create_task(never_runs()) for _ in range(count)]
    abandon_loop(loop)
    loop.close()
    return [t.cancelled() or t.get_coro().cr_frame is None for t in tasks]  # type: ignore[union-attr]


def test_abandoning_more_tasks_than_the_livelock_budget_leaves_none_to_warn(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # 400 tasks to unwind against a budget of 50 events per instant: several rounds.
    assert _abandon_many(400, 50) == [True] * 400
    gc.collect()  # no "Task was destroyed", no "coroutine ... was never awaited"
    captured = capsys.readouterr()
    assert captured.err == captured.out == ""


class HoldWhilePolling:
    """Holds every request while a task polls with bare ``asyncio.sleep`` (not the context)."""

    name = "poll"

    def __init__(self, step_s: float) -> None:
        self.step_s = step_s

    async def run(self, stream: RequestStream, ctx: PolicyContext) -> None:
        async def poll() -> None:
            while True:
                await asyncio.sleep(self.step_s)

        ctx.spawn(poll(), name="poll")
        async for _ in stream:
            pass


@pytest.mark.parametrize(("step_s", "moves"), [(1e-9, True), (60.0, False)])
def test_a_poller_on_bare_asyncio_sleep_is_caught_by_the_clock_watch(
    step_s: float, moves: bool
) -> None:
    with pytest.raises(ReplayFailedError) as info:
        run(_workload(), topology=TOPOLOGY, policy=HoldWhilePolling(step_s))
    cause = info.value.__cause__
    assert isinstance(cause, NoProgressError)
    end_ms = info.value.result.meta.virtual_duration_ms
    if moves:
        # twice 200,000 moves of 1 ns: 0.4 ms in, only the first request was released
        assert cause.unsettled == ("r0",)
        assert "the clock still moving, with 1 request(s) unsettled: r0" in str(cause)
        assert end_ms == pytest.approx(0.4, abs=0.01)
    else:
        # checked every two hours of virtual time; the last release was at 20 ms
        assert cause.unsettled == ("r0", "r1", "r2")
        assert "the clock still moving, with 3 request(s) unsettled: r0, r1, r2" in str(cause)
        assert end_ms == pytest.approx(2 * NO_PROGRESS_S * 1000, abs=60_000)
