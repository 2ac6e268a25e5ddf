"""anyio works unchanged on the virtual loop, through its asyncio backend (anyio plugin recipe)."""

from __future__ import annotations

import anyio
import pytest

import simclock
import simclock.testing

SECOND = 1_000_000_000
pytestmark = pytest.mark.anyio


async def test_anyio_sleep_and_current_time_follow_the_virtual_clock() -> None:
    start = anyio.current_time()
    await anyio.sleep(90)
    assert anyio.current_time() - start == 90.0
    assert simclock.now_ns() == 90 * SECOND


async def test_fail_after_raises_at_its_deadline() -> None:
    with pytest.raises(TimeoutError):
        with anyio.fail_after(2.5):
            await anyio.sleep(100)
    assert simclock.now_ns() == 2_500_000_000


async def test_move_on_after_cancels_quietly_at_its_deadline() -> None:
    with anyio.move_on_after(4) as scope:
        await anyio.sleep(100)
    assert scope.cancelled_caught
    assert simclock.now_ns() == 4 * SECOND


async def test_task_group_runs_children_concurrently() -> None:
    finished: list[tuple[str, int]] = []

    async def child(name: str, seconds: float) -> None:
        await anyio.sleep(seconds)
        finished.append((name, simclock.now_ns()))

    async with anyio.create_task_group() as group:
        group.start_soon(child, "slow", 3)
        group.start_soon(child, "fast", 1)
    assert finished == [("fast", SECOND), ("slow", 3 * SECOND)]


async def test_memory_object_streams_carry_messages_in_order() -> None:
    send, receive = anyio.create_memory_object_stream[int](max_buffer_size=1)
    got: list[tuple[int, int]] = []

    async def producer() -> None:
        async with send:
            for i in range(3):
                await anyio.sleep(0.5)
                await send.send(i)

    async def consumer() -> None:
        async with receive:
            async for item in receive:
                got.append((item, simclock.now_ns()))

    async with anyio.create_task_group() as group:
        group.start_soon(producer)
        group.start_soon(consumer)
    assert got == [(0, 500_000_000), (1, SECOND), (2, 1_500_000_000)]


def test_anyio_run_accepts_the_loop_factory_as_a_backend_option() -> None:
    async def main() -> int:
        await anyio.sleep(3600)
        return simclock.now_ns()

    result = anyio.run(
        main, backend="asyncio", backend_options={"loop_factory": simclock.VirtualEventLoop}
    )
    assert result == 3600 * SECOND


def test_anyio_deadlock_is_reported() -> None:
    async def main() -> None:
        event = anyio.Event()
        await event.wait()

    with pytest.raises(simclock.DeadlockError, match=r"^deadlock at 0 ns: nothing is ready"):
        anyio.run(main, backend="asyncio", backend_options=simclock.testing.anyio_backend()[1])
