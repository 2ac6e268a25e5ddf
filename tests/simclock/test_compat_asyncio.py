"""Standard asyncio works unchanged on the virtual loop (pytest-asyncio recipe)."""

from __future__ import annotations

import asyncio
import contextvars

import pytest

import simclock

SECOND = 1_000_000_000
on_clock = pytest.mark.asyncio(loop_factories=["simclock"])


@on_clock
async def test_sleep_moves_the_clock_by_exactly_the_delay() -> None:
    await asyncio.sleep(0.25)
    await asyncio.sleep(1)
    assert simclock.now_ns() == 1_250_000_000


@on_clock
async def test_wait_for_times_out_at_the_exact_instant() -> None:
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(asyncio.sleep(10), timeout=2.5)
    assert simclock.now_ns() == 2_500_000_000
    assert await asyncio.wait_for(asyncio.sleep(1, result="done"), timeout=2) == "done"
    assert simclock.now_ns() == 3_500_000_000


@on_clock
async def test_timeout_context_manager_cancels_at_its_deadline() -> None:
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(1.5):
            await asyncio.sleep(60)
    assert simclock.now_ns() == 1_500_000_000


@on_clock
async def test_queue_producer_consumer_deliver_in_order_at_virtual_times() -> None:
    queue: asyncio.Queue[int] = asyncio.Queue(maxsize=2)
    got: list[tuple[int, int]] = []

    async def produce() -> None:
        for i in range(5):
            await asyncio.sleep(0.1)
            await queue.put(i)

    async def consume() -> None:
        for _ in range(5):
            item = await queue.get()
            got.append((item, simclock.now_ns()))
            await asyncio.sleep(0.3)

    await asyncio.gather(produce(), consume())
    assert got == [(i, t * 1_000_000) for i, t in enumerate((100, 400, 700, 1000, 1300))]


@on_clock
async def test_event_wakes_every_waiter() -> None:
    event = asyncio.Event()
    woke: list[str] = []

    async def wait(name: str) -> None:
        await event.wait()
        woke.append(name)

    tasks = [asyncio.create_task(wait(n)) for n in "abc"]
    await asyncio.sleep(5)
    event.set()
    await asyncio.gather(*tasks)
    assert woke == ["a", "b", "c"]
    assert simclock.now_ns() == 5 * SECOND


@on_clock
async def test_lock_serialises_holders_in_arrival_order() -> None:
    lock = asyncio.Lock()
    spans: list[tuple[str, int, int]] = []

    async def hold(name: str) -> None:
        async with lock:
            start = simclock.now_ns()
            await asyncio.sleep(1)
            spans.append((name, start, simclock.now_ns()))

    await asyncio.gather(hold("a"), hold("b"), hold("c"))
    assert spans == [("a", 0, SECOND), ("b", SECOND, 2 * SECOND), ("c", 2 * SECOND, 3 * SECOND)]


@on_clock
async def test_semaphore_limits_concurrency() -> None:
    semaphore = asyncio.Semaphore(2)
    finished: list[int] = []

    async def work() -> None:
        async with semaphore:
            await asyncio.sleep(1)
            finished.append(simclock.now_ns())

    await asyncio.gather(*(work() for _ in range(5)))
    assert finished == [SECOND, SECOND, 2 * SECOND, 2 * SECOND, 3 * SECOND]


@on_clock
async def test_condition_notifies_waiters() -> None:
    condition = asyncio.Condition()
    items: list[int] = []
    seen: list[tuple[int, int]] = []

    async def consumer() -> None:
        async with condition:
            await condition.wait_for(lambda: bool(items))
            seen.append((items.pop(), simclock.now_ns()))

    task = asyncio.create_task(consumer())
    await asyncio.sleep(2)
    async with condition:
        items.append(7)
        condition.notify_all()
    await task
    assert seen == [(7, 2 * SECOND)]


@on_clock
async def test_task_group_waits_for_all_children() -> None:
    done: list[int] = []

    async def child(seconds: int) -> None:
        await asyncio.sleep(seconds)
        done.append(seconds)

    async with asyncio.TaskGroup() as group:
        for seconds in (3, 1, 2):
            group.create_task(child(seconds))
    assert done == [1, 2, 3]
    assert simclock.now_ns() == 3 * SECOND


@on_clock
async def test_gather_returns_results_in_argument_order() -> None:
    async def value(v: int, delay: float) -> int:
        await asyncio.sleep(delay)
        return v

    assert await asyncio.gather(value(1, 3), value(2, 1), value(3, 2)) == [1, 2, 3]
    assert simclock.now_ns() == 3 * SECOND


@on_clock
async def test_cancellation_interrupts_a_sleep_and_removes_its_timer() -> None:
    cleanup: list[int] = []

    async def sleeper() -> None:
        try:
            await asyncio.sleep(100)
        finally:
            cleanup.append(simclock.now_ns())

    task = asyncio.create_task(sleeper())
    await asyncio.sleep(1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleanup == [SECOND]
    loop = asyncio.get_running_loop()
    assert isinstance(loop, simclock.VirtualEventLoop)
    assert loop.snapshot().pending_timers == ()


@on_clock
async def test_simclock_sleep_can_be_cancelled() -> None:
    task = asyncio.create_task(simclock.sleep_ns(10 * SECOND, waiter="w"))
    await asyncio.sleep(1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    loop = asyncio.get_running_loop()
    assert isinstance(loop, simclock.VirtualEventLoop)
    assert loop.snapshot().pending_timers == ()
    assert simclock.now_ns() == SECOND


@on_clock
async def test_run_in_executor_runs_inline_and_returns_a_finished_future() -> None:
    loop = asyncio.get_running_loop()
    await asyncio.sleep(2)
    future = loop.run_in_executor(None, lambda x: (x * 2, simclock.now_ns()), 21)
    assert future.done()
    assert await future == (42, 2 * SECOND)
    failing = loop.run_in_executor(None, int, "not a number")
    with pytest.raises(ValueError, match="invalid literal"):
        await failing
    assert await asyncio.to_thread(sum, [1, 2, 3]) == 6


@on_clock
async def test_context_variables_flow_into_tasks_and_callbacks() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    var.set("parent")
    seen: list[str] = []

    async def child() -> None:
        await asyncio.sleep(1)
        seen.append(var.get())

    await asyncio.create_task(child())
    asyncio.get_running_loop().call_later(1, lambda: seen.append(var.get()))
    await asyncio.sleep(2)
    assert seen == ["parent", "parent"]


def test_unfinished_async_generators_are_finalised_when_the_run_ends() -> None:
    closed: list[int] = []

    async def numbers():  # type: ignore[no-untyped-def]
        try:
            for i in range(10):
                await asyncio.sleep(1)
                yield i
        finally:
            closed.append(simclock.now_ns())

    async def main() -> None:
        generator = numbers()
        async for n in generator:
            if n == 2:
                break

    simclock.run(main())
    assert closed == [3 * SECOND]


def test_asyncio_runner_accepts_the_loop_class_as_loop_factory() -> None:
    async def main() -> int:
        await asyncio.sleep(7)
        return simclock.now_ns()

    with asyncio.Runner(loop_factory=simclock.VirtualEventLoop) as runner:
        assert runner.run(main()) == 7 * SECOND
        assert runner.run(main()) == 14 * SECOND


def test_removing_readers_writers_and_signal_handlers_reports_nothing_registered() -> None:
    loop = simclock.new_event_loop()
    try:
        assert loop.remove_reader(0) is False
        assert loop.remove_writer(1) is False
        assert loop.remove_signal_handler(2) is False
    finally:
        loop.close()


def test_a_default_executor_is_accepted_and_never_used() -> None:
    import concurrent.futures

    async def main() -> str:
        loop = asyncio.get_running_loop()
        with concurrent.futures.ThreadPoolExecutor() as executor:
            loop.set_default_executor(executor)
            future = loop.run_in_executor(None, lambda: "inline")
            assert future.done()
            return await future

    assert simclock.run(main()) == "inline"


def test_a_positive_delay_below_a_nanosecond_still_moves_the_clock_one_nanosecond() -> None:
    async def main() -> int:
        await asyncio.sleep(1e-12)
        return simclock.now_ns()

    assert simclock.run(main()) == 1


def test_call_soon_threadsafe_schedules_but_the_loop_never_waits_for_threads() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        loop.call_soon_threadsafe(done.set_result, 1)
        assert await done == 1
        await loop.create_future()  # only another thread could complete this one

    with pytest.raises(simclock.DeadlockError, match=r"^deadlock at 0 ns"):
        simclock.run(main())
