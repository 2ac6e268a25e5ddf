"""Stepping from outside a running coroutine: step, run until, inspect, resume."""

from __future__ import annotations

import asyncio

import attrs
import pytest

import simclock
import simclock.testing
from simclock import WakeupKind

MS = 1_000_000


async def engine(log: list[tuple[int, str]]) -> None:
    for _ in range(3):
        await simclock.sleep_ns(10 * MS, waiter="engine-0", kind=WakeupKind.ENGINE_DEADLINE)
        log.append((simclock.now_ns(), "pass"))


async def policy(log: list[tuple[int, str]]) -> None:
    await simclock.sleep_until_ns(15 * MS, waiter="policy", kind=WakeupKind.POLICY_WAKEUP)
    log.append((simclock.now_ns(), "rebalance"))


def test_step_runs_one_callback_and_leaves_no_running_loop() -> None:
    log: list[tuple[int, str]] = []
    with simclock.testing.virtual_loop() as loop:
        loop.create_task(engine(log), name="engine")
        event = loop.step()
        assert event == simclock.StepEvent(time_ns=0, label="task 'engine'")
        assert asyncio._get_running_loop() is None
        assert not loop.is_running()
        event = loop.step()
        assert event == simclock.StepEvent(time_ns=10 * MS, label="task 'engine'")
        assert log == [(10 * MS, "pass")]


def test_step_returns_none_when_everything_finished() -> None:
    with simclock.testing.virtual_loop() as loop:
        task = loop.create_task(asyncio.sleep(1))
        events = []
        while (event := loop.step()) is not None:
            events.append(event)
        assert task.done()
        assert [e.time_ns for e in events] == [0, 1_000_000_000]


def test_run_until_ns_runs_everything_before_the_instant_and_stops_there() -> None:
    log: list[tuple[int, str]] = []
    with simclock.testing.virtual_loop() as loop:
        loop.create_task(engine(log), name="engine")
        loop.create_task(policy(log), name="policy")
        loop.run_until_ns(20 * MS)
        assert loop.time_ns() == 20 * MS
        assert log == [(10 * MS, "pass"), (15 * MS, "rebalance")]
        assert loop.step() == simclock.StepEvent(time_ns=20 * MS, label="task 'engine'")
        assert log[-1] == (20 * MS, "pass")


def test_run_until_ns_moves_an_idle_clock() -> None:
    with simclock.testing.virtual_loop(start_ns=5) as loop:
        loop.run_until_ns(1_000)
        assert loop.time_ns() == 1_000


def test_run_until_ns_refuses_to_go_back() -> None:
    with (
        simclock.testing.virtual_loop(start_ns=5_000) as loop,
        pytest.raises(simclock.StaleWakeupError) as caught,
    ):
        loop.run_until_ns(10)
    assert str(caught.value) == (
        "stale wakeup for waiter 'run_until_ns': requested 10 ns, which is before now (5000 ns)"
    )


def test_run_until_predicate_stops_as_soon_as_it_holds() -> None:
    log: list[tuple[int, str]] = []
    with simclock.testing.virtual_loop() as loop:
        loop.create_task(engine(log), name="engine")
        loop.create_task(policy(log), name="policy")
        assert loop.run_until(lambda: len(log) == 2)
        assert log == [(10 * MS, "pass"), (15 * MS, "rebalance")]
        assert loop.time_ns() == 15 * MS
        assert loop.run_until(lambda: simclock.now_ns() >= 30 * MS)
        assert loop.run_until(lambda: False) is False
        assert log[-1] == (30 * MS, "pass")


def test_run_until_gives_up_after_max_events() -> None:
    with simclock.testing.virtual_loop() as loop:
        loop.create_task(asyncio.sleep(5))
        assert loop.run_until(lambda: False, max_events=1) is False
        assert loop.stats().events == 1


def test_snapshot_shows_now_timers_with_waiters_ready_and_tasks() -> None:
    log: list[tuple[int, str]] = []
    with simclock.testing.virtual_loop() as loop:
        loop.create_task(engine(log), name="engine")
        loop.create_task(policy(log), name="policy")
        before = loop.snapshot()
        assert before.ready == 2
        assert [t.name for t in before.tasks] == ["engine", "policy"]
        assert {t.waits_on for t in before.tasks} == {"ready"}
        loop.step()
        loop.step()
        snapshot = loop.snapshot()
    assert snapshot.now_ns == 0
    assert snapshot.ready == 0
    assert snapshot.pending_timers == (
        simclock.PendingTimer(
            when_ns=10 * MS,
            sequence=0,
            waiter="engine-0",
            kind=WakeupKind.ENGINE_DEADLINE,
            callback="wakeup of task 'engine'",
        ),
        simclock.PendingTimer(
            when_ns=15 * MS,
            sequence=1,
            waiter="policy",
            kind=WakeupKind.POLICY_WAKEUP,
            callback="wakeup of task 'policy'",
        ),
    )
    assert snapshot.tasks == (
        simclock.TaskInfo(name="engine", waits_on="engine -> sleep_ns"),
        simclock.TaskInfo(name="policy", waits_on="policy -> sleep_until_ns"),
    )


def test_snapshot_lists_plain_asyncio_timers_and_instant_end_waiters() -> None:
    async def at_end() -> None:
        await simclock.instant_end(priority=3, waiter="engine-3")

    with simclock.testing.virtual_loop() as loop:
        loop.create_task(asyncio.sleep(2), name="sleeper")
        loop.create_task(at_end(), name="ender")
        loop.step()
        loop.step()
        snapshot = loop.snapshot()
    assert snapshot.instant_end_waiters == (
        simclock.InstantEndWaiter(priority=3, sequence=1, waiter="engine-3"),
    )
    (timer,) = snapshot.pending_timers
    assert (timer.when_ns, timer.waiter, timer.kind) == (2_000_000_000, None, None)
    assert timer.callback == "_set_result_unless_cancelled of task 'sleeper'"


def test_stats_are_a_frozen_snapshot_that_counts_events_timers_and_advances() -> None:
    log: list[tuple[int, str]] = []
    with simclock.testing.virtual_loop() as loop:
        task = loop.create_task(engine(log), name="engine")
        first = loop.stats()
        loop.run_until_complete(task)
        last = loop.stats()
    assert first == simclock.LoopStats(
        now_ns=0, events=0, timers_fired=0, clock_advances=0, instant_end_wakeups=0
    )
    # Events: the task's first step, three timer callbacks, three task wakeups, and
    # run_until_complete's done callback.
    assert last == simclock.LoopStats(
        now_ns=30 * MS, events=8, timers_fired=3, clock_advances=3, instant_end_wakeups=0
    )
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        last.events = 0  # type: ignore[misc]


def test_resume_after_stepping_with_run_until_complete() -> None:
    log: list[tuple[int, str]] = []
    with simclock.testing.virtual_loop() as loop:
        task = loop.create_task(engine(log), name="engine")
        loop.run_until_ns(15 * MS)
        loop.run_until_complete(task)
        assert loop.time_ns() == 30 * MS
    assert log == [(10 * MS, "pass"), (20 * MS, "pass"), (30 * MS, "pass")]


def test_stepping_is_refused_while_the_loop_runs() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, simclock.VirtualEventLoop)
        with pytest.raises(RuntimeError, match="already running"):
            loop.step()

    simclock.run(main())


def test_snapshot_orders_tasks_by_name_with_numbers_as_numbers_and_inf_timers_last() -> None:
    with simclock.testing.virtual_loop() as loop:
        for name in ("worker-10", "worker-9", "alpha"):
            loop.create_task(asyncio.sleep(1), name=name)
        loop.call_later(float("inf"), print)
        loop.call_later(5, print)
        snapshot = loop.snapshot()
    assert [t.name for t in snapshot.tasks] == ["alpha", "worker-9", "worker-10"]
    assert [t.when_ns for t in snapshot.pending_timers] == [5_000_000_000, None]


def test_next_event_ns_names_the_next_instant_without_running_it() -> None:
    loop = simclock.new_event_loop()
    try:
        assert loop.next_event_ns() is None

        async def sleeper() -> None:
            await simclock.sleep_until_ns(5_000, waiter="sleeper")

        task = loop.create_task(sleeper())
        assert loop.next_event_ns() == 0  # the task's first step is ready now
        loop.step()
        assert loop.next_event_ns() == 5_000
        assert loop.time_ns() == 0
        loop.run_until_ns(5_000)
        assert loop.next_event_ns() == 5_000
        assert loop.run_until(task.done)
        assert loop.next_event_ns() is None
    finally:
        loop.close()
