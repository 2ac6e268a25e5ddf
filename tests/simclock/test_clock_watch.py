"""``VirtualEventLoop.watch_clock``: a callback just before the clock moves, every so much
virtual time or so many moves, that changes nothing in the run's order."""

from __future__ import annotations

import asyncio

import pytest

import simclock


async def _sleepers(log: list[tuple[str, int]]) -> None:
    async def sleeper(name: str, step_s: float, count: int) -> None:
        for _ in range(count):
            await asyncio.sleep(step_s)
            log.append((name, simclock.now_ns()))

    await asyncio.gather(sleeper("a", 0.3, 20), sleeper("b", 0.7, 10), sleeper("c", 1.1, 5))


def test_the_watch_runs_before_the_clock_moves_and_changes_no_order() -> None:
    plain: list[tuple[str, int]] = []
    simclock.run(_sleepers(plain))

    watched: list[tuple[str, int]] = []
    calls: list[tuple[int, int]] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, simclock.VirtualEventLoop)
        loop.watch_clock(lambda when: calls.append((loop.time_ns(), when)), every_ns=2 * 10**9)
        await _sleepers(watched)

    simclock.run(main())
    assert watched == plain
    # called just before the first move to an instant at least 2 s after the instant of the
    # previous call (or of the watch's start), with the instant the clock moves to
    expected: list[tuple[int, int]] = []
    before, due = 0, 2 * 10**9
    for instant in sorted({t for _, t in plain}):
        if instant >= due:
            expected.append((before, instant))
            due = before + 2 * 10**9
        before = instant
    assert calls == expected
    assert len(calls) >= 2


def test_the_watch_runs_every_so_many_moves_and_can_end_the_run() -> None:
    class Stop(Exception):
        pass

    seen: list[int] = []

    def watch(when: int) -> None:
        seen.append(when)
        if len(seen) == 3:
            raise Stop(f"stopped before {when} ns")

    async def poller() -> None:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, simclock.VirtualEventLoop)
        loop.watch_clock(watch, every_moves=10)
        while True:
            await asyncio.sleep(1e-9)

    with pytest.raises(Stop, match="stopped before 31 ns"):
        simclock.run(poller())
    # after every 10 moves: before the 11th, 21st and 31st
    assert seen == [11, 21, 31]


def test_bad_periods_are_refused_and_none_removes_the_watch() -> None:
    loop = simclock.new_event_loop()
    try:
        with pytest.raises(simclock.ClockConfigError, match="every_ns must be an int >= 1, got 0"):
            loop.watch_clock(print, every_ns=0)
        with pytest.raises(simclock.ClockConfigError, match="every_moves must be an int >= 1"):
            loop.watch_clock(print, every_moves=1.5)  # type: ignore[arg-type]
        calls: list[int] = []
        loop.watch_clock(calls.append, every_moves=1)
        loop.watch_clock(None)

        async def two_steps() -> None:
            await asyncio.sleep(1)
            await asyncio.sleep(1)

        loop.run_until_complete(two_steps())
        assert calls == []
    finally:
        loop.close()
