"""Going back in a replay session: :meth:`~replay.ReplaySession.back` and
:meth:`~replay.ReplaySession.goto`, by re-executing the run up to a position of the trail
(:mod:`replay._session_trail` says how a position is found again).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from engines import EventKind

from ._run import Run, RunOptions, setup
from ._session_core import detached
from ._session_state import Stop, describe_event, format_ns
from ._session_stepping import SessionStepping
from ._session_trail import NON_TOKEN_KINDS, Position, pristine_options

if TYPE_CHECKING:
    from ._session import ReplaySession

__all__ = ("SessionRewind",)

_WATCHED_COST = 6  # a watched run's cost per virtual second over a fast forward's, about


class SessionRewind(SessionStepping):
    """The methods of :class:`replay.ReplaySession` that go back (or to an instant)."""

    __slots__ = ()

    def back(self, n: int = 1) -> Stop:
        """Go back ``n`` stops on the trail (:attr:`stops`), by re-executing the run.

        ``n`` counts the stops the session made: ``back(1)`` returns to where the previous
        running call stopped (the start, for the first one), ``back(len(stops))`` to the
        start. The stops gone back over leave the trail. Breakpoints stay as they are (a time
        breakpoint that fired is gone); predicate breakpoints start from their value at
        the stop gone back to.

        Returns:
            A ``"rewind"`` stop with the events of the stop gone back to.

        Raises:
            ValueError: ``n`` is not an int >= 1, the trail has fewer stops, or the run
                cannot be re-executed (it streams to a ``request_log``, or its options
                cannot be copied).
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"back needs a number of stops >= 1, got {n!r}")
        taken = len(self._trail) - 1
        if n > taken:
            raise ValueError(f"cannot go back {n} stops: the session has made {taken}")
        self._check_usable()
        position, stop = self._trail[-1 - n]
        self._move_to(position)
        del self._trail[len(self._trail) - n :]
        events = () if stop is None else stop.events
        was = "the start" if stop is None else stop.description.split("\n", 1)[0]
        head = f"back at {format_ns(self.now_ns)} ({n} stop{'s' if n != 1 else ''} back: {was})"
        lines = [head, *(f"  {describe_event(e)}" for e in events)]
        return Stop("rewind", self.now_ns, events, None, "\n".join(lines))

    def goto(self, time_ns: int | None = None, *, time_s: float | None = None) -> Stop:
        """Go to a virtual instant, forward or back, ignoring breakpoints.

        The session stops with the clock at the instant and nothing at that instant run yet,
        as :meth:`run_until` does. Forward, the run goes on; back, it is re-executed from
        the start up to the instant (:meth:`back` says what stays).

        Returns:
            A ``"time"`` stop (forward), a ``"rewind"`` stop (back), or ``"finished"`` when the
            run ends first.

        Raises:
            ValueError: neither or both of ``time_ns`` and ``time_s``, a negative instant, or
                a run that cannot be re-executed (see :meth:`back`).
        """
        if (time_ns is None) == (time_s is None):
            raise ValueError("give goto exactly one of time_ns and time_s")
        if time_s is not None:
            if not math.isfinite(time_s):
                raise ValueError(f"time_s must be finite, got {time_s!r}")
            time_ns = round(time_s * 1_000_000_000)
        when = cast(int, time_ns)
        if isinstance(when, bool) or not isinstance(when, int) or when < 0:
            raise ValueError(f"goto needs an instant >= 0 ns, got {when!r}")
        self._check_usable()
        if self._run.result is None and when >= self.now_ns:
            saved, self._breakpoints = self._breakpoints, []
            try:
                return self._run_to(when, None, "time", f"reached {format_ns(when)}")
            finally:
                self._breakpoints = saved
        self._move_to(Position(when, 0, -1, when))
        if self._run.result is not None:  # the run ended before the instant
            return self._stopped("finished", what=self._over())
        return self._stopped("rewind", (), what=f"went back to {format_ns(when)}")

    def _fresh_run(self) -> Run:
        """A new run of the session's inputs, built as :meth:`build` built the first."""
        if self._options is None or self._workload is None:
            raise ValueError(
                f"this session cannot go back: {self._not_rewindable or 'it was not built'}"
            )
        options = cast(RunOptions, pristine_options(self._options)[0])
        parts, echo = setup(self._workload, options, caller="ReplaySession.build")
        return Run(parts, self._workload, options.get("slo"), echo, self._run_id)

    def _move_to(self, position: Position) -> None:
        """Make the session stand at ``position``: go on from here when it lies ahead,
        else re-execute a fresh run up to it."""
        here = self._position()
        # Going on with a watched run costs several times what a fast forward from the
        # start costs per virtual second (docs/reference/debugging.md): go on only when
        # the position is near.
        if (
            self._run.result is None
            and here.before(position)
            and not position.finished
            and (position.time_ns - here.time_ns) * _WATCHED_COST <= position.time_ns
        ):
            self._advance_to(self._run, position)
            return
        observed = not self._history_on or self._timeline_filter is not None
        found = detached(lambda: self._reexecute(position, observed=observed))
        if not found and not observed:
            detached(lambda: self._reexecute(position, observed=True))

    def _advance_to(self, run: Run, position: Position) -> None:
        """Run ``run`` forward to ``position`` (no breakpoint, no predicate)."""
        if position.finished:
            run.finish()
            return
        if run.now_ns < position.time_ns:
            run.advance(position.time_ns)
        loop = run.loop
        while loop.instant_events() < position.callbacks and not run.done:
            run.step_callback()
        if run.done:
            run.finish()

    def _reset_recording(self) -> None:
        self._history.clear()
        self._last_kind.clear()
        self._recent.clear()
        self._matched.clear()
        self._watched.clear()
        self._watch = None
        self._seen = 0

    def _reexecute(self, position: Position, *, observed: bool) -> bool:
        """Replace the run by a fresh one stopped at ``position``; return whether the
        position was found exactly (see :mod:`replay._session_trail`)."""
        run = self._fresh_run()
        old = self._run
        self._run = run
        old.close("the session went back")
        self._reset_recording()
        journal = run.journal
        fast = not observed and position.switch_ns > 0
        if self._history_on:
            journal.subscribe(self._on_event, kinds=NON_TOKEN_KINDS if fast else None)
        self._record_timeline(run)
        if fast:
            run.advance(position.switch_ns)
            if not run.done:
                journal.subscribe(self._on_event, kinds=(EventKind.TOKEN,))
                for engine in run.engines:
                    macro = engine.macro_stepping
                    engine.step_per_pass()  # the passes from here on record their tokens
                    engine.macro_stepping = macro
        self._advance_to(run, position)
        self._recent.clear()
        self._matched.clear()
        for bp in self._breakpoints:
            if bp.kind == "predicate" and not self.finished:
                check = cast("Callable[[ReplaySession], bool]", bp.predicate)
                self._predicate_states[bp.number] = bool(check(cast("ReplaySession", self)))
        if position.events < 0:  # an instant asked for (goto): nothing more to check
            return True
        here = self._position()
        return (here.time_ns, here.callbacks, here.events, here.finished) == (
            position.time_ns,
            position.callbacks,
            position.events,
            position.finished,
        )
