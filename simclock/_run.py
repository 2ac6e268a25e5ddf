"""Entry points that mirror asyncio's: :func:`run` and :func:`new_event_loop`."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Coroutine
from typing import Any, TypeVar

from ._loop import DEFAULT_LIVELOCK_BUDGET, DEFAULT_STALL_BUDGET, VirtualEventLoop

__all__ = ("new_event_loop", "run")

_T = TypeVar("_T")


def new_event_loop(
    *,
    start_ns: int = 0,
    stall_budget: int | None = DEFAULT_STALL_BUDGET,
    livelock_budget: int | None = DEFAULT_LIVELOCK_BUDGET,
) -> VirtualEventLoop:
    """A new :class:`VirtualEventLoop` (the caller closes it).

    Args:
        start_ns: the virtual time the clock starts at, in nanoseconds.
        stall_budget: see :class:`VirtualEventLoop`; ``None`` disables the check.
        livelock_budget: see :class:`VirtualEventLoop`; ``None`` disables the check.
    """
    return VirtualEventLoop(
        start_ns=start_ns, stall_budget=stall_budget, livelock_budget=livelock_budget
    )


def run(
    main: Coroutine[Any, Any, _T],
    *,
    debug: bool = False,
    start_ns: int = 0,
    stall_budget: int | None = DEFAULT_STALL_BUDGET,
    livelock_budget: int | None = DEFAULT_LIVELOCK_BUDGET,
) -> _T:
    """Run a coroutine on a fresh :class:`VirtualEventLoop` and return its result.

    Like :func:`asyncio.run`: the loop is created, runs ``main`` to completion, cancels
    what is left, shuts down async generators and is closed.

    Args:
        main: the coroutine to run.
        debug: asyncio debug mode.
        start_ns: the virtual time the clock starts at, in nanoseconds.
        stall_budget: see :class:`VirtualEventLoop`; ``None`` disables the check.
        livelock_budget: see :class:`VirtualEventLoop`; ``None`` disables the check.

    Returns:
        What ``main`` returned.

    Raises:
        DeadlockError: the run can make no progress and ``main`` has not finished.
        LivelockError: too many events ran at one virtual instant.
    """
    factory = functools.partial(
        VirtualEventLoop,
        start_ns=start_ns,
        stall_budget=stall_budget,
        livelock_budget=livelock_budget,
    )
    with asyncio.Runner(debug=debug, loop_factory=factory) as runner:
        return runner.run(main)
