"""Opt-in virtual wall-clock functions and strict refusal of blocking real I/O."""

from __future__ import annotations

import asyncio
import datetime
import socket
import subprocess
import sys
import time

import pytest

import simclock
import simclock.testing

START_NS = 1_700_000_000 * 10**9  # 2023-11-14 22:13:20 UTC


def test_patched_functions_read_the_virtual_clock_inside_the_run() -> None:
    async def main() -> dict[str, object]:
        await asyncio.sleep(1.5)
        return {
            "time": time.time(),
            "time_ns": time.time_ns(),
            "monotonic": time.monotonic(),
            "monotonic_ns": time.monotonic_ns(),
            "perf_counter": time.perf_counter(),
            "perf_counter_ns": time.perf_counter_ns(),
            "now": datetime.datetime.now(datetime.UTC),
            "utcnow": datetime.datetime.utcnow(),
            "is_datetime": isinstance(datetime.datetime.now(), datetime.datetime),
        }

    read = simclock.run(main(), start_ns=START_NS, patch_time=True)
    now_ns = START_NS + 1_500_000_000
    assert read == {
        "time": now_ns / 1e9,
        "time_ns": now_ns,
        "monotonic": now_ns / 1e9,
        "monotonic_ns": now_ns,
        "perf_counter": now_ns / 1e9,
        "perf_counter_ns": now_ns,
        "now": datetime.datetime(2023, 11, 14, 22, 13, 21, 500000, tzinfo=datetime.UTC),
        "utcnow": datetime.datetime(2023, 11, 14, 22, 13, 21, 500000),
        "is_datetime": True,
    }


def test_functions_are_restored_and_stay_real_without_the_option() -> None:
    originals = (time.time, time.monotonic, time.perf_counter, time.sleep, datetime.datetime)

    async def main() -> float:
        await asyncio.sleep(3600)
        return time.monotonic()

    before = time.monotonic()
    simclock.run(main(), patch_time=True)
    assert (time.time, time.monotonic, time.perf_counter, time.sleep, datetime.datetime) == (
        originals
    )
    assert simclock.run(main()) >= before  # real monotonic time, not 3600 s


def test_a_token_bucket_reading_time_monotonic_sees_virtual_time_pass() -> None:
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

    async def main() -> list[bool]:
        bucket = TokenBucket(rate_per_s=0.1)
        taken = [bucket.take()]
        await asyncio.sleep(10)
        taken.append(bucket.take())
        taken.append(bucket.take())
        return taken

    assert simclock.run(main(), patch_time=True) == [False, True, False]


def test_time_sleep_inside_the_run_raises_naming_the_caller() -> None:
    async def main() -> None:
        time.sleep(0.5)

    with pytest.raises(simclock.BlockingCallError) as caught:
        simclock.run(main(), patch_time=True)
    line = main.__code__.co_firstlineno + 1
    caller = f"{__file__}:{line} in main"
    assert str(caught.value) == (
        f"time.sleep(0.5) called inside a virtual run, from {caller}: it would block in real "
        "time while the virtual clock stands still; await asyncio.sleep() instead"
    )
    assert (caught.value.call, caught.value.caller) == ("time.sleep(0.5)", caller)


def test_outside_the_run_the_patched_functions_are_real() -> None:
    with simclock.testing.virtual_wall_clock():
        assert time.time() > 1.6e9
        time.sleep(0)
        assert datetime.datetime.now().year >= 2024


def test_strict_io_refuses_blocking_connects_and_subprocesses_inside_the_run() -> None:
    async def connect() -> None:
        socket.create_connection(("127.0.0.1", 9), timeout=1)

    async def spawn() -> None:
        subprocess.run([sys.executable, "-c", "pass"], check=True)

    with pytest.raises(simclock.BlockingCallError) as caught:
        simclock.run(connect(), strict_io=True)
    assert str(caught.value).startswith("socket.create_connection() called inside a virtual run")
    with pytest.raises(simclock.BlockingCallError) as caught:
        simclock.run(spawn(), strict_io=True)
    assert str(caught.value).startswith("subprocess.Popen() called inside a virtual run")
    # outside a run, strict mode lets them through
    with simclock.testing.refuse_blocking_io():
        subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_without_strict_io_a_subprocess_is_not_intercepted() -> None:
    async def spawn() -> int:
        return subprocess.run([sys.executable, "-c", "pass"], check=True).returncode

    assert simclock.run(spawn()) == 0


def test_the_marker_option_patches_the_wall_clock_for_that_test_only(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini(
        "[pytest]\nasyncio_mode = strict\nasyncio_default_fixture_loop_scope = function\n"
        "filterwarnings = error\n"
    )
    pytester.makepyfile(
        test_wall="""
        import asyncio
        import time

        import pytest

        import simclock


        @pytest.mark.simclock(start_s=1_700_000_000, patch_time=True)
        @pytest.mark.asyncio
        async def test_patched():
            await asyncio.sleep(60)
            assert time.time() == 1_700_000_060.0
            with pytest.raises(simclock.BlockingCallError):
                time.sleep(1)


        @pytest.mark.simclock(strict_io=True)
        @pytest.mark.asyncio
        async def test_strict():
            import socket
            with pytest.raises(simclock.BlockingCallError):
                socket.create_connection(("127.0.0.1", 9))


        @pytest.mark.asyncio
        async def test_unmarked_stays_real():
            assert time.time() > 1_700_000_060.0
        """
    )
    pytester.runpytest().assert_outcomes(passed=3)


pytest_plugins = ("pytester",)
