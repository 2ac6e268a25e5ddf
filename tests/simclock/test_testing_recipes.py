"""The documented test-harness recipes work: pytest-asyncio, anyio and plain tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import anyio
import pytest
import pytest_asyncio

import simclock
import simclock.testing

HOUR_NS = 3600 * 1_000_000_000


@pytest.mark.asyncio(loop_factories=["simclock"])
async def test_pytest_asyncio_marked_test_runs_on_the_virtual_loop() -> None:
    assert isinstance(asyncio.get_running_loop(), simclock.VirtualEventLoop)
    await asyncio.sleep(3600)
    assert simclock.now_ns() == HOUR_NS


@pytest_asyncio.fixture
async def warmed_up_cache() -> AsyncIterator[asyncio.AbstractEventLoop]:
    await asyncio.sleep(60)
    yield asyncio.get_running_loop()


@pytest.mark.asyncio(loop_factories=["simclock"])
async def test_async_fixtures_share_the_virtual_loop_of_the_test(
    warmed_up_cache: asyncio.AbstractEventLoop,
) -> None:
    assert warmed_up_cache is asyncio.get_running_loop()
    assert simclock.now_ns() == 60 * 1_000_000_000


@pytest.mark.asyncio
async def test_pytest_asyncio_unmarked_test_keeps_a_stock_loop() -> None:
    assert not isinstance(asyncio.get_running_loop(), simclock.VirtualEventLoop)


@pytest.mark.anyio
async def test_anyio_plugin_runs_on_the_virtual_loop() -> None:
    start = anyio.current_time()
    await anyio.sleep(3600)
    assert anyio.current_time() - start == 3600.0
    assert simclock.now_ns() == HOUR_NS


def test_plain_test_calls_simclock_run() -> None:
    async def main() -> int:
        await asyncio.sleep(3600)
        return simclock.now_ns()

    assert simclock.run(main()) == HOUR_NS


def test_virtual_loop_cancels_unfinished_tasks_and_closes() -> None:
    cancelled: list[bool] = []

    async def forever() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    with simclock.testing.virtual_loop() as loop:
        loop.create_task(forever())
        loop.run_until_ns(5_000_000_000)
    assert cancelled == [True]
    assert loop.is_closed()


def test_loop_factories_for_offers_simclock_only_when_asked() -> None:
    class Marker:
        def __init__(self, **kwargs: object) -> None:
            self.kwargs = kwargs

    class Item:
        def __init__(self, marker: Marker | None) -> None:
            self.marker = marker

        def get_closest_marker(self, name: str) -> Marker | None:
            return self.marker

    asked = simclock.testing.loop_factories_for(Item(Marker(loop_factories=["simclock"])))
    plain = simclock.testing.loop_factories_for(Item(Marker()))
    assert list(asked) == ["asyncio", "simclock"]
    assert list(plain) == ["asyncio"]
    loop = asked["simclock"]()
    try:
        assert isinstance(loop, simclock.VirtualEventLoop)
    finally:
        loop.close()


def test_anyio_backend_names_asyncio_with_a_virtual_loop_factory() -> None:
    name, options = simclock.testing.anyio_backend(start_ns=7)
    assert name == "asyncio"
    loop = options["loop_factory"]()
    try:
        assert loop.time_ns() == 7
    finally:
        loop.close()


def test_loop_factory_rejects_bad_options_at_the_call() -> None:
    with pytest.raises(simclock.ClockConfigError) as caught:
        simclock.testing.loop_factory(stall_budget=0)
    assert str(caught.value) == "stall_budget must be an int >= 1 or None, got 0"
