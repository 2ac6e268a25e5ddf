"""Running a replay session forward: a step (of the whole run, one engine or one request),
one callback, to an instant or a predicate, to a request's state, to a breakpoint, to the end.

Every method here returns the :class:`Stop` it made (:meth:`replay.ReplaySession.step`,
:meth:`~replay.ReplaySession.run_until`, :meth:`~replay.ReplaySession.resume`, ...).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from engines import EventKind

from ._exceptions import ReplayFailedError
from ._report import ReplayResult
from ._session_snapshots import SessionSnapshots
from ._session_state import (
    TERMINAL,
    Breakpoint,
    Stop,
    StopReason,
    describe_pass,
    event_kind,
    format_ns,
)

if TYPE_CHECKING:
    from ._session import ReplaySession

__all__ = ("SessionStepping",)


class SessionStepping(SessionSnapshots):
    """The running methods of :class:`replay.ReplaySession` (forward only)."""

    __slots__ = ()

    def step(self, *, engine: int | None = None, request: str | None = None) -> Stop:
        """Run until at least one lifecycle event is recorded (or the run ends).

        Breakpoints are not checked. Several events recorded by the same callback (a pass
        commit, for example) are all returned.

        Args:
            engine: focus on this engine: run until it starts its next pass or records an
                event (the stop's ``events`` are its events).
            request: focus on this request: run until its next lifecycle event (any kind,
                per-token ones included).

        Returns:
            A ``"step"`` stop whose ``events`` are the events recorded, or ``"finished"``.

        Raises:
            ValueError: both ``engine`` and ``request`` given, or the request is not in the
                run (or the session keeps no history).
            IndexError: no such engine.
        """
        if engine is not None and request is not None:
            raise ValueError("give step at most one of engine and request")
        if engine is not None:
            return self._step_engine(engine)
        if request is not None:
            return self._step_request(request)
        self._check_usable()
        done = self._end_or_none()
        if done is not None:
            return done
        self._recent.clear()
        self._matched.clear()
        recent = self._recent
        saved, self._breakpoints = self._breakpoints, []
        try:
            self._drive(None, lambda: bool(recent))
        finally:
            self._breakpoints = saved
        events = tuple(self._recent)
        done = self._end_or_none()
        if done is not None and not events:
            return done
        return self._stopped("step", events, what="one step")

    def _step_engine(self, index: int) -> Stop:
        """:meth:`step` focused on engine ``index``."""
        self.engine(index)  # IndexError for no such engine
        self._check_usable()
        done = self._end_or_none()
        if done is not None:
            return done
        target = self._run.engines[index]
        before = target.passes
        self._recent.clear()
        self._matched.clear()
        recent = self._recent
        mine = [len(recent)]

        def moved() -> bool:
            if target.passes != before:
                return True
            while mine[0] < len(recent):
                if recent[mine[0]].engine == index:
                    return True
                mine[0] += 1
            return False

        saved, self._breakpoints = self._breakpoints, []
        macro = target.macro_stepping
        target.step_per_pass()  # every pass start is a callback to stop after
        try:
            self._drive(None, moved)
        finally:
            target.macro_stepping = macro
            self._breakpoints = saved
        events = tuple(e for e in self._recent if e.engine == index)
        done = self._end_or_none()
        if done is not None and not events:
            return done
        flight = target.view.pass_in_flight
        what = f"engine {index}"
        if flight is not None and flight.start_ns == self.now_ns:
            what += f" started pass {target.passes}: {describe_pass(flight)}"
        elif events:
            what += ": its next events"
        return self._stopped("step", events, what=what)

    def _step_request(self, request_id: str) -> Stop:
        """:meth:`step` focused on request ``request_id``."""
        self._run_request(request_id)
        self._need_history("request steps")
        self._check_usable()
        done = self._end_or_none()
        if done is not None:
            return done
        last = self._last_kind.get(request_id)
        if last is not None and last[0] in TERMINAL:
            return self._stopped(
                "step", (), what=f"request {request_id!r} has ended ({last[0].value})"
            )
        self._recent.clear()
        self._matched.clear()
        self._watched.clear()
        watched = self._watched
        self._watch = lambda e: e.request_id == request_id
        saved, self._breakpoints = self._breakpoints, []
        try:
            self._drive(None, lambda: bool(watched))
        finally:
            self._watch = None
            self._breakpoints = saved
        events = tuple(self._watched)
        done = self._end_or_none()
        if done is not None and not events:
            return done
        return self._stopped("step", events, what=f"request {request_id!r}: next event")

    def step_callback(self) -> Stop:
        """Run exactly one callback of the virtual loop (a task step, a timer, ...).

        Returns:
            A ``"step"`` stop with the events that callback recorded (often none), or
            ``"finished"``.
        """
        self._check_usable()
        done = self._end_or_none()
        if done is not None:
            return done
        self._recent.clear()
        label = self._run.step_callback() or ""
        events = tuple(self._recent)
        done = self._end_or_none()
        if done is not None and not events:
            return done
        return self._stopped("step", events, what=f"ran {label}" if label else "one callback")

    def run_until(
        self,
        target: int | Callable[[ReplaySession], bool] | None = None,
        *,
        time_ns: int | None = None,
        time_s: float | None = None,
    ) -> Stop:
        """Run to a virtual instant, or until a predicate holds, or until a breakpoint.

        Args:
            target: an instant in integer nanoseconds, or a predicate called with the
                session before every callback.
            time_ns: the instant in integer nanoseconds (instead of ``target``).
            time_s: the instant in seconds (instead of ``target``).

        Returns:
            A ``"time"`` stop with the clock at the instant (nothing at that instant run
            yet), a ``"predicate"`` stop, a ``"breakpoint"`` stop, or ``"finished"``.

        Raises:
            ValueError: neither or both of an instant and a predicate, or an instant in the
                past.
        """
        given = sum(x is not None for x in (target, time_ns, time_s))
        if given > 1:
            raise ValueError("give run_until one of target, time_ns and time_s")
        if time_ns is not None:
            target = time_ns
        if time_s is not None:
            if not math.isfinite(time_s):
                raise ValueError(f"time_s must be finite, got {time_s!r}")
            target = round(time_s * 1_000_000_000)
        if target is None:
            raise ValueError("run_until needs an instant (ns or time_s=) or a predicate")
        if callable(target):
            check, session = target, cast("ReplaySession", self)
            return self._run_to(None, lambda: check(session), "predicate", "the predicate holds")
        if isinstance(target, bool) or not isinstance(target, int):
            raise ValueError(f"run_until target must be an int of ns or a callable, got {target!r}")
        if target < self.now_ns:
            raise ValueError(
                f"cannot run back in time: {target} ns is before now ({self.now_ns} ns)"
            )
        return self._run_to(target, None, "time", f"reached {format_ns(target)}")

    def resume(self) -> Stop:
        """Run until a breakpoint is hit or the run ends.

        Returns:
            A ``"breakpoint"`` stop describing the event, or ``"finished"``.
        """
        return self._run_to(None, None, "finished", "")

    def run_until_request(self, request_id: str, state: EventKind | str = "finished") -> Stop:
        """Run until request ``request_id``'s next ``state`` event (or a breakpoint hits).

        Args:
            request_id: a request of the workload.
            state: an event kind (or its value: ``"arrived"``, ``"queued"``,
                ``"admitted"``, ``"first_token"``, ``"preempted"``, ``"finished"``, ...), or
                ``"terminal"`` for any of finished, rejected, failed and cancelled.

        Returns:
            A ``"request"`` stop whose ``events`` hold the matching event (at once, with the
            latest such event if any, when the request has already ended), a
            ``"breakpoint"`` stop, or ``"finished"``.

        Raises:
            ValueError: the request is not in the run, or ``state`` is unknown.
        """
        self._run_request(request_id)
        self._need_history("request stops")
        kinds = TERMINAL if state == "terminal" else frozenset({event_kind(state)})
        label = "terminal" if state == "terminal" else event_kind(state).value
        last = self._last_kind.get(request_id)
        if last is not None and last[0] in TERMINAL:
            past = [e for e in self._history.get(request_id, []) if e.kind in kinds]
            return self._stopped(
                "request",
                tuple(past[-1:]),
                what=f"request {request_id!r} has ended ({last[0].value})",
            )
        self._watched.clear()
        watched = self._watched
        self._watch = lambda e: e.request_id == request_id and e.kind in kinds
        try:
            return self._run_to(
                None, lambda: bool(watched), "request", f"request {request_id!r} reached {label}"
            )
        finally:
            self._watch = None

    def _run_to(
        self,
        until_ns: int | None,
        predicate: Callable[[], bool] | None,
        reason: StopReason,
        what: str,
    ) -> Stop:
        self._check_usable()
        done = self._end_or_none()
        if done is not None:
            return done
        self._matched.clear()
        now = self.now_ns
        times = [bp for bp in self._breakpoints if bp.kind == "time" and bp.time_ns is not None]
        time_bp = min(
            (bp for bp in times if cast(int, bp.time_ns) >= now),
            key=lambda bp: cast(int, bp.time_ns),
            default=None,
        )
        stop_ns = until_ns
        if time_bp is not None and (stop_ns is None or cast(int, time_bp.time_ns) < stop_ns):
            stop_ns = time_bp.time_ns
        checks = [bp for bp in self._breakpoints if bp.kind == "predicate"]
        hit: list[Breakpoint] = []

        states = self._predicate_states
        session = cast("ReplaySession", self)

        def pred() -> bool:
            if predicate is not None and predicate():
                return True
            fired = False
            for bp in checks:
                value = bool(cast("Callable[[ReplaySession], bool]", bp.predicate)(session))
                if value and not states.get(bp.number, False) and not fired:
                    hit.append(bp)
                    fired = True
                states[bp.number] = value
            return fired

        stepping = [e.macro_stepping for e in self._run.engines]
        if predicate is not None or checks:
            # a predicate is checked before every callback: one deadline per pass gives it
            # every pass boundary to look at
            for engine in self._run.engines:
                engine.step_per_pass()
        try:
            self._drive(stop_ns, pred)
        finally:
            for engine, macro in zip(self._run.engines, stepping, strict=True):
                engine.macro_stepping = macro
        if self._matched:
            bp, _ = self._matched[0]
            events = tuple(e for b, e in self._matched if b is bp)
            self._matched.clear()
            return self._stopped("breakpoint", events, bp)
        if hit:
            return self._stopped("breakpoint", (), hit[0])
        if self._run.done:
            self._finish()
            return self._stopped("finished", what=self._over())
        if predicate is not None and predicate():
            return self._stopped(reason, tuple(self._watched), what=what)
        if stop_ns is not None and self.now_ns == stop_ns:
            if time_bp is not None and time_bp.time_ns == stop_ns:
                self._breakpoints.remove(time_bp)
                return self._stopped("breakpoint", (), time_bp)
            return self._stopped(reason, (), what=what)
        self._finish()  # pragma: no cover - the loop ran dry without the main task ending
        return self._stopped("finished", what=self._over())  # pragma: no cover

    def run(self) -> ReplayResult:
        """Run to the end, ignoring breakpoints, and return the report.

        Returns:
            The :class:`replay.ReplayResult`, the same as :func:`replay.run` gives.

        Raises:
            ReplayFailedError: a step failed, as in :func:`replay.run`.
        """
        self._check_usable()
        if self._run.result is None:
            self._finish()
            end = f"finished at {format_ns(self.now_ns)}"
            self._mark(Stop("finished", self.now_ns, (), None, end))
        result = self.result
        failure = self.failure
        if failure is not None:
            raise ReplayFailedError(
                f"replay failed: {type(failure).__name__}: {failure}", result=result
            ) from failure
        return result
