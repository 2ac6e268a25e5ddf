"""Reading and waiting on the virtual clock from inside a running :class:`VirtualEventLoop`.

Every wakeup names its ``waiter`` (who waits) and its :class:`WakeupKind` (why), so
snapshots and errors can say who is waiting for what. Requests are validated at the call:
a non-finite instant or delay raises :class:`NonFiniteWakeupError`, an instant earlier
than now raises :class:`StaleWakeupError`, and a waiter that keeps asking for the current
instant raises :class:`StalledWaiterError` once the loop's stall budget is spent.
"""

from __future__ import annotations

import asyncio
import math

from ._exceptions import NotVirtualLoopError
from ._inspect import WakeupKind
from ._loop import (
    _RUNNING,
    MAX_DEADLINE_RANK,
    MAX_TIME_NS,
    VirtualEventLoop,
    _check_int,
    _non_finite,
    _Timer,
    delay_to_ns,
)

__all__ = (
    "Deadline",
    "instant_end",
    "now_ns",
    "sleep",
    "sleep_ns",
    "sleep_until",
    "sleep_until_ns",
)

_get_running_loop = asyncio._get_running_loop
_Future = asyncio.Future
_MAX = MAX_TIME_NS


def _virtual_loop(function: str) -> VirtualEventLoop:
    running = _RUNNING.loop
    if running is not None:
        return running
    loop = _get_running_loop()
    if isinstance(loop, VirtualEventLoop):
        return loop
    found = (
        "no event loop is running"
        if loop is None
        else f"the running loop is a {type(loop).__name__}"
    )
    raise NotVirtualLoopError(
        f"simclock.{function}() needs a running simclock.VirtualEventLoop, but {found}"
    )


def now_ns() -> int:
    """The virtual time of the running :class:`VirtualEventLoop`, in integer nanoseconds.

    Raises:
        NotVirtualLoopError: no :class:`VirtualEventLoop` is running in this thread.
    """
    loop = _RUNNING.loop
    if loop is None:
        loop = _virtual_loop("now_ns")
    return loop._now_ns


async def sleep_until_ns(when_ns: int, *, waiter: str, kind: WakeupKind = WakeupKind.OTHER) -> None:
    """Wait until virtual instant ``when_ns`` (integer nanoseconds).

    Asking for the current instant yields to everything else due now, then resumes at the
    same instant; doing so more than the loop's stall budget allows raises.

    Args:
        when_ns: the instant to wake at, in nanoseconds.
        waiter: who waits (shown in snapshots and errors).
        kind: why it waits.

    Raises:
        NonFiniteWakeupError: ``when_ns`` is a NaN or infinite float.
        StaleWakeupError: ``when_ns`` is earlier than now.
        ClockRangeError: the instant is past :data:`simclock.MAX_TIME_NS`.
        StalledWaiterError: ``waiter`` asked for the current instant too many times.
        NotVirtualLoopError: no :class:`VirtualEventLoop` is running.
        TypeError: ``when_ns`` is not an int.
    """
    loop = _RUNNING.loop
    if loop is None:
        loop = _virtual_loop("sleep_until_ns")
    when = when_ns if type(when_ns) is int else _check_int("when_ns", when_ns, waiter, loop)
    if when <= loop._now_ns:
        loop._check_wakeup(when, waiter, when_ns, f"{when} ns")
    elif when > _MAX:
        loop._refuse_out_of_range(when, waiter, when_ns, f"{when} ns")
    future: asyncio.Future[None] = _Future(loop=loop)
    timer = loop._wakeup_timer(when, future, waiter, kind)
    try:
        await future
    except BaseException:
        timer.cancel()
        raise


async def sleep_ns(delay_ns: int, *, waiter: str, kind: WakeupKind = WakeupKind.OTHER) -> None:
    """Wait for ``delay_ns`` nanoseconds of virtual time.

    Args:
        delay_ns: how long to wait, in nanoseconds; 0 yields and resumes at this instant.
        waiter: who waits (shown in snapshots and errors).
        kind: why it waits.

    Raises:
        NonFiniteWakeupError: ``delay_ns`` is a NaN or infinite float.
        StaleWakeupError: ``delay_ns`` is negative.
        ClockRangeError: the instant is past :data:`simclock.MAX_TIME_NS`.
        StalledWaiterError: ``waiter`` asked for the current instant too many times.
        NotVirtualLoopError: no :class:`VirtualEventLoop` is running.
        TypeError: ``delay_ns`` is not an int.
    """
    loop = _RUNNING.loop
    if loop is None:
        loop = _virtual_loop("sleep_ns")
    delay = delay_ns if type(delay_ns) is int else _check_int("delay_ns", delay_ns, waiter, loop)
    when = loop._now_ns + delay
    if delay <= 0:
        loop._check_wakeup(when, waiter, delay_ns, f"{when} ns (a delay of {delay} ns)")
    elif when > _MAX:
        loop._refuse_out_of_range(when, waiter, delay_ns, f"{when} ns (a delay of {delay} ns)")
    future: asyncio.Future[None] = _Future(loop=loop)
    timer = loop._wakeup_timer(when, future, waiter, kind)
    try:
        await future
    except BaseException:
        timer.cancel()
        raise


def _check_float(name: str, value: object, waiter: str, loop: VirtualEventLoop) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise _non_finite(waiter, f"{name}={value!r}", value, loop._now_ns)
    return float(value)


async def sleep_until(when_s: float, *, waiter: str, kind: WakeupKind = WakeupKind.OTHER) -> None:
    """Wait until virtual instant ``when_s`` (float seconds, as ``loop.time()``).

    The instant maps to the first nanosecond at which ``loop.time()`` reads ``when_s`` or
    later (the roundest delay from now among equal readings), so ``sleep_until(loop.time() +
    0.004)`` waits exactly 4,000,000 ns however far from zero the clock is. Prefer
    :func:`sleep_until_ns` for exact instants.

    Args:
        when_s: the instant to wake at, in seconds.
        waiter: who waits (shown in snapshots and errors).
        kind: why it waits.

    Raises:
        NonFiniteWakeupError: ``when_s`` is NaN or infinite.
        StaleWakeupError: ``when_s`` is earlier than now.
        ClockRangeError: the instant is past :data:`simclock.MAX_TIME_NS`.
        StalledWaiterError: ``waiter`` asked for the current instant too many times.
        NotVirtualLoopError: no :class:`VirtualEventLoop` is running.
        TypeError: ``when_s`` is not a number.
    """
    loop = _virtual_loop("sleep_until")
    value = _check_float("when_s", when_s, waiter, loop)
    if value < loop._now_s:
        when = loop._now_ns + delay_to_ns(value - loop._now_s)
        loop._check_wakeup(min(when, loop._now_ns - 1), waiter, when_s, f"{value!r} s ({when} ns)")
    when = loop._seconds_to_ns(value) or loop._now_ns
    if when <= loop._now_ns:
        loop._check_wakeup(when, waiter, when_s, f"{value!r} s ({when} ns)")
    elif when > _MAX:
        loop._refuse_out_of_range(when, waiter, when_s, f"{value!r} s")
    future: asyncio.Future[None] = _Future(loop=loop)
    timer = loop._wakeup_timer(when, future, waiter, kind)
    try:
        await future
    except BaseException:
        timer.cancel()
        raise


async def sleep(delay_s: float, *, waiter: str, kind: WakeupKind = WakeupKind.OTHER) -> None:
    """Wait for ``delay_s`` seconds of virtual time (rounded to the nearest nanosecond).

    Args:
        delay_s: how long to wait, in seconds; 0 yields and resumes at this instant.
        waiter: who waits (shown in snapshots and errors).
        kind: why it waits.

    Raises:
        NonFiniteWakeupError: ``delay_s`` is NaN or infinite.
        StaleWakeupError: ``delay_s`` is negative.
        ClockRangeError: the instant is past :data:`simclock.MAX_TIME_NS`.
        StalledWaiterError: ``waiter`` asked for the current instant too many times.
        NotVirtualLoopError: no :class:`VirtualEventLoop` is running.
        TypeError: ``delay_s`` is not a number.
    """
    loop = _virtual_loop("sleep")
    value = _check_float("delay_s", delay_s, waiter, loop)
    when = loop._now_ns + delay_to_ns(value)
    if when <= loop._now_ns:
        loop._check_wakeup(when, waiter, delay_s, f"{when} ns (a delay of {value!r} s)")
    elif when > _MAX:
        loop._refuse_out_of_range(when, waiter, delay_s, f"a delay of {value!r} s")
    future: asyncio.Future[None] = _Future(loop=loop)
    timer = loop._wakeup_timer(when, future, waiter, kind)
    try:
        await future
    except BaseException:
        timer.cancel()
        raise


async def instant_end(*, priority: int = 0, waiter: str) -> None:
    """Wait until everything else at the current virtual instant has run.

    The waiter resumes when nothing is ready and no timer is due at this instant, before
    the clock may advance. Waiters resume one at a time, lowest ``(priority, sequence)``
    first; whatever a resumed waiter schedules at this instant runs before the next waiter
    resumes.

    Args:
        priority: lower resumes first (engines pass their index).
        waiter: who waits (shown in snapshots).

    Raises:
        NotVirtualLoopError: no :class:`VirtualEventLoop` is running.
        TypeError: ``priority`` is not an int.
    """
    loop = _virtual_loop("instant_end")
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise TypeError(f"priority must be an int, got {type(priority).__name__}")
    await loop._instant_end_wait(priority, waiter)


class Deadline:
    """A movable engine deadline on the running :class:`VirtualEventLoop`.

    An engine waits for the end of its pass (or of a run of passes) with :meth:`wait_until`;
    while it waits, :meth:`move` brings the wakeup earlier or later (for instance to the
    instant at which an input splits a run of passes). Deadlines due at one instant fire
    before every other timer due then, lowest ``rank`` first, so every pass that ends at an
    instant commits before anything else runs at that instant, in engine order.

    States: *idle*, or *armed* at one instant while :meth:`wait_until` waits.

    Args:
        waiter: who waits (shown in snapshots and errors).
        rank: the order among deadlines due at one instant (engines pass their index),
            ``0 <= rank <= 2**20 - 1``.

    Raises:
        NotVirtualLoopError: no :class:`VirtualEventLoop` is running.
        ValueError: ``rank`` is out of range.
    """

    __slots__ = ("_future", "_loop", "_previous", "_timer", "rank", "waiter")

    def __init__(self, *, waiter: str, rank: int) -> None:
        if (
            isinstance(rank, bool)
            or not isinstance(rank, int)
            or not 0 <= rank <= MAX_DEADLINE_RANK
        ):
            raise ValueError(f"rank must be an int in [0, {MAX_DEADLINE_RANK}], got {rank!r}")
        self._loop = _virtual_loop("Deadline")
        self.waiter = waiter
        self.rank = rank
        self._future: asyncio.Future[None] | None = None
        self._timer: _Timer | None = None
        self._previous: list[int | None] = []

    @property
    def armed_ns(self) -> int | None:
        """The instant the deadline is armed for, or ``None`` when idle."""
        timer = self._timer
        return None if timer is None else timer._when_ns

    async def wait_until(self, when_ns: int) -> None:
        """Wait until ``when_ns`` (or the instant :meth:`move` sets meanwhile).

        Raises:
            StaleWakeupError: ``when_ns`` is earlier than now.
            StalledWaiterError: the waiter asked for the current instant too many times.
            ClockRangeError: ``when_ns`` is past :data:`simclock.MAX_TIME_NS`.
        """
        loop = self._loop
        if when_ns <= loop._now_ns:
            loop._check_wakeup(when_ns, self.waiter, when_ns, f"{when_ns} ns")
        elif when_ns > _MAX:
            loop._refuse_out_of_range(when_ns, self.waiter, when_ns, f"{when_ns} ns")
        future: asyncio.Future[None] = _Future(loop=loop)
        self._future = future
        self._timer = loop._deadline_timer(when_ns, future, self.waiter, self.rank)
        try:
            await future
        finally:
            timer = self._timer
            if timer is not None and not future.done():
                timer.cancel()
            self._timer = None
            self._future = None

    def turn(self) -> Deadline:
        """Return a context manager for the holder's turn: what it does on its deadline.

        Inside it :meth:`VirtualEventLoop.deadline_turn` reports this deadline's rank, so that
        others can tell which holders due at this instant have acted (the lower ranks) and
        which have not (the higher ones)::

            await deadline.wait_until(end_ns)
            with deadline.turn():
                commit()
        """
        return self

    def __enter__(self) -> None:
        loop = self._loop
        self._previous.append(loop._deadline_turn)
        loop._deadline_turn = self.rank

    def __exit__(self, *exc: object) -> None:
        self._loop._deadline_turn = self._previous.pop()

    def move(self, when_ns: int) -> None:
        """Re-arm the pending wait for ``when_ns`` (no effect when idle).

        Raises:
            StaleWakeupError: ``when_ns`` is earlier than now.
            ClockRangeError: ``when_ns`` is past :data:`simclock.MAX_TIME_NS`.
        """
        future = self._future
        timer = self._timer
        if future is None or timer is None or future.done() or timer._when_ns == when_ns:
            return
        loop = self._loop
        if when_ns < loop._now_ns:
            loop._check_wakeup(when_ns, self.waiter, when_ns, f"{when_ns} ns")
        elif when_ns > _MAX:
            loop._refuse_out_of_range(when_ns, self.waiter, when_ns, f"{when_ns} ns")
        timer.cancel()
        self._timer = loop._deadline_timer(when_ns, future, self.waiter, self.rank)
