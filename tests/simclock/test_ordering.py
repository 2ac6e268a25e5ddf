"""The documented scheduling order: timers by (when, sequence), ready FIFO, instant end last."""

from __future__ import annotations

import asyncio

import simclock
import simclock.testing


def test_ready_callbacks_run_first_in_first_out() -> None:
    order: list[int] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for i in range(10):
            loop.call_soon(order.append, i)
        await asyncio.sleep(0)

    simclock.run(main())
    assert order == list(range(10))


def test_equal_time_timers_fire_in_scheduling_order_across_apis() -> None:
    order: list[str] = []

    async def waiter(name: str) -> None:
        await simclock.sleep_until_ns(1_000_000, waiter=name)
        order.append(name)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        first = asyncio.create_task(waiter("first"))
        await asyncio.sleep(0)  # let "first" schedule its wakeup
        loop.call_later(0.001, order.append, "call_later")
        loop.call_at(0.001, order.append, "call_at")
        last = asyncio.create_task(waiter("last"))
        await asyncio.gather(first, last)

    simclock.run(main())
    assert order == ["first", "call_later", "call_at", "last"]


def test_the_clock_waits_for_a_long_chain_of_ready_work() -> None:
    seen: list[int] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.call_later(1e-9, lambda: seen.append(-simclock.now_ns()))

        def chain(n: int) -> None:
            seen.append(simclock.now_ns())
            if n:
                loop.call_soon(chain, n - 1)

        chain(1000)
        await asyncio.sleep(1)

    simclock.run(main())
    assert seen == [0] * 1001 + [-1]


def test_timers_due_now_run_before_instant_end_waiters() -> None:
    order: list[str] = []

    async def ender() -> None:
        await simclock.instant_end(waiter="engine")
        order.append("instant end")

    async def late_arrival() -> None:
        await simclock.sleep_ns(0, waiter="arrival")
        await simclock.sleep_ns(0, waiter="arrival")
        order.append("arrival")

    async def main() -> None:
        await asyncio.gather(ender(), late_arrival())

    simclock.run(main())
    assert order == ["arrival", "instant end"]


def test_instant_end_waiters_resume_one_at_a_time_with_their_work_in_between() -> None:
    order: list[str] = []

    async def engine(index: int) -> None:
        await simclock.instant_end(priority=index, waiter=f"engine-{index}")
        order.append(f"engine-{index} starts")
        await asyncio.sleep(0)
        order.append(f"engine-{index} follow-up")

    async def main() -> None:
        await asyncio.gather(engine(2), engine(0), engine(1))

    simclock.run(main())
    assert order == [
        "engine-0 starts",
        "engine-0 follow-up",
        "engine-1 starts",
        "engine-1 follow-up",
        "engine-2 starts",
        "engine-2 follow-up",
    ]


def test_instant_end_ties_on_priority_resume_in_arrival_order() -> None:
    order: list[str] = []

    async def waiter(name: str) -> None:
        await simclock.instant_end(priority=0, waiter=name)
        order.append(name)

    async def main() -> None:
        await asyncio.gather(*(waiter(n) for n in "zyx"))

    simclock.run(main())
    assert order == ["z", "y", "x"]


def test_cancelled_instant_end_waiter_is_skipped() -> None:
    order: list[str] = []

    async def waiter(name: str) -> None:
        await simclock.instant_end(waiter=name)
        order.append(name)

    async def main() -> None:
        doomed = asyncio.create_task(waiter("doomed"))
        kept = asyncio.create_task(waiter("kept"))
        await asyncio.sleep(0)
        doomed.cancel()
        await asyncio.gather(kept, doomed, return_exceptions=True)

    simclock.run(main())
    assert order == ["kept"]


def test_instant_end_comes_before_the_clock_advances() -> None:
    order: list[tuple[int, str]] = []

    async def later() -> None:
        await simclock.sleep_ns(1, waiter="later")
        order.append((simclock.now_ns(), "later"))

    async def ender() -> None:
        await simclock.instant_end(waiter="ender")
        order.append((simclock.now_ns(), "ender"))

    async def main() -> None:
        await asyncio.gather(later(), ender())

    simclock.run(main())
    assert order == [(0, "ender"), (1, "later")]


def test_an_hour_of_virtual_time_is_a_few_thousand_events() -> None:
    async def ticker() -> int:
        ticks = 0
        while simclock.now_ns() < 3600 * 1_000_000_000:
            await asyncio.sleep(1)
            ticks += 1
        return ticks

    with simclock.testing.virtual_loop() as loop:
        assert loop.run_until_complete(ticker()) == 3600
        stats = loop.stats()
    assert stats.now_ns == 3600 * 1_000_000_000
    assert stats.clock_advances == 3600
    assert stats.events < 4 * 3600


def test_testing_module_all_lists_what_it_defines() -> None:
    exported = simclock.testing.__all__
    assert isinstance(exported, tuple)
    assert all(hasattr(simclock.testing, name) for name in exported)
    assert all((getattr(simclock.testing, name).__doc__ or "").strip() for name in exported)
