"""The no-progress check: a run that cannot finish says so instead of running for ever.

A run can keep its clock moving without getting anywhere: a policy holds requests while a
periodic task of its own keeps waking up, or polls every nanosecond. The loop sees timers
firing, so it never deadlocks. After every policy wakeup the runner asks
:meth:`ProgressWatch.check`; the run has made progress when a request was released or reached
a terminal state, or when an engine has work. When requests remain unsettled (released, not
terminal) and there has been no progress for :data:`NO_PROGRESS_S` seconds of virtual time or
:data:`NO_PROGRESS_WAKEUPS` policy wakeups, whichever comes first, the check raises
:class:`NoProgressError`, naming the unsettled requests and the pending timers; the run then
ends as a failed replay with its report.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import attrs

import simclock
from simclock import VirtualEventLoop

from ._exceptions import ReplayError

__all__ = ("NO_PROGRESS_S", "NO_PROGRESS_WAKEUPS", "NoProgressError", "ProgressWatch")

NO_PROGRESS_S = 3600.0
"""Virtual seconds without progress, with requests unsettled, after which a run fails."""
NO_PROGRESS_WAKEUPS = 100_000
"""Policy wakeups without progress, with requests unsettled, after which a run fails."""

_SHOWN = 5  # requests and timers named in the message


class NoProgressError(ReplayError, RuntimeError):
    """A run kept its clock moving without progress while requests remained unsettled.

    Attributes:
        unsettled: the ids of the released requests that are not terminal, in release order.
        timers: one ``<waiter> at <time> s`` line per pending timer, earliest first.
    """

    def __init__(self, message: str, *, unsettled: tuple[str, ...], timers: tuple[str, ...]):
        super().__init__(message)
        self.unsettled = unsettled
        self.timers = timers


def _listed(items: list[str]) -> str:
    shown = ", ".join(items[:_SHOWN])
    more = len(items) - _SHOWN
    return f"{shown} and {more} more" if more > 0 else shown


@attrs.define(eq=False)
class ProgressWatch:
    """Watches a run's progress from its policy wakeups (see the module docstring).

    Attributes:
        progress: a value that changes whenever a request is released or ends.
        unsettled: the released, non-terminal request ids, in release order.
        engines_idle: whether no engine has a request waiting, running or offered.
        last_progress_ns: when the latest progress happened (for the clock watch).
        budget_ns: virtual time without progress allowed (``NO_PROGRESS_S``).
        budget_wakeups: wakeups without progress allowed (``NO_PROGRESS_WAKEUPS``).
    """

    progress: Callable[[], object]
    unsettled: Callable[[], list[str]]
    engines_idle: Callable[[], bool]
    last_progress_ns: Callable[[], int] | None = None
    budget_ns: int = round(NO_PROGRESS_S * 1e9)
    budget_wakeups: int = NO_PROGRESS_WAKEUPS
    _mark: object = attrs.field(default=None, init=False)
    _since_ns: int = attrs.field(default=0, init=False)
    _wakeups: int = attrs.field(default=0, init=False)

    def check(self, waiter: str) -> None:
        """Note one policy wakeup; raise when the run is past the no-progress budget.

        Raises:
            NoProgressError: requests are unsettled, no engine has work, and nothing moved
                for the budget.
        """
        now = simclock.now_ns()
        mark = self.progress()
        if mark != self._mark:
            self._mark, self._since_ns, self._wakeups = mark, now, 0
            return
        self._wakeups += 1
        if now - self._since_ns < self.budget_ns and self._wakeups < self.budget_wakeups:
            return
        self._stuck(now, f"{self._wakeups:,} policy wakeups, the latest of {waiter}")

    def check_clock(self, when_ns: int) -> None:
        """The clock is about to move to ``when_ns`` (``VirtualEventLoop.watch_clock``): raise
        when the run is past the budget, whatever keeps the clock moving (a policy task on
        bare ``asyncio.sleep``, a poller of one nanosecond).

        Raises:
            NoProgressError: as :meth:`check`.
        """
        mark = self.progress()
        if mark != self._mark:
            self._mark, self._wakeups = mark, 0
            last = self.last_progress_ns
            self._since_ns = simclock.now_ns() if last is None else last()
            if when_ns - self._since_ns < self.budget_ns:
                return
        self._stuck(when_ns, "the clock still moving")

    def _stuck(self, now: int, what: str) -> None:
        # Only now look at the engines: reading their views mid-run is not free.
        unsettled = self.unsettled()
        if not unsettled or not self.engines_idle():
            self._since_ns, self._wakeups = simclock.now_ns(), 0
            return
        loop = asyncio.get_running_loop()
        pending = loop.snapshot().pending_timers if isinstance(loop, VirtualEventLoop) else ()
        timers = tuple(
            f"{t.waiter or t.callback} at "
            + ("never" if t.when_ns is None else f"{t.when_ns / 1e9:.9g} s")
            for t in pending
        )
        raise NoProgressError(
            f"no progress for {(now - self._since_ns) / 1e9:.9g} s of virtual time and "
            f"{what}, with "
            f"{len(unsettled)} request(s) unsettled: {_listed(unsettled)}; other pending "
            f"timers: {_listed(list(timers)) or 'none'}",
            unsettled=tuple(unsettled),
            timers=timers,
        )
