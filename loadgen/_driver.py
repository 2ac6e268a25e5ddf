"""The release driver: hands requests on at their release times (REFERENCE-workloads §1.1, §4, §5).

The driver knows no engine. It releases requests through a ``submit(request)`` callback
and learns what became of them through :meth:`Driver.on_terminal`, which the replay layer
calls from the engines' journal. It runs on the virtual clock (``simclock``), so it must
live inside a running :class:`simclock.VirtualEventLoop`.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from array import array
from collections.abc import Callable, Sequence

import attrs
import numpy as np
import numpy.typing as npt

import simclock

from ._exceptions import WorkloadConfigError, WorkloadRunError
from ._modes import LoadMode
from ._outcomes import TERMINAL_STATUSES, OutcomeLedger, Outcomes, RequestOutcome
from ._plays import instance_requests, preparation_requests, snapshot_cut
from ._request import ArrivalRule, Dep, Request
from ._synthetic_table import SyntheticRequests
from ._workload import Play, Workload

__all__ = (
    "TERMINAL_STATUSES",
    "Driver",
    "DriverReport",
    "IdleShift",
    "PlayOutcome",
    "RequestOutcome",
)

_WAITER = "loadgen:driver"
_NS_PER_MS = 1_000_000
_POLL_NS = _NS_PER_MS  # quiescence is polled every virtual millisecond after the warm-up
_COMPACT_ROOTS = 1 << 16  # roots released before their columns are cut down to the rest


def _ns(ms: float) -> int:
    return round(ms * _NS_PER_MS)


@attrs.frozen
class PlayOutcome:
    """What became of one play instance (§5.2, §5.3).

    Attributes:
        instance_id: ``P#k`` with lanes, else the play id.
        play_id: the corpus play id.
        lane: the lane that ran it, or None.
        outcome: ``completed``, ``failed`` or ``incomplete``.
        failed_request: the reported failure (smallest terminal time, then play
            position), or None.
        first_release_ns: the first release of a measured request, or None.
        last_terminal_ns: the last terminal time of a measured request, or None.
        trajectory_ms: ``last_terminal - first_release`` for completed plays, else None.
    """

    instance_id: str
    play_id: str
    lane: int | None
    outcome: str
    failed_request: str | None
    first_release_ns: int | None
    last_terminal_ns: int | None
    trajectory_ms: float | None


@attrs.frozen
class IdleShift:
    """A profile idle cap moved pending timers earlier (§5.7).

    Attributes:
        time_ns: when.
        scope: a play instance id, or ``"global"``.
        shift_ns: by how much.
        timers: how many timers moved.
    """

    time_ns: int
    scope: str
    shift_ns: int
    timers: int


@attrs.frozen
class DriverReport:
    """The driver's accounting of a run.

    Attributes:
        requests: one outcome per request of the workload and of every started play
            instance, in the order they entered the run. A tuple, or, for a run at the
            workload's timestamps, an :class:`Outcomes` sequence that builds each outcome
            when it is read (a long run keeps a few numbers per request, not an object).
        plays: play outcomes, in start order.
        profile_start_ms: the warm-up barrier ``B`` (or None without warm-up).
        cutoff_ms: the profile cutoff, or None.
        idle_shifts: idle-cap shifts, in time order.
        history: ids of snapshot history requests (never released, not accounted).
    """

    requests: Sequence[RequestOutcome]
    plays: tuple[PlayOutcome, ...]
    history: tuple[str, ...] = ()
    profile_start_ms: float | None = None
    cutoff_ms: float | None = None
    idle_shifts: tuple[IdleShift, ...] = ()

    def counts(self) -> dict[str, int]:
        """Requests per terminal status (every status listed, zeros included)."""
        out: dict[str, int] = dict.fromkeys(TERMINAL_STATUSES, 0)
        for outcome in self.requests:
            out[outcome.status] += 1
        return out

    def trajectory_percentiles_ms(self) -> tuple[float, float, float] | None:
        """p50, p90, p99 of the trajectory latency of completed plays (None if none)."""
        values = [p.trajectory_ms for p in self.plays if p.trajectory_ms is not None]
        if not values:
            return None
        p50, p90, p99 = (float(v) for v in np.percentile(values, [50, 90, 99]))
        return p50, p90, p99


@attrs.define(eq=False)
class _PlayRun:
    """A play (instance) in the run: its units, lane and outcome."""

    instance_id: str
    play_id: str
    lane: int | None
    origin_ns: int
    units: list[_Unit] = attrs.field(factory=list)
    open_units: int = 0
    failed: _Unit | None = None
    done: bool = False
    in_flight: int = 0
    idle_since_ns: int | None = None


@attrs.define(eq=False)
class _Session:
    """A closed-loop session (§4.2): a conversation, or a standalone request."""

    key: str
    positions: list[int]
    open_units: int = 0
    done: bool = False


@attrs.define(eq=False)
class _Unit:
    """One request in the run."""

    request: Request
    order: tuple[int, int]
    origin_ns: int
    play: _PlayRun | None = None
    session: _Session | None = None
    waiting: int = 0
    due_ns: int = 0
    status: str | None = None
    released_ns: int | None = None
    terminal_ns: int | None = None
    queued: bool = False
    prep_next: _Unit | None = None


@attrs.define(eq=False)
class _Roots:
    """The roots of a timestamp run not yet released: no unit exists for them until then.

    ``due[k]`` is when ``positions[k]`` is due; both are sorted by due time, then position
    (the order the units would have in the release queue). ``next`` is the first not taken;
    ``head`` is ``due[next]`` as an int (None when every root is taken), read without numpy
    by the driver's loop at every turn.
    """

    due: npt.NDArray[np.int64]
    positions: npt.NDArray[np.int64]
    next: int = 0
    head: int | None = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._set_head()

    def _set_head(self) -> None:
        self.head = int(self.due[self.next]) if self.next < len(self.due) else None

    def __len__(self) -> int:
        return len(self.positions) - self.next

    def take(self, now: int) -> list[int]:
        """The positions of the roots due by ``now``, taken out."""
        head = self.head
        if head is None or head > now:
            return []
        start = self.next
        stop = int(np.searchsorted(self.due, now, side="right"))
        self.next = stop
        taken: list[int] = self.positions[start:stop].tolist()
        if stop >= _COMPACT_ROOTS and 2 * stop >= len(self.due):
            # let go of the part taken (a long run would hold it to the end)
            self.due = self.due[stop:].copy()
            self.positions = self.positions[stop:].copy()
            self.next = 0
        self._set_head()
        return taken

    def drain(self) -> npt.NDArray[np.int64]:
        """The positions of every root left, taken out."""
        rest = self.positions[self.next :]
        self.next = len(self.positions)
        self.head = None
        return rest


def _settled(unit: _Unit) -> tuple[str, int | None, int | None]:
    return (unit.status or "never_issued", unit.released_ns, unit.terminal_ns)


def _check_unique(requests: Sequence[Request]) -> None:
    """Refuse a workload that names one id twice (as adding its units one by one would)."""
    if isinstance(requests, SyntheticRequests):
        return  # ids made unique
    ids = [r.id for r in requests]
    if len(set(ids)) == len(ids):
        return
    seen: set[str] = set()
    for rid in ids:
        if rid in seen:
            raise WorkloadConfigError(f"requests: duplicate request id {rid!r}")
        seen.add(rid)


def _outcome(unit: _Unit | RequestOutcome) -> RequestOutcome:
    if isinstance(unit, RequestOutcome):
        return unit
    request = unit.request
    return RequestOutcome(
        request_id=request.id,
        status=unit.status or "never_issued",
        released_ns=unit.released_ns,
        terminal_ns=unit.terminal_ns,
        phase=request.identity.phase,
        play_id=request.identity.play_id,
        request=request,
    )


@attrs.define(eq=False)
class Driver:
    """Releases a workload's requests on the virtual clock, by their arrival rules.

    Build it with the workload and a ``submit`` callback, await :meth:`run` inside the
    running loop (as a task of its own), and report every request's fate with
    :meth:`on_terminal`. The replay runner uses ``run()``, ``on_terminal()``, ``stop()``,
    ``finished`` and ``deadline_ns``; a replay session uses ``request()``; ``report()``
    gives the accounting so far.

    State machine of a request: *waiting* (for dependencies, a session slot, a lane or
    the warm-up barrier) → *due* (queued at its release time) → *released* (handed to
    ``submit``) → terminal. Requests due at the same instant are handed on after every
    other same-instant callback ran (``simclock.instant_end`` at priority -1, before the
    engines plan), in workload order (lane, then play position).

    Args:
        workload: what to release.
        submit: called with each request at its release instant.
        mode: the load mode and stop rules.
        rng: randomness for re-timing roots (``mode.arrivals``); the caller derives it
            from the run seed (stream ``driver``: ``replay.SEED_STREAMS``).
        seed: the run seed (default for ``mode.snapshot_seed``).
        quiescent: for the warm-up barrier: returns True when every engine is idle
            (nothing waiting or running, no transfer in flight).
        cancel: called with the id of each request cancelled at the end of a profile's
            grace.
    """

    workload: Workload
    submit: Callable[[Request], None]
    mode: LoadMode = attrs.field(factory=LoadMode, kw_only=True)
    rng: np.random.Generator | None = attrs.field(default=None, kw_only=True)
    seed: int = attrs.field(default=0, kw_only=True)
    quiescent: Callable[[], bool] | None = attrs.field(default=None, kw_only=True)
    cancel: Callable[[str], None] | None = attrs.field(default=None, kw_only=True)

    # Every request of the run by id, in the order they entered it: a unit while it may
    # still change, its outcome once settled (units of plays stay units: the play reads them).
    _units: dict[str, _Unit | RequestOutcome] = attrs.field(factory=dict, init=False)
    # Units neither released nor settled: kept up to date where units are added, released
    # and settled, so ``finished`` costs O(1) on every terminal event.
    _unsettled: int = attrs.field(default=0, init=False)
    _dependents: dict[str, list[tuple[_Unit, Dep]]] = attrs.field(factory=dict, init=False)
    _heap: list[tuple[int, tuple[int, int], int, _Unit]] = attrs.field(factory=list, init=False)
    _sequence: int = attrs.field(default=0, init=False)
    _waker: asyncio.Future[None] | None = attrs.field(default=None, init=False)
    _released: int = attrs.field(default=0, init=False)
    _in_flight: int = attrs.field(default=0, init=False)
    _closed: bool = attrs.field(default=False, init=False)
    _no_more_releases: bool = attrs.field(default=False, init=False)
    _error: BaseException | None = attrs.field(default=None, init=False)
    _plays: list[_PlayRun] = attrs.field(factory=list, init=False)
    _starts: dict[str, int] = attrs.field(factory=dict, init=False)
    # the first content id no request uses, worked out when a play first starts again
    _content_next: int | None = attrs.field(default=None, init=False)
    _cursor: int = attrs.field(default=0, init=False)
    _sessions: list[_Session] = attrs.field(factory=list, init=False)
    _session_cursor: int = attrs.field(default=0, init=False)
    _speedup: float = attrs.field(default=1.0, init=False)
    _roots_ms: dict[int, float] = attrs.field(factory=dict, init=False)
    _deadline_ns: int | None = attrs.field(default=None, init=False)
    _cutoff_ns: int | None = attrs.field(default=None, init=False)
    _grace_end_ns: int | None = attrs.field(default=None, init=False)
    _prep_open: int = attrs.field(default=0, init=False)
    _barrier_ns: int | None = attrs.field(default=None, init=False)
    _held: list[tuple[_PlayRun, list[Request]]] = attrs.field(factory=list, init=False)
    _idle_shifts: list[IdleShift] = attrs.field(factory=list, init=False)
    _outside: list[RequestOutcome] = attrs.field(factory=list, init=False)
    _history: list[str] = attrs.field(factory=list, init=False)
    _in_grace: bool = attrs.field(default=False, init=False)
    _idle_since_ns: int = attrs.field(default=0, init=False)
    _final: DriverReport | None = attrs.field(default=None, init=False)
    # A run at the workload's timestamps keeps the outcome of a request settled outside a
    # play in the ledger, at its workload position (its unit is let go), and takes a root
    # (no dependency, no play) into the run, as a unit, only when it is released.
    _ledger: OutcomeLedger | None = attrs.field(default=None, init=False)
    _roots: _Roots | None = attrs.field(default=None, init=False)
    _origin_ns: int = attrs.field(default=0, init=False)

    def __attrs_post_init__(self) -> None:
        mode = self.mode
        if mode.concurrency is not None and self.workload.plays:
            raise WorkloadConfigError("concurrency: agentic workloads use lanes instead")
        if mode.lanes is not None and not self.workload.plays:
            raise WorkloadConfigError("lanes: the workload has no plays")
        if mode.arrivals is not None and self.rng is None:
            raise WorkloadConfigError("arrivals: needs an rng (the run's 'driver' stream)")
        self._speedup = mode.speedup
        if mode.max_virtual_time_s is not None:
            self._deadline_ns = round(mode.max_virtual_time_s * 1e9)
        self._retime_roots()

    # -- public seam ---------------------------------------------------------------------

    @property
    def finished(self) -> bool:
        """Whether nothing more will ever be released."""
        return (
            self._closed
            or self._no_more_releases
            or (not self._queued() and not self._pending_starts() and self._unsettled == 0)
        )

    @property
    def deadline_ns(self) -> int | None:
        """``max_virtual_time_s`` in ns (the caller stops the engines there), or None."""
        return self._deadline_ns

    def request(self, request_id: str) -> Request | None:
        """Return request ``request_id`` as the driver runs it, or None if it holds no such one.

        The driver holds a play instance's requests (ids ``P#k/...``, content ids moved) and
        its warm-up requests from the instance's start. It holds a workload request while it
        is in the run: a run at the workload's timestamps takes a request that waits for its
        time only in when it is released, and lets a settled request outside a play go.
        Once the run has ended, the request is looked for in the report (linear time).
        """
        unit = self._units.get(request_id)
        if unit is None and self._final is not None:
            # the ended run let its units go; its report holds every request it ran
            unit = next((o for o in self._final.requests if o.request_id == request_id), None)
        return None if unit is None else unit.request

    def stop(self) -> None:
        """Release nothing more and settle the accounts now (in flight → incomplete)."""
        if not self._closed:
            self._close(simclock.now_ns())
        self._wake()

    def on_terminal(self, request_id: str, status: str) -> None:
        """A released request reached a terminal state.

        Args:
            request_id: the request.
            status: ``completed``; ``cancelled``; anything else (``rejected``,
                ``failed``, ...) counts as ``rejected``.
        """
        unit = self._units.get(request_id)
        if not isinstance(unit, _Unit) or unit.status is not None or self._closed:
            return
        now = simclock.now_ns()
        settled = status if status in ("completed", "cancelled") else "rejected"
        self._in_flight -= 1
        if self._in_flight == 0:
            self._idle_since_ns = now
        if unit.play is not None:
            unit.play.in_flight -= 1
            if unit.play.in_flight == 0:
                unit.play.idle_since_ns = now
        self._settle(unit, settled, now)
        if settled == "completed":
            self._event(unit, "completion", now)
        else:
            if unit.request.identity.phase != "measure":
                self._error = WorkloadRunError(
                    f"warm-up: request '{request_id}' ended {status}; nothing is measured"
                )
            self._fail_play(unit, now)
            self._skip_dependents(unit, now)
        if unit.prep_next is not None and settled == "completed":
            self._schedule(unit.prep_next, now)
        self._after_settle(unit, now)
        self._wake()

    async def run(self) -> DriverReport:
        """Release the whole workload; return the accounting when nothing is left.

        With ``max_virtual_time_s`` it returns at that instant (after everything at that
        instant ran); requests in flight then are ``incomplete``.

        Raises:
            WorkloadRunError: a warm-up request failed.
        """
        self._begin()
        loop = asyncio.get_running_loop()
        if not isinstance(loop, simclock.VirtualEventLoop):
            raise simclock.NotVirtualLoopError(
                "Driver.run() needs a running simclock.VirtualEventLoop, but the running loop "
                f"is a {type(loop).__name__}"
            )
        while not self._closed:
            if self._error is not None:
                self._close(simclock.now_ns())
                raise self._error
            now = simclock.now_ns()
            limit = self._limit_ns()
            if limit is not None and now >= limit and not self._due_now(now):
                await simclock.instant_end(priority=1 << 30, waiter=_WAITER)
                self._at_limit(simclock.now_ns())
                continue
            if self._due_now(now):
                await simclock.instant_end(priority=-1, waiter=_WAITER)
                self._flush(simclock.now_ns())
                continue
            if self._barrier_pending(now):
                continue
            if self._in_flight == 0 and (
                self._no_more_releases or (not self._queued() and not self._pending_starts())
            ):
                self._close(now)
                break
            if self.mode.profile is not None:
                self._apply_idle_caps(now)
            wake_at = self._next_wake_ns()
            self._waker = loop.create_future()
            if wake_at is None:
                await self._waker
            else:
                # the waker completes at the next instant, or earlier when on_terminal wakes it
                timer = loop.wake_at_ns(
                    self._waker, max(wake_at, simclock.now_ns()), waiter=_WAITER
                )
                try:
                    await self._waker
                finally:
                    timer.cancel()
            self._waker = None
        if self._error is not None:
            raise self._error
        return self._final_report()

    def report(self) -> DriverReport:
        """The accounting so far (complete once :meth:`run` returned)."""
        if self._final is not None:
            return self._final
        plays = tuple(self._play_outcome(p) for p in self._plays)
        ledger = self._ledger
        if ledger is not None:
            others = {
                unit.order[1]: _outcome(unit)
                for unit in self._units.values()
                if isinstance(unit, _Unit)  # always: the ledger holds what settled
            }
            return self._report(Outcomes(ledger.copy(), others), plays)
        requests = (*self._outside, *map(_outcome, self._units.values()))
        return self._report(requests, plays)

    def _final_report(self) -> DriverReport:
        """The accounting of the ended run, kept for :meth:`report`.

        Nothing changes once the run ended, so the units are let go as their outcomes are
        built: a long run holds one or the other, never both.
        """
        plays = tuple(self._play_outcome(p) for p in self._plays)
        for play in self._plays:
            play.units = []
        self._dependents = {}
        units, self._units = self._units, {}
        ledger = self._ledger
        if ledger is not None:
            others: dict[int, RequestOutcome] = {}
            for unit in units.values():
                if not isinstance(unit, _Unit):  # pragma: no cover - the ledger holds those
                    raise simclock.InternalError(f"settled {unit.request_id!r} left as a unit")
                if unit.play is None:
                    ledger.settle(unit.order[1], *_settled(unit))
                else:
                    others[unit.order[1]] = _outcome(unit)
            self._final = self._report(Outcomes(ledger, others), plays)
            return self._final
        built: list[RequestOutcome] = []
        while units:
            built.append(_outcome(units.popitem()[1]))  # newest first: reversed below
        built.reverse()
        self._final = self._report((*self._outside, *built), plays)
        return self._final

    def _report(
        self, requests: Sequence[RequestOutcome], plays: tuple[PlayOutcome, ...]
    ) -> DriverReport:
        return DriverReport(
            requests=requests,
            plays=plays,
            history=tuple(self._history),
            profile_start_ms=None if self._barrier_ns is None else self._barrier_ns / _NS_PER_MS,
            cutoff_ms=None if self._cutoff_ns is None else self._cutoff_ns / _NS_PER_MS,
            idle_shifts=tuple(self._idle_shifts),
        )

    # -- setup ---------------------------------------------------------------------------

    def _retime_roots(self) -> None:
        """Apply ``arrivals`` / ``target_rate`` to roots, in queue order (§4.3)."""
        mode = self.mode
        if mode.arrivals is None and mode.target_rate is None:
            return
        roots = sorted(
            (r.arrival_ms, i)
            for i, r in enumerate(self.workload.requests)
            if not r.arrival.after and r.identity.phase == "measure"
        )
        if mode.target_rate is not None:
            span_s = (roots[-1][0] - roots[0][0]) / 1000.0 if roots else 0.0
            if span_s <= 0:
                raise WorkloadConfigError("target_rate: the roots span no time")
            self._speedup = mode.target_rate / (len(roots) / span_s)
            return
        rng = self.rng
        if rng is None or mode.arrivals is None:  # pragma: no cover - checked in post-init
            return
        gaps = mode.arrivals.gaps_ms(rng, len(roots))
        times = np.concatenate(([0.0], np.cumsum(gaps[1:]))) if len(roots) else gaps
        for (_, index), when in zip(roots, times.tolist(), strict=True):
            self._roots_ms[index] = when

    def _begin(self) -> None:
        now = simclock.now_ns()
        mode = self.mode
        if mode.lanes is not None:
            self._begin_lanes(now)
        elif mode.concurrency is not None or mode.max_sessions is not None:
            self._begin_sessions(now)
        else:
            self._begin_timestamps(now)

    def _begin_timestamps(self, now: int) -> None:
        play_of: dict[int, _PlayRun] = {}
        for play in self.workload.plays:
            run = _PlayRun(instance_id=play.id, play_id=play.id, lane=None, origin_ns=now)
            self._plays.append(run)
            for index in play.request_indices:
                play_of[index] = run
        requests = self.workload.requests
        _check_unique(requests)
        self._ledger = OutcomeLedger(requests)
        self._origin_ns = now
        # Every request is in the run from now on; a root outside a play is due at its own
        # time and waits for nothing, so its unit is made when it is released.
        units: list[_Unit] = []
        # typed arrays, not lists: a million roots would leave a million int objects' worth
        # of freed memory behind
        root_due = array("q")
        root_positions = array("q")
        for i, request in enumerate(requests):
            in_play = play_of.get(i)
            if in_play is None and not request.arrival.after:
                floor = self._floor_for(request, i, now)
                root_due.append(now if floor is None else floor)
                root_positions.append(i)
            else:
                units.append(self._add(request, (0, i), now, in_play, None))
        due = np.frombuffer(root_due, dtype=np.int64)
        order = np.argsort(due, kind="stable")  # by due time, then position
        self._roots = _Roots(due[order], np.frombuffer(root_positions, dtype=np.int64)[order])
        self._unsettled += len(root_positions)
        self._arm(units, now)

    def _begin_sessions(self, now: int) -> None:
        by_key: dict[str, _Session] = {}
        for i, request in enumerate(self.workload.requests):
            key = request.identity.conversation_id or f"\x00{request.id}"
            session = by_key.get(key)
            if session is None:
                session = by_key[key] = _Session(key=key, positions=[])
            session.positions.append(i)

        def first_time(s: _Session) -> tuple[float, int]:
            first = s.positions[0]
            when = self._roots_ms.get(first, self.workload.requests[first].arrival.not_before_ms)
            return (when if when is not None else 0.0, first)

        self._sessions = sorted(by_key.values(), key=first_time)
        limit = self.mode.max_sessions
        if limit is not None:
            for session in self._sessions[limit:]:
                for i in session.positions:
                    self._outside_never(self.workload.requests[i])
            self._sessions = self._sessions[:limit]
        if self.mode.concurrency is None:
            # max_sessions alone: the chosen sessions run at their own times.
            units = []
            for session in self._sessions:
                for i in session.positions:
                    units.append(self._add(self.workload.requests[i], (0, i), now, None, session))
            self._session_cursor = len(self._sessions)
            self._arm(units, now)
            return
        for _ in range(self.mode.concurrency):
            self._start_next_session(now)

    def _start_next_session(self, now: int) -> bool:
        if self._session_cursor >= len(self._sessions) or self._no_more_releases:
            return False
        session = self._sessions[self._session_cursor]
        self._session_cursor += 1
        units = []
        for n, i in enumerate(session.positions):
            request = self.workload.requests[i]
            if n == 0 or not request.arrival.after:
                request = attrs.evolve(request, arrival=ArrivalRule(not_before_ms=None, after=()))
            units.append(self._add(request, (0, i), now, None, session))
        self._arm(units, now)
        return True

    def _begin_lanes(self, now: int) -> None:
        mode = self.mode
        lanes = mode.lanes or 0
        plays = self.workload.plays
        seed = mode.snapshot_seed if mode.snapshot_seed is not None else self.seed
        for lane in range(lanes):
            play = plays[lane % len(plays)]
            self._start_play(play, lane, now, snapshot_seed=seed if mode.snapshots else None)
        self._cursor = lanes
        if self.mode.profile is not None and not mode.warmup:
            self._set_cutoff(now)

    def _set_cutoff(self, start_ns: int) -> None:
        profile = self.mode.profile
        if profile is None:
            return
        self._cutoff_ns = start_ns + round(profile.duration_s * 1e9)
        self._grace_end_ns = self._cutoff_ns + round(profile.grace_s * 1e9)

    def _content_ids_stop(self) -> int:
        """The first content id above every content id of the workload: a play started
        again takes its content ids from there on (so no instance shares another's)."""
        top = 0
        for play in self.workload.plays:
            top = max(top, play.content_ids[1])
        requests = self.workload.requests
        if isinstance(requests, SyntheticRequests):
            return max(top, requests.content_ids_stop())
        for request in requests:
            if request.hash_ids.size:
                top = max(top, int(request.hash_ids.max()) + 1)
        return top

    def _start_play(
        self, play: Play, lane: int, now: int, *, snapshot_seed: int | None = None
    ) -> None:
        k = self._starts.get(play.id, 0)
        self._starts[play.id] = k + 1
        base: int | None = None
        if k > 0:
            base = self._content_next
            if base is None:
                base = self._content_ids_stop()
            self._content_next = base + play.content_ids[1] - play.content_ids[0]
        requests = [self.workload.requests[i] for i in play.request_indices]
        renamed = instance_requests(requests, play, k, lane, base)
        instance_id = f"{play.id}#{k}"
        run = _PlayRun(
            instance_id=instance_id, play_id=play.id, lane=lane, origin_ns=now, idle_since_ns=now
        )
        self._plays.append(run)
        if snapshot_seed is None:
            units = [self._add(r, (lane, n), now, run, None) for n, r in enumerate(renamed)]
            self._arm(units, now)
            return
        snapshot = snapshot_cut(renamed, snapshot_seed=snapshot_seed, lane=lane)
        # History is never released and is not part of the run's accounting.
        self._history.extend(r.id for r in snapshot.history)
        if not self.mode.warmup:
            units = [self._add(r, (lane, n), now, run, None) for n, r in enumerate(snapshot.live)]
            self._arm(units, now)
            return
        primers, warmups = preparation_requests(
            snapshot, instance_id, repeats=self.mode.warmup_repeats
        )
        prep = [self._add(r, (lane, -1), now, None, None) for r in (*primers, *warmups)]
        for earlier, later in itertools.pairwise(prep):
            later.waiting = 1
            earlier.prep_next = later
        self._prep_open += len(prep)
        self._held.append((run, list(snapshot.live)))
        if prep:
            self._arm(prep[:1], now)

    # -- units and releases --------------------------------------------------------------

    def _add(
        self,
        request: Request,
        order: tuple[int, int],
        origin_ns: int,
        play: _PlayRun | None,
        session: _Session | None,
    ) -> _Unit:
        if request.id in self._units:
            raise WorkloadConfigError(f"requests: duplicate request id {request.id!r}")
        unit = _Unit(request=request, order=order, origin_ns=origin_ns, play=play, session=session)
        unit.waiting = len(request.arrival.after)
        self._units[request.id] = unit
        self._unsettled += 1
        for dep in request.arrival.after:
            self._dependents.setdefault(dep.request_id, []).append((unit, dep))
        if play is not None:
            play.units.append(unit)
            play.open_units += 1
        if session is not None:
            session.open_units += 1
        return unit

    def _arm(self, units: Sequence[_Unit], now: int) -> None:
        """Queue the units that wait for nothing."""
        for unit in units:
            if unit.waiting == 0:
                self._schedule(unit, now)

    def _floor_ns(self, unit: _Unit) -> int | None:
        return self._floor_for(unit.request, unit.order[1], unit.origin_ns)

    def _floor_for(self, request: Request, position: int, origin_ns: int) -> int | None:
        when = request.arrival.not_before_ms
        if self.mode.lanes is None and not request.arrival.after and self._roots_ms:
            when = self._roots_ms.get(position, when)
        if when is None:
            return None
        return origin_ns + _ns(when / self._speedup)

    def _schedule(self, unit: _Unit, now: int) -> None:
        """Queue a unit whose dependencies are all met (roots: at once)."""
        floor = self._floor_ns(unit)
        if unit.request.arrival.after:
            due = unit.due_ns if floor is None else max(unit.due_ns, floor)
        else:
            due = floor if floor is not None else max(now, unit.origin_ns)
        unit.queued = True
        self._sequence += 1
        heapq.heappush(self._heap, (due, unit.order, self._sequence, unit))

    def _queued(self) -> bool:
        """Whether anything waits in the release queue (or among the roots not yet taken)."""
        return bool(self._heap) or bool(self._roots)

    def _next_due_ns(self) -> int | None:
        roots = self._roots
        head = None if roots is None else roots.head
        if self._heap and (head is None or self._heap[0][0] < head):
            return self._heap[0][0]
        return head

    def _due_now(self, now: int) -> bool:
        due = self._next_due_ns()
        return due is not None and due <= now

    def _flush(self, now: int) -> None:
        while self._due_now(now):
            batch: list[tuple[tuple[int, int], int, _Unit]] = []
            while self._heap and self._heap[0][0] <= now:
                _, order, seq, unit = heapq.heappop(self._heap)
                batch.append((order, seq, unit))
            if self._roots is not None:
                for position in self._roots.take(now):
                    unit = self._root_unit(position)
                    batch.append((unit.order, 0, unit))
            batch.sort(key=lambda item: (item[0], item[1]))
            for _, _, unit in batch:
                self._release(unit, now)

    def _root_unit(self, position: int) -> _Unit:
        """The unit of a root taken into the run as it is released (see _begin_timestamps)."""
        request = self.workload.requests[position]
        unit = _Unit(request=request, order=(0, position), origin_ns=self._origin_ns)
        self._units[request.id] = unit
        return unit

    def _release(self, unit: _Unit, now: int) -> None:
        unit.queued = False
        if unit.status is not None:
            return
        if self._no_more_releases or self._past_limit(now):
            return
        limit = self.mode.max_requests
        if limit is not None and self._released >= limit:
            self._no_more_releases = True
            self._wake()
            return
        if unit.play is not None and unit.play.failed is not None:
            self._settle(unit, "skipped", now)
            self._skip_dependents(unit, now)
            self._after_settle(unit, now)
            return
        self._released += 1
        self._in_flight += 1
        if unit.released_ns is None:
            self._unsettled -= 1
        unit.released_ns = now
        if unit.play is not None:
            unit.play.in_flight += 1
            unit.play.idle_since_ns = None
        self.submit(unit.request)
        self._event(unit, "start", now)

    def _past_limit(self, now: int) -> bool:
        limit = self._deadline_ns if self._deadline_ns is not None else self._cutoff_ns
        return limit is not None and now > limit

    def _limit_ns(self) -> int | None:
        """The next stop instant: the deadline, the profile cutoff, or the grace end."""
        if self._deadline_ns is not None:
            return self._deadline_ns
        return self._grace_end_ns if self._in_grace else self._cutoff_ns

    def _event(self, unit: _Unit, on: str, at_ns: int) -> None:
        for dependent, dep in self._dependents.get(unit.request.id, ()):
            if dep.on != on or dependent.status is not None:
                continue
            due = at_ns + _ns(dep.delay_ms / self._speedup)
            dependent.due_ns = max(dependent.due_ns, due)
            dependent.waiting -= 1
            if dependent.waiting == 0:
                self._schedule(dependent, at_ns)

    def _skip_dependents(self, unit: _Unit, now: int) -> None:
        stack = [unit]
        while stack:
            current = stack.pop()
            for dependent, _ in self._dependents.get(current.request.id, ()):
                if dependent.status is None and dependent.released_ns is None:
                    self._settle(dependent, "skipped", now)
                    self._after_settle(dependent, now)
                    stack.append(dependent)

    def _settle(self, unit: _Unit, status: str, now: int) -> None:
        if unit.status is None and unit.released_ns is None:
            self._unsettled -= 1
        unit.status = status
        unit.terminal_ns = now
        if unit.play is not None:
            unit.play.open_units -= 1
        if unit.session is not None:
            unit.session.open_units -= 1
        if unit.request.identity.phase != "measure":
            self._prep_open -= 1
        if unit.play is None:
            # Settled for good (a unit is never released or settled twice): its outcome
            # stands in for it, a run holds no unit for what has ended.
            if self._ledger is not None:
                self._ledger.settle(unit.order[1], status, unit.released_ns, now)
                del self._units[unit.request.id]
            else:
                self._units[unit.request.id] = _outcome(unit)

    def _fail_play(self, unit: _Unit, now: int) -> None:
        play = unit.play
        if play is None:
            return
        if play.failed is None or (unit.terminal_ns or now, play.units.index(unit)) < (
            play.failed.terminal_ns or now,
            play.units.index(play.failed),
        ):
            play.failed = unit
        for other in play.units:
            if other.status is None and other.released_ns is None:
                self._settle(other, "skipped", now)
        self._heap = [item for item in self._heap if item[3].status is None]
        heapq.heapify(self._heap)

    def _after_settle(self, unit: _Unit, now: int) -> None:
        session = unit.session
        if (
            session is not None
            and session.open_units == 0
            and not session.done
            and self.mode.concurrency is not None
        ):
            session.done = True
            self._start_next_session(now)
        play = unit.play
        if play is not None and play.open_units == 0 and not play.done:
            play.done = True
            self._refill(play, now)

    def _refill(self, finished: _PlayRun, now: int) -> None:
        if finished.lane is None or self._no_more_releases or self._past_limit(now):
            return
        plays = self.workload.plays
        if self.mode.profile is None and (self.mode.snapshots or self._cursor >= len(plays)):
            return
        play = plays[self._cursor % len(plays)]
        self._cursor += 1
        self._start_play(play, finished.lane, now)

    def _pending_starts(self) -> bool:
        if self._no_more_releases:
            return False
        if self.mode.concurrency is not None and self._session_cursor < len(self._sessions):
            return True
        return bool(self._held)

    # -- profile idle caps -----------------------------------------------------------------

    def _apply_idle_caps(self, now: int) -> None:
        """Move the pending timers of idle plays (and of an idle run) earlier (§5.7)."""
        profile = self.mode.profile
        if profile is None or not self._heap or self._in_grace:
            return
        tree_cap = round(profile.tree_idle_cap_s * 1e9)
        global_cap = round(profile.global_idle_cap_s * 1e9)
        moved = False
        earliest: dict[int, tuple[int, _PlayRun]] = {}
        for due, _, _, unit in self._heap:
            play = unit.play
            if play is None or play.in_flight or play.idle_since_ns is None:
                continue
            key = self._plays.index(play)
            if key not in earliest or due < earliest[key][0]:
                earliest[key] = (due, play)
        for key in sorted(earliest):
            due, play = earliest[key]
            idle = play.idle_since_ns or 0
            excess = due - (idle + tree_cap)
            if excess > 0:
                moved |= self._shift(play, excess, idle + tree_cap, play.instance_id)
        if self._in_flight == 0:
            due = min(item[0] for item in self._heap)
            excess = due - (self._idle_since_ns + global_cap)
            if excess > 0:
                moved |= self._shift(None, excess, self._idle_since_ns + global_cap, "global")
        if moved:
            heapq.heapify(self._heap)

    def _shift(self, play: _PlayRun | None, excess: int, at_ns: int, scope: str) -> bool:
        """Move the timers of ``play`` (every timer when None) ``excess`` ns earlier."""
        count = 0
        for index, (due, order, seq, unit) in enumerate(self._heap):
            if play is None or unit.play is play:
                self._heap[index] = (due - excess, order, seq, unit)
                count += 1
        self._idle_shifts.append(
            IdleShift(time_ns=at_ns, scope=scope, shift_ns=excess, timers=count)
        )
        return count > 0

    # -- warm-up barrier -----------------------------------------------------------------

    def _barrier_pending(self, now: int) -> bool:
        """Start the measured plays once preparation completed and engines are quiet."""
        if not self._held or self._prep_open > 0:
            return False
        if self.quiescent is not None and not self.quiescent():
            return False
        self._barrier_ns = now
        held, self._held = self._held, []
        for run, live in held:
            run.origin_ns = now
            units = [self._add(r, (run.lane or 0, n), now, run, None) for n, r in enumerate(live)]
            self._arm(units, now)
        self._set_cutoff(now)
        return True

    # -- limits --------------------------------------------------------------------------

    def _next_wake_ns(self) -> int | None:
        candidates: list[int] = []
        due = self._next_due_ns()
        if due is not None:
            candidates.append(due)
        limit = self._limit_ns()
        if limit is not None:
            candidates.append(limit)
        if self._held and self._prep_open == 0:
            candidates.append(simclock.now_ns() + _POLL_NS)
        now = simclock.now_ns()
        later = [c for c in candidates if c > now]
        return min(later) if later else None

    def _at_limit(self, now: int) -> None:
        """At ``max_virtual_time_s`` or a profile cutoff: stop releasing."""
        self._no_more_releases = True
        if self._deadline_ns is not None:
            self._close(now)
            return
        if self._in_grace:
            for unit in list(self._units.values()):
                if isinstance(unit, _Unit) and unit.status is None and unit.released_ns is not None:
                    self._in_flight -= 1
                    self._settle(unit, "cancelled", now)
                    if self.cancel is not None:
                        self.cancel(unit.request.id)
            self._close(now)
            return
        # The cutoff: nothing more is released; in-flight requests get the grace.
        self._in_grace = True
        if self._in_flight == 0:
            self._close(now)

    def _close(self, now: int) -> None:
        """Settle every account: in flight → incomplete, unreleased → never_issued."""
        if self._closed:
            return
        self._closed = True
        self._no_more_releases = True
        for unit in self._units.values():
            if isinstance(unit, _Unit) and unit.status is None:
                if unit.released_ns is None:
                    self._unsettled -= 1
                    status = "never_issued"
                else:
                    status = "incomplete"
                unit.status = status
                unit.terminal_ns = now
        if self._roots is not None and self._ledger is not None:
            never = self._roots.drain()
            self._unsettled -= len(never)
            self._ledger.settle_unreleased(never, "never_issued", now)
        self._heap.clear()
        self._held.clear()
        if self.mode.concurrency is not None:
            for session in self._sessions[self._session_cursor :]:
                for i in session.positions:
                    self._outside_never(self.workload.requests[i])
            self._session_cursor = len(self._sessions)
        if self.mode.lanes is not None and not self.mode.snapshots:
            for play in self.workload.plays[self._cursor :]:
                for i in play.request_indices:
                    self._outside_never(self.workload.requests[i])
            self._cursor = len(self.workload.plays)

    def _outside_never(self, request: Request) -> None:
        identity = request.identity
        outcome = RequestOutcome(
            request.id, "never_issued", None, None, identity.phase, identity.play_id, request
        )
        self._outside.append(outcome)

    def _wake(self) -> None:
        if self._waker is not None and not self._waker.done():
            self._waker.set_result(None)

    def _play_outcome(self, play: _PlayRun) -> PlayOutcome:
        measured = [u for u in play.units if u.request.identity.phase == "measure"]
        releases = [u.released_ns for u in measured if u.released_ns is not None]
        ends = [u.terminal_ns for u in measured if u.terminal_ns is not None]
        if play.failed is not None:
            outcome = "failed"
        elif measured and all(u.status == "completed" for u in measured):
            outcome = "completed"
        else:
            outcome = "incomplete"
        first = min(releases) if releases else None
        last = max(ends) if ends else None
        trajectory = (
            (last - first) / _NS_PER_MS
            if outcome == "completed" and first is not None and last is not None
            else None
        )
        return PlayOutcome(
            instance_id=play.instance_id,
            play_id=play.play_id,
            lane=play.lane,
            outcome=outcome,
            failed_request=None if play.failed is None else play.failed.request.id,
            first_release_ns=first,
            last_terminal_ns=last,
            trajectory_ms=trajectory,
        )
