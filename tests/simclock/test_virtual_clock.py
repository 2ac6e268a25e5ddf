"""``simclock.testing.VirtualClock``: what the ``virtual_clock`` fixture returns."""

from __future__ import annotations

import asyncio

import pytest

import simclock
from simclock.testing import VirtualClock


def test_reads_the_running_loop_and_asserts_exactly() -> None:
    clock = VirtualClock(start_ns=5 * 10**9, seed=4)

    async def main() -> None:
        await asyncio.sleep(1.5)
        assert (clock.now_ns(), clock.now_s()) == (6_500_000_000, 6.5)
        assert (clock.elapsed_ns(), clock.elapsed_s()) == (1_500_000_000, 1.5)
        assert clock.loop is asyncio.get_running_loop()
        clock.assert_now(s=6.5)
        clock.assert_elapsed(ns=1_500_000_000)
        with pytest.raises(AssertionError) as caught:
            clock.assert_now(s=6)
        assert str(caught.value) == (
            "virtual time is 6500000000 ns (6.5 s), expected 6000000000 ns (6 s)"
        )
        with pytest.raises(AssertionError) as caught:
            clock.assert_elapsed(s=2)
        assert str(caught.value) == (
            "virtual time elapsed: 1500000000 ns (1.5 s), expected 2000000000 ns (2 s)"
        )
        with pytest.raises(TypeError) as wrong:
            clock.assert_now(s=1, ns=1)
        assert str(wrong.value) == "give exactly one of s= (seconds) or ns= (nanoseconds)"

    simclock.run(main(), start_ns=5 * 10**9)
    assert clock.seed == 4


def test_without_a_running_virtual_loop_it_says_so() -> None:
    with pytest.raises(simclock.NotVirtualLoopError):
        VirtualClock().now_ns()
