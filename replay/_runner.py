"""The runner: one replay of a workload through a topology under a policy, on a fresh loop.

Wiring, all on one virtual clock::

    release driver ──submit──► (tokenizer stage) ──► PolicyRuntime ──dispatch──► engines
          ▲                                                                        │
          └──────── on_terminal ◄─────────── journal (lifecycle events) ◄────────┘
                                                         └──► policy hooks

The run ends when every request of the workload is terminal (or can never be released), when a
step fails (the policy runtime is poisoned), at the ``max_virtual_time_s`` cutoff, or when
nothing but requests held by the policy is left (they end ``unplaced``). After a failure the
engines still drain what they had accepted, so every request ends in exactly one state and no
KV block stays referenced.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import inspect
import math
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal, Protocol, cast

import attrs
import numpy as np

import simclock
from engines import (
    BlockKeyer,
    Engine,
    EventKind,
    Journal,
    LifecycleEvent,
)
from loadgen import Driver, DriverReport, LoadMode, Request, Workload
from policies import Policy, PolicyRuntime, policy_name

from ._exceptions import ReplayFailedError, ReplayInterrupted, WorkloadValidationError
from ._metrics import SLO
from ._output import RequestLog
from ._prepare import PreparedWorkload, prepare
from ._records import build_record
from ._report import EngineUsage, ReplayResult, RunMeta, finalize
from ._stream import RecordStream
from ._topology import Topology
from ._watch import NO_PROGRESS_S, NO_PROGRESS_WAKEUPS, ProgressWatch

__all__ = ("SEED_STREAMS", "RunJournal", "run")

SEED_STREAMS = ("policy", "driver", "topology", "workload")
"""The child seed streams of a run, in spawn order: ``SeedSequence(seed).spawn(4)``.

``workload`` seeds a generated (synthetic) workload, so its draws never repeat another
component's; spawning one more child leaves the first three unchanged.
"""

_REJECTED = EventKind.REJECTED
_ARRIVED = EventKind.ARRIVED
_TERMINAL_NAMES = frozenset(
    kind._value_
    for kind in (EventKind.FINISHED, EventKind.REJECTED, EventKind.FAILED, EventKind.CANCELLED)
)

StopReason = Literal["done", "failed", "cutoff", "quiescent"]
Stepping = Literal["macro", "pass"]
STEPPINGS: tuple[Stepping, ...] = ("macro", "pass")
"""How engines advance: ``"macro"`` jumps over determined runs of passes, ``"pass"`` takes
one engine deadline per pass (the reference behaviour)."""


@attrs.define(eq=False)
class RunJournal(Journal):
    """The run's journal: a :class:`engines.Journal` that also counts events by kind and tells
    the runner of terminal events, without subscribing (so engines keep their fast path of
    folding per-token events straight into traces when events are not kept).

    Attributes:
        on_terminal: called with every FINISHED, REJECTED, FAILED and CANCELLED event after it
            is folded.
    """

    on_terminal: Callable[[LifecycleEvent], None] | None = attrs.field(default=None, kw_only=True)
    _counts: dict[str, int] = attrs.field(factory=dict, init=False)

    def record(self, event: LifecycleEvent) -> None:
        """Record ``event`` (see :meth:`engines.Journal.record`), count it, and report it to
        :attr:`on_terminal` when it is terminal."""
        Journal.record(self, event)
        # Keyed by the member's value (a str): hashing enum members runs Python code.
        name: str = event.kind._value_
        counts = self._counts
        counts[name] = counts.get(name, 0) + 1
        if name in _TERMINAL_NAMES and self.on_terminal:
            self.on_terminal(event)

    def _marked(self, name: str) -> None:
        """Count an event that was marked, not made (:meth:`engines.Journal.mark`)."""
        counts = self._counts
        counts[name] = counts.get(name, 0) + 1

    def event_counts(self) -> Mapping[str, int]:
        """Events recorded through :meth:`record`, by kind name (per-token events that the
        engines fold directly into traces are not counted)."""
        return dict(sorted(self._counts.items()))


class _Booking(Protocol):
    @property
    def start_ns(self) -> int: ...
    @property
    def done_ns(self) -> int: ...


class _TokenizerPool(Protocol):
    def assign(self, arrival_ns: int, input_length: int) -> _Booking: ...


class TokenizerStageLike(Protocol):
    """The frontend tokenization stage as the runner uses it (``engines.TokenizerStage``)."""

    @property
    def enabled(self) -> bool:
        """Whether the stage costs anything (else requests pass straight through)."""
        ...

    def pool(self) -> _TokenizerPool:
        """Return a fresh, idle worker pool."""
        ...


def _jsonable(value: object) -> object:
    """``value`` with tuples as lists and anything not JSON-like as its repr."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)


def _check_seed(seed: object) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise WorkloadValidationError(f"seed: must be an int >= 0, got {seed!r}")
    return seed


@attrs.define(eq=False)
class _Run:
    """One replay's components and bookkeeping (built and used inside the loop)."""

    prepared: PreparedWorkload
    topology: Topology
    policy: Policy
    seeds: tuple[np.random.SeedSequence, ...]
    tokenizer: TokenizerStageLike | None
    cutoff_ns: int | None
    keep_events: bool
    seed: int = attrs.field(default=0, kw_only=True)
    stepping: Stepping = attrs.field(default="macro", kw_only=True)
    load: LoadMode = attrs.field(factory=LoadMode, kw_only=True)
    stream: RecordStream | None = attrs.field(default=None, kw_only=True)
    slo: SLO | None = attrs.field(default=None, kw_only=True)
    journal: RunJournal = attrs.field(init=False)
    engines: tuple[Engine, ...] = attrs.field(init=False)
    runtime: PolicyRuntime = attrs.field(init=False)
    driver: Driver = attrs.field(init=False)
    driver_report: DriverReport | None = attrs.field(default=None, init=False)
    stop_reason: StopReason | None = attrs.field(default=None, init=False)
    engine_failure: BaseException | None = attrs.field(default=None, init=False)
    driver_failure: BaseException | None = attrs.field(default=None, init=False)
    loop_failure: simclock.SimulationError | None = attrs.field(default=None, init=False)
    _pool: _TokenizerPool | None = attrs.field(default=None, init=False)
    # Requests that reached their terminal state: a flag per workload position, a set for
    # the others (play instances, preparation requests), and their count.
    _terminal_at: bytearray = attrs.field(factory=bytearray, init=False)
    _terminal_other: set[str] = attrs.field(factory=set, init=False)
    _terminals: int = attrs.field(default=0, init=False)
    _released: int = attrs.field(default=0, init=False)
    _done: asyncio.Future[None] | None = attrs.field(default=None, init=False)
    _engine_tasks: list[asyncio.Task[None]] = attrs.field(factory=list, init=False)
    _side_tasks: list[asyncio.Task[Any]] = attrs.field(factory=list, init=False)
    _clock_watch: Callable[[int], None] | None = attrs.field(default=None, init=False)
    _progress_ns: int = attrs.field(default=0, init=False)
    _to_settle: list[str] = attrs.field(factory=list, init=False)

    def __attrs_post_init__(self) -> None:
        self._terminal_at = bytearray(len(self.prepared.requests))
        if self.cutoff_ns is not None and self.load.max_virtual_time_s is None:
            self.load = attrs.evolve(self.load, max_virtual_time_s=self.cutoff_ns / 1e9)

    def build(self) -> None:
        self.journal = RunJournal(keep_events=self.keep_events, on_terminal=self._on_terminal)
        keyer = BlockKeyer()
        self.engines = tuple(self.topology.build(keyer=keyer, journal=self.journal))
        for engine in self.engines:
            engine.macro_stepping = self.stepping == "macro"
        policy_rng = np.random.default_rng(self.seeds[SEED_STREAMS.index("policy")])
        # A topology may supply its own policy runtime (replay.Disaggregated does: one
        # runtime per pool plus the prefill->decode handoff); it has PolicyRuntime's interface.
        make_runtime = getattr(self.topology, "make_runtime", None)
        if make_runtime is not None:
            self.runtime = make_runtime(
                self.policy,
                self.engines,
                journal=self.journal,
                keyer=keyer,
                rng=policy_rng,
                on_poison=self._on_poison,
            )
        else:
            self.runtime = PolicyRuntime(
                self.policy,
                self.engines,
                self.journal,
                keyer,
                policy_rng,
                on_poison=self._on_poison,
            )
        # A run whose clock moves without progress fails instead of running for ever.
        watch = ProgressWatch(
            progress=lambda: (self._released, self._terminals),
            unsettled=self._unsettled_ids,
            engines_idle=self._engines_idle,
            last_progress_ns=lambda: self._progress_ns,
        )
        self.runtime.wakeup_watch = watch.check
        # Whatever else keeps the clock moving (a policy task on bare asyncio.sleep) is seen
        # by the loop's clock watch. Not with P/D: a KV transfer in flight leaves every
        # engine's queues empty while the run is making progress.
        self._clock_watch = None if make_runtime is not None else watch.check_clock
        workload = self.prepared.workload
        if self.prepared.requests != workload.requests:
            workload = attrs.evolve(workload, requests=self.prepared.requests)
        self.driver = Driver(
            workload,
            self._release,
            mode=self.load,
            rng=np.random.default_rng(self.seeds[SEED_STREAMS.index("driver")]),
            seed=self.seed,
            quiescent=self._engines_idle,
            cancel=self._cancel,
        )
        if self.tokenizer is not None and self.tokenizer.enabled:
            self._pool = self.tokenizer.pool()

    async def main(self) -> None:
        loop = asyncio.get_running_loop()
        self._done = loop.create_future()
        if self._clock_watch is not None and isinstance(loop, simclock.VirtualEventLoop):
            # twice the policy-wakeup budget: a policy that wakes through its context is
            # reported by that check first, with its own wakeup count
            loop.watch_clock(
                self._clock_watch,
                every_ns=round(2 * NO_PROGRESS_S * 1e9),
                every_moves=2 * NO_PROGRESS_WAKEUPS,
            )
        for engine in self.engines:
            task = loop.create_task(engine.run(), name=f"engine[{engine.index}]")
            task.add_done_callback(self._engine_done)
            self._engine_tasks.append(task)
        self.runtime.start()
        driver = loop.create_task(self.driver.run(), name="driver")
        driver.add_done_callback(self._driver_done)
        self._side_tasks.append(driver)
        deadline = self.driver.deadline_ns
        if deadline is not None:
            self._side_tasks.append(loop.create_task(self._cutoff(deadline), name="cutoff"))
        await self._done
        await self._shutdown()

    def _engines_idle(self) -> bool:
        return all(
            e.view.waiting_count == 0 and e.view.running_count == 0 and e.view.pending_offers == 0
            for e in self.engines
        )

    def _unsettled_ids(self) -> list[str]:
        """Released requests that are not terminal, in release order."""
        return [
            rid
            for rid, trace in self.journal.traces.items()
            if not self._is_terminal(rid) and trace.arrival_ns is not None
        ]

    def _driver_done(self, task: asyncio.Task[DriverReport]) -> None:
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            if self.driver_failure is None:
                self.driver_failure = error
            self._finish("failed")
            return
        self.driver_report = task.result()
        if self.load.profile is not None:
            # A profile ends when the driver returns: at the end of the grace it cancelled
            # what was still in flight (REFERENCE-workloads §5.7); a pass the engines were
            # timing then has nothing left to report, so they stop at once.
            self._finish("cutoff")
            return
        self._check_done()

    def _cancel(self, request_id: str) -> None:
        """The driver cancelled ``request_id`` (a profile's grace ended): drop it now."""
        found = False
        for engine in self.engines:
            # the first engine that holds it records its one CANCELLED event
            found = engine.cancel(request_id, record=not found) or found
        if not found:
            # With the policy or the tokenizer, on no engine: it ends here.
            self.journal.record(
                LifecycleEvent(simclock.now_ns(), EventKind.CANCELLED, request_id, None)
            )

    # -- release path -------------------------------------------------------------------------

    def _release(self, request: Request) -> None:
        if self._to_settle:
            self.settle()
        now = simclock.now_ns()
        self._released += 1
        self._progress_ns = now
        self.journal.record(
            LifecycleEvent(
                now,
                _ARRIVED,
                request.id,
                None,
                (("input_length", request.input_length), ("output_length", request.output_length)),
            )
        )
        if self._pool is None:
            self.runtime.submit(request)
            return
        booked = self._pool.assign(now, request.input_length)
        if booked.done_ns == now:
            self._tokenized(request, booked.start_ns)
            return
        task = asyncio.get_running_loop().create_task(
            self._tokenize(request, booked.start_ns, booked.done_ns), name=f"tokenize:{request.id}"
        )
        self._side_tasks.append(task)

    async def _tokenize(self, request: Request, start_ns: int, done_ns: int) -> None:
        await simclock.sleep_until_ns(done_ns, waiter="replay:tokenizer")
        self._tokenized(request, start_ns)

    def _tokenized(self, request: Request, start_ns: int) -> None:
        self.journal.record(
            LifecycleEvent(
                simclock.now_ns(), EventKind.TOKENIZED, request.id, None, (("start_ns", start_ns),)
            )
        )
        self.runtime.submit(request)

    # -- terminal path ------------------------------------------------------------------------

    def _on_terminal(self, event: LifecycleEvent) -> None:
        rid = event.request_id
        position = self.prepared.positions.get(rid)
        # _is_terminal, with the position looked up once
        terminal = rid in self._terminal_other if position is None else self._terminal_at[position]
        if terminal:
            return
        self._progress_ns = event.time_ns
        if event.kind is _REJECTED and self.runtime.status(rid) in ("held", "offered"):
            return  # the policy may still place it elsewhere
        if position is None:
            self._terminal_other.add(rid)
        else:
            self._terminal_at[position] = 1
        self._terminals += 1
        trace = self.journal.traces[rid]
        self.runtime.request_terminal(trace)
        self.driver.on_terminal(rid, trace.terminal_status or "failed")
        if self.stream is not None:
            self._to_settle.append(rid)
        self._check_done()

    def _is_terminal(self, rid: str) -> bool:
        position = self.prepared.positions.get(rid)
        if position is None:
            return rid in self._terminal_other
        return self._terminal_at[position] != 0

    def settle(self) -> None:
        """Stream the records of the requests that became terminal since the last call, and
        drop their traces (workload requests only: the others, play instances, settle at the
        end in the order the report lists them).

        Called from the release path and before the report, not from the engine's terminal
        event: the engine's step stays short, and an interrupt never lands in the middle of
        it because of this work.
        """
        stream = self.stream
        queue = self._to_settle
        if stream is None or not queue:
            return
        self._to_settle = []
        journal = self.journal
        requests = stream.requests
        for rid in queue:
            position = stream.position(rid)
            if position is None:
                continue
            trace = journal.forget(rid)
            stream.put(position, build_record(requests[position], trace, slo=self.slo))

    def _check_done(self) -> None:
        if self.load.profile is not None:
            return  # a profile ends when the driver returns (see _driver_done)
        if self.driver.finished and self._terminals == self._released:
            self._finish("done")

    def _finish(self, reason: StopReason) -> None:
        if self._done is not None and not self._done.done():
            self.stop_reason = reason
            self._done.set_result(None)

    def _on_poison(self, failure: BaseException) -> None:
        self._finish("failed")

    def _engine_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        error = task.exception()
        if error is not None and self.engine_failure is None:
            self.engine_failure = error
            self._finish("failed")

    async def _cutoff(self, cutoff_ns: int) -> None:
        await simclock.sleep_until_ns(cutoff_ns, waiter="replay:cutoff")
        self._finish("cutoff")

    def quiesce(self) -> bool:
        """Called when the loop deadlocked: end the run if only policy-held requests remain.

        Returns:
            True when the run can end (every released, non-terminal request is held by the
            policy); False when something else is stuck (a bug to report).
        """
        held = set(self.runtime.held_request_ids())
        stuck = [
            rid
            for rid in self.journal.traces
            if not self._is_terminal(rid)
            and rid not in held
            and self.journal.traces[rid].arrival_ns is not None
        ]
        if stuck:
            return False
        self._finish("quiescent")
        return True

    # -- shutdown -----------------------------------------------------------------------------

    async def _shutdown(self) -> None:
        self.driver.stop()
        for task in self._side_tasks:
            if task.get_name() != "driver":
                task.cancel()
        self.runtime.close()
        await self.runtime.shutdown()
        drain = self.stop_reason in ("done", "failed", "quiescent") and self.engine_failure is None
        for engine in self.engines:
            engine.close()
        if not drain:
            for task in self._engine_tasks:
                task.cancel()
        for task in [*self._engine_tasks, *self._side_tasks]:
            with contextlib.suppress(BaseException):
                await task  # engine failures were recorded by _engine_done

    def engine_usage(self) -> tuple[EngineUsage, ...]:
        return tuple(
            EngineUsage(index=engine.index, busy_ns=engine.busy_ns, passes=engine.passes)
            for engine in self.engines
        )


def _run_loop(replay: _Run) -> tuple[int, int]:
    """Run ``replay.main`` on a fresh virtual loop; return (virtual end ns, events processed).

    A :class:`simclock.SimulationError` of the loop (livelock, deadlock, stalled waiter; not
    an internal error) ends the run: it is kept in ``replay.loop_failure``, every task left
    is cancelled, and the caller reports the run up to that instant.
    """
    loop = simclock.new_event_loop(report_interrupts=False)
    try:
        replay.build()
        main = loop.create_task(replay.main(), name="replay")
        try:
            try:
                loop.run_until_complete(main)
            except simclock.DeadlockError:
                if not replay.quiesce():
                    raise
                loop.run_until_complete(main)
        except simclock.InternalError:
            raise
        except simclock.SimulationError as exc:
            replay.loop_failure = exc
            stats = loop.stats()
            abandon_loop(loop)
            return stats.now_ns, stats.events
        stats = loop.stats()
        return stats.now_ns, stats.events
    except KeyboardInterrupt:
        now_ns = loop.time_ns()
        abandon_loop(loop)
        raise ReplayInterrupted(now_ns) from None
    except BaseException:
        abandon_loop(loop)  # a bug: no task is left to warn when it is collected
        raise
    finally:
        loop.close()


def abandon_loop(loop: simclock.VirtualEventLoop) -> None:
    """Cancel every unfinished task of ``loop``, let them unwind, and keep the abandoned run
    quiet: no "Task was destroyed but it is pending", no "exception was never retrieved"."""
    # The run is being thrown away: what its tasks end with is not news (the caller
    # reports the run's failure or interruption itself).
    loop.set_exception_handler(_ignore)
    # Unwinding a great many tasks can itself spend the loop's livelock budget: go again.
    for _ in range(_ABANDON_ROUNDS):
        tasks = [task for task in asyncio.all_tasks(loop) if not task.done()]
        if not tasks or loop.is_closed():
            break
        for task in tasks:
            task.cancel()
        with contextlib.suppress(Exception, KeyboardInterrupt):
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    for task in asyncio.all_tasks(loop):
        coro = task.get_coro()
        if inspect.iscoroutine(coro) and inspect.getcoroutinestate(coro) == "CORO_CREATED":
            coro.close()  # never started: no "coroutine ... was never awaited" at collection


_ABANDON_ROUNDS = 10


def _ignore(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """An exception handler that reports nothing."""


def run(
    workload: Workload,
    *,
    topology: Topology,
    policy: Policy,
    seed: int = 0,
    slo: SLO | None = None,
    tokenizer: TokenizerStageLike | None = None,
    load: LoadMode | None = None,
    max_virtual_time_s: float | None = None,
    keep_events: bool = False,
    config: Mapping[str, object] | None = None,
    stepping: Stepping = "macro",
    request_log: RequestLog | None = None,
) -> ReplayResult:
    """Replay ``workload`` through ``topology``'s engines under ``policy``; return the report.

    Everything runs on a fresh :class:`simclock.VirtualEventLoop`. The seed is split with
    ``numpy.random.SeedSequence(seed).spawn(4)`` into the streams named by
    :data:`SEED_STREAMS` (policy, driver, topology, workload), so the same inputs and seed
    give the same result, byte for byte.

    Args:
        workload: the requests to replay (checked by :func:`replay.prepare`).
        topology: builds the engines (e.g. :class:`replay.Aggregated`).
        policy: places the requests (a fresh policy object per run: policies keep state).
        seed: the run seed (int >= 0).
        slo: service-level objectives for goodput.
        tokenizer: an optional frontend tokenization stage (REFERENCE-engine §7).
        load: how the workload is released (``loadgen.LoadMode``: speedup, closed-loop
            concurrency, rate override, stop rules, lanes, snapshots, warm-up, profile);
            default: at the trace's timestamps.
        max_virtual_time_s: stop the run at this virtual time (shorthand for
            ``load.max_virtual_time_s``): requests in flight end ``incomplete`` and later ones
            ``never_issued``.
        keep_events: keep every lifecycle event in the journal (slower; for timelines).
        config: extra configuration to echo in the report (e.g. the CLI's resolved config).
        stepping: ``"macro"`` (default): engines jump over runs of passes whose outcome is
            determined (docs/explanation/macro-stepping.md); ``"pass"``: one engine deadline
            per pass, the reference behaviour. Both give the same results, byte for byte.
        request_log: stream the per-request records to this :class:`replay.RequestLog` as
            requests settle, keeping neither the records nor the settled requests' traces
            (memory stays proportional to the requests in flight); the result's
            ``requests`` is then empty and its summary the same. Write the report with
            ``write_outputs(result, ..., request_log=request_log)``.

    Returns:
        The :class:`replay.ReplayResult`.

    Raises:
        WorkloadValidationError: the workload or an option is invalid.
        ReplayFailedError: a step failed (commit, abort, policy hook, policy coroutine, engine),
            the run made no progress (``NoProgressError``), or the loop failed
            (``LivelockError``, ``DeadlockError``, ``StalledWaiterError``); its ``result``
            holds the report of the run, naming the failure, and its ``__cause__`` is the
            failure.
        ReplayInterrupted: a ``KeyboardInterrupt`` arrived during the run; its tasks were
            cancelled.
    """
    replay, echo = setup_run(
        workload,
        topology=topology,
        policy=policy,
        seed=seed,
        tokenizer=tokenizer,
        load=load,
        max_virtual_time_s=max_virtual_time_s,
        keep_events=keep_events,
        config=config,
        stepping=stepping,
        slo=slo,
        request_log=request_log,
    )
    with _collector_paused():
        wall_start = time.perf_counter()
        now_ns, events = _run_loop(replay)
        wall_s = time.perf_counter() - wall_start
        return report_run(
            replay, workload, echo, now_ns=now_ns, events=events, wall_time_s=wall_s, slo=slo
        )


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for a replay, and restore it afterwards.

    A replay builds millions of long-lived objects (traces, requests, engine state) and few
    reference cycles; the collector would scan them again and again (a fifth of the CPU time
    of an hour's replay). Nothing a run computes depends on it.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            # The run's objects are all in the youngest generation (no collection ran): move
            # them to the oldest in one step, so that re-enabling does not scan them all at
            # the next allocation. They stay collectable by the next full collection.
            gc.freeze()
            gc.unfreeze()
            gc.enable()


def setup_run(
    workload: Workload,
    *,
    topology: Topology,
    policy: Policy,
    seed: int,
    tokenizer: TokenizerStageLike | None = None,
    load: LoadMode | None = None,
    max_virtual_time_s: float | None = None,
    keep_events: bool = False,
    config: Mapping[str, object] | None = None,
    stepping: Stepping = "macro",
    slo: SLO | None = None,
    request_log: RequestLog | None = None,
) -> tuple[_Run, dict[str, Any]]:
    """Validate the options and build one replay, exactly as :func:`run` does, without running.

    Shared by :func:`run` and the step-by-step replay session so both build (and echo) the
    same run. Returns the replay (call ``build()`` then run ``main()`` on a fresh virtual loop)
    and its configuration echo. With ``request_log``, records stream to it as requests settle
    (``slo`` decides their ``meets_slo``; give the same SLO to :func:`report_run`).

    Raises:
        WorkloadValidationError: the workload or an option is invalid.
    """
    seed = _check_seed(seed)
    if stepping not in STEPPINGS:
        raise WorkloadValidationError(
            f"stepping: must be one of {', '.join(STEPPINGS)}, got {stepping!r}"
        )
    load = LoadMode() if load is None else load
    if max_virtual_time_s is not None:
        if (
            isinstance(max_virtual_time_s, bool)
            or not isinstance(max_virtual_time_s, int | float)
            or not math.isfinite(max_virtual_time_s)
            or max_virtual_time_s <= 0
        ):
            raise WorkloadValidationError(
                f"max_virtual_time_s: must be finite and > 0, got {max_virtual_time_s!r}"
            )
        load = attrs.evolve(load, max_virtual_time_s=max_virtual_time_s)
    prepared = prepare(workload, engine_block_size=topology.block_size, tokenizer=tokenizer)
    seeds = tuple(np.random.SeedSequence(seed).spawn(len(SEED_STREAMS)))
    stream = None
    if request_log is not None:
        stream = RecordStream(
            workload.requests,
            keep=False,
            write=request_log.write,
            token_times=request_log.token_times,
            spill_dir=str(request_log.directory),
            positions=prepared.positions,
        )
    replay = _Run(
        prepared,
        topology,
        policy,
        seeds,
        tokenizer,
        None,
        keep_events,
        seed=seed,
        load=load,
        stepping=stepping,
        stream=stream,
        slo=None if slo is None or slo.is_empty else slo,
    )
    echo: dict[str, Any] = {
        "seed": seed,
        "policy": policy_name(policy),
        "topology": dict(topology.describe()),
        "tokenizer": None if tokenizer is None else attrs.asdict(cast(Any, tokenizer)),
        "max_virtual_time_s": load.max_virtual_time_s,
        "workload": {
            "source": workload.source,
            "format": workload.format,
            "requests": len(workload.requests),
        },
    }
    if attrs.evolve(load, max_virtual_time_s=None) != LoadMode():
        echo["load"] = _jsonable(attrs.asdict(load))
    if config:
        echo["config"] = dict(config)
    return replay, echo


def report_run(
    replay: _Run,
    workload: Workload,
    echo: Mapping[str, Any],
    *,
    now_ns: int,
    events: int,
    wall_time_s: float,
    slo: SLO | None = None,
) -> ReplayResult:
    """Finalize a finished replay built by :func:`setup_run` (see :func:`run`).

    Raises:
        ReplayFailedError: a step failed; its ``result`` holds the report.
    """
    replay.settle()
    failure = (
        replay.runtime.failure
        or replay.engine_failure
        or replay.driver_failure
        or replay.loop_failure
    )
    meta = RunMeta(
        seed=replay.seed,
        event_counts=replay.journal.event_counts(),
        config=dict(echo),
        virtual_duration_ms=now_ns / 1_000_000,
        wall_time_s=wall_time_s,
        events_processed=events,
        engines=replay.engine_usage(),
    )
    result = finalize(
        replay.journal,
        workload=workload,
        meta=meta,
        slo=slo,
        driver=replay.driver_report,
        stream=replay.stream,
    )
    if failure is not None:
        raise ReplayFailedError(
            f"replay failed: {type(failure).__name__}: {failure}", result=result
        ) from failure
    return result
