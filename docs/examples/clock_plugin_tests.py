"""test_with_the_plugin.py: the virtual clock through simclock's pytest plugin, three ways."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import anyio
import pytest
import pytest_asyncio

import simclock
from simclock.testing import VirtualClock

HOUR = 3600


# pytest-asyncio: the marker puts the test and its async fixtures on the virtual loop.
@pytest_asyncio.fixture
async def warm_cache() -> AsyncIterator[dict[str, str]]:
    await asyncio.sleep(60)  # one virtual minute to warm up
    yield {"greeting": "hello"}


@pytest.mark.simclock
@pytest.mark.asyncio
async def test_cache_entry_expires_after_an_hour(
    warm_cache: dict[str, str], virtual_clock: VirtualClock
) -> None:
    asyncio.get_running_loop().call_later(HOUR, warm_cache.clear)
    await asyncio.sleep(HOUR + 1)
    assert warm_cache == {}
    virtual_clock.assert_elapsed(s=60 + HOUR + 1)


# anyio: the same marker, on anyio's asyncio backend.
@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.simclock(start_s=1_700_000_000)
@pytest.mark.anyio
async def test_retry_with_backoff_stops_at_the_one_hour_deadline(
    virtual_clock: VirtualClock,
) -> None:
    attempts = 0
    delay = 1.0
    with anyio.move_on_after(HOUR):
        while True:
            attempts += 1
            await anyio.sleep(delay)
            delay = min(delay * 4, 900)
    assert attempts == 9  # slept 1, 4, 16, 64, 256, 900, 900, 900 s; cut in the 9th
    virtual_clock.assert_now(s=1_700_000_000 + HOUR)


# patch_time: code that reads time.monotonic() sees virtual time pass.
class TokenBucket:
    def __init__(self, rate_per_s: float) -> None:
        self.rate = rate_per_s
        self.tokens = 0.0
        self.stamp = time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(1.0, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


@pytest.mark.simclock(patch_time=True)
@pytest.mark.asyncio
async def test_token_bucket_refills_in_virtual_time() -> None:
    bucket = TokenBucket(rate_per_s=0.1)
    assert not bucket.take()
    await asyncio.sleep(10)
    assert bucket.take()


# Plain: an async test that neither pytest-asyncio nor anyio claims runs on the plugin's loop.
@pytest.mark.simclock
async def test_plain_async_test() -> None:
    await asyncio.sleep(HOUR)
    assert simclock.now_ns() == HOUR * 1_000_000_000


# Unmarked tests keep a stock loop.
@pytest.mark.asyncio
async def test_unmarked_tests_keep_a_stock_loop() -> None:
    assert not isinstance(asyncio.get_running_loop(), simclock.VirtualEventLoop)
