"""Every clock error: raised where documented, with its exact message."""

from __future__ import annotations

import asyncio
import inspect
import math
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import simclock
import simclock.testing
from simclock import WakeupKind

SECOND = 1_000_000_000


def run_at(start_ns: int, body: Callable[[], Awaitable[Any]], **options: Any) -> Any:
    async def main() -> Any:
        return await body()

    return simclock.run(main(), start_ns=start_ns, **options)


# --------------------------------------------------------------------- non-finite wakeups


@pytest.mark.parametrize(
    ("call", "text"),
    [
        (lambda: simclock.sleep(math.nan, waiter="w"), "delay_s=nan"),
        (lambda: simclock.sleep(math.inf, waiter="w"), "delay_s=inf"),
        (lambda: simclock.sleep(-math.inf, waiter="w"), "delay_s=-inf"),
        (lambda: simclock.sleep_until(math.nan, waiter="w"), "when_s=nan"),
        (lambda: simclock.sleep_until(math.inf, waiter="w"), "when_s=inf"),
        (lambda: simclock.sleep_until_ns(math.nan, waiter="w"), "when_ns=nan"),  # type: ignore[arg-type]
        (lambda: simclock.sleep_ns(-math.inf, waiter="w"), "delay_ns=-inf"),  # type: ignore[arg-type]
    ],
)
def test_non_finite_wakeup_raises_at_the_call_naming_waiter_request_and_now(
    call: Callable[[], Awaitable[None]], text: str
) -> None:
    with pytest.raises(simclock.NonFiniteWakeupError) as caught:
        run_at(5, call)
    assert str(caught.value) == f"non-finite wakeup for waiter 'w': requested {text}, now is 5 ns"
    assert isinstance(caught.value, ValueError)
    assert (caught.value.waiter, caught.value.now_ns) == ("w", 5)


def test_nan_delay_of_a_plain_asyncio_timer_raises() -> None:
    async def body() -> None:
        asyncio.get_running_loop().call_later(math.nan, print)

    with pytest.raises(simclock.NonFiniteWakeupError) as caught:
        run_at(0, body)
    assert str(caught.value) == (
        "non-finite wakeup for waiter 'print': requested a delay of nan s, now is 0 ns"
    )
    # asyncio.sleep(nan) raises a ValueError too (Python 3.13 checks it before the loop does).
    with pytest.raises(ValueError, match=r"(?i)nan"):
        run_at(0, lambda: asyncio.sleep(math.nan))


def test_nan_deadline_of_a_plain_asyncio_timer_raises() -> None:
    async def body() -> None:
        asyncio.get_running_loop().call_at(math.nan, print)

    with pytest.raises(simclock.NonFiniteWakeupError) as caught:
        run_at(0, body)
    assert str(caught.value) == (
        "non-finite wakeup for waiter 'print': requested the instant nan s, now is 0 ns"
    )


def test_negative_plain_asyncio_delays_run_now_as_in_asyncio() -> None:
    fired: list[tuple[str, int]] = []

    async def body() -> None:
        loop = asyncio.get_running_loop()
        loop.call_later(-1.0, lambda: fired.append(("neg", simclock.now_ns())))
        loop.call_later(-math.inf, lambda: fired.append(("-inf", simclock.now_ns())))
        loop.call_at(-math.inf, lambda: fired.append(("at -inf", simclock.now_ns())))
        await asyncio.sleep(-5)
        await asyncio.sleep(0.5)

    run_at(SECOND, body)
    assert fired == [("neg", SECOND), ("-inf", SECOND), ("at -inf", SECOND)]


def test_a_run_left_waiting_only_on_an_infinite_timer_is_a_deadlock() -> None:
    async def body() -> None:
        task = asyncio.current_task()
        assert task is not None
        task.set_name("main")
        await asyncio.sleep(math.inf)

    with pytest.raises(simclock.DeadlockError) as caught:
        run_at(0, body)
    assert str(caught.value) == (
        "deadlock at 0 ns: nothing is ready and no timer is pending (1 timer at +inf never "
        "fires), but 1 task is blocked:\n"
        "  'main' waits in run_at.<locals>.main -> "
        "test_a_run_left_waiting_only_on_an_infinite_timer_is_a_deadlock.<locals>.body -> sleep"
    )


# --------------------------------------------------------------------- stale wakeups


def test_stale_wakeup_raises_with_the_requested_instant_and_now() -> None:
    with pytest.raises(simclock.StaleWakeupError) as caught:
        run_at(2_000, lambda: simclock.sleep_until_ns(1_000, waiter="engine-0"))
    assert str(caught.value) == (
        "stale wakeup for waiter 'engine-0': requested 1000 ns, which is before now (2000 ns)"
    )
    assert isinstance(caught.value, ValueError)
    assert caught.value.requested == 1_000


def test_negative_delay_is_a_stale_wakeup() -> None:
    with pytest.raises(simclock.StaleWakeupError) as caught:
        run_at(2_000, lambda: simclock.sleep_ns(-1, waiter="policy", kind=WakeupKind.POLICY_WAKEUP))
    assert str(caught.value) == (
        "stale wakeup for waiter 'policy': requested 1999 ns (a delay of -1 ns), "
        "which is before now (2000 ns)"
    )


def test_stale_float_wakeups_name_seconds_and_nanoseconds() -> None:
    with pytest.raises(simclock.StaleWakeupError) as caught:
        run_at(2 * SECOND, lambda: simclock.sleep_until(1.5, waiter="w"))
    assert str(caught.value) == (
        "stale wakeup for waiter 'w': requested 1.5 s (1500000000 ns), "
        "which is before now (2000000000 ns)"
    )
    with pytest.raises(simclock.StaleWakeupError) as caught:
        run_at(0, lambda: simclock.sleep(-0.25, waiter="w"))
    assert str(caught.value) == (
        "stale wakeup for waiter 'w': requested -250000000 ns (a delay of -0.25 s), "
        "which is before now (0 ns)"
    )


def test_wakeup_instants_must_be_ints() -> None:
    with pytest.raises(TypeError) as caught:
        run_at(0, lambda: simclock.sleep_ns(1.5, waiter="w"))  # type: ignore[arg-type]
    assert str(caught.value) == "delay_ns must be an int of nanoseconds, got float"


# --------------------------------------------------------------------- stalled waiter


def test_stalled_waiter_raises_after_the_budget() -> None:
    calls = 0

    async def body() -> None:
        nonlocal calls
        while True:
            await simclock.sleep_until_ns(simclock.now_ns(), waiter="spinner")
            calls += 1

    with pytest.raises(simclock.StalledWaiterError) as caught:
        run_at(7, body, stall_budget=3)
    assert calls == 3
    assert str(caught.value) == (
        "stalled waiter 'spinner': requested 7 ns, the current instant, 4 times while the "
        "clock stayed at 7 ns (stall budget 3)"
    )


def test_default_stall_budget_is_1000() -> None:
    calls = 0

    async def body() -> None:
        nonlocal calls
        while True:
            await simclock.sleep_ns(0, waiter="spinner")
            calls += 1

    with pytest.raises(simclock.StalledWaiterError):
        run_at(0, body)
    assert calls == simclock.DEFAULT_STALL_BUDGET == 1000


def test_stall_count_resets_when_the_clock_advances() -> None:
    async def body() -> int:
        for _ in range(10):
            await simclock.sleep_ns(0, waiter="w")
            await simclock.sleep_ns(0, waiter="w")
            await simclock.sleep_ns(1, waiter="w")
        return simclock.now_ns()

    assert run_at(0, body, stall_budget=2) == 10


# --------------------------------------------------------------------- livelock


def test_livelock_names_the_busiest_waiters() -> None:
    async def spin(n: int) -> None:
        for _ in range(n):
            await asyncio.sleep(0)

    async def body() -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(spin(10**9), name="hot")
            group.create_task(spin(10**9), name="hot-too")
            group.create_task(spin(3), name="cold")

    with pytest.raises(simclock.LivelockError) as caught:
        run_at(9, body, livelock_budget=500)
    assert str(caught.value) == (
        "livelock at 9 ns: more than 500 events ran without the clock advancing "
        "(livelock budget 500); busiest waiters in the next 1000 events: "
        "task 'hot' (500 events), task 'hot-too' (500 events)"
    )
    assert caught.value.busiest == (("task 'hot'", 500), ("task 'hot-too'", 500))


# --------------------------------------------------------------------- deadlock


def test_deadlock_names_every_blocked_task_and_what_it_waits_on() -> None:
    async def wait_event(event: asyncio.Event) -> None:
        await event.wait()

    async def body() -> None:
        event = asyncio.Event()
        lock = asyncio.Lock()
        await lock.acquire()

        async def take_lock() -> None:
            await lock.acquire()

        task = asyncio.current_task()
        assert task is not None
        task.set_name("main")
        await simclock.sleep_ns(42, waiter="main")
        a = asyncio.create_task(wait_event(event), name="waiter-a")
        b = asyncio.create_task(take_lock(), name="waiter-b")
        await asyncio.gather(a, b)

    with pytest.raises(simclock.DeadlockError) as caught:
        run_at(0, body)
    lines = str(caught.value).splitlines()
    assert lines[0] == (
        "deadlock at 42 ns: nothing is ready and no timer is pending, but 3 tasks are blocked:"
    )
    assert lines[1:] == [
        "  'main' waits in run_at.<locals>.main"
        " -> test_deadlock_names_every_blocked_task_and_what_it_waits_on.<locals>.body"
        " on tasks 'waiter-a', 'waiter-b'",
        "  'waiter-a' waits in test_deadlock_names_every_blocked_task_and_what_it_waits_on"
        ".<locals>.wait_event -> Event.wait",
        "  'waiter-b' waits in test_deadlock_names_every_blocked_task_and_what_it_waits_on"
        ".<locals>.body.<locals>.take_lock -> Lock.acquire",
    ]
    assert caught.value.blocked == tuple(line.strip() for line in lines[1:])
    assert caught.value.now_ns == 42


def test_deadlock_raises_from_stepping_too() -> None:
    with simclock.testing.virtual_loop() as loop:
        # Held here: nothing else refers to a task blocked on an Event nobody else holds,
        # and the garbage collector may destroy it between the two steps.
        stuck = loop.create_task(asyncio.Event().wait(), name="stuck")
        assert loop.step() is not None
        with pytest.raises(simclock.DeadlockError) as caught:
            loop.step()
        assert not stuck.done()
    assert str(caught.value) == (
        "deadlock at 0 ns: nothing is ready and no timer is pending, but 1 task is blocked:\n"
        "  'stuck' waits in Event.wait"
    )


# --------------------------------------------------------------------- real I/O


@pytest.mark.parametrize(
    ("name", "call"),
    [
        ("create_connection", lambda loop: loop.create_connection(asyncio.Protocol, "h", 1)),
        ("create_server", lambda loop: loop.create_server(asyncio.Protocol, "h", 1)),
        ("create_datagram_endpoint", lambda loop: loop.create_datagram_endpoint(asyncio.Protocol)),
        ("sock_recv", lambda loop: loop.sock_recv(None, 1)),
        ("sock_sendall", lambda loop: loop.sock_sendall(None, b"")),
        ("sock_connect", lambda loop: loop.sock_connect(None, ("h", 1))),
        ("sock_accept", lambda loop: loop.sock_accept(None)),
        ("connect_read_pipe", lambda loop: loop.connect_read_pipe(asyncio.Protocol, None)),
        ("connect_write_pipe", lambda loop: loop.connect_write_pipe(asyncio.Protocol, None)),
        ("subprocess_exec", lambda loop: loop.subprocess_exec(asyncio.SubprocessProtocol, "ls")),
        ("subprocess_shell", lambda loop: loop.subprocess_shell(asyncio.SubprocessProtocol, "ls")),
        ("add_signal_handler", lambda loop: loop.add_signal_handler(2, print)),
        ("add_reader", lambda loop: loop.add_reader(0, print)),
        ("add_writer", lambda loop: loop.add_writer(1, print)),
        ("getaddrinfo", lambda loop: loop.getaddrinfo("localhost", 80)),
    ],
)
def test_real_io_raises_naming_the_call(name: str, call: Callable[[Any], Any]) -> None:
    loop = simclock.new_event_loop()
    try:
        with pytest.raises(simclock.RealIOError) as caught:
            call(loop)
    finally:
        loop.close()
    assert str(caught.value) == (
        f"VirtualEventLoop.{name}() is real I/O, which has no meaning on a virtual clock; "
        "replace it with an in-memory fake (for example an asyncio.Queue)"
    )
    assert caught.value.call == name


def test_asyncio_subprocess_and_streams_raise_real_io_error() -> None:
    async def body() -> None:
        await asyncio.create_subprocess_exec("true")

    with pytest.raises(simclock.RealIOError, match=r"^VirtualEventLoop\.subprocess_exec\(\)"):
        run_at(0, body)

    async def connect() -> None:
        await asyncio.open_connection("localhost", 80)

    with pytest.raises(simclock.RealIOError, match=r"^VirtualEventLoop\.create_connection\(\)"):
        run_at(0, connect)


# --------------------------------------------------------------------- misuse


def test_clock_functions_need_a_running_virtual_loop() -> None:
    with pytest.raises(simclock.NotVirtualLoopError) as caught:
        simclock.now_ns()
    assert str(caught.value) == (
        "simclock.now_ns() needs a running simclock.VirtualEventLoop, but no event loop is running"
    )

    async def on_stock_loop() -> None:
        await simclock.sleep_ns(1, waiter="w")

    with pytest.raises(simclock.NotVirtualLoopError) as caught:
        asyncio.run(on_stock_loop())
    assert str(caught.value).startswith(
        "simclock.sleep_ns() needs a running simclock.VirtualEventLoop, but the running loop is a "
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"start_ns": -1}, "start_ns must be an int >= 0, got -1"),
        ({"start_ns": 1.0}, "start_ns must be an int >= 0, got 1.0"),
        ({"stall_budget": 0}, "stall_budget must be an int >= 1 or None, got 0"),
        ({"livelock_budget": True}, "livelock_budget must be an int >= 1 or None, got True"),
    ],
)
def test_bad_loop_options_raise_clock_config_error(options: dict[str, Any], message: str) -> None:
    with pytest.raises(simclock.ClockConfigError) as caught:
        simclock.new_event_loop(**options)
    assert str(caught.value) == message
    assert isinstance(caught.value, ValueError)


def test_every_clock_error_is_a_simulation_error() -> None:
    for error in (
        simclock.NonFiniteWakeupError,
        simclock.StaleWakeupError,
        simclock.StalledWaiterError,
        simclock.LivelockError,
        simclock.DeadlockError,
        simclock.RealIOError,
        simclock.NotVirtualLoopError,
        simclock.ClockConfigError,
    ):
        assert issubclass(error, simclock.SimulationError)


def test_default_budgets_are_documented_values() -> None:
    # The livelock budget's behaviour is tested above with a small budget; running a million
    # events here would only slow the suite down.
    for function in (simclock.VirtualEventLoop, simclock.new_event_loop, simclock.run):
        parameters = inspect.signature(function).parameters
        assert parameters["livelock_budget"].default == 1_000_000
        assert parameters["stall_budget"].default == 1000
    assert simclock.DEFAULT_LIVELOCK_BUDGET == 1_000_000
    assert simclock.DEFAULT_STALL_BUDGET == 1000
