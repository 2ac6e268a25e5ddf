"""Entry points that mirror asyncio's: :func:`run` and :func:`new_event_loop`."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import signal
import threading
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

from ._loop import DEFAULT_LIVELOCK_BUDGET, DEFAULT_STALL_BUDGET, VirtualEventLoop
from ._wallclock import refuse_blocking_io, virtual_wall_clock

__all__ = ("new_event_loop", "run")

_T = TypeVar("_T")


def new_event_loop(
    *,
    start_ns: int = 0,
    stall_budget: int | None = DEFAULT_STALL_BUDGET,
    livelock_budget: int | None = DEFAULT_LIVELOCK_BUDGET,
    end_s: float | None = None,
    seed: int | None = None,
    report_interrupts: bool = True,
) -> VirtualEventLoop:
    """A new :class:`VirtualEventLoop` (the caller closes it).

    Args:
        start_ns: the virtual time the clock starts at, in nanoseconds.
        stall_budget: see :class:`VirtualEventLoop`; ``None`` disables the check.
        livelock_budget: see :class:`VirtualEventLoop`; ``None`` disables the check.
        end_s: the end of virtual time in seconds; see :class:`VirtualEventLoop`.
        seed: permute same-instant ready callbacks; see :class:`VirtualEventLoop`.
        report_interrupts: print where an interrupted run was; see :class:`VirtualEventLoop`.
    """
    return VirtualEventLoop(
        start_ns=start_ns,
        stall_budget=stall_budget,
        livelock_budget=livelock_budget,
        end_s=end_s,
        seed=seed,
        report_interrupts=report_interrupts,
    )


def _raise_keyboard_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def interrupts_raise_in_the_loop() -> Iterator[None]:
    """Let Ctrl-C raise ``KeyboardInterrupt`` where the loop is, in the main thread.

    ``asyncio.Runner`` would otherwise turn the first Ctrl-C into a cancellation of the main
    task, which unwinds the very await chains the loop reports on interruption.
    """
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    signal.signal(signal.SIGINT, _raise_keyboard_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def run(
    main: Coroutine[Any, Any, _T],
    *,
    debug: bool = False,
    start_ns: int = 0,
    stall_budget: int | None = DEFAULT_STALL_BUDGET,
    livelock_budget: int | None = DEFAULT_LIVELOCK_BUDGET,
    end_s: float | None = None,
    seed: int | None = None,
    patch_time: bool = False,
    strict_io: bool = False,
) -> _T:
    """Run a coroutine on a fresh :class:`VirtualEventLoop` and return its result.

    Like :func:`asyncio.run`: the loop is created, runs ``main`` to completion, cancels
    what is left, shuts down async generators and is closed. Ctrl-C raises
    ``KeyboardInterrupt`` after printing the virtual time and the unfinished tasks.

    Args:
        main: the coroutine to run.
        debug: asyncio debug mode.
        start_ns: the virtual time the clock starts at, in nanoseconds.
        stall_budget: see :class:`VirtualEventLoop`; ``None`` disables the check.
        livelock_budget: see :class:`VirtualEventLoop`; ``None`` disables the check.
        end_s: the end of virtual time, in seconds: the run fails with
            :class:`VirtualTimeLimitError` when the clock would pass it.
        seed: run same-instant ready callbacks in an order permuted by this seed.
        patch_time: make ``time.time``, ``time.monotonic``, ``time.perf_counter`` (and their
            ``_ns`` forms) and ``datetime.datetime.now``/``utcnow`` read the virtual clock
            during the run, and ``time.sleep`` raise; see
            :func:`simclock.testing.virtual_wall_clock`.
        strict_io: refuse blocking socket connects and subprocesses made inside the run;
            see :func:`simclock.testing.refuse_blocking_io`.

    Returns:
        What ``main`` returned.

    Raises:
        DeadlockError: the run can make no progress and ``main`` has not finished.
        LivelockError: too many events ran at one virtual instant.
        VirtualTimeLimitError: the clock would pass ``end_s``.
    """
    factory = functools.partial(
        VirtualEventLoop,
        start_ns=start_ns,
        stall_budget=stall_budget,
        livelock_budget=livelock_budget,
        end_s=end_s,
        seed=seed,
    )
    with (
        interrupts_raise_in_the_loop(),
        virtual_wall_clock() if patch_time else contextlib.nullcontext(),
        refuse_blocking_io() if strict_io else contextlib.nullcontext(),
        asyncio.Runner(debug=debug, loop_factory=factory) as runner,
    ):
        return runner.run(main)
