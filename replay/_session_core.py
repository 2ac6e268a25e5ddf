"""The state every part of a replay session shares (:mod:`replay._session`).

:class:`SessionCore` holds the run, what the session records of it (request history, the
events of the current step, matched breakpoints) and the trail of stops, and gives the
parts built on it (:mod:`replay._session_snapshots`, :mod:`replay._session_stepping`,
:mod:`replay._session_rewind`, :mod:`replay._session_breakpoints`) the clock, the checks
before a step, one way to drive the run and one way to make a :class:`Stop`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

import attrs

import simclock
from engines import EventKind, LifecycleEvent
from loadgen import Request, Workload
from simclock import get_logger

from ._report import ReplayResult
from ._run import Run
from ._session_state import Breakpoint, Stop, StopReason, describe_event, format_ns
from ._session_trail import START, Position
from ._timeline import TimelineFilter, TimelineRecorder

__all__ = ("SessionCore", "detached")

T = TypeVar("T")

# the session logs under one name, whichever of its modules logs
log = get_logger("replay._session")


def detached(fn: Callable[[], T]) -> T:
    """Call ``fn`` with no running loop in this thread (the session's loop takes its place)."""
    outer = asyncio.events._get_running_loop()
    asyncio.events._set_running_loop(None)
    try:
        return fn()
    finally:
        asyncio.events._set_running_loop(outer)


@attrs.define(eq=False, repr=False)
class SessionCore:
    """The run of a :class:`replay.ReplaySession` and what the session keeps of it.

    The session's states and its public methods are described on
    :class:`replay.ReplaySession`; this class holds its state and the steps every running
    method shares.
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
        self._recorder = run.timeline_recorder(self._timeline_filter)

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

    # -- the requests of the run ----------------------------------------------------------

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
