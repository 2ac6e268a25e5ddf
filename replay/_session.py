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

The class is assembled from one module per part, on the state they share
(:mod:`replay._session_core`): inspection (:mod:`replay._session_snapshots`), running forward
(:mod:`replay._session_stepping`), going back (:mod:`replay._session_rewind`) and breakpoints
(:mod:`replay._session_breakpoints`); building, closing, the timeline and the awaitable
variants are here.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Unpack

import attrs

from engines import EventKind
from loadgen import Workload

from ._files import make_directories
from ._report import ReplayResult
from ._run import Run, RunOptions, setup
from ._session_breakpoints import SessionBreakpoints
from ._session_core import detached
from ._session_rewind import SessionRewind
from ._session_state import (
    Breakpoint,
    EngineState,
    PolicyState,
    RequestState,
    Stop,
    describe_event,
    format_ns,
)
from ._session_trail import pristine_options
from ._timeline import Timeline, TimelineFilter

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


@attrs.define(eq=False)
class ReplaySession(SessionRewind, SessionBreakpoints):
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

    # -- closing ----------------------------------------------------------------------

    def close(self) -> None:
        """Abandon an unfinished run: cancel its tasks and close its loop (idempotent).

        A finished session is already closed. After :meth:`close` the session can still be
        inspected but not stepped. Safe inside a running event loop (an async test): the
        run's own loop unwinds its tasks in place of the running one.
        """
        detached(lambda: self._run.close("the session was closed"))

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
        stop = detached(lambda: self.step(engine=engine, request=request))
        await asyncio.sleep(0)
        return stop

    async def aback(self, n: int = 1) -> Stop:
        """:meth:`back` from inside a running event loop."""
        stop = detached(lambda: self.back(n))
        await asyncio.sleep(0)
        return stop

    async def agoto(self, time_ns: int | None = None, *, time_s: float | None = None) -> Stop:
        """:meth:`goto` from inside a running event loop."""
        stop = detached(lambda: self.goto(time_ns, time_s=time_s))
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
        stop = detached(lambda: self.run_until(target, time_ns=time_ns, time_s=time_s))
        await asyncio.sleep(0)
        return stop

    async def arun_until_request(
        self, request_id: str, state: EventKind | str = "finished"
    ) -> Stop:
        """:meth:`run_until_request` from inside a running event loop."""
        stop = detached(lambda: self.run_until_request(request_id, state))
        await asyncio.sleep(0)
        return stop

    async def aresume(self) -> Stop:
        """:meth:`resume` from inside a running event loop."""
        stop = detached(self.resume)
        await asyncio.sleep(0)
        return stop

    async def arun(self) -> ReplayResult:
        """:meth:`run` from inside a running event loop."""
        result = detached(self.run)
        await asyncio.sleep(0)
        return result

    def __repr__(self) -> str:
        state = "finished" if self._run.result is not None else "ready"
        return f"<ReplaySession {state} at {format_ns(self.now_ns)}>"
