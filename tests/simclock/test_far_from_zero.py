"""The clock stays exact far from zero: a run at 10^9 s behaves like one at 0."""

from __future__ import annotations

import asyncio

import anyio
import pytest

import simclock

FAR = [0, 10**18, 10**18 + 123, 123_456_789_123_456_789]


async def timeline() -> list[int]:
    """Sleeps, timeouts and deadlines; returns the instants seen, relative to the start."""
    loop = asyncio.get_running_loop()
    start = simclock.now_ns()
    seen: list[int] = []

    def mark() -> None:
        seen.append(simclock.now_ns() - start)

    await asyncio.sleep(0.004)
    mark()
    await asyncio.sleep(1e-9)
    mark()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.25):
            await asyncio.sleep(10)
    mark()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(asyncio.sleep(10), 0.125)
    mark()
    with anyio.move_on_after(0.5):
        await anyio.sleep(10)
    mark()
    await simclock.sleep_until(loop.time() + 0.003, waiter="t")
    mark()
    await simclock.sleep(0.000_001, waiter="t")
    mark()
    await simclock.sleep_ns(1, waiter="t")
    mark()
    fired: list[int] = []
    loop.call_at(loop.time() + 0.01, lambda: fired.append(simclock.now_ns() - start))
    loop.call_later(0.01, lambda: fired.append(simclock.now_ns() - start))
    await asyncio.sleep(0.02)
    return seen + fired


@pytest.mark.parametrize("start_ns", FAR)
def test_far_from_zero_a_run_sees_the_same_relative_instants_as_at_zero(start_ns: int) -> None:
    assert simclock.run(timeline(), start_ns=start_ns) == [
        4_000_000,
        4_000_001,
        254_000_001,
        379_000_001,
        879_000_001,
        882_000_001,
        882_001_001,
        882_001_002,
        892_001_002,
        892_001_002,
    ]


@pytest.mark.parametrize("start_ns", FAR)
def test_rescheduling_until_a_float_deadline_passes_never_stalls(start_ns: int) -> None:
    async def main() -> int:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 1e-7
        rounds = 0
        while loop.time() < deadline:
            rounds += 1
            await asyncio.sleep(deadline - loop.time())
        assert loop.time() >= deadline
        return rounds

    assert simclock.run(main(), start_ns=start_ns) <= 2


@pytest.mark.parametrize("start_ns", FAR)
def test_a_callback_at_a_float_instant_sees_time_at_or_after_it(start_ns: int) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        seen: list[tuple[float, float]] = []
        for k in range(1, 200):
            when = loop.time() + k * 1.7e-8
            loop.call_at(when, lambda when=when: seen.append((loop.time(), when)))
        await asyncio.sleep(1)
        assert len(seen) == 199
        assert all(now >= when for now, when in seen)

    simclock.run(main(), start_ns=start_ns)


def test_time_is_the_correctly_rounded_float_of_the_integer_clock() -> None:
    async def main() -> tuple[float, int]:
        await asyncio.sleep(0)
        return asyncio.get_running_loop().time(), simclock.now_ns()

    now_s, now_ns = simclock.run(main(), start_ns=10**18 + 123)
    assert now_ns == 10**18 + 123
    assert now_s == (10**18 + 123) / 10**9


def test_asyncio_timers_past_the_clock_range_never_fire_like_inf() -> None:
    async def main() -> list[int | None]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, simclock.VirtualEventLoop)
        at = loop.call_at(1e300, print)
        later = loop.call_later(1e300, print)
        at_edge = loop.call_at((simclock.MAX_TIME_NS + 10**9) / 10**9, print)
        await asyncio.sleep(0)
        timers = loop.snapshot().pending_timers
        for timer in (at, later, at_edge):
            timer.cancel()
        return [t.when_ns for t in timers]

    assert simclock.run(main(), start_ns=10**18 + 5) == [None, None, None]


def test_simclock_wakeups_past_the_clock_range_raise_naming_the_waiter() -> None:
    async def main() -> None:
        await simclock.sleep(1e300, waiter="sleeper")

    with pytest.raises(simclock.ClockRangeError) as caught:
        simclock.run(main(), start_ns=10**18 + 5)
    assert str(caught.value) == (
        "wakeup out of range for waiter 'sleeper': requested a delay of 1e+300 s, past the end "
        "of the clock's range (2**63 - 1 ns, about 292 years); now is 1000000000000000005 ns"
    )
    assert caught.value.waiter == "sleeper"


def test_an_engine_deadline_past_the_clock_range_raises_naming_the_engine() -> None:
    async def main() -> None:
        deadline = simclock.Deadline(waiter="engine-3", rank=3)
        await deadline.wait_until(simclock.MAX_TIME_NS + 1)

    with pytest.raises(simclock.ClockRangeError) as caught:
        simclock.run(main())
    assert str(caught.value) == (
        "wakeup out of range for waiter 'engine-3': requested 9223372036854775808 ns, past the "
        "end of the clock's range (2**63 - 1 ns, about 292 years); now is 0 ns"
    )


@pytest.mark.parametrize(
    ("call", "requested"),
    [
        ("sleep_until_ns", "requested 9223372036854775808 ns"),
        ("sleep_ns", "requested 9223372036854775808 ns (a delay of 9223372036854775808 ns)"),
        ("sleep_until", "requested 1e+300 s"),
    ],
)
def test_every_wakeup_function_refuses_instants_past_the_range(call: str, requested: str) -> None:
    async def main() -> None:
        if call == "sleep_until_ns":
            await simclock.sleep_until_ns(2**63, waiter="w")
        elif call == "sleep_ns":
            await simclock.sleep_ns(2**63, waiter="w")
        else:
            await simclock.sleep_until(1e300, waiter="w")

    with pytest.raises(simclock.ClockRangeError) as caught:
        simclock.run(main())
    assert str(caught.value) == (
        f"wakeup out of range for waiter 'w': {requested}, past the end of the clock's range "
        "(2**63 - 1 ns, about 292 years); now is 0 ns"
    )
    assert isinstance(caught.value, simclock.SimulationError)
    assert not isinstance(caught.value, OverflowError)


def test_the_last_instant_of_the_range_is_reachable() -> None:
    async def main() -> int:
        await simclock.sleep_until_ns(simclock.MAX_TIME_NS, waiter="w")
        return simclock.now_ns()

    assert simclock.run(main(), start_ns=simclock.MAX_TIME_NS - 10) == simclock.MAX_TIME_NS
