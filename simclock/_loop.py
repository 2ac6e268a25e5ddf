"""The virtual-time asyncio event loop.

:class:`VirtualEventLoop` is an :class:`asyncio.AbstractEventLoop` whose clock is an
integer count of nanoseconds that moves only when nothing else can happen. It owns its
ready queue, its timer heap and its run loop; it never waits in real time.

Scheduling, one iteration at a time:

1. timers due at the current instant leave the heap in ``(when_ns, sequence)`` order; a
   timer that only completes a future (``asyncio.sleep``, simclock wakeups) completes it
   there and then, any other timer's callback moves to the back of the ready queue;
2. the callbacks that are in the ready queue at that moment run, first in first out
   (callbacks they schedule run in the next iteration);
3. when the ready queue is empty and no timer is due, the lowest ``(priority, sequence)``
   waiter of :func:`simclock.instant_end` is released (one per iteration);
4. when there is nothing of the above, the clock jumps to the earliest pending timer;
5. when there is no pending timer either, the run has deadlocked: :class:`DeadlockError`.

Sequence numbers come from one counter per loop, so equal-time timers fire in the order
they were scheduled, with one exception: an engine deadline (:class:`simclock.Deadline`)
sorts before every other timer due at the same instant, lowest rank first, so every engine
pass that ends at an instant commits before anything else runs then, in engine order.
Nothing on this path depends on ``id()``, ``hash()`` or set order.

A loop given a ``seed`` changes one thing, rule 2: each batch of ready callbacks runs in an
order permuted by a generator seeded with it (callbacks woken by engine-deadline timers keep
their place at the head of the batch). Same seed, same order; no seed, first in first out.
The clock never passes ``end_ns``: the jump of rule 4 past it raises
:class:`VirtualTimeLimitError` instead.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import functools
import heapq
import itertools
import math
import os
import sys
import threading
from asyncio import events, futures
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, TypeVarTuple

import numpy as np

from ._diagnostics import interrupt_note, thread_notes, time_limit_error
from ._exceptions import (
    ClockConfigError,
    ClockRangeError,
    DeadlockError,
    InternalError,
    LivelockError,
    NonFiniteWakeupError,
    RealIOError,
    RealThreadError,
    StaleWakeupError,
    StalledWaiterError,
    VirtualTimeLimitError,
)
from ._inspect import (
    InstantEndWaiter,
    LoopSnapshot,
    LoopStats,
    PendingTimer,
    StepEvent,
    TaskInfo,
    WakeupKind,
    describe_callback,
    describe_task_wait,
    name_key,
)

__all__ = (
    "DEFAULT_LIVELOCK_BUDGET",
    "DEFAULT_STALL_BUDGET",
    "MAX_TIME_NS",
    "VirtualEventLoop",
)

_T = TypeVar("_T")
_Ts = TypeVarTuple("_Ts")

DEFAULT_STALL_BUDGET = 1000
"""Default number of wakeups one waiter may ask for at one instant before it counts as stalled."""

DEFAULT_LIVELOCK_BUDGET = 1_000_000
"""Default number of events the loop may run at one virtual instant before it is a livelock."""

MAX_TIME_NS = 2**63 - 1
"""The last instant of the clock's range: virtual time is an int64 count of nanoseconds."""

_LIVELOCK_WINDOW = 1000
"""Events watched, after the livelock budget is spent, to name the busiest waiters."""

_NS_PER_S = 1_000_000_000
#: An asyncio timer that ends past the clock's range never fires when it is further than
#: this from now (10**9 s, the longest delay call_later's fast path takes); a nearer one
#: stops the run at the range when it comes next.
_NEAR_NS = 10**18
#: A timer made at a clock reading (s) up to this and at most _NEAR_NS later ends inside the
#: clock's range; past it, the run loop checks every move against the range.
_FAST_PATH_END_S = float((MAX_TIME_NS - _NEAR_NS) // _NS_PER_S - 1)
_INF = math.inf
# Engine deadlines take sequence numbers below every ordinary one: this base, plus
# rank * _RANK_SPAN, plus the loop's running counter (so keys stay unique).
_DEADLINE_BASE = -(1 << 62)
_RANK_SPAN = 1 << 40
MAX_DEADLINE_RANK = (1 << 20) - 1
_ROUND_STEPS_NS: tuple[int, ...] = tuple(10**k for k in range(9, 0, -1))
# A module constant: reading a member off its Enum class runs Python code on every read.
_ENGINE_DEADLINE = WakeupKind.ENGINE_DEADLINE


class _Handle(events.Handle):
    """An asyncio handle that :meth:`VirtualEventLoop.call_soon` fills in without ``__init__``.

    Release mode only: it skips the debug-mode bookkeeping of :class:`asyncio.Handle`.
    """

    __slots__ = ()


_new_handle = object.__new__


class _Timer(events.TimerHandle):
    """A timer of the virtual loop: an asyncio ``TimerHandle`` that knows its instant in ns.

    ``when_ns`` is ``None`` for a timer at +inf, which never fires. ``waiter`` and ``kind``
    are set for simclock wakeups and ``None`` for plain asyncio timers.
    """

    __slots__ = ("_kind", "_sequence", "_waiter", "_when_ns")

    def __init__(
        self,
        when_ns: int | None,
        sequence: int,
        callback: Callable[..., object],
        args: tuple[Any, ...],
        loop: VirtualEventLoop,
        context: contextvars.Context | None,
        waiter: str | None,
        kind: WakeupKind | None,
    ) -> None:
        if loop._debug:
            events.Handle.__init__(self, callback, args, loop, context)
        else:
            self._context = contextvars.copy_context() if context is None else context
            self._loop = loop
            self._callback = callback
            self._args = args
            self._cancelled = False
            self._repr = None
            self._source_traceback = None
        self._when = _INF if when_ns is None else when_ns / _NS_PER_S
        self._scheduled = when_ns is not None
        self._when_ns = when_ns
        self._sequence = sequence
        self._waiter = waiter
        self._kind = kind

    def cancel(self) -> None:
        if not self._cancelled:
            self._cancelled = True
            if self._scheduled:
                self._scheduled = False
                loop = self._loop
                if isinstance(loop, VirtualEventLoop):
                    loop._timer_cancelled()
            self._callback = None  # type: ignore[assignment]
            self._args = None  # type: ignore[assignment]


class _Running(threading.local):
    """The :class:`VirtualEventLoop` running in this thread, or None.

    A mirror of asyncio's running loop, set and cleared with it by
    :meth:`VirtualEventLoop._running`. asyncio's own accessor makes a ``getpid()`` system
    call on every read (to notice a fork); engines, policies and the workload driver read the
    virtual clock hundreds of thousands of times in a replay, and a system call costs more
    than the rest of the read. A forked child starts with no loop running, as in asyncio.
    """

    loop: VirtualEventLoop | None = None


_RUNNING = _Running()


def _forget_running_loop() -> None:
    _RUNNING.loop = None


os.register_at_fork(after_in_child=_forget_running_loop)


def _scaled_midpoint(low: float, high: float) -> tuple[int, int]:
    """``(low + high) / 2 * 10**9`` as an exact fraction ``(numerator, denominator)``."""
    p1, q1 = low.as_integer_ratio()
    p2, q2 = high.as_integer_ratio()
    return (p1 * q2 + p2 * q1) * _NS_PER_S, 2 * q1 * q2


def _first_ns_reading(when: float) -> int:
    """The smallest ``n`` whose reading ``n / 10**9`` (a correctly rounded float) is ``>= when``.

    Computed from the midpoint between ``when`` and the float below it, then checked with
    the very division :meth:`VirtualEventLoop.time` uses; exact at any magnitude.
    """
    numerator, denominator = _scaled_midpoint(math.nextafter(when, -_INF), when)
    n = numerator // denominator
    while n / _NS_PER_S < when:
        n += 1
    while (n - 1) / _NS_PER_S >= when:
        n -= 1
    return n


def _last_ns_reading(reading: float) -> int:
    """The largest ``n`` whose reading ``n / 10**9`` is exactly ``reading``."""
    numerator, denominator = _scaled_midpoint(reading, math.nextafter(reading, _INF))
    n = -(-numerator // denominator)
    while n / _NS_PER_S > reading:
        n -= 1
    while (n + 1) / _NS_PER_S == reading:
        n += 1
    return n


def delay_to_ns(delay_s: float) -> int:
    """A finite delay in seconds as integer nanoseconds, rounded to the nearest (any size)."""
    try:
        return round(delay_s * _NS_PER_S)
    except OverflowError:  # beyond 1.8e299 s the product overflows a float
        whole = int(delay_s)
        return whole * _NS_PER_S + round((delay_s - whole) * _NS_PER_S)


def _new_timer(
    loop: VirtualEventLoop,
    when_ns: int,
    sequence: int,
    callback: Callable[..., object],
    args: tuple[Any, ...],
    context: contextvars.Context,
    waiter: str | None,
    kind: WakeupKind | None,
) -> _Timer:
    """A timer of ``loop`` that runs ``callback(*args)`` in ``context`` at ``when_ns``.

    In release mode its fields are set here rather than by ``_Timer.__init__`` (one Python
    call instead of three per engine deadline, wakeup and sleep); in debug mode ``__init__``
    records where it was made.
    """
    if loop._debug:
        return _Timer(when_ns, sequence, callback, args, loop, context, waiter, kind)
    timer: Any = _new_handle(_Timer)
    timer._context = context
    timer._loop = loop
    timer._callback = callback
    timer._args = args
    timer._cancelled = False
    timer._repr = None
    timer._source_traceback = None
    timer._when = when_ns / _NS_PER_S
    timer._scheduled = True
    timer._when_ns = when_ns
    timer._sequence = sequence
    timer._waiter = waiter
    timer._kind = kind
    return timer  # type: ignore[no-any-return]


def _non_finite(waiter: str, requested: str, value: float, now_ns: int) -> NonFiniteWakeupError:
    """The error of a wakeup asked for at a non-finite time (``requested`` says what)."""
    return NonFiniteWakeupError(
        f"non-finite wakeup for waiter {waiter!r}: requested {requested}, now is {now_ns} ns",
        waiter=waiter,
        requested=value,
        now_ns=now_ns,
    )


def _check_int(name: str, value: object, waiter: str, loop: VirtualEventLoop) -> int:
    """``value`` as an int of nanoseconds, or the error a simclock wakeup raises for it."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and not math.isfinite(value):
        raise _non_finite(waiter, f"{name}={value!r}", value, loop._now_ns)
    raise TypeError(f"{name} must be an int of nanoseconds, got {type(value).__name__}")


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


_set_result_unless_cancelled = futures._set_result_unless_cancelled  # type: ignore[attr-defined]
_COMPLETERS = (_wake, _set_result_unless_cancelled)
"""Timer callbacks that only complete a future; they fire as soon as they come due."""


def _refuse(name: str) -> Any:
    def refused(self: VirtualEventLoop, *args: Any, **kwargs: Any) -> Any:
        raise RealIOError(name)

    refused.__name__ = name
    refused.__qualname__ = f"VirtualEventLoop.{name}"
    refused.__doc__ = "Refused: raises :class:`RealIOError` (real I/O has no virtual time)."
    return refused


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_options(
    start_ns: object,
    stall_budget: object,
    livelock_budget: object,
    *,
    end_ns: object = None,
    seed: object = None,
) -> str | None:
    """The problem with the loop options, or ``None`` when they are fine."""
    if not _is_int(start_ns) or start_ns < 0:  # type: ignore[operator]
        return f"start_ns must be an int >= 0, got {start_ns!r}"
    if start_ns > MAX_TIME_NS:  # type: ignore[operator]
        return f"start_ns must be at most 2**63 - 1 (the clock's range), got {start_ns!r}"
    if end_ns is not None and (
        not _is_int(end_ns) or not start_ns <= end_ns <= MAX_TIME_NS  # type: ignore[operator]
    ):
        return f"end_ns must be an int from start_ns ({start_ns}) to 2**63 - 1, got {end_ns!r}"
    if seed is not None and (not _is_int(seed) or seed < 0):  # type: ignore[operator]
        return f"seed must be an int >= 0 or None, got {seed!r}"
    for name, budget in (("stall_budget", stall_budget), ("livelock_budget", livelock_budget)):
        if budget is not None and (
            isinstance(budget, bool) or not isinstance(budget, int) or budget < 1
        ):
            return f"{name} must be an int >= 1 or None, got {budget!r}"
    return None


def _end_s_to_ns(end_s: object, end_ns: object, start_ns: int) -> tuple[int | None, str | None]:
    """``end_s`` as integer nanoseconds, or the problem with it."""
    if end_ns is not None:
        return None, "give end_ns or end_s, not both"
    if (
        isinstance(end_s, bool)
        or not isinstance(end_s, (int, float))
        or not math.isfinite(end_s)
        or end_s < 0
    ):
        return None, f"end_s must be a finite number of seconds >= 0, got {end_s!r}"
    when = delay_to_ns(end_s)
    if not start_ns <= when <= MAX_TIME_NS:
        return None, (
            f"end_s must be from the start ({start_ns / _NS_PER_S:g} s) to the end of the "
            f"clock's range (2**63 - 1 ns), got {end_s!r}"
        )
    return when, None


class VirtualEventLoop(asyncio.BaseEventLoop):
    """An asyncio event loop on a deterministic virtual clock.

    Time is an integer count of nanoseconds (:meth:`time_ns`); :meth:`time` returns the same
    instant in float seconds. The clock moves only when nothing is ready, straight to the
    earliest pending timer; it never waits in real time. The scheduling order is total: see
    the module documentation (timers by ``(when_ns, sequence)``, ready callbacks first in
    first out).

    States: *idle* (created, or between runs and steps), *running* (inside
    :meth:`run_forever`, :meth:`run_until_complete` or a stepping method), *closed*. A run
    that ends with nothing ready, no timer pending and the run unfinished raises
    :class:`DeadlockError`; more than ``livelock_budget`` events at one instant raise
    :class:`LivelockError`.

    Real I/O (sockets, pipes, subprocesses, signal handlers, file-descriptor readers and
    writers, name resolution) raises :class:`RealIOError`. :meth:`run_in_executor` runs the
    function inline, at the current instant, and returns a finished future.

    Args:
        start_ns: the virtual time the clock starts at, in nanoseconds (``>= 0``).
        stall_budget: how many times one waiter may ask for the current instant (with
            :func:`simclock.sleep_until_ns` and friends) while the clock stays there before
            :class:`StalledWaiterError` is raised; ``None`` disables the check. Default
            :data:`DEFAULT_STALL_BUDGET` (1000).
        livelock_budget: how many events may run at one virtual instant before
            :class:`LivelockError` is raised; ``None`` disables the check. Default
            :data:`DEFAULT_LIVELOCK_BUDGET` (1,000,000).
        end_ns: the end of virtual time, in nanoseconds: when the clock would jump past it,
            the run raises :class:`VirtualTimeLimitError` listing every unfinished task.
            ``None`` (the default) leaves only the clock's range, :data:`MAX_TIME_NS`.
        end_s: the same instant in seconds (rounded to the nearest nanosecond); give
            ``end_ns`` or ``end_s``, not both.
        seed: when given, each batch of ready callbacks runs in an order permuted by a
            generator seeded with it, instead of first in first out (schedule exploration;
            see the module documentation). ``None`` (the default) keeps FIFO.
        report_interrupts: on ``KeyboardInterrupt`` inside the run, also print the virtual
            time and the unfinished tasks to stderr (they are always added to the
            exception as a note). An application that reports interrupts itself (the
            ``simclock replay`` command) passes ``False``.

    Raises:
        ClockConfigError: an option is out of range.
    """

    _ready: collections.deque[events.Handle]
    _stopping: bool
    _debug: bool
    _thread_id: int | None
    _default_executor: Any
    _executor_shutdown_called: bool

    def __init__(
        self,
        *,
        start_ns: int = 0,
        stall_budget: int | None = DEFAULT_STALL_BUDGET,
        livelock_budget: int | None = DEFAULT_LIVELOCK_BUDGET,
        end_ns: int | None = None,
        end_s: float | None = None,
        seed: int | None = None,
        report_interrupts: bool = True,
    ) -> None:
        problem = _check_options(start_ns, stall_budget, livelock_budget, end_ns=end_ns, seed=seed)
        if problem is None and end_s is not None:
            end_ns, problem = _end_s_to_ns(end_s, end_ns, start_ns)
        super().__init__()
        if problem is not None:
            self._closed = True  # nothing to release; keeps __del__ quiet
            raise ClockConfigError(problem)
        self._now_ns: int = start_ns
        self._now_s = start_ns / _NS_PER_S
        self._stall_budget: int = sys.maxsize if stall_budget is None else stall_budget
        self._livelock_budget: int = sys.maxsize if livelock_budget is None else livelock_budget
        self._timers: list[tuple[int, int, _Timer]] = []
        self._infinite_timers: list[_Timer] = []
        self._cancelled_timers = 0
        self._sequence = itertools.count()
        self._instant_end: list[tuple[int, int, asyncio.Future[None], str]] = []
        self._instant_end_level: int | None = None
        # the rank of the simclock.Deadline whose holder is taking its turn (Deadline.turn)
        self._deadline_turn: int | None = None
        # run_until is checking its predicate, between callbacks
        self._observing = False
        self._stall_counts: dict[str, int] = {}
        self._batch_left = 0
        self._instant_mark = 0
        self._events = 0
        self._timers_fired = 0
        self._clock_advances = 0
        self._instant_end_wakeups = 0
        self._wakeup_context = contextvars.Context()
        self._end_ns: int = MAX_TIME_NS if end_ns is None else end_ns
        # the clock watch (watch_clock): the callback, its period in ns and in clock moves,
        # and the next instant / move count at which it is due
        self._watch: Callable[[int], object] | None = None
        self._watch_ns = 0
        self._watch_moves = 0
        self._watch_at_ns = MAX_TIME_NS
        self._watch_at_moves = sys.maxsize
        self._limit_ns: int = self._end_ns
        # whether a timer may end past the clock's range (the clock is near its end)
        self._near_end = self._now_s > _FAST_PATH_END_S
        self._guarded: bool  # set by _set_guard
        self._set_guard()
        self._seed = seed
        self._rng = None if seed is None else np.random.default_rng(seed)
        self._home_thread = threading.get_ident()
        self._thread_refusals: list[str] = []
        self._report_interrupt_to_stderr = bool(report_interrupts)
        # A C-level callable instead of a Python method: asyncio.sleep and every queue
        # and lock call it, and the loop's cost per event is what the benchmark measures.
        self.create_future = functools.partial(asyncio.Future, loop=self)  # type: ignore[method-assign]

    def set_debug(self, enabled: bool) -> None:
        """Turn asyncio debug mode on or off (as :meth:`asyncio.BaseEventLoop.set_debug`)."""
        super().set_debug(enabled)
        # Every Future and Task asks the loop get_debug() when it is created; a C-level
        # callable answers without a Python frame.
        self.get_debug = itertools.repeat(bool(enabled)).__next__  # type: ignore[method-assign]

    # ------------------------------------------------------------------ the clock

    def time(self) -> float:
        """The virtual time in seconds (a float derived from :meth:`time_ns`)."""
        return self._now_s

    def time_ns(self) -> int:
        """The virtual time in integer nanoseconds."""
        return self._now_ns

    def _advance(self, when_ns: int) -> None:
        if when_ns < self._now_ns:
            raise InternalError(f"clock would go back from {self._now_ns} ns to {when_ns} ns")
        if self._guarded and (
            when_ns > self._limit_ns or self._clock_advances >= self._watch_at_moves
        ):
            self._cross(when_ns)
        if when_ns != self._now_ns:
            self._now_ns = when_ns
            self._now_s = now_s = when_ns / _NS_PER_S
            if now_s > _FAST_PATH_END_S:
                self._near_end = self._guarded = True
            self._clock_advances += 1
            self._instant_mark = self._events
            self._instant_end_level = None
            if self._stall_counts:
                self._stall_counts = {}

    # ------------------------------------------------------------------ scheduling

    def call_soon(
        self,
        callback: Callable[[*_Ts], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> events.Handle:
        """Schedule ``callback(*args)`` to run in the next iteration (first in, first out)."""
        if self._closed:
            raise RuntimeError("Event loop is closed")
        if self._debug:
            return super().call_soon(callback, *args, context=context)
        handle: Any = _new_handle(_Handle)
        handle._context = contextvars.copy_context() if context is None else context
        handle._loop = self
        handle._callback = callback
        handle._args = args
        handle._cancelled = False
        handle._repr = None
        handle._source_traceback = None
        self._ready.append(handle)
        return handle  # type: ignore[no-any-return]

    def call_later(
        self,
        delay: float,
        callback: Callable[[*_Ts], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> events.TimerHandle:
        """Schedule ``callback(*args)`` ``delay`` seconds of virtual time from now.

        A negative delay (even ``-inf``) runs at the current instant, as in asyncio;
        ``+inf``, and a delay of more than 10**9 s that ends past :data:`MAX_TIME_NS`, never
        fire; a shorter one that ends past it stops the run (:class:`VirtualTimeLimitError`)
        when the clock would move to it.

        Raises:
            NonFiniteWakeupError: ``delay`` is NaN.
        """
        if delay > 0.0:
            if delay == _INF:
                return self._schedule(None, callback, args, context, None, None)
            if self._closed or self._debug or delay > 1e9:
                return self._schedule(
                    self._now_ns + (delay_to_ns(delay) or 1),
                    callback,
                    args,
                    context,
                    None,
                    None,
                )
            # The fast path of asyncio.sleep: the timer made in line, not by _new_timer (one
            # Python call less per sleep: 1.8 % of bench/loop.py's timers instructions). A
            # positive delay moves at least 1 ns, so rescheduling loops always make progress.
            when_ns = self._now_ns + (round(delay * _NS_PER_S) or 1)
            sequence = next(self._sequence)
            if context is None:
                context = (
                    self._wakeup_context if callback in _COMPLETERS else contextvars.copy_context()
                )
            timer: Any = _new_handle(_Timer)
            timer._context = context
            timer._loop = self
            timer._callback = callback
            timer._args = args
            timer._cancelled = False
            timer._repr = None
            timer._source_traceback = None
            timer._when = when_ns / _NS_PER_S
            timer._scheduled = True
            timer._when_ns = when_ns
            timer._sequence = sequence
            timer._waiter = None
            timer._kind = None
            heapq.heappush(self._timers, (when_ns, sequence, timer))
            return timer  # type: ignore[no-any-return]
        if delay != delay:
            waiter = describe_callback(callback)
            raise _non_finite(waiter, f"a delay of {delay!r} s", delay, self._now_ns)
        return self._schedule(self._now_ns, callback, args, context, None, None)

    def call_at(
        self,
        when: float,
        callback: Callable[[*_Ts], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> events.TimerHandle:
        """Schedule ``callback(*args)`` at virtual time ``when`` (seconds, as :meth:`time`).

        An instant in the past runs at the current instant; ``+inf`` (and an instant past
        :data:`MAX_TIME_NS` more than 10**9 s from now) never fires and ``-inf`` runs now; a
        nearer instant past the range stops the run as :meth:`call_later` says.

        Raises:
            NonFiniteWakeupError: ``when`` is NaN.
        """
        if when != when:
            waiter = describe_callback(callback)
            raise _non_finite(waiter, f"the instant {when!r} s", when, self._now_ns)
        return self._schedule(self._seconds_to_ns(when), callback, args, context, None, None)

    def _seconds_to_ns(self, when: float) -> int | None:
        """Map an instant in float seconds (as :meth:`time` reads) to integer nanoseconds.

        The result is the instant at which :meth:`time` first reads ``when`` or later, so a
        callback scheduled for ``when`` always sees ``time() >= when`` (code that reschedules
        until a deadline has passed cannot stall). Far from zero many nanoseconds read as the
        same float; among them the one at the roundest delay from now is chosen, so
        ``time() + 0.004`` lands exactly 4,000,000 ns from now at 10^9 s as at 0. Instants
        in the past map to now; +inf maps to ``None`` (never).
        """
        now = self._now_ns
        if when <= self._now_s:
            return now
        if when == _INF:
            return None
        first = _first_ns_reading(when)
        last = _last_ns_reading(first / _NS_PER_S)
        if last > first:
            for step in _ROUND_STEPS_NS:
                delay = -(-(first - now) // step) * step
                if now + delay <= last:
                    return now + delay
        return first

    def _schedule(
        self,
        when_ns: int | None,
        callback: Callable[..., object],
        args: tuple[Any, ...],
        context: contextvars.Context | None,
        waiter: str | None,
        kind: WakeupKind | None,
    ) -> _Timer:
        if self._closed:
            raise RuntimeError("Event loop is closed")
        if when_ns is not None and when_ns - self._now_ns > _NEAR_NS and when_ns > MAX_TIME_NS:
            # Far past the end of the clock's range: never, like +inf. Libraries use huge
            # timeouts (sys.maxsize seconds) to mean "no timeout"; simclock's own wakeups
            # refuse such instants at the call instead (ClockRangeError). A nearer one (as
            # call_later's fast path makes) stops the run at the range when it comes next.
            when_ns = None
        sequence = next(self._sequence)
        timer = _Timer(when_ns, sequence, callback, args, self, context, waiter, kind)
        if when_ns is None:
            live = [t for t in self._infinite_timers if not t._cancelled]
            live.append(timer)
            self._infinite_timers = live
        else:
            heapq.heappush(self._timers, (when_ns, sequence, timer))
        return timer

    def _timer_cancelled(self) -> None:
        self._cancelled_timers += 1
        timers = self._timers
        if self._cancelled_timers > 100 and self._cancelled_timers * 2 > len(timers):
            # In place: the run loop holds a reference to this list.
            timers[:] = [entry for entry in timers if not entry[2]._cancelled]
            heapq.heapify(timers)
            self._cancelled_timers = 0

    def _timer_handle_cancelled(self, handle: events.TimerHandle) -> None:
        # Only reached for TimerHandles that are not ours (never scheduled here).
        pass

    def call_soon_threadsafe(
        self,
        callback: Callable[[*_Ts], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> events.Handle:
        """Like :meth:`call_soon`, from the thread that runs the loop (or a signal handler).

        Raises:
            RealThreadError: called from another thread. Threads run in real time, which
                the virtual clock never waits for; the refusal is also reported by the loop
                when it deadlocks or reaches its end of virtual time.
        """
        if self._closed:
            raise RuntimeError("Event loop is closed")
        current = threading.current_thread()
        if current.ident != self._home_thread:
            call = f"call_soon_threadsafe({describe_callback(callback)})"
            self._thread_refusals.append(f"{call} from thread {current.name!r}")
            raise RealThreadError(
                f"VirtualEventLoop.{call} was called from thread {current.name!r}, not the "
                "thread that runs the loop: real threads have no virtual time, so a callback "
                "handed over from one would land at a machine-dependent instant; run the "
                "function inline (loop.run_in_executor, asyncio.to_thread) instead",
                call=call,
                thread=current.name,
            )
        handle = events.Handle(callback, args, self, context)
        self._ready.append(handle)
        return handle

    def _refuse_out_of_range(self, when_ns: int, waiter: str, requested: object, text: str) -> None:
        """Raise :class:`ClockRangeError` for a wakeup past :data:`MAX_TIME_NS`."""
        raise ClockRangeError(
            f"wakeup out of range for waiter {waiter!r}: requested {text}, past the end of "
            f"the clock's range (2**63 - 1 ns, about 292 years); now is {self._now_ns} ns",
            waiter=waiter,
            requested=requested,
            now_ns=self._now_ns,
        )

    def _write_to_self(self) -> None:
        # The virtual loop never blocks waiting for I/O, so there is nothing to wake up.
        pass

    def _process_events(self, event_list: list[Any]) -> None:
        pass

    # ------------------------------------------------------------------ simclock wakeups

    def _check_wakeup(self, when_ns: int, waiter: str, requested: object, text: str) -> None:
        """Refuse a stale wakeup; count (and refuse past the budget) one for the current instant.

        Only called for ``when_ns <= now``; later instants need no check.
        """
        now = self._now_ns
        if when_ns < now:
            raise StaleWakeupError(
                f"stale wakeup for waiter {waiter!r}: requested {text}, which is before now "
                f"({now} ns)",
                waiter=waiter,
                requested=requested,
                now_ns=now,
            )
        count = self._stall_counts.get(waiter, 0) + 1
        if count > self._stall_budget:
            raise StalledWaiterError(
                f"stalled waiter {waiter!r}: requested {text}, the current instant, {count} "
                f"times while the clock stayed at {now} ns (stall budget {self._stall_budget})",
                waiter=waiter,
                requested=requested,
                now_ns=now,
            )
        self._stall_counts[waiter] = count

    def _wakeup_timer(
        self, when_ns: int, future: asyncio.Future[None], waiter: str, kind: WakeupKind
    ) -> _Timer:
        """Schedule the timer of a validated simclock wakeup (``when_ns >= now``)."""
        if self._closed:
            raise RuntimeError("Event loop is closed")
        sequence = next(self._sequence)
        timer = _new_timer(
            self, when_ns, sequence, _wake, (future,), self._wakeup_context, waiter, kind
        )
        heapq.heappush(self._timers, (when_ns, sequence, timer))
        return timer

    def wake_at_ns(
        self,
        future: asyncio.Future[Any],
        when_ns: int,
        *,
        waiter: str,
        kind: WakeupKind = WakeupKind.OTHER,
    ) -> events.TimerHandle:
        """Complete ``future`` (result ``None``) at virtual instant ``when_ns``, unless it is
        done by then.

        For a coroutine that waits for an instant or for something earlier, whichever comes
        first: it awaits one future that both complete, with no task sleeping beside it and
        no :func:`asyncio.wait`. The instant is validated and ordered exactly as
        :func:`simclock.sleep_until_ns` validates and orders its own. Cancel the returned timer
        once the future completed otherwise (left pending, it fires and finds it done).

        Args:
            future: the future to complete (of this loop).
            when_ns: the instant, in nanoseconds.
            waiter: who waits (shown in snapshots and errors).
            kind: why it waits.

        Raises:
            NonFiniteWakeupError: ``when_ns`` is a NaN or infinite float.
            StaleWakeupError: ``when_ns`` is earlier than now.
            ClockRangeError: ``when_ns`` is past :data:`MAX_TIME_NS`.
            StalledWaiterError: ``waiter`` asked for the current instant too many times.
            TypeError: ``when_ns`` is not an int.
        """
        when = when_ns if type(when_ns) is int else _check_int("when_ns", when_ns, waiter, self)
        if when <= self._now_ns:
            self._check_wakeup(when, waiter, when_ns, f"{when} ns")
        elif when > MAX_TIME_NS:
            self._refuse_out_of_range(when, waiter, when_ns, f"{when} ns")
        return self._wakeup_timer(when, future, waiter, kind)

    def _deadline_timer(
        self, when_ns: int, future: asyncio.Future[None], waiter: str, rank: int
    ) -> _Timer:
        """Schedule an engine deadline (``when_ns >= now``): it sorts before every ordinary
        timer due at the same instant, lowest ``rank`` first."""
        if self._closed:
            raise RuntimeError("Event loop is closed")
        sequence = _DEADLINE_BASE + rank * _RANK_SPAN + next(self._sequence) % _RANK_SPAN
        context = self._wakeup_context
        kind = _ENGINE_DEADLINE
        timer = _new_timer(self, when_ns, sequence, _wake, (future,), context, waiter, kind)
        heapq.heappush(self._timers, (when_ns, sequence, timer))
        return timer

    def watch_clock(
        self,
        callback: Callable[[int], object] | None,
        *,
        every_ns: int = MAX_TIME_NS,
        every_moves: int = sys.maxsize,
    ) -> None:
        """Call ``callback(when_ns)`` as the clock moves, at most every ``every_ns`` of virtual
        time and every ``every_moves`` moves of the clock, whichever comes first.

        The call happens just before the clock moves to ``when_ns`` (nothing else runs in
        between); an exception it raises ends the run there, as a time limit does. It adds no
        callback to the loop, so it changes no order. ``None`` removes the watch.

        Raises:
            ClockConfigError: a period is not an int >= 1.
        """
        for name, value in (("every_ns", every_ns), ("every_moves", every_moves)):
            if not _is_int(value) or value < 1:
                raise ClockConfigError(f"{name} must be an int >= 1, got {value!r}")
        self._watch = callback
        self._watch_ns = every_ns
        self._watch_moves = every_moves
        self._arm_watch()

    def _arm_watch(self) -> None:
        if self._watch is None:
            self._watch_at_ns = MAX_TIME_NS
            self._watch_at_moves = sys.maxsize
        else:
            self._watch_at_ns = min(MAX_TIME_NS, self._now_ns + self._watch_ns)
            self._watch_at_moves = self._clock_advances + self._watch_moves
        self._limit_ns = min(self._end_ns, self._watch_at_ns - 1)
        self._set_guard()

    def _set_guard(self) -> None:
        """Note whether a clock move can cross the end of time, the clock's range or a watch
        point: when not, the run loops leave out the check of each move."""
        self._guarded = self._near_end or self._watch is not None or self._end_ns < MAX_TIME_NS

    def _cross(self, when_ns: int) -> None:
        """The clock is about to move to ``when_ns`` past the end of time or a watch point."""
        if when_ns > self._end_ns:
            raise self._time_limit_error(when_ns)
        watch = self._watch
        if watch is not None and (
            when_ns >= self._watch_at_ns or self._clock_advances >= self._watch_at_moves
        ):
            self._arm_watch()
            watch(when_ns)

    def instant_events(self) -> int:
        """Callbacks run since the clock reached the current instant (0: nothing has run at
        this instant yet)."""
        return self._events - self._instant_mark

    def _observe(self, predicate: Callable[[], bool]) -> bool:
        """Call ``predicate`` between callbacks (see :meth:`in_callback`)."""
        self._observing = True
        try:
            return predicate()
        finally:
            self._observing = False

    def in_callback(self) -> bool:
        """Whether one of this loop's callbacks is running now: False when the loop is not
        running, and between callbacks (while :meth:`run_until` checks its predicate)."""
        return not self._observing and _RUNNING.loop is self

    def deadline_turn(self) -> int | None:
        """The rank of the :class:`simclock.Deadline` whose holder is taking its turn now
        (inside :meth:`Deadline.turn <simclock.Deadline.turn>`), or ``None``.

        Deadlines due at one instant fire in rank order, so while the holder of rank ``r``
        acts on its deadline, the holders of higher ranks due at this instant have not acted
        yet, and those of lower ranks have.
        """
        return self._deadline_turn

    def instant_end_level(self) -> int | None:
        """The priority of the last :func:`simclock.instant_end` waiter released at the
        current instant, or ``None`` when none has been released since the clock moved here.

        Every waiter of a lower ``(priority, sequence)`` that was waiting then has resumed.
        """
        return self._instant_end_level

    def _instant_end_wait(self, priority: int, waiter: str) -> asyncio.Future[None]:
        future: asyncio.Future[None] = self.create_future()
        heapq.heappush(self._instant_end, (priority, next(self._sequence), future, waiter))
        return future

    # ------------------------------------------------------------------ running

    @contextlib.contextmanager
    def _running(self) -> Iterator[None]:
        """Be the running loop of this thread for the duration of the block."""
        self._check_closed()  # type: ignore[attr-defined]
        self._check_running()  # type: ignore[attr-defined]
        self._set_coroutine_origin_tracking(self._debug)  # type: ignore[attr-defined]
        old_hooks = sys.get_asyncgen_hooks()
        try:
            self._thread_id = self._home_thread = threading.get_ident()
            sys.set_asyncgen_hooks(
                firstiter=self._asyncgen_firstiter_hook,  # type: ignore[attr-defined]
                finalizer=self._asyncgen_finalizer_hook,  # type: ignore[attr-defined]
            )
            events._set_running_loop(self)
            _RUNNING.loop = self
            yield
        except KeyboardInterrupt as exc:
            self._report_interrupt(exc)
            raise
        finally:
            self._stopping = False
            self._thread_id = None
            events._set_running_loop(None)
            _RUNNING.loop = None
            self._set_coroutine_origin_tracking(False)  # type: ignore[attr-defined]
            sys.set_asyncgen_hooks(*old_hooks)

    def run_forever(self) -> None:
        """Run until :meth:`stop` is called.

        Raises:
            DeadlockError: nothing is ready, no timer is pending and the loop was not stopped.
            LivelockError: more than ``livelock_budget`` events ran at one virtual instant.
            VirtualTimeLimitError: the clock would jump past ``end_ns``.
        """
        with self._running():
            if self._rng is None:
                self._run_until_stopped()
            else:
                self._run_until_stopped_stepwise()

    def _run_until_stopped_stepwise(self) -> None:
        """The run loop of a seeded loop: :meth:`_run_one` until stopped, batch by batch."""
        __tracebackhide__ = True  # pytest: a failure shows the test's frames, not this loop
        while True:
            if self._run_one(advance=not self._stopping) is None:
                if self._stopping:
                    break
                raise self._deadlock_error()
            if self._events - self._instant_mark > self._livelock_budget:
                self._raise_livelock()
            if self._stopping and not self._batch_left:
                break

    def _run_until_stopped(self) -> None:
        __tracebackhide__ = True  # pytest: a failure shows the test's frames, not this loop
        # The hot loop. It inlines Handle._run, moving due timers and advancing the clock,
        # and must keep exactly the order of _run_one (the stepping path); tests compare them.
        ready = self._ready
        timers = self._timers
        popleft = ready.popleft
        append = ready.append
        heappop = heapq.heappop
        set_unless_cancelled = _set_result_unless_cancelled
        wake = _wake
        budget = self._livelock_budget
        ntodo = self._batch_left
        self._batch_left = 0
        while True:
            if not ntodo:
                now = self._now_ns
                if timers and timers[0][0] <= now:
                    fired = 0
                    while timers and timers[0][0] <= now:
                        timer: Any = heappop(timers)[2]
                        if timer._cancelled:
                            self._cancelled_timers -= 1
                            continue
                        timer._scheduled = False
                        fired += 1
                        callback = timer._callback
                        if callback is set_unless_cancelled:
                            # A timer that only completes a future fires as it comes due;
                            # this is futures._set_result_unless_cancelled, inlined.
                            self._events += 1
                            future = timer._args[0]
                            if not future.cancelled():
                                try:
                                    future.set_result(timer._args[1])
                                except BaseException as exc:
                                    self._report_callback_error(timer, exc)
                        elif callback is wake:
                            self._events += 1  # _wake, inlined
                            future = timer._args[0]
                            if not future.done():
                                future.set_result(None)
                        else:
                            append(timer)
                    self._timers_fired += fired
                ntodo = len(ready)
                if not ntodo:
                    if self._stopping:
                        break
                    if self._instant_end or not timers or timers[0][2]._cancelled:
                        if self._idle_transition():
                            continue
                        raise self._deadlock_error()
                    # self._advance inlined; the heap top is the earliest live timer.
                    now = timers[0][0]
                    # read each time: a watch may be set from inside the run
                    if self._guarded and (
                        now > self._limit_ns or self._clock_advances >= self._watch_at_moves
                    ):
                        self._cross(now)
                    self._now_ns = now
                    self._now_s = now_s = now / _NS_PER_S
                    if now_s > _FAST_PATH_END_S:
                        self._near_end = self._guarded = True
                    self._clock_advances += 1
                    self._instant_mark = self._events
                    self._instant_end_level = None
                    if self._stall_counts:
                        self._stall_counts = {}
                    continue
            ran = ntodo
            while ntodo:
                ntodo -= 1
                handle: Any = popleft()
                if handle._cancelled:
                    ran -= 1
                    continue
                try:
                    handle._context.run(handle._callback, *handle._args)
                except (SystemExit, KeyboardInterrupt):
                    self._batch_left = ntodo
                    self._events += ran - ntodo
                    raise
                except BaseException as exc:
                    self._report_callback_error(handle, exc)
            self._events += ran
            if self._events - self._instant_mark > budget:
                self._raise_livelock()
            if self._stopping:
                break

    def _idle_transition(self) -> bool:
        """Nothing is ready and no timer is due: release an instant-end waiter or advance.

        Returns:
            False when there is nothing left to do at all (no waiter, no pending timer).
        """
        waiting = self._instant_end
        while waiting:
            priority, _, future, _ = heapq.heappop(waiting)
            if future.done():
                continue
            future.set_result(None)
            self._instant_end_level = priority
            self._instant_end_wakeups += 1
            return True
        timers = self._timers
        while timers and timers[0][2]._cancelled:
            heapq.heappop(timers)
            self._cancelled_timers -= 1
        if timers:
            self._advance(timers[0][0])
            return True
        return False

    def _has_work_now(self) -> bool:
        """Is there anything to run at the current instant (before the clock may advance)?"""
        if self._batch_left or self._ready:
            return True
        timers = self._timers
        if timers and timers[0][0] <= self._now_ns:
            return True
        return any(not entry[2].done() for entry in self._instant_end)

    def _run_one(self, *, advance: bool) -> str | None:
        """Run the next callback, in exactly the order of :meth:`_run_until_stopped`.

        Args:
            advance: whether the clock may move forward to reach the next callback.

        Returns:
            A label of what ran (see :meth:`_label`), or ``None`` when nothing can run
            (without advancing, when ``advance`` is false).
        """
        ready = self._ready
        timers = self._timers
        while True:
            if not self._batch_left:
                now = self._now_ns
                pinned = 0
                while timers and timers[0][0] <= now:
                    timer = heapq.heappop(timers)[2]
                    if timer._cancelled:
                        self._cancelled_timers -= 1
                        continue
                    timer._scheduled = False
                    self._timers_fired += 1
                    if timer._callback in _COMPLETERS:
                        # A timer that only completes a future fires as it comes due.
                        self._events += 1
                        try:
                            timer._callback(*timer._args)
                        except (SystemExit, KeyboardInterrupt):
                            raise
                        except BaseException as exc:
                            self._report_callback_error(timer, exc)
                    else:
                        ready.append(timer)
                    if timer._kind is _ENGINE_DEADLINE:
                        pinned = len(ready)
                if self._rng is not None and len(ready) - pinned > 1:
                    self._permute_ready(pinned)
                self._batch_left = len(ready)
                if not self._batch_left:
                    if not advance and not any(not e[2].done() for e in self._instant_end):
                        return None
                    if self._idle_transition():
                        continue
                    return None
            handle: Any = ready.popleft()
            self._batch_left -= 1
            if handle._cancelled:
                continue
            label = self._label(handle)
            self._events += 1
            try:
                handle._context.run(handle._callback, *handle._args)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._report_callback_error(handle, exc)
            return label

    def _permute_ready(self, pinned: int) -> None:
        """Seeded mode: shuffle the ready queue after its first ``pinned`` callbacks.

        The pinned head holds what engine-deadline timers woke, which keeps its place.
        """
        ready = self._ready
        batch = list(ready)
        tail = batch[pinned:]
        rng = self._rng
        if rng is None:
            raise InternalError("the ready queue is permuted only by a seeded loop")
        order = rng.permutation(len(tail))
        ready.clear()
        ready.extend(batch[:pinned])
        ready.extend(tail[int(i)] for i in order)

    def _report_callback_error(self, handle: Any, exc: BaseException) -> None:
        self.call_exception_handler(
            {
                "message": f"Exception in callback {describe_callback(handle._callback)}",
                "exception": exc,
                "handle": handle,
            }
        )

    @staticmethod
    def _label(handle: Any) -> str:
        """Who a callback runs for: a task's name, a simclock waiter, or the callback."""
        if isinstance(handle, _Timer) and handle._waiter is not None:
            return f"waiter {handle._waiter!r}"
        return describe_callback(handle._callback)

    def _raise_livelock(self) -> None:
        """Watch a short window of further events to name the busiest waiters, then raise."""
        counts: dict[str, int] = {}
        watched = 0
        while watched < _LIVELOCK_WINDOW:
            label = self._run_one(advance=False)
            if label is None:
                break
            watched += 1
            counts[label] = counts.get(label, 0) + 1
        busiest = tuple(sorted(counts.items(), key=lambda item: -item[1])[:3])
        names = ", ".join(f"{label} ({n} events)" for label, n in busiest) or "none"
        # A fresh budget for whoever cleans up after the error (asyncio.Runner cancels tasks).
        self._instant_mark = self._events
        raise LivelockError(
            f"livelock at {self._now_ns} ns: more than {self._livelock_budget} events ran "
            f"without the clock advancing (livelock budget {self._livelock_budget}); busiest "
            f"waiters in the next {watched} events: {names}",
            now_ns=self._now_ns,
            busiest=busiest,
        )

    def _unfinished_tasks(self) -> list[asyncio.Task[Any]]:
        tasks = asyncio.all_tasks(self)
        return sorted(tasks, key=lambda t: (name_key(t.get_name()), describe_task_wait(t)))

    def _deadlock_error(self) -> DeadlockError:
        tasks = self._unfinished_tasks()
        blocked = tuple(f"{t.get_name()!r} waits in {describe_task_wait(t)}" for t in tasks)
        never = sum(1 for t in self._infinite_timers if not t._cancelled)
        head = f"deadlock at {self._now_ns} ns: nothing is ready and no timer is pending"
        if never:
            noun = "timer at +inf never fires" if never == 1 else "timers at +inf never fire"
            head += f" ({never} {noun})"
        if tasks:
            verb = "task is" if len(tasks) == 1 else "tasks are"
            message = f"{head}, but {len(tasks)} {verb} blocked:\n" + "\n".join(
                f"  {line}" for line in blocked
            )
        else:
            message = f"{head}, but the loop still waits on a future nothing will complete"
        return DeadlockError(
            message + self._thread_notes(blocked), now_ns=self._now_ns, blocked=blocked
        )

    def _thread_notes(self, blocked: tuple[str, ...]) -> str:
        return thread_notes(blocked, self._thread_refusals)

    def _time_limit_error(self, next_ns: int) -> VirtualTimeLimitError:
        return time_limit_error(
            self._unfinished_tasks(),
            self._now_ns,
            self._end_ns,
            next_ns,
            self._thread_refusals,
            range_end=self._end_ns == MAX_TIME_NS,
        )

    def _report_interrupt(self, exc: KeyboardInterrupt) -> None:
        """Say where the virtual run was when it was interrupted (a note, and stderr)."""
        note = interrupt_note(self._unfinished_tasks(), self._now_ns)
        if note not in getattr(exc, "__notes__", ()):
            exc.add_note(note)
            if self._report_interrupt_to_stderr:
                print(note, file=sys.stderr, flush=True)

    # ------------------------------------------------------------------ stepping

    def step(self) -> StepEvent | None:
        """Run exactly one callback, advancing the clock to reach it if needed.

        Call it from outside any running loop (a REPL, a debugger, a harness). Tasks may
        have been created with :meth:`create_task` without :meth:`run_until_complete`.

        Returns:
            What ran, or ``None`` when there is nothing left to run and no task is unfinished.

        Raises:
            DeadlockError: nothing can run but some task is unfinished.
            LivelockError: the livelock budget is spent at this instant.
        """
        with self._running():
            label = self._run_one(advance=True)
            if label is None:
                if asyncio.all_tasks(self):
                    raise self._deadlock_error()
                return None
            event = StepEvent(time_ns=self._now_ns, label=label)
            if self._events - self._instant_mark > self._livelock_budget:
                self._raise_livelock()
            return event

    def run_until_ns(self, when_ns: int) -> None:
        """Run every event before virtual instant ``when_ns``, then set the clock to it.

        Events scheduled exactly at ``when_ns`` have not run when this returns; the next
        :meth:`step` runs the first of them.

        Args:
            when_ns: the instant to stop at, in nanoseconds; not earlier than now.

        Raises:
            StaleWakeupError: ``when_ns`` is earlier than now.
            DeadlockError: tasks are blocked with no timer pending before ``when_ns``.
            LivelockError: the livelock budget is spent at one instant.
        """
        if isinstance(when_ns, bool) or not isinstance(when_ns, int):
            raise TypeError(f"when_ns must be an int, got {type(when_ns).__name__}")
        if when_ns < self._now_ns:
            raise StaleWakeupError(
                f"stale wakeup for waiter 'run_until_ns': requested {when_ns} ns, "
                f"which is before now ({self._now_ns} ns)",
                waiter="run_until_ns",
                requested=when_ns,
                now_ns=self._now_ns,
            )
        with self._running():
            timers = self._timers
            while self._now_ns < when_ns:
                if self._has_work_now():
                    self._run_one(advance=False)
                    if self._events - self._instant_mark > self._livelock_budget:
                        self._raise_livelock()
                    continue
                while timers and timers[0][2]._cancelled:
                    heapq.heappop(timers)
                    self._cancelled_timers -= 1
                if timers and timers[0][0] < when_ns:
                    self._advance(timers[0][0])
                    continue
                if not timers and asyncio.all_tasks(self):
                    raise self._deadlock_error()
                self._advance(when_ns)

    def run_until(self, predicate: Callable[[], bool], *, max_events: int | None = None) -> bool:
        """Run one callback at a time until ``predicate()`` is true.

        The predicate is checked before every callback, with this loop as the running loop
        (so it may call :func:`simclock.now_ns`).

        Args:
            predicate: the condition to reach.
            max_events: give up after this many callbacks; ``None`` for no limit.

        Returns:
            True when the predicate holds; False when ``max_events`` ran out or nothing is
            left to run and no task is unfinished.

        Raises:
            DeadlockError: nothing can run but some task is unfinished.
            LivelockError: the livelock budget is spent at one instant.
        """
        with self._running():
            ran = 0
            while not self._observe(predicate):
                if max_events is not None and ran >= max_events:
                    return False
                if self._run_one(advance=True) is None:
                    if asyncio.all_tasks(self):
                        raise self._deadlock_error()
                    return False
                ran += 1
                if self._events - self._instant_mark > self._livelock_budget:
                    self._raise_livelock()
            return True

    # ------------------------------------------------------------------ inspection

    def next_event_ns(self) -> int | None:
        """The virtual instant of the next callback, without running anything.

        Returns:
            The current time if something can run at this instant (a ready callback, a due
            timer or an ``instant_end`` waiter), else the earliest pending timer's instant, or
            ``None`` when nothing at all is scheduled.
        """
        # _has_work_now, inlined: engines ask this at every commit
        now = self._now_ns
        if self._batch_left or self._ready:
            return now
        timers = self._timers
        if timers and timers[0][0] <= now:
            return now
        for entry in self._instant_end:
            if not entry[2].done():
                return now
        while timers and timers[0][2]._cancelled:  # drop cancelled timers off the heap top
            heapq.heappop(timers)
            self._cancelled_timers -= 1
        return timers[0][0] if timers else None

    def stats(self) -> LoopStats:
        """The loop's counters as a frozen snapshot.

        Inside a running loop the counters cover every callback batch finished so far.
        """
        return LoopStats(
            now_ns=self._now_ns,
            events=self._events,
            timers_fired=self._timers_fired,
            clock_advances=self._clock_advances,
            instant_end_wakeups=self._instant_end_wakeups,
        )

    def snapshot(self) -> LoopSnapshot:
        """What the loop holds now: time, ready queue length, pending timers, tasks."""
        tasks = self._unfinished_tasks()
        waiting: dict[object, asyncio.Task[Any]] = {}
        for task in tasks:
            future = getattr(task, "_fut_waiter", None)
            if future is not None:
                waiting[future] = task
        pending = [e[2] for e in sorted(self._timers) if not e[2]._cancelled]
        pending += [t for t in self._infinite_timers if not t._cancelled]
        timers = tuple(
            PendingTimer(
                when_ns=t._when_ns,
                sequence=t._sequence,
                waiter=t._waiter,
                kind=t._kind,
                callback=self._describe_timer(t, waiting),
            )
            for t in pending
        )
        instant = tuple(
            InstantEndWaiter(priority=p, sequence=s, waiter=w)
            for p, s, f, w in sorted(self._instant_end, key=lambda e: (e[0], e[1]))
            if not f.done()
        )
        infos = tuple(
            TaskInfo(
                name=t.get_name(),
                waits_on=describe_task_wait(t)
                if getattr(t, "_fut_waiter", None) is not None
                else "ready",
            )
            for t in tasks
        )
        return LoopSnapshot(
            now_ns=self._now_ns,
            ready=len(self._ready),
            pending_timers=timers,
            instant_end_waiters=instant,
            tasks=infos,
            stats=self.stats(),
        )

    @staticmethod
    def _describe_timer(timer: _Timer, waiting: dict[object, asyncio.Task[Any]]) -> str:
        text = "wakeup" if timer._waiter is not None else describe_callback(timer._callback)
        args = timer._args or ()
        if args and isinstance(args[0], asyncio.Future):
            task = waiting.get(args[0])
            if task is not None:
                text += f" of task {task.get_name()!r}"
        return text

    # ------------------------------------------------------------------ executors

    def run_in_executor(  # type: ignore[override]
        self, executor: Any, func: Callable[..., _T], *args: Any
    ) -> asyncio.Future[_T]:
        """Run ``func(*args)`` inline, at the current instant; return a finished future.

        The executor argument is ignored: threads have no virtual time, so the call happens
        here and now, deterministically.
        """
        self._check_closed()  # type: ignore[attr-defined]
        future: asyncio.Future[_T] = self.create_future()
        try:
            result = func(*args)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            future.set_exception(exc)
        else:
            future.set_result(result)
        return future

    def set_default_executor(self, executor: Any) -> None:
        """Accepted and ignored: :meth:`run_in_executor` always runs inline."""

    async def shutdown_default_executor(self, timeout: float | None = None) -> None:
        """Nothing to shut down: the virtual loop never starts an executor."""
        self._executor_shutdown_called = True

    def close(self) -> None:
        """Close the loop, dropping every pending timer and callback."""
        if self.is_running():
            raise RuntimeError("Cannot close a running event loop")
        self._timers.clear()
        self._infinite_timers = []
        self._instant_end.clear()
        self._batch_left = 0
        super().close()

    # ------------------------------------------------------------------ real I/O

    def remove_reader(self, fd: Any) -> bool:
        """Nothing was ever registered: returns False."""
        return False

    def remove_writer(self, fd: Any) -> bool:
        """Nothing was ever registered: returns False."""
        return False

    def remove_signal_handler(self, sig: int) -> bool:
        """Nothing was ever registered: returns False."""
        return False

    add_reader = _refuse("add_reader")
    add_writer = _refuse("add_writer")
    add_signal_handler = _refuse("add_signal_handler")
    sock_recv = _refuse("sock_recv")
    sock_recv_into = _refuse("sock_recv_into")
    sock_recvfrom = _refuse("sock_recvfrom")
    sock_recvfrom_into = _refuse("sock_recvfrom_into")
    sock_sendall = _refuse("sock_sendall")
    sock_sendto = _refuse("sock_sendto")
    sock_connect = _refuse("sock_connect")
    sock_accept = _refuse("sock_accept")
    sock_sendfile = _refuse("sock_sendfile")
    sendfile = _refuse("sendfile")
    start_tls = _refuse("start_tls")
    create_connection = _refuse("create_connection")
    create_server = _refuse("create_server")
    create_datagram_endpoint = _refuse("create_datagram_endpoint")
    create_unix_connection = _refuse("create_unix_connection")
    create_unix_server = _refuse("create_unix_server")
    connect_accepted_socket = _refuse("connect_accepted_socket")
    connect_read_pipe = _refuse("connect_read_pipe")
    connect_write_pipe = _refuse("connect_write_pipe")
    subprocess_shell = _refuse("subprocess_shell")
    subprocess_exec = _refuse("subprocess_exec")
    getaddrinfo = _refuse("getaddrinfo")
    getnameinfo = _refuse("getnameinfo")
