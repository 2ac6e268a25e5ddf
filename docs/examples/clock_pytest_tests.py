"""test_timeouts.py: an hour-long test that runs in milliseconds, three ways."""

from __future__ import annotations

import asyncio

import anyio
import pytest

import simclock

HOUR = 3600


@pytest.mark.asyncio(loop_factories=["simclock"])
async def test_cache_entry_expires_after_an_hour() -> None:
    expired = asyncio.Event()
    asyncio.get_running_loop().call_later(HOUR, expired.set)
    await asyncio.wait_for(expired.wait(), timeout=HOUR + 1)
    assert simclock.now_ns() == HOUR * 1_000_000_000


@pytest.mark.asyncio
async def test_unmarked_tests_keep_a_stock_loop() -> None:
    assert not isinstance(asyncio.get_running_loop(), simclock.VirtualEventLoop)


@pytest.mark.anyio
async def test_anyio_timeout_fires_on_the_virtual_clock() -> None:
    with anyio.move_on_after(HOUR) as scope:
        await anyio.sleep(2 * HOUR)
    assert scope.cancelled_caught
    assert anyio.current_time() == HOUR


def test_plain_synchronous_test() -> None:
    async def slow() -> str:
        await asyncio.sleep(HOUR)
        return "finished"

    assert simclock.run(slow()) == "finished"
