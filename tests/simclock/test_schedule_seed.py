"""Seeded schedule exploration: same-instant ready callbacks permuted by a seed."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import simclock

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


async def _same_instant_order(workers: int = 6) -> list[str]:
    order: list[str] = []

    async def worker(name: str) -> None:
        await asyncio.sleep(1)
        order.append(name)
        await asyncio.sleep(0)
        order.append(name + "'")

    async with asyncio.TaskGroup() as group:
        for i in range(workers):
            group.create_task(worker(f"w{i}"))
    return order


FIFO = [f"w{i}" for i in range(6)] + [f"w{i}'" for i in range(6)]


def test_without_a_seed_the_order_is_first_in_first_out() -> None:
    assert simclock.run(_same_instant_order()) == FIFO


def test_a_seed_permutes_each_batch_and_loses_nothing() -> None:
    orders = [simclock.run(_same_instant_order(), seed=seed) for seed in range(10)]
    for order in orders:
        assert sorted(order[:6]) == FIFO[:6]  # the first batch is a permutation of itself
        assert sorted(order[6:]) == sorted(FIFO[6:])
    assert len({tuple(order) for order in orders}) > 5
    assert any(order != FIFO for order in orders)


def test_the_same_seed_gives_the_same_order_in_every_run() -> None:
    first = simclock.run(_same_instant_order(), seed=7)
    assert [simclock.run(_same_instant_order(), seed=7) for _ in range(3)] == [first] * 3


def test_the_same_seed_gives_the_same_order_in_processes_with_other_hash_seeds() -> None:
    script = textwrap.dedent(
        """
        import asyncio, simclock

        async def main():
            order = []
            async def worker(name):
                await asyncio.sleep(1)
                order.append(name)
            async with asyncio.TaskGroup() as group:
                for name in ["a", "b", "c", "d", "e", "f", "g"]:
                    group.create_task(worker(name))
            return order

        print(simclock.run(main(), seed=11))
        """
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
        ).stdout
        for hash_seed in ("0", "1", "12345")
    }
    assert len(outputs) == 1


def test_stepping_a_seeded_loop_follows_the_same_order_as_running_it() -> None:
    ran = simclock.run(_same_instant_order(), seed=3)
    loop = simclock.VirtualEventLoop(seed=3)
    try:
        task = loop.create_task(_same_instant_order())
        while not task.done():
            loop.step()
        assert task.result() == ran
    finally:
        loop.close()


def test_engine_deadline_wakeups_keep_their_place_at_the_head_of_the_instant() -> None:
    async def main() -> list[str]:
        order: list[str] = []

        # Engines schedule their deadlines one after another (0, 0.1, 0.2 s), the others
        # only at 0.5 s: the timer order at 1 s is the engines in index order, then the rest.
        async def engine(index: int) -> None:
            await asyncio.sleep(index / 10)
            await simclock.sleep_until_ns(
                10**9, waiter=f"engine-{index}", kind=simclock.WakeupKind.ENGINE_DEADLINE
            )
            order.append(f"engine-{index}")

        async def other(index: int) -> None:
            await asyncio.sleep(0.5)
            await asyncio.sleep(0.5)
            order.append(f"other-{index}")

        async with asyncio.TaskGroup() as group:
            for index in range(3):
                group.create_task(engine(index))
            for index in range(4):
                group.create_task(other(index))
        return order

    orders = [simclock.run(main(), seed=seed) for seed in range(12)]
    for order in orders:
        assert order[:3] == ["engine-0", "engine-1", "engine-2"]
        assert sorted(order[3:]) == ["other-0", "other-1", "other-2", "other-3"]
    assert len({tuple(order[3:]) for order in orders}) > 1  # the others were permuted


def test_a_bad_seed_is_a_clock_config_error() -> None:
    with pytest.raises(simclock.ClockConfigError) as caught:
        simclock.VirtualEventLoop(seed=-1)
    assert str(caught.value) == "seed must be an int >= 0 or None, got -1"


def test_the_documented_race_hides_under_fifo_and_a_seed_replays_it() -> None:
    namespace: dict[str, object] = {}
    exec(compile((EXAMPLES / "clock_schedule_race.py").read_text(), "race", "exec"), namespace)
    sessions_created = namespace["sessions_created"]
    assert sessions_created(None) == ["worker-a"]  # type: ignore[operator]
    failing = [s for s in range(20) if len(sessions_created(s)) > 1]  # type: ignore[operator]
    assert failing, "no seed exposed the race"
    assert sessions_created(failing[0]) == sessions_created(failing[0])  # type: ignore[operator]


def test_explore_reports_the_failing_seed_and_the_replay_fails_identically(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini(
        "[pytest]\nasyncio_mode = strict\nasyncio_default_fixture_loop_scope = function\n"
        "filterwarnings = error\n"
    )
    pytester.makepyfile(test_sessions=(EXAMPLES / "clock_explore_tests.py").read_text())
    explored = pytester.runpytest("-p", "no:cacheprovider")
    explored.assert_outcomes(passed=2, failed=3)
    explored.stdout.fnmatch_lines(
        [
            "failed under schedule seed 1; replay this exact run with:",
            "  pytest 'test_sessions.py::test_one_session_per_user' --simclock-seed 1",
            "or with the marker option @pytest.mark.simclock(seed=1)",
            "*simclock: failing schedule seeds*",
            "pytest 'test_sessions.py::test_one_session_per_user' --simclock-seed 1",
            "pytest 'test_sessions.py::test_one_session_per_user' --simclock-seed 3",
            "pytest 'test_sessions.py::test_one_session_per_user' --simclock-seed 4",
        ]
    )
    failure = "E       AssertionError: assert ['worker-a', 'worker-b'] == ['worker-a']"
    explored.stdout.fnmatch_lines([failure])
    for _ in range(2):
        replayed = pytester.runpytest(
            "-p",
            "no:cacheprovider",
            "test_sessions.py::test_one_session_per_user",
            "--simclock-seed",
            "1",
        )
        replayed.assert_outcomes(failed=1)
        replayed.stdout.fnmatch_lines([failure])
    passing = pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "test_sessions.py::test_one_session_per_user",
        "--simclock-seed",
        "0",
    )
    passing.assert_outcomes(passed=1)


pytest_plugins = ("pytester",)


def test_engine_deadlines_fire_first_in_rank_order_under_every_seed() -> None:
    async def main() -> list[str]:
        order: list[str] = []

        async def engine(rank: int) -> None:
            deadline = simclock.Deadline(waiter=f"engine-{rank}", rank=rank)
            await deadline.wait_until(10**9)
            order.append(f"engine-{rank}")

        async def other(index: int) -> None:
            await asyncio.sleep(1)
            order.append(f"other-{index}")

        async with asyncio.TaskGroup() as group:
            for index in range(3):
                group.create_task(other(index))
            for rank in (2, 0, 1):
                group.create_task(engine(rank))
        return order

    orders = [simclock.run(main(), seed=seed) for seed in range(12)]
    for order in orders:
        assert order[:3] == ["engine-0", "engine-1", "engine-2"]
        assert sorted(order[3:]) == ["other-0", "other-1", "other-2"]
    assert len({tuple(order[3:]) for order in orders}) > 1
