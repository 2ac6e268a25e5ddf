"""The virtual clock's basic contract: time jumps, ordering, deadlock, instant end."""

from __future__ import annotations

import asyncio

import pytest

import simclock


def test_an_hour_of_sleep_reaches_exactly_3600_seconds() -> None:
    async def main() -> int:
        await asyncio.sleep(3600)
        return simclock.now_ns()

    assert simclock.run(main()) == 3600 * 1_000_000_000


def test_time_is_a_float_view_of_integer_nanoseconds() -> None:
    async def main() -> tuple[float, int]:
        await simclock.sleep_ns(1_500, waiter="t")
        loop = asyncio.get_running_loop()
        return loop.time(), simclock.now_ns()

    assert simclock.run(main(), start_ns=1_000) == (2.5e-06, 2_500)


def test_equal_time_timers_fire_in_scheduling_order() -> None:
    fired: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for name in "dcba":
            loop.call_later(0.5, fired.append, name)
        await asyncio.sleep(1)

    simclock.run(main())
    assert fired == ["d", "c", "b", "a"]


def test_deadlock_names_every_blocked_task() -> None:
    async def main() -> None:
        queue: asyncio.Queue[int] = asyncio.Queue()

        async def consume() -> None:
            await queue.get()

        await asyncio.create_task(consume(), name="consumer")

    with pytest.raises(simclock.DeadlockError) as caught:
        simclock.run(main())
    lines = str(caught.value).splitlines()
    assert lines[0] == (
        "deadlock at 0 ns: nothing is ready and no timer is pending, but 2 tasks are blocked:"
    )
    assert lines[2] == (
        "  'consumer' waits in test_deadlock_names_every_blocked_task.<locals>.main.<locals>"
        ".consume -> Queue.get"
    )
    assert lines[1].endswith(
        "waits in test_deadlock_names_every_blocked_task.<locals>.main on task 'consumer'"
    )


def test_instant_end_releases_after_same_instant_work_lowest_priority_first() -> None:
    order: list[tuple[int, str]] = []

    async def engine(index: int) -> None:
        for _ in range(2):
            await simclock.instant_end(priority=index, waiter=f"engine-{index}")
            order.append((simclock.now_ns(), f"engine-{index}"))
            await simclock.sleep_ns(10, waiter=f"engine-{index}")

    async def arrivals() -> None:
        for _ in range(2):
            order.append((simclock.now_ns(), "arrival"))
            await simclock.sleep_ns(10, waiter="arrivals")

    async def main() -> None:
        await asyncio.gather(engine(1), engine(0), arrivals())

    simclock.run(main())
    assert order == [
        (0, "arrival"),
        (0, "engine-0"),
        (0, "engine-1"),
        (10, "arrival"),
        (10, "engine-0"),
        (10, "engine-1"),
    ]
