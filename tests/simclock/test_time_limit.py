"""End of virtual time (``end_s``/``end_ns``) and what an interrupted run prints."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import textwrap

import pytest

import simclock


async def _deadlock_behind_a_heartbeat() -> None:
    async def heartbeat() -> None:
        while True:
            await asyncio.sleep(5)

    beating = asyncio.create_task(heartbeat(), name="heartbeat")
    await asyncio.Event().wait()
    beating.cancel()


def test_run_end_s_fails_a_deadlock_hidden_behind_a_heartbeat_with_the_task_list() -> None:
    with pytest.raises(simclock.VirtualTimeLimitError) as caught:
        simclock.run(_deadlock_behind_a_heartbeat(), end_s=60)
    error = caught.value
    assert str(error).splitlines()[0] == (
        "virtual time limit: the clock would jump from 60000000000 ns to the next event at "
        "65000000000 ns, past end_ns=60000000000 (60 s); 2 tasks are unfinished:"
    )
    assert tuple(re.sub(r"Task-\d+", "Task-N", line) for line in error.blocked) == (
        "'Task-N' waits in _deadlock_behind_a_heartbeat -> Event.wait",
        "'heartbeat' waits in _deadlock_behind_a_heartbeat.<locals>.heartbeat -> sleep",
    )
    assert (error.now_ns, error.end_ns, error.next_ns) == (60 * 10**9, 60 * 10**9, 65 * 10**9)
    assert isinstance(error, simclock.SimulationError)


def test_events_exactly_at_the_end_still_run() -> None:
    async def main() -> int:
        await asyncio.sleep(60)
        return simclock.now_ns()

    assert simclock.run(main(), end_s=60) == 60 * 10**9


def test_loop_end_ns_and_end_s_agree_and_are_validated() -> None:
    loop = simclock.VirtualEventLoop(start_ns=10, end_s=1.5)
    try:
        assert loop._end_ns == 1_500_000_000
    finally:
        loop.close()
    with pytest.raises(simclock.ClockConfigError) as caught:
        simclock.VirtualEventLoop(start_ns=10**9, end_ns=5)
    assert str(caught.value) == (
        "end_ns must be an int from start_ns (1000000000) to 2**63 - 1, got 5"
    )
    with pytest.raises(simclock.ClockConfigError) as caught:
        simclock.VirtualEventLoop(end_ns=5, end_s=5.0)
    assert str(caught.value) == "give end_ns or end_s, not both"
    with pytest.raises(simclock.ClockConfigError) as caught:
        simclock.VirtualEventLoop(end_s=float("nan"))
    assert str(caught.value) == "end_s must be a finite number of seconds >= 0, got nan"


def test_stepping_past_the_end_raises_too() -> None:
    loop = simclock.VirtualEventLoop(end_ns=1000)
    try:
        with pytest.raises(simclock.VirtualTimeLimitError) as caught:
            loop.run_until_ns(2000)
        assert caught.value.next_ns == 2000
        assert loop.time_ns() == 0
    finally:
        loop.close()


def test_a_seeded_loop_honours_the_end_too() -> None:
    with pytest.raises(simclock.VirtualTimeLimitError):
        simclock.run(_deadlock_behind_a_heartbeat(), end_s=60, seed=3)


def test_keyboard_interrupt_notes_the_virtual_time_and_the_task_list(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def interrupt() -> None:
        raise KeyboardInterrupt

    async def main() -> None:
        asyncio.get_running_loop().call_later(90, interrupt)
        await asyncio.sleep(3600)

    with pytest.raises(KeyboardInterrupt) as caught:
        simclock.run(main())
    note = (
        "simclock: interrupted at virtual time 90000000000 ns (90.000000000 s), "
        "1 unfinished task:\n  'Task-N' waits in test_keyboard_interrupt_notes_the_virtual_time"
        "_and_the_task_list.<locals>.main -> sleep"
    )
    notes = [re.sub(r"Task-\d+", "Task-N", n) for n in caught.value.__notes__]
    assert notes == [note]
    assert re.sub(r"Task-\d+", "Task-N", capsys.readouterr().err) == note + "\n"


def test_ctrl_c_in_a_run_prints_the_virtual_time_before_the_traceback() -> None:
    script = textwrap.dedent(
        """
        import asyncio, os, signal
        import simclock

        async def main():
            loop = asyncio.get_running_loop()
            loop.call_later(7, os.kill, os.getpid(), signal.SIGINT)
            await asyncio.sleep(3600)

        simclock.run(main())
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
        timeout=60,
    )
    assert result.returncode != 0
    lines = result.stderr.splitlines()
    assert lines[:2] == [
        "simclock: interrupted at virtual time 7000000000 ns (7.000000000 s), 1 unfinished task:",
        "  'Task-1' waits in main -> sleep",
    ]
    assert "KeyboardInterrupt" in lines


def test_run_takes_over_ctrl_c_for_its_duration_only() -> None:
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.fail("this test needs Python's default SIGINT handler in the main thread")

    async def main() -> str:
        return getattr(signal.getsignal(signal.SIGINT), "__qualname__", "")

    # simclock's handler raises KeyboardInterrupt where the loop is (asyncio.Runner's would
    # cancel the main task instead, unwinding the chains the report shows)
    assert simclock.run(main()) == "_raise_keyboard_interrupt"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.parametrize("seed", [None, 7])  # the run loop, and the seeded loop's steps
def test_a_clock_that_moves_near_the_end_of_the_range_checks_each_later_move(
    seed: int | None,
) -> None:
    # Far from the end, moves are not checked (no end of time, no watch): an asyncio timer
    # made there cannot end past the range. Once the clock is within 10**18 ns of it, one
    # can, and the move to it is refused as from a start near the end.
    start = 8 * 10**18
    near = start + 3 * 10**17

    async def main() -> None:
        await asyncio.sleep(3e8)
        assert simclock.now_ns() == near
        await asyncio.sleep(1e9)

    with pytest.raises(simclock.VirtualTimeLimitError) as caught:
        simclock.run(main(), start_ns=start, seed=seed)
    first = str(caught.value).splitlines()[0]
    assert first == (
        f"virtual time limit: the clock would jump from {near} ns to the next event at "
        f"{near + 10**18} ns, past the end of the clock's range (9.22337e+09 s); "
        "1 task is unfinished:"
    )


@pytest.mark.parametrize("how", ["sleep in debug mode", "call_at"])
def test_a_timer_near_the_range_end_stops_the_run_however_it_is_made(how: str) -> None:
    # the same rule as asyncio.sleep's fast path (the test below): a timer that ends past
    # the range within 10**9 s stops the run there
    start = simclock.MAX_TIME_NS - 10**9

    async def main() -> None:
        loop = asyncio.get_running_loop()
        if how == "call_at":
            done = loop.create_future()
            loop.call_at(loop.time() + 5, done.set_result, None)
            await done
        else:
            await asyncio.sleep(5)

    with pytest.raises(simclock.VirtualTimeLimitError) as caught:
        simclock.run(main(), start_ns=start, debug=how != "call_at")
    first = str(caught.value).splitlines()[0]
    assert first.startswith(f"virtual time limit: the clock would jump from {start} ns to ")
    assert first.endswith(
        f"to the next event at {start + 5 * 10**9} ns, past the end of the clock's range "
        "(9.22337e+09 s); 1 task is unfinished:"
    )


def test_a_sleep_past_the_range_end_by_more_than_a_billion_seconds_never_fires() -> None:
    async def main() -> None:
        await asyncio.sleep(2e9)

    with pytest.raises(simclock.DeadlockError) as caught:
        simclock.run(main(), start_ns=simclock.MAX_TIME_NS - 10**9)
    assert "(1 timer at +inf never fires)" in str(caught.value).splitlines()[0]


def test_an_asyncio_timer_scheduled_near_the_end_of_the_range_stops_at_the_range() -> None:
    async def main() -> None:
        await asyncio.sleep(5)

    start = simclock.MAX_TIME_NS - 10**9
    with pytest.raises(simclock.VirtualTimeLimitError) as caught:
        simclock.run(main(), start_ns=start)
    first = str(caught.value).splitlines()[0]
    assert first == (
        f"virtual time limit: the clock would jump from {start} ns to the next event at "
        f"{start + 5 * 10**9} ns, past the end of the clock's range (9.22337e+09 s); "
        "1 task is unfinished:"
    )
