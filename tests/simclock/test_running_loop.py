"""The clock functions find the running virtual loop of their own thread, and only while it runs:
after a run (however it ended), in another thread, on a stock loop, in a forked child."""

from __future__ import annotations

import asyncio
import os
import threading

import pytest

import simclock

NOT_RUNNING = (
    "simclock.now_ns() needs a running simclock.VirtualEventLoop, but no event loop is running"
)


def _now_error() -> str:
    try:
        simclock.now_ns()
    except simclock.NotVirtualLoopError as error:
        return str(error)
    return "no error"


def test_clock_is_read_inside_the_run_and_refused_after_it() -> None:
    async def main() -> int:
        await simclock.sleep_ns(5, waiter="w")
        return simclock.now_ns()

    assert simclock.run(main()) == 5
    assert _now_error() == NOT_RUNNING


def test_clock_is_refused_after_a_run_that_raised() -> None:
    async def main() -> None:
        await simclock.sleep_ns(5, waiter="w")
        raise ValueError("boom")

    with pytest.raises(ValueError, match=r"^boom$"):
        simclock.run(main())
    assert _now_error() == NOT_RUNNING


def test_clock_is_refused_in_another_thread_while_the_loop_runs() -> None:
    seen: list[str] = []

    async def main() -> None:
        thread = threading.Thread(target=lambda: seen.append(_now_error()))
        thread.start()
        thread.join()

    simclock.run(main())
    assert seen == [NOT_RUNNING]


def test_clock_is_refused_on_a_stock_loop_run_after_a_virtual_one() -> None:
    async def virtual() -> int:
        return simclock.now_ns()

    async def stock() -> str:
        return _now_error()

    assert simclock.run(virtual()) == 0
    message = asyncio.run(stock())
    assert message.startswith(
        "simclock.now_ns() needs a running simclock.VirtualEventLoop, but the running loop is a "
    )


def test_each_stepping_call_is_a_run_of_its_own() -> None:
    loop = simclock.new_event_loop()
    times: list[int] = []

    async def main() -> None:
        for _ in range(3):
            await simclock.sleep_ns(10, waiter="w")
            times.append(simclock.now_ns())

    task = loop.create_task(main())
    try:
        loop.run_until_ns(15)
        assert times == [10]
        assert _now_error() == NOT_RUNNING
        loop.run_until_complete(task)
        assert times == [10, 20, 30]
        assert _now_error() == NOT_RUNNING
    finally:
        loop.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork with threads (pytest-xdist)
def test_a_child_forked_inside_a_run_has_no_loop_running() -> None:
    async def main() -> str:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child
            os.close(read)
            os.write(write, _now_error().encode())
            os._exit(0)
        os.close(write)
        os.waitpid(pid, 0)
        with os.fdopen(read, "rb") as pipe:
            return pipe.read().decode()

    assert simclock.run(main()) == NOT_RUNNING
