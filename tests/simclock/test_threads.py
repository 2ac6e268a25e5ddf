"""Real threads and the virtual loop: inline executors, refused thread calls, clear errors."""

from __future__ import annotations

import asyncio
import re
import threading

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
import pytest

import simclock


def test_asyncio_to_thread_runs_inline_at_the_current_instant() -> None:
    async def main() -> tuple[int, int, bool]:
        await asyncio.sleep(2)
        ident = await asyncio.to_thread(threading.get_ident)
        return simclock.now_ns(), ident, ident == threading.get_ident()

    now, _, same_thread = simclock.run(main())
    assert (now, same_thread) == (2 * 10**9, True)


def test_anyio_to_thread_is_refused_with_an_error_naming_the_call() -> None:
    release = threading.Event()

    async def main() -> None:
        await anyio.sleep(1)
        await anyio.to_thread.run_sync(release.wait)

    try:
        with pytest.raises(simclock.DeadlockError) as caught:
            anyio.run(
                main,
                backend="asyncio",
                backend_options={"loop_factory": simclock.VirtualEventLoop},
            )
    finally:
        release.set()
    message = str(caught.value)
    assert message.splitlines()[0].startswith("deadlock at 1000000000 ns")
    assert (
        "  anyio.to_thread.run_sync() hands its function to a real worker thread, which the "
        "virtual clock never waits for: call the function directly, or use asyncio.to_thread() "
        "or loop.run_in_executor(), which run it inline"
    ) in message.splitlines()


def test_anyio_to_thread_behind_a_heartbeat_fails_at_the_end_with_the_same_note() -> None:
    release = threading.Event()

    async def main() -> None:
        async def heartbeat() -> None:
            while True:
                await anyio.sleep(5)

        async with anyio.create_task_group() as group:
            group.start_soon(heartbeat)
            await anyio.to_thread.run_sync(release.wait)

    try:
        with pytest.raises(simclock.VirtualTimeLimitError) as caught:
            anyio.run(
                main,
                backend="asyncio",
                backend_options={
                    "loop_factory": lambda: simclock.VirtualEventLoop(end_ns=60 * 10**9)
                },
            )
    finally:
        release.set()
    assert "anyio.to_thread.run_sync() hands its function to a real worker thread" in str(
        caught.value
    )


def _call_from_a_thread(function: object) -> list[BaseException]:
    errors: list[BaseException] = []

    def body() -> None:
        try:
            function()  # type: ignore[operator]
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=body, name="helper")
    thread.start()
    thread.join()
    return errors


def test_call_soon_threadsafe_from_a_real_thread_raises_there_and_the_run_says_so() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[int] = loop.create_future()
        errors = _call_from_a_thread(lambda: loop.call_soon_threadsafe(future.set_result, 1))
        assert len(errors) == 1 and isinstance(errors[0], simclock.RealThreadError)
        assert str(errors[0]) == (
            "VirtualEventLoop.call_soon_threadsafe(Future callback) was called from thread "
            "'helper', not the thread that runs the loop: real threads have no virtual time, "
            "so a callback handed over from one would land at a machine-dependent instant; "
            "run the function inline (loop.run_in_executor, asyncio.to_thread) instead"
        )
        await future

    with pytest.raises(simclock.DeadlockError) as caught:
        simclock.run(main())
    assert str(caught.value).splitlines()[-1] == (
        "  refused: call_soon_threadsafe(Future callback) from thread 'helper' "
        "(real threads cannot call into a virtual loop)"
    )


def test_anyio_from_thread_in_a_real_thread_gets_the_error() -> None:
    async def main() -> list[BaseException]:
        token = anyio.lowlevel.current_token()
        return _call_from_a_thread(lambda: anyio.from_thread.run_sync(print, token=token))

    errors = anyio.run(
        main, backend="asyncio", backend_options={"loop_factory": simclock.VirtualEventLoop}
    )
    assert len(errors) == 1
    assert isinstance(errors[0], simclock.RealThreadError)
    assert re.match(
        r"VirtualEventLoop\.call_soon_threadsafe\(.*\) was called from thread "
        r"'helper'",
        str(errors[0]),
    )


def test_asyncio_run_coroutine_threadsafe_from_a_real_thread_gets_the_error() -> None:
    async def noop() -> None:
        pass

    async def main() -> list[BaseException]:
        loop = asyncio.get_running_loop()
        coroutine = noop()
        try:
            return _call_from_a_thread(lambda: asyncio.run_coroutine_threadsafe(coroutine, loop))
        finally:
            coroutine.close()

    errors = simclock.run(main())
    assert [type(e) for e in errors] == [simclock.RealThreadError]


def test_call_soon_threadsafe_from_the_loop_thread_still_works() -> None:
    async def main() -> int:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[int] = loop.create_future()
        loop.call_soon_threadsafe(future.set_result, 5)
        return await future

    assert simclock.run(main()) == 5
