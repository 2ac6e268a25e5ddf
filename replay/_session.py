"""Step-debugging a replay: build it without running it, then step, inspect, break and resume.

A :class:`ReplaySession` holds one replay on its own :class:`simclock.VirtualEventLoop`,
built exactly as :func:`replay.run` builds it but not started. Nothing runs until you ask:

- :meth:`~ReplaySession.step` runs until the next lifecycle event is recorded (one
  ``simclock`` callback at a time; :meth:`~ReplaySession.step_callback` runs exactly one);
- :meth:`~ReplaySession.run_until` runs to a virtual instant or until a predicate holds;
- :meth:`~ReplaySession.run_until_request` runs until a request reaches a state;
- :meth:`~ReplaySession.resume` runs until a breakpoint is hit (or the end);
- :meth:`~ReplaySession.run` runs to the end and returns the :class:`replay.ReplayResult`.

Every stepping method returns a :class:`Stop` that says where and why the session stopped.
Between steps the session is idle and everything can be looked at: :attr:`now_ns`,
:meth:`engine` (queues, running batch, pass in flight, KV use and cached blocks),
:meth:`request` (state, history, trace), :meth:`in_flight`, :meth:`policy` (requests it
holds, its next wakeup) and :meth:`describe` for all of it as text.

The session works from a plain REPL or ``pdb`` (no loop runs outside); inside a running
event loop (an async test) use the awaitable variants (:meth:`astep`, :meth:`arun_until`,
:meth:`arun_until_request`, :meth:`aresume`, :meth:`arun`). Stepping changes nothing: a
session stepped to the end gives the same report, byte for byte, as :func:`replay.run` on
the same inputs.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import TypeVar, Unpack, cast

import attrs

import simclock
from engines import Engine, EventKind, Journal, LifecycleEvent, RequestTrace
from loadgen import Request, Workload
from simclock import get_logger

from ._exceptions import ReplayFailedError
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
    event_kind,
    format_ns,
)

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

    @classmethod
    def build(
        cls,
        workload: Workload,
        *,
        history: bool = True,
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
        parts, echo = setup(workload, options, caller="ReplaySession.build")
        return cls(Run(parts, workload, options.get("slo"), echo, run_id), history)

    # -- recording ------------------------------------------------------------------------

    def _on_event(self, event: LifecycleEvent) -> None:
        self._recent.append(event)
        self._last_kind[event.request_id] = (event.kind, event.engine)
        if event.kind is not EventKind.TOKEN:
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
        return Stop(reason, self.now_ns, events, bp, "\n".join(lines))

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

    def step(self) -> Stop:
        """Run until at least one lifecycle event is recorded (or the run ends).

        Breakpoints are not checked. Several events recorded by the same callback (a pass
        commit, for example) are all returned.

        Returns:
            A ``"step"`` stop whose ``events`` are the events recorded, or ``"finished"``.
        """
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
        self._finish()
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
        inspected but not stepped.
        """
        self._run.close("the session was closed")

    def __enter__(self) -> ReplaySession:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- awaitable variants -------------------------------------------------------------

    async def astep(self) -> Stop:
        """:meth:`step` from inside a running event loop (an async test)."""
        stop = _detached(self.step)
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
