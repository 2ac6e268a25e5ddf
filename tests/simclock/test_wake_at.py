"""VirtualEventLoop.wake_at_ns: a future completed at an instant, unless something completes it
first; ordered and validated as simclock.sleep_until_ns."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import simclock
from simclock import WakeupKind


def _loop() -> simclock.VirtualEventLoop:
    loop = asyncio.get_running_loop()
    assert isinstance(loop, simclock.VirtualEventLoop)
    return loop


def test_the_future_completes_at_the_instant() -> None:
    async def main() -> tuple[int, object]:
        loop = _loop()
        future: asyncio.Future[None] = loop.create_future()
        loop.wake_at_ns(future, 250, waiter="w")
        result = await future
        return simclock.now_ns(), result

    assert simclock.run(main()) == (250, None)


def test_a_future_completed_earlier_resumes_early_and_the_cancelled_timer_is_gone() -> None:
    async def main() -> tuple[int, Any, int]:
        loop = _loop()
        future: asyncio.Future[None] = loop.create_future()
        timer = loop.wake_at_ns(future, 1_000, waiter="driver")
        loop.call_later(1e-7, future.set_result, None)  # 100 ns
        await future
        woken = simclock.now_ns()
        pending = loop.snapshot().pending_timers
        timer.cancel()
        after = loop.snapshot().pending_timers
        await simclock.sleep_ns(5_000, waiter="later")
        return woken, (pending, after), simclock.now_ns()

    woken, (pending, after), end = simclock.run(main())
    assert woken == 100
    assert pending == (
        simclock.PendingTimer(
            when_ns=1_000,
            sequence=0,
            waiter="driver",
            kind=WakeupKind.OTHER,
            callback="wakeup",  # main is running, not waiting on it
        ),
    )
    assert after == ()
    assert end == 5_100


def test_a_timer_left_pending_finds_its_future_done() -> None:
    async def main() -> int:
        loop = _loop()
        future: asyncio.Future[None] = loop.create_future()
        loop.wake_at_ns(future, 1_000, waiter="w")
        future.set_result(None)
        await future
        await simclock.sleep_ns(2_000, waiter="w")
        return simclock.now_ns()

    assert simclock.run(main()) == 2_000


def test_wakeups_at_one_instant_resume_in_request_order_with_sleepers() -> None:
    order: list[str] = []

    async def sleeper(name: str) -> None:
        await simclock.sleep_until_ns(10, waiter=name)
        order.append(name)

    async def woken(name: str) -> None:
        loop = _loop()
        future: asyncio.Future[None] = loop.create_future()
        loop.wake_at_ns(future, 10, waiter=name, kind=WakeupKind.POLICY_WAKEUP)
        await future
        order.append(name)

    async def main() -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(sleeper("a"))
            group.create_task(woken("b"))
            group.create_task(sleeper("c"))
            group.create_task(woken("d"))

    simclock.run(main())
    assert order == ["a", "b", "c", "d"]


@pytest.mark.parametrize(
    ("when", "error", "message"),
    [
        (
            5,
            simclock.StaleWakeupError,
            "stale wakeup for waiter 'w': requested 5 ns, which is before now (7 ns)",
        ),
        (
            float("nan"),
            simclock.NonFiniteWakeupError,
            "non-finite wakeup for waiter 'w': requested when_ns=nan, now is 7 ns",
        ),
        (1.5, TypeError, "when_ns must be an int of nanoseconds, got float"),
        (
            2**63,
            simclock.ClockRangeError,
            "wakeup out of range for waiter 'w': requested 9223372036854775808 ns, past the end "
            "of the clock's range (2**63 - 1 ns, about 292 years); now is 7 ns",
        ),
    ],
)
def test_bad_instants_raise_as_sleep_until_ns_does(
    when: object, error: type[Exception], message: str
) -> None:
    async def main() -> None:
        loop = _loop()
        loop.wake_at_ns(loop.create_future(), when, waiter="w")  # type: ignore[arg-type]

    with pytest.raises(error) as caught:
        simclock.run(main(), start_ns=7)
    assert str(caught.value) == message


def test_asking_for_the_current_instant_counts_against_the_stall_budget() -> None:
    calls = 0

    async def main() -> None:
        nonlocal calls
        loop = _loop()
        while True:
            future: asyncio.Future[None] = loop.create_future()
            loop.wake_at_ns(future, simclock.now_ns(), waiter="spinner")
            await future
            calls += 1

    with pytest.raises(simclock.StalledWaiterError) as caught:
        simclock.run(main(), start_ns=7, stall_budget=3)
    assert calls == 3
    assert str(caught.value) == (
        "stalled waiter 'spinner': requested 7 ns, the current instant, 4 times while the "
        "clock stayed at 7 ns (stall budget 3)"
    )
