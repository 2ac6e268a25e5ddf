"""Values that describe a virtual event loop: wakeup kinds, statistics and snapshots.

Everything here is a frozen value, safe to keep after the loop has moved on.
"""

from __future__ import annotations

import asyncio
import enum
import re
from collections.abc import Callable
from typing import Any

import attrs

__all__ = (
    "InstantEndWaiter",
    "LoopSnapshot",
    "LoopStats",
    "PendingTimer",
    "StepEvent",
    "TaskInfo",
    "WakeupKind",
)


class WakeupKind(enum.Enum):
    """Why a coroutine waits on the virtual clock (shown in snapshots and errors).

    The kind never changes the order in which wakeups fire: that order is always
    ``(instant, sequence number)``.
    """

    ENGINE_DEADLINE = "engine_deadline"
    """An engine waits for the end of the pass it is running."""
    POLICY_WAKEUP = "policy_wakeup"
    """A policy (or a policy's background coroutine) waits for a chosen instant."""
    OTHER = "other"
    """Anything else: workload drivers, tests, user code."""


@attrs.frozen
class LoopStats:
    """Counters of a virtual event loop since it was created.

    Attributes:
        now_ns: the virtual time when the statistics were taken.
        events: callbacks run (task steps, future callbacks, timer callbacks, ...).
        timers_fired: timers (asyncio timers and simclock wakeups) that came due and ran.
        clock_advances: times the clock jumped forward to the next timer.
        instant_end_wakeups: waiters of :func:`simclock.instant_end` released.
    """

    now_ns: int
    events: int
    timers_fired: int
    clock_advances: int
    instant_end_wakeups: int


@attrs.frozen
class PendingTimer:
    """One timer that has not fired yet.

    Attributes:
        when_ns: the instant it fires at (``None`` for a timer at +inf, which never fires).
        sequence: its scheduling sequence number; ties on ``when_ns`` fire in this order.
        waiter: who waits, for simclock wakeups; ``None`` for plain asyncio timers.
        kind: why it waits, for simclock wakeups; ``None`` for plain asyncio timers.
        callback: a short description of the callback the timer runs.
    """

    when_ns: int | None
    sequence: int
    waiter: str | None
    kind: WakeupKind | None
    callback: str


@attrs.frozen
class InstantEndWaiter:
    """A coroutine waiting in :func:`simclock.instant_end`.

    Attributes:
        priority: its priority; lower is released first.
        sequence: its arrival order; ties on ``priority`` are released in this order.
        waiter: who waits.
    """

    priority: int
    sequence: int
    waiter: str


@attrs.frozen
class TaskInfo:
    """One unfinished task of the loop.

    Attributes:
        name: the task's name.
        waits_on: what the task waits on: its chain of coroutines, outermost first, and the
            task it awaits if any (for example ``"consume -> Queue.get"``); ``"ready"`` when
            the task is scheduled to run.
    """

    name: str
    waits_on: str


@attrs.frozen
class LoopSnapshot:
    """What a virtual event loop holds at one moment, for debuggers and harnesses.

    Attributes:
        now_ns: the virtual time.
        ready: callbacks queued to run at this instant.
        pending_timers: timers not yet fired, in firing order ``(when_ns, sequence)``;
            timers at +inf come last.
        instant_end_waiters: waiters of :func:`simclock.instant_end`, in release order.
        tasks: unfinished tasks, ordered by name.
        stats: the loop's counters.
    """

    now_ns: int
    ready: int
    pending_timers: tuple[PendingTimer, ...]
    instant_end_waiters: tuple[InstantEndWaiter, ...]
    tasks: tuple[TaskInfo, ...]
    stats: LoopStats


@attrs.frozen
class StepEvent:
    """The event one :meth:`VirtualEventLoop.step` ran.

    Attributes:
        time_ns: the virtual time the event ran at.
        label: who ran: a task's name, or a short description of the callback.
    """

    time_ns: int
    label: str


def describe_callback(callback: Callable[..., Any] | None) -> str:
    """A short, stable description of a callback (a task's name, or a qualified name)."""
    if callback is None:
        return "<cancelled>"
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, asyncio.Task):
        return f"task {owner.get_name()!r}"
    if isinstance(owner, asyncio.Future):
        return f"{type(owner).__name__} callback"
    name = getattr(callback, "__qualname__", None)
    if isinstance(name, str):
        return name
    return type(callback).__name__


def describe_task_wait(task: asyncio.Task[Any]) -> str:
    """Say what an unfinished task waits on: its coroutine chain and any awaited task."""
    chain: list[str] = []
    obj: Any = task.get_coro()
    while obj is not None and len(chain) < 64:
        name = getattr(obj, "__qualname__", None)
        if not isinstance(name, str) or not (
            hasattr(obj, "cr_code") or hasattr(obj, "gi_code") or hasattr(obj, "ag_code")
        ):
            break
        chain.append(name)
        obj = (
            getattr(obj, "cr_await", None)
            or getattr(obj, "gi_yieldfrom", None)
            or getattr(obj, "ag_await", None)
        )
    text = " -> ".join(chain) if chain else "<no coroutine>"
    waiter = getattr(task, "_fut_waiter", None)
    if isinstance(waiter, asyncio.Task):
        text += f" on task {waiter.get_name()!r}"
    elif isinstance(waiter, asyncio.Future):
        gathered = getattr(waiter, "_children", None)
        if isinstance(gathered, list):
            names = [c.get_name() for c in gathered if isinstance(c, asyncio.Task) and not c.done()]
            if names:
                text += " on tasks " + ", ".join(repr(n) for n in names)
    return text


_DIGITS = re.compile(r"(\d+)")


def name_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders ``Task-9`` before ``Task-10`` (numbers compare as numbers)."""
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part) for part in _DIGITS.split(name) if part
    )
