"""Step-debugging a replay: build it without running it, then step, inspect, break and resume.

A :class:`ReplaySession` holds one replay on its own :class:`simclock.VirtualEventLoop`,
built exactly as :func:`replay.run` builds it but not started. Nothing runs until you ask:

- :meth:`~ReplaySession.step` runs until the next lifecycle event is recorded (one
  ``simclock`` callback at a time; :meth:`~ReplaySession.step_callback` runs exactly one);
- :meth:`~ReplaySession.run_until` runs to a virtual instant or until a predicate holds;
- :meth:`~ReplaySession.run_until_request` runs until a request reaches a state;
- :meth:`~ReplaySession.resume` runs until a breakpoint is hit (or the end);
- :meth:`~ReplaySession.run` runs to the end and returns the :class:`replay.ReplayResult`;
- :meth:`~ReplaySession.back` and :meth:`~ReplaySession.goto` go back to an earlier stop
  or instant by re-executing the run (:mod:`replay._session_trail`).

Every stepping method returns a :class:`Stop` that says where and why the session stopped.
Between steps the session is idle and everything can be looked at: :attr:`now_ns`,
:meth:`engine` (queues, running batch, pass in flight, KV use and cached blocks),
:meth:`request` (state, history, trace), :meth:`in_flight`, :meth:`policy` (requests it
holds, its next wakeup) and :meth:`describe` for all of it as text; a session built with
``timeline=True`` gives the timeline so far at any stop (:meth:`timeline`).

The session works from a plain REPL or ``pdb`` (no loop runs outside); inside a running
event loop (an async test) use the awaitable variants (:meth:`astep`, :meth:`arun_until`,
:meth:`arun_until_request`, :meth:`aresume`, :meth:`arun`). Stepping changes nothing: a
session stepped to the end gives the same report, byte for byte, as :func:`replay.run` on
the same inputs.
"""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, Unpack, cast

import attrs

import simclock
from engines import Engine, EventKind, Journal, LifecycleEvent, RequestTrace
from loadgen import Request, Workload
from simclock import get_logger

from ._exceptions import ReplayFailedError
from ._files import make_directories
from ._report import ReplayResult
from ._run import Run, RunOptions, setup
from ._session_state import (
    STATE_OF,
    TERMINAL,
    Breakpoint,
    EngineState,
    PolicyState,
    RequestState,
    Stop,
    StopReason,
    describe_event,
    describe_pass,
    event_kind,
    format_ns,
)
from ._session_trail import NON_TOKEN_KINDS, START, Position, pristine_options
from ._timeline import Timeline, TimelineFilter, TimelineRecorder

__all__ = (
    "Breakpoint",
    "EngineState",
    "PolicyState",
    "ReplaySession",
    "RequestState",
    "Stop",
    "describe_event",
    "format_ns",
)

T = TypeVar("T")

log = get_logger(__name__)

_WATCHED_COST = 6  # a watched run's cost per virtual second over a fast forward's, about


def _detached(fn: Callable[[], T]) -> T:
    """Call ``fn`` with no running loop in this thread (the session's loop takes its place)."""
    outer = asyncio.events._get_running_loop()
    asyncio.events._set_running_loop(None)
    try:
        return fn()
    finally:
        asyncio.events._set_running_loop(outer)


@attrs.define(eq=False)
class ReplaySession:
    """One replay, built but not run, that can be stepped, inspected and resumed.

    Build it with :meth:`ReplaySession.build` (the arguments of :func:`replay.run`).

    States: *ready* (built, or stopped between steps), *finished* (the run is over:
    :attr:`result` is set and stepping methods return a ``"finished"`` stop at once),
    *failed* (a step raised; the session cannot go on). Breakpoints are checked by every
    running method except :meth:`step`, :meth:`step_callback` and :meth:`run`; a time
    breakpoint stops the session with the clock at that instant and nothing at that instant
    run yet; an event or request breakpoint stops it right after the callback that recorded
    the matching event.
    """

    _run: Run
    _history_on: bool = True
    _workload: Workload | None = attrs.field(default=None, kw_only=True)
    _options: dict[str, Any] | None = attrs.field(default=None, kw_only=True)
    _not_rewindable: str | None = attrs.field(default=None, kw_only=True)
    _run_id: str | None = attrs.field(default=None, kw_only=True)
    _timeline_filter: TimelineFilter | None = attrs.field(default=None, kw_only=True)
    _recorder: TimelineRecorder | None = attrs.field(default=None, init=False)
    _seen: int = attrs.field(default=0, init=False)
    _trail: list[tuple[Position, Stop | None]] = attrs.field(
        factory=lambda: [(START, None)], init=False
    )
    _breakpoints: list[Breakpoint] = attrs.field(factory=list, init=False)
    _next_number: int = attrs.field(default=1, init=False)
    _history: dict[str, list[LifecycleEvent]] = attrs.field(factory=dict, init=False)
    _last_kind: dict[str, tuple[EventKind, int | None]] = attrs.field(factory=dict, init=False)
    _recent: list[LifecycleEvent] = attrs.field(factory=list, init=False)
    _matched: list[tuple[Breakpoint, LifecycleEvent]] = attrs.field(factory=list, init=False)
    _watch: Callable[[LifecycleEvent], bool] | None = attrs.field(default=None, init=False)
    _predicate_states: dict[int, bool] = attrs.field(factory=dict, init=False)
    _watched: list[LifecycleEvent] = attrs.field(factory=list, init=False)
    _closed: bool = attrs.field(default=False, init=False)

    def __attrs_post_init__(self) -> None:
        if self._history_on:
            self._run.journal.subscribe(self._on_event)
        self._record_timeline(self._run)

    def _record_timeline(self, run: Run) -> None:
        """Subscribe a fresh timeline recorder to ``run``'s journal, if the session keeps one."""
        if self._timeline_filter is None:
            return
        self._recorder = TimelineRecorder(
            views=tuple(e.view for e in run.engines), filter=self._timeline_filter
        )
        run.journal.subscribe(self._recorder.on_event)

    @classmethod
    def build(
        cls,
        workload: Workload,
        *,
        history: bool = True,
        timeline: bool | TimelineFilter = False,
        run_id: str | None = None,
        **options: Unpack[RunOptions],
    ) -> ReplaySession:
        """Build a replay exactly as :func:`replay.run` would, without running anything.

        Args:
            workload: the requests to replay.
            history: watch the journal (request history, request states, event and
                request breakpoints). Watching makes the engines record their per-token
                events (slower; the report does not change); with ``history=False`` the run
                is observed exactly as :func:`replay.run` observes it, and only instants and
                predicates can stop it.
            timeline: record the run's timeline as it goes, for :meth:`timeline` and
                :meth:`write_timeline` at any stop (``True``, or a
                :class:`replay.TimelineFilter` to keep only a window or some requests).
                Recording watches every event, per-token ones included.
            run_id: the ``run_id`` bound to every log event of the run (default
                ``"<workload source>#<seed>"``).
            **options: the run spec (:class:`replay.RunOptions`), as :func:`replay.run`
                takes it. With ``stepping="pass"`` or ``"macro"`` the session shows the same
                state at every instant; with ``request_log`` a settled request's trace is
                dropped (:meth:`request` no longer shows it).

        Returns:
            The session, at virtual time 0 with nothing run.

        Raises:
            TypeError: an unknown option, or ``topology`` or ``policy`` missing.
            WorkloadValidationError: the workload or an option is invalid.
        """
        if run_id is None:
            run_id = f"{workload.source}#{options.get('seed', 0)}"
        # copied before anything runs: each re-execution starts from this state (back, goto)
        pristine, why = pristine_options(dict(options))
        parts, echo = setup(workload, options, caller="ReplaySession.build")
        window: TimelineFilter | None = None
        if isinstance(timeline, TimelineFilter):
            window = timeline
        elif timeline:
            window = TimelineFilter()
        return cls(
            Run(parts, workload, options.get("slo"), echo, run_id),
            history,
            workload=workload,
            options=pristine,
            not_rewindable=why,
            run_id=run_id,
            timeline_filter=window,
        )

    # -- recording ------------------------------------------------------------------------

    def _on_event(self, event: LifecycleEvent) -> None:
        self._recent.append(event)
        self._last_kind[event.request_id] = (event.kind, event.engine)
        if event.kind is not EventKind.TOKEN:
            self._seen += 1
            self._history.setdefault(event.request_id, []).append(event)
        for bp in self._breakpoints:
            if bp.matches(event):
                self._matched.append((bp, event))
        if self._watch is not None and self._watch(event):
            self._watched.append(event)

    # -- the clock ----------------------------------------------------------------------

    @property
    def loop(self) -> simclock.VirtualEventLoop:
        """The session's virtual event loop (for :meth:`~simclock.VirtualEventLoop.snapshot`)."""
        return self._run.loop

    @property
    def now_ns(self) -> int:
        """The virtual time, in integer nanoseconds."""
        return self._run.now_ns

    @property
    def now_s(self) -> float:
        """The virtual time, in seconds."""
        return self._run.now_ns / 1e9

    @property
    def finished(self) -> bool:
        """Whether the run is over (:attr:`result` is set)."""
        return self._run.result is not None

    @property
    def result(self) -> ReplayResult:
        """The report of the finished run.

        Raises:
            RuntimeError: the run is not finished yet.
        """
        result = self._run.result
        if result is None:
            raise RuntimeError("the replay is not finished; call run() or resume() first")
        return result

    # -- running --------------------------------------------------------------------------

    def _need_history(self, what: str) -> None:
        if not self._history_on:
            raise ValueError(f"{what} need the request history; build with history=True")

    def _check_usable(self) -> None:
        error = self._run.error
        if error is not None:
            raise RuntimeError(
                f"the replay session failed and cannot go on: {type(error).__name__}: {error}"
            ) from error

    def _drive(self, until_ns: int | None, predicate: Callable[[], bool] | None) -> None:
        """Run callbacks until the run is over, a breakpoint matches, ``predicate()`` holds,
        or the next callback is at ``until_ns`` or later (then set the clock there)."""
        matched = self._matched

        def stop() -> bool:
            return bool(matched) or (predicate is not None and predicate())

        self._run.advance(until_ns, stop=stop)

    def _finish(self) -> None:
        """Run the rest exactly as :func:`replay.run` does and build the result."""
        self._run.finish()

    def _stopped(
        self,
        reason: StopReason,
        events: tuple[LifecycleEvent, ...] = (),
        bp: Breakpoint | None = None,
        what: str = "",
    ) -> Stop:
        head = f"stopped at {format_ns(self.now_ns)}"
        if reason == "finished":
            head = f"finished at {format_ns(self.now_ns)}"
        if bp is not None:
            head += f": breakpoint {bp.number} ({bp.description})"
        elif what:
            head += f": {what}"
        lines = [head, *(f"  {describe_event(e)}" for e in events)]
        log.debug(
            "session stopped",
            virtual_time_ns=self.now_ns,
            reason=reason,
            breakpoint=None if bp is None else bp.number,
            events=len(events),
        )
        stop = Stop(reason, self.now_ns, events, bp, "\n".join(lines))
        self._mark(stop)
        return stop

    # -- the trail of stops (back, goto) ----------------------------------------------------

    def _position(self) -> Position:
        """Where the session is now, as a re-execution finds it again."""
        now = self.now_ns
        if self._run.result is not None:
            return Position(now, 0, self._seen, 0, finished=True)
        starts = [p.start_ns for p in (e.view.pass_in_flight for e in self._run.engines) if p]
        callbacks = self._run.loop.instant_events()
        return Position(now, callbacks, self._seen, min([now, *starts]))

    def _mark(self, stop: Stop) -> None:
        """Put the session's position on the trail, unless it has not moved."""
        position = self._position()
        if position != self._trail[-1][0]:
            self._trail.append((position, stop))

    @property
    def stops(self) -> tuple[Stop, ...]:
        """The stops on the session's trail, oldest first (what :meth:`back` counts).

        Every call of a running method that moves the session (``step``, ``step_callback``,
        ``run_until``, ``run_until_request``, ``resume``, ``run``, ``goto``) adds its stop; a
        call that leaves the session where it was adds none; :meth:`back` removes the stops
        it goes back over.
        """
        return tuple(stop for _, stop in self._trail if stop is not None)

    @property
    def failure(self) -> BaseException | None:
        """What made the run fail (a commit, a policy, an engine, the driver), if anything."""
        return self._run.failure

    def _over(self) -> str:
        failure = self.failure
        if failure is None:
            return "the run is over"
        return f"the run failed: {type(failure).__name__}: {failure}"

    def _end_or_none(self) -> Stop | None:
        if self._run.result is not None:
            return self._stopped("finished", what=self._over())
        if self._run.done:
            self._finish()
            return self._stopped("finished", what=self._over())
        return None

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
            check = target
            return self._run_to(None, lambda: check(self), "predicate", "the predicate holds")
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

        def pred() -> bool:
            if predicate is not None and predicate():
                return True
            fired = False
            for bp in checks:
                value = bool(cast(Callable[[ReplaySession], bool], bp.predicate)(self))
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

    def close(self) -> None:
        """Abandon an unfinished run: cancel its tasks and close its loop (idempotent).

        A finished session is already closed. After :meth:`close` the session can still be
        inspected but not stepped. Safe inside a running event loop (an async test): the
        run's own loop unwinds its tasks in place of the running one.
        """
        _detached(lambda: self._run.close("the session was closed"))

    async def aclose(self) -> None:
        """:meth:`close` from inside a running event loop (``async with`` calls it)."""
        self.close()
        await asyncio.sleep(0)

    def __enter__(self) -> ReplaySession:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> ReplaySession:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- going back ---------------------------------------------------------------------

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
        found = _detached(lambda: self._reexecute(position, observed=observed))
        if not found and not observed:
            _detached(lambda: self._reexecute(position, observed=True))

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
                check = cast(Callable[[ReplaySession], bool], bp.predicate)
                self._predicate_states[bp.number] = bool(check(self))
        if position.events < 0:  # an instant asked for (goto): nothing more to check
            return True
        here = self._position()
        return (here.time_ns, here.callbacks, here.events, here.finished) == (
            position.time_ns,
            position.callbacks,
            position.events,
            position.finished,
        )

    # -- timeline -----------------------------------------------------------------------

    def timeline(self, filter: TimelineFilter | None = None) -> Timeline:
        """Return the timeline of the run so far (a session built with ``timeline=``).

        Phases still open are shown up to the latest event, marked ``incomplete``.

        Args:
            filter: the window and requests to show (default: the session's own); a session
                built with a filter shows only that one.

        Raises:
            ValueError: the session records no timeline, or ``filter`` differs from the one
                it records.
        """
        if self._recorder is None:
            raise ValueError(
                "this session records no timeline; build it with timeline=True "
                "(or a TimelineFilter)"
            )
        self._run.journal.sync()
        return self._recorder.timeline(filter)

    def write_timeline(
        self, path: str | os.PathLike[str], filter: TimelineFilter | None = None
    ) -> Timeline:
        """Write :meth:`timeline` to ``path`` (atomically, creating its directory).

        Returns:
            The timeline written.

        Raises:
            ValueError: as :meth:`timeline`.
            OutputError: the file cannot be written.
        """
        timeline = self.timeline(filter)
        target = Path(path)
        make_directories(target.parent)
        timeline.write(target)
        return timeline

    # -- awaitable variants -------------------------------------------------------------

    async def astep(self, *, engine: int | None = None, request: str | None = None) -> Stop:
        """:meth:`step` from inside a running event loop (an async test)."""
        stop = _detached(lambda: self.step(engine=engine, request=request))
        await asyncio.sleep(0)
        return stop

    async def aback(self, n: int = 1) -> Stop:
        """:meth:`back` from inside a running event loop."""
        stop = _detached(lambda: self.back(n))
        await asyncio.sleep(0)
        return stop

    async def agoto(self, time_ns: int | None = None, *, time_s: float | None = None) -> Stop:
        """:meth:`goto` from inside a running event loop."""
        stop = _detached(lambda: self.goto(time_ns, time_s=time_s))
        await asyncio.sleep(0)
        return stop

    async def arun_until(
        self,
        target: int | Callable[[ReplaySession], bool] | None = None,
        *,
        time_ns: int | None = None,
        time_s: float | None = None,
    ) -> Stop:
        """:meth:`run_until` from inside a running event loop."""
        stop = _detached(lambda: self.run_until(target, time_ns=time_ns, time_s=time_s))
        await asyncio.sleep(0)
        return stop

    async def arun_until_request(
        self, request_id: str, state: EventKind | str = "finished"
    ) -> Stop:
        """:meth:`run_until_request` from inside a running event loop."""
        stop = _detached(lambda: self.run_until_request(request_id, state))
        await asyncio.sleep(0)
        return stop

    async def aresume(self) -> Stop:
        """:meth:`resume` from inside a running event loop."""
        stop = _detached(self.resume)
        await asyncio.sleep(0)
        return stop

    async def arun(self) -> ReplayResult:
        """:meth:`run` from inside a running event loop."""
        result = _detached(self.run)
        await asyncio.sleep(0)
        return result

    # -- breakpoints --------------------------------------------------------------------

    def _add(self, bp: Breakpoint) -> Breakpoint:
        if bp.kind in ("request", "event"):
            self._need_history("event and request breakpoints")
        self._breakpoints.append(bp)
        self._next_number += 1
        return bp

    def break_at(self, time_ns: int | None = None, *, time_s: float | None = None) -> Breakpoint:
        """Stop when the clock reaches an instant (before anything at that instant runs).

        Args:
            time_ns: the instant in integer nanoseconds.
            time_s: the instant in seconds (instead of ``time_ns``).

        Returns:
            The breakpoint (it fires once).

        Raises:
            ValueError: neither or both given, or the instant is in the past.
        """
        if (time_ns is None) == (time_s is None):
            raise ValueError("give break_at exactly one of time_ns and time_s")
        when = time_ns if time_ns is not None else round(cast(float, time_s) * 1_000_000_000)
        if when < self.now_ns:
            raise ValueError(
                f"cannot break in the past: {when} ns is before now ({self.now_ns} ns)"
            )
        return self._add(
            Breakpoint(self._next_number, "time", f"at {format_ns(when)}", time_ns=when)
        )

    def break_on_request(self, request_id: str, *kinds: EventKind | str) -> Breakpoint:
        """Stop after any event of ``request_id`` (or only events of ``kinds``).

        Raises:
            ValueError: the request is not in the run, or a kind is unknown.
        """
        self._run_request(request_id)
        resolved = frozenset(event_kind(k) for k in kinds)
        names = "any event" if not resolved else "/".join(sorted(k.value for k in resolved))
        return self._add(
            Breakpoint(
                self._next_number,
                "request",
                f"request {request_id!r}: {names}",
                request_id=request_id,
                kinds=resolved,
            )
        )

    def break_on(self, *kinds: EventKind | str) -> Breakpoint:
        """Stop after any event of ``kinds``: e.g. ``"preemption"``, ``"rejection"``,
        ``"abort"`` (a dispatch abort), ``"failure"``, or any event kind value.

        Raises:
            ValueError: no kind given, or a kind is unknown.
        """
        if not kinds:
            raise ValueError("break_on needs at least one event kind")
        resolved = frozenset(event_kind(k) for k in kinds)
        names = "/".join(sorted(k.value for k in resolved))
        return self._add(Breakpoint(self._next_number, "event", names, kinds=resolved))

    def break_when(
        self, predicate: Callable[[ReplaySession], bool], *, description: str = "a predicate"
    ) -> Breakpoint:
        """Stop before a callback at which ``predicate(session)`` has become true.

        The breakpoint fires the first time the predicate holds, then again each time it
        turns from false to true. It runs before every callback: keep it cheap.
        """
        return self._add(
            Breakpoint(self._next_number, "predicate", description, predicate=predicate)
        )

    @property
    def breakpoints(self) -> tuple[Breakpoint, ...]:
        """The breakpoints set, in creation order."""
        return tuple(self._breakpoints)

    def delete(self, bp: Breakpoint | int) -> None:
        """Remove a breakpoint (or the one with that number).

        Raises:
            ValueError: no such breakpoint.
        """
        number = bp if isinstance(bp, int) else bp.number
        for existing in self._breakpoints:
            if existing.number == number:
                self._breakpoints.remove(existing)
                return
        raise ValueError(f"no breakpoint {number}")

    def clear_breakpoints(self) -> None:
        """Remove every breakpoint."""
        self._breakpoints.clear()

    # -- inspection ---------------------------------------------------------------------

    @property
    def journal(self) -> Journal:
        """The run's live journal (subscribe a :class:`replay.TimelineRecorder` here)."""
        return self._run.journal

    @property
    def engines(self) -> tuple[Engine, ...]:
        """The live engines (read their ``view``; do not call their handshake methods)."""
        return self._run.engines

    def engine(self, index: int) -> EngineState:
        """Return engine ``index`` as it is now.

        Raises:
            IndexError: no such engine.
        """
        if not 0 <= index < len(self._run.engines):
            raise IndexError(f"no engine {index}; the topology has {len(self._run.engines)}")
        engine = self._run.engines[index]
        snap = engine.snapshot()
        view = engine.view
        return EngineState(
            index=index,
            role=engine.role,
            waiting=snap.waiting,
            running=snap.running,
            in_pass=snap.in_pass,
            pass_end_ns=engine.pass_end_ns,
            kv_blocks_used=view.kv_blocks_used,
            kv_blocks_free=view.kv_blocks_free,
            kv_blocks_total=view.kv_blocks_total,
            cached_blocks=sum(1 for key in snap.block_keys if key != 0),
            held=snap.held,
            reserving=snap.reserving,
            passes=engine.passes,
            prefill_outstanding=snap.prefill_outstanding,
            decode_outstanding=snap.decode_outstanding,
            current_pass=engine.view.pass_in_flight,
        )

    def _trace(self, request_id: str) -> RequestTrace | None:
        journal = self._run.journal
        journal.sync()
        return journal.traces.get(request_id)

    def _run_request(self, request_id: str) -> Request:
        """The request ``request_id`` of the run: a workload request, or one the release
        driver has taken in (a started play instance's, a warm-up request)."""
        prepared = self._run.parts.prepared
        position = prepared.positions.get(request_id)
        if position is not None:
            return prepared.requests[position]
        request = self._run.parts.driver.request(request_id)
        if request is None:
            where = "the workload"
            if self._run.parts.load.lanes is not None:
                where += " or in the play instances started so far"
            raise ValueError(f"no request {request_id!r} in {where}")
        return request

    def request(self, request_id: str) -> RequestState:
        """Return request ``request_id`` as it is now.

        ``request_id`` names a request of the workload or, with lanes, a request of a play
        instance started so far (``P#k/...``, a warm-up request).

        Raises:
            ValueError: the request is not in the run.
        """
        self._run_request(request_id)
        self._need_history("request states")
        last = self._last_kind.get(request_id)
        state = "pending" if last is None else STATE_OF[last[0]]
        history = tuple(self._history.get(request_id, ()))
        engine = next((e.engine for e in reversed(history) if e.engine is not None), None)
        return RequestState(request_id, state, engine, history, self._trace(request_id))

    def in_flight(self) -> tuple[RequestState, ...]:
        """Every released request that has not ended, in release order."""
        self._need_history("request states")
        return tuple(
            self.request(rid) for rid, (kind, _) in self._last_kind.items() if kind not in TERMINAL
        )

    def prefix_hits(self, request_id: str) -> tuple[int, ...]:
        """Prompt tokens of ``request_id`` each engine holds cached now, by engine index.

        Raises:
            ValueError: the request is not in the run.
        """
        request = self._run_request(request_id)
        context = self._run.runtime.context
        return tuple(context.prefix_overlap_tokens(request, e.index) for e in self._run.engines)

    def policy(self) -> PolicyState:
        """Return the policy's pending work and next wakeup as they are now."""
        runtime = self._run.runtime
        wakeups = [
            t.when_ns
            for t in self._run.loop.snapshot().pending_timers
            if t.kind is simclock.WakeupKind.POLICY_WAKEUP and t.when_ns is not None
        ]
        return PolicyState(
            name=runtime.name,
            held=tuple(runtime.held_request_ids()),
            queued=len(runtime.stream),
            unsettled=runtime.unsettled,
            next_wakeup_ns=min(wakeups) if wakeups else None,
        )

    def describe(self) -> str:
        """Return the whole state as text: time, engines, policy, requests in flight."""
        flying = self.in_flight() if self._history_on else ()
        lines = [f"virtual time {format_ns(self.now_ns)}"]
        lines.extend(self.engine(e.index).describe() for e in self._run.engines)
        lines.append(self.policy().describe())
        by_state: dict[str, int] = {}
        for r in flying:
            by_state[r.state] = by_state.get(r.state, 0) + 1
        counts = ", ".join(f"{n} {s}" for s, n in sorted(by_state.items())) or "none"
        if self._history_on:
            lines.append(f"in flight: {len(flying)} ({counts})")
        return "\n".join(lines)

    def __repr__(self) -> str:
        state = "finished" if self._run.result is not None else "ready"
        return f"<ReplaySession {state} at {format_ns(self.now_ns)}>"
