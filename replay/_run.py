"""A replay as one object: :class:`Run` builds it on its own virtual loop, advances it to an
instant or a condition, and finishes it into its report; :func:`run` is a :class:`Run` run to
the end. The step-by-step session, progress and timelines drive a :class:`Run`.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import inspect
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Required, TypedDict, Unpack, cast, overload

import attrs
import numpy as np

import simclock
from engines import Engine, EngineView
from loadgen import LoadMode, Workload
from policies import Policy, policy_name
from simclock import log_context

from ._autoscale import Autoscaler, autoscaler_name
from ._cluster import Cluster, ClusterError, ClusterEvent
from ._exceptions import ReplayFailedError, ReplayInterrupted, WorkloadValidationError
from ._faults import FaultError, Faults
from ._logging_events import subscribe_story
from ._metrics import SLO
from ._output import RequestLog
from ._prepare import prepare
from ._report import ReplayResult, RunMeta, finalize
from ._runner import (
    SEED_STREAMS,
    STEPPINGS,
    ClusterTask,
    RunJournal,
    RunParts,
    Stepping,
    TokenizerStageLike,
)
from ._series import SeriesRecorder
from ._stream import RecordStream
from ._timeline import TimelineFilter, TimelineRecorder
from ._topology import Runtime, Topology

__all__ = ("Run", "RunOptions", "abandon_loop", "run", "setup")


def _stop_loop(future: asyncio.Future[Any]) -> None:
    """Done callback of the run's main task: stop the loop, as ``run_until_complete`` does."""
    future.get_loop().stop()


class RunOptions(TypedDict, total=False):
    """The run spec: the options of a replay, given as keywords to :func:`replay.run`,
    :meth:`Run.build` and :meth:`replay.ReplaySession.build` (``topology`` and ``policy``
    are required).

    Attributes:
        topology: builds the engines (e.g. :class:`replay.Aggregated`).
        policy: places the requests (a fresh policy object per run: policies keep state).
        seed: the run seed (int >= 0; default 0).
        slo: service-level objectives for goodput.
        tokenizer: an optional frontend tokenization stage (REFERENCE-engine §7).
        load: how the workload is released (``loadgen.LoadMode``: speedup, closed-loop
            concurrency, rate override, stop rules, lanes, snapshots, warm-up, profile);
            default: at the trace's timestamps.
        max_virtual_time_s: stop the run at this virtual time (shorthand for
            ``load.max_virtual_time_s``): requests in flight end ``incomplete`` and later
            ones ``never_issued``.
        keep_events: keep every lifecycle event in the journal (slower; for timelines).
        config: extra configuration to echo in the report (e.g. the CLI's resolved config).
        stepping: ``"macro"`` (default): engines jump over runs of passes whose outcome is
            determined (docs/explanation/macro-stepping.md); ``"pass"``: one engine deadline
            per pass, the reference behaviour. Both give the same results, byte for byte.
        dispatch_latency_ms: the router-to-engine latency of each phase of the dispatch
            handshake (offer, answer, commit), in ms (default 0: instantaneous; aggregated
            topologies only).
        request_log: stream the per-request records to this :class:`replay.RequestLog` as
            requests settle, keeping neither the records nor the settled requests' traces
            (memory stays proportional to the requests in flight); the result's
            ``requests`` is then empty and its summary the same. Write the report with
            ``write_outputs(result, ..., request_log=request_log)``.
        series: record per-engine queue depth, batch size, KV usage and utilisation into
            this :class:`replay.SeriesRecorder` (``recorder.write(output_dir)`` writes
            ``engines.csv``); the report is the same with or without it.
        cluster_events: a declared schedule of cluster changes (:class:`replay.ClusterEvent`:
            add, drain or remove an engine at an instant), applied on the run's clock;
            echoed in ``config.json`` as ``cluster.events``.
        cluster_tasks: coroutine functions called with the run's :class:`replay.Cluster` and
            run as supervised tasks on its clock (they may add, drain and remove engines at
            any instant); an exception fails the run, and they are cancelled when it ends.
        autoscaler: a :class:`replay.Autoscaler` run as a task of the run with an
            :class:`replay.AutoscalerContext` (metrics, pending queue, SLO attainment,
            add/drain/remove); echoed in ``config.json`` as ``cluster.autoscaler``.
        cold_start_s: how long an engine added during the run loads before it serves
            (state ``starting``), seconds (default 0: at once); echoed in ``config.json``
            as ``cluster.cold_start_s`` when not 0.
        faults: engine crashes and drains at instants, and stale engine views and KV events
            (:class:`replay.Faults`); echoed in ``config.json`` as ``faults``.
        schedule_seed: run the callbacks ready at one virtual instant in an order permuted
            by this seed (the clock's seeded mode, :class:`simclock.VirtualEventLoop`)
            instead of first in first out; echoed in ``config.json``. None (the default):
            first in first out. ``replay.explore`` varies it.
    """

    topology: Required[Topology]
    policy: Required[Policy]
    seed: int
    slo: SLO | None
    tokenizer: TokenizerStageLike | None
    load: LoadMode | None
    max_virtual_time_s: float | None
    keep_events: bool
    config: Mapping[str, object] | None
    stepping: Stepping
    dispatch_latency_ms: float
    request_log: RequestLog | None
    series: SeriesRecorder | None
    cluster_events: Sequence[ClusterEvent]
    cluster_tasks: Sequence[ClusterTask]
    autoscaler: Autoscaler | None
    cold_start_s: float
    faults: Faults | None
    schedule_seed: int | None


_RUN_OPTIONS = frozenset(RunOptions.__annotations__)


class _LiveViews(Sequence[EngineView]):
    """The views of a run's engines, by id, read when asked (engines added later too)."""

    def __init__(self, parts: RunParts) -> None:
        self._parts = parts

    def __len__(self) -> int:
        return len(self._parts.engines)

    @overload
    def __getitem__(self, index: int) -> EngineView: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[EngineView]: ...
    def __getitem__(self, index: int | slice) -> EngineView | Sequence[EngineView]:
        if isinstance(index, slice):
            return tuple(e.view for e in self._parts.engines[index])
        return self._parts.engines[index].view


@attrs.define(eq=False)
class Run:
    """One replay, built on its own :class:`simclock.VirtualEventLoop` with nothing run yet.

    Build it with :meth:`Run.build` (the arguments of :func:`replay.run`); move it with
    :meth:`advance` (to an instant, or until a condition holds) and :meth:`step_callback`;
    end it with :meth:`finish`, which runs the rest exactly as :func:`replay.run` does and
    returns the report. The same inputs give the same report however the run is advanced.

    A run that raised (an interrupt, an internal error) cannot go on: :attr:`error` says why,
    and every method that runs callbacks raises it again.

    Attributes:
        parts: the run's components (engines, journal, policy runtime, driver).
        workload: the workload replayed.
        slo: the SLO the report's goodput is measured against, if any.
        echo: the run's configuration echo (``config.json``).
    """

    parts: RunParts
    workload: Workload
    slo: SLO | None
    echo: dict[str, Any]
    _run_id: str | None = None
    _loop: simclock.VirtualEventLoop = attrs.field(init=False)
    _main: asyncio.Task[None] = attrs.field(init=False)
    _result: ReplayResult | None = attrs.field(default=None, init=False)
    _error: BaseException | None = attrs.field(default=None, init=False)
    _wall_s: float = attrs.field(default=0.0, init=False)

    def __attrs_post_init__(self) -> None:
        loop = simclock.new_event_loop(report_interrupts=False, seed=self.parts.schedule_seed)
        try:
            self.parts.build()
            subscribe_story(self.parts.journal)  # debug logs only: decided once, here
            context = (
                contextlib.nullcontext()
                if self._run_id is None
                else log_context(run_id=self._run_id)  # every task of the run inherits it
            )
            with context:
                self._main = loop.create_task(self.parts.main(), name="replay")
        except BaseException:
            loop.close()
            raise
        self._main.add_done_callback(_stop_loop)
        self._loop = loop

    @classmethod
    def build(
        cls, workload: Workload, *, run_id: str | None = None, **options: Unpack[RunOptions]
    ) -> Run:
        """Build a replay exactly as :func:`replay.run` does, without running anything.

        Args:
            workload: the requests to replay.
            run_id: a ``run_id`` bound to every log event of the run (none by default).
            **options: the run spec (:class:`RunOptions`), as :func:`replay.run` takes it.

        Returns:
            The run, at virtual time 0 with nothing run.

        Raises:
            TypeError: an unknown option, or ``topology`` or ``policy`` missing.
            WorkloadValidationError: the workload or an option is invalid.
        """
        parts, echo = setup(workload, options, caller="Run.build")
        return cls(parts, workload, options.get("slo"), echo, run_id)

    # -- state -----------------------------------------------------------------------------

    @property
    def loop(self) -> simclock.VirtualEventLoop:
        """The run's virtual event loop."""
        return self._loop

    @property
    def now_ns(self) -> int:
        """The virtual time, integer nanoseconds."""
        return self._loop.time_ns()

    @property
    def done(self) -> bool:
        """Whether the replay's main task is over (:meth:`finish` then only reports)."""
        return self._main.done()

    @property
    def result(self) -> ReplayResult | None:
        """The report, once :meth:`finish` has made it."""
        return self._result

    @property
    def error(self) -> BaseException | None:
        """What a method of this run raised, if it raised: the run cannot go on."""
        return self._error

    @property
    def failure(self) -> BaseException | None:
        """What made the replay fail (a commit, a policy, an engine, the driver, the loop),
        if anything; the report names it."""
        p = self.parts
        return (
            p.runtime.failure
            or p.engine_failure
            or p.driver_failure
            or p.cluster_failure
            or p.loop_failure
        )

    @property
    def runtime(self) -> Runtime:
        """The runtime placing the requests (the topology's)."""
        return self.parts.runtime

    @property
    def journal(self) -> RunJournal:
        """The run's journal."""
        return self.parts.journal

    @property
    def engines(self) -> tuple[Engine, ...]:
        """Every engine of the run so far, removed ones too, in id order."""
        return self.parts.engines

    @property
    def cluster(self) -> Cluster:
        """The run's engines by stable id; add, drain and remove them from a coroutine of
        the run (see :class:`replay.Cluster`)."""
        return self.parts.cluster

    def timeline_recorder(self, filter: TimelineFilter | None = None) -> TimelineRecorder:
        """A :class:`replay.TimelineRecorder` attached to this run's journal: it samples
        the views of every engine of the run (those added later too), records the engine
        count when the cluster changes, and with a window end lets the engines macro-step
        again once the window is past (:meth:`replay.TimelineRecorder.attach`)."""
        recorder = TimelineRecorder(
            views=_LiveViews(self.parts),
            engine_usage=self.parts.engine_usage,
            filter=TimelineFilter() if filter is None else filter,
        )
        recorder.attach(self.journal)
        return recorder

    # -- advancing -------------------------------------------------------------------------

    def _check_usable(self) -> None:
        if self._error is not None:
            raise RuntimeError(
                f"the run cannot go on: {type(self._error).__name__}: {self._error}"
            ) from self._error

    def _quiesced(self, fn: Callable[[], Any]) -> Any:
        """``fn()``, again after a deadlock that the run settles by ending the requests only
        the policy holds (the run is then quiescent)."""
        while True:
            try:
                return fn()
            except simclock.DeadlockError:
                if not self.parts.quiesce():
                    raise

    def _guarded(self, fn: Callable[[], Any]) -> Any:
        """``fn()``, timed; an interrupt or any other exception makes the run unusable."""
        start = time.perf_counter()
        try:
            return fn()
        except KeyboardInterrupt:
            self._error = ReplayInterrupted(self._loop.time_ns())
            raise self._error from None
        except BaseException as error:
            self._error = error
            raise
        finally:
            self._wall_s += time.perf_counter() - start

    def advance(
        self, until_ns: int | None = None, *, stop: Callable[[], bool] | None = None
    ) -> bool:
        """Run callbacks until the replay is over, ``stop()`` holds (checked before every
        callback), or the next callback is at ``until_ns`` or later; in that last case the
        clock is then set to ``until_ns``, with nothing at that instant run yet.

        Returns:
            Whether it stopped because ``stop()`` held.

        Raises:
            RuntimeError: the run cannot go on (:attr:`error`).
            ReplayInterrupted: a ``KeyboardInterrupt`` arrived; the run cannot go on.
        """
        self._check_usable()
        main = self._main
        loop = self._loop
        held = False

        def check() -> bool:
            nonlocal held
            if main.done():
                return True
            if stop is not None and stop():
                held = True
                return True
            if until_ns is not None:
                nxt = loop.next_event_ns()
                return nxt is not None and nxt >= until_ns
            return False

        def go() -> None:
            more = self._quiesced(lambda: loop.run_until(check))
            if (
                more
                and until_ns is not None
                and not main.done()
                and not held
                and until_ns > loop.time_ns()
            ):
                loop.run_until_ns(until_ns)

        self._guarded(go)
        return held

    def step_callback(self) -> str | None:
        """Run exactly one callback of the loop (a task step, a timer, ...).

        Returns:
            The label of the callback run, or None when there was none to run.
        """
        self._check_usable()
        ran = self._guarded(lambda: self._quiesced(self._loop.step))
        return None if ran is None else cast(str, ran.label)

    def finish(self) -> ReplayResult:
        """Run the rest exactly as :func:`replay.run` does and return the report (also when
        the replay failed: :attr:`failure` says why, and the report names it).

        Raises:
            RuntimeError: the run cannot go on (:attr:`error`).
            ReplayInterrupted: a ``KeyboardInterrupt`` arrived; the run's tasks were cancelled.
            simclock.InternalError: an invariant of the simulator broke.
        """
        if self._result is not None:
            return self._result
        self._check_usable()
        loop = self._loop
        main = self._main
        wall_start = time.perf_counter()
        try:
            if main.done():
                loop.run_forever()  # the rest of the callback batch, then _stop_loop stops it
            else:
                main.remove_done_callback(_stop_loop)
                self._quiesced(lambda: loop.run_until_complete(main))
            main.result()
            stats = loop.stats()
        except simclock.InternalError as error:
            self._error = error
            loop.close()
            raise
        except simclock.SimulationError as error:
            # A loop failure (livelock, deadlock, stalled waiter) ends the run with its
            # report.
            self.parts.loop_failure = error
            stats = loop.stats()
            abandon_loop(loop)
            loop.close()
        except KeyboardInterrupt:
            now_ns = loop.time_ns()
            abandon_loop(loop)
            loop.close()
            self._error = ReplayInterrupted(now_ns)
            raise self._error from None
        except BaseException as error:
            self._error = error
            abandon_loop(loop)
            loop.close()
            raise
        loop.close()
        self._wall_s += time.perf_counter() - wall_start
        self._result = report_run(
            self.parts,
            self.workload,
            self.echo,
            now_ns=stats.now_ns,
            events=stats.events,
            wall_time_s=self._wall_s,
            slo=self.slo,
        )
        return self._result

    def result_or_raise(self) -> ReplayResult:
        """:meth:`finish`, raising :class:`replay.ReplayFailedError` (with the report) when the
        replay failed, as :func:`replay.run` does."""
        with _collector_paused():
            result = self.finish()
        failure = self.failure
        if failure is not None:
            raise ReplayFailedError(
                f"replay failed: {type(failure).__name__}: {failure}", result=result
            ) from failure
        return result

    def close(self, reason: str = "the run was closed") -> None:
        """Abandon an unfinished run: cancel its tasks and close its loop (idempotent).

        A finished run is already closed. After :meth:`close` the run cannot go on: its
        :attr:`error` is a ``RuntimeError`` saying ``reason``.
        """
        loop = self._loop
        if loop.is_closed():
            return
        try:
            abandon_loop(loop)
        finally:
            loop.close()
            if self._result is None and self._error is None:
                self._error = RuntimeError(reason)


def run(workload: Workload, **options: Unpack[RunOptions]) -> ReplayResult:
    """Replay ``workload`` through ``topology``'s engines under ``policy``; return the report.

    Everything runs on a fresh :class:`simclock.VirtualEventLoop`. The seed is split with
    ``numpy.random.SeedSequence(seed).spawn(4)`` into the streams named by
    :data:`SEED_STREAMS` (policy, driver, topology, workload), so the same inputs and seed
    give the same result, byte for byte.

    Args:
        workload: the requests to replay (checked by :func:`replay.prepare`).
        **options: the run spec (:class:`replay.RunOptions`): ``topology`` and ``policy``
            (required), ``seed``, ``slo``, ``tokenizer``, ``load``, ``max_virtual_time_s``,
            ``keep_events``, ``config``, ``stepping``, ``request_log``, ``series``.

    Returns:
        The :class:`replay.ReplayResult`.

    Raises:
        TypeError: an unknown option, or ``topology`` or ``policy`` missing.
        WorkloadValidationError: the workload or an option is invalid.
        ReplayFailedError: a step failed (commit, abort, policy hook, policy coroutine, engine),
            the run made no progress (``NoProgressError``), or the loop failed
            (``LivelockError``, ``DeadlockError``, ``StalledWaiterError``); its ``result``
            holds the report of the run, naming the failure, and its ``__cause__`` is the
            failure.
        ReplayInterrupted: a ``KeyboardInterrupt`` arrived during the run; its tasks were
            cancelled.
    """
    parts, echo = setup(workload, options, caller="run")
    return Run(parts, workload, options.get("slo"), echo).result_or_raise()


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


def _jsonable(value: object) -> object:
    """``value`` with tuples as lists and anything not JSON-like as its repr."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)


def _check_seed(seed: object, name: str = "seed") -> int:
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise WorkloadValidationError(f"{name}: must be an int >= 0, got {seed!r}")
    return seed


def _check_cluster_events(events: object) -> tuple[ClusterEvent, ...]:
    if isinstance(events, str) or not isinstance(events, Sequence):
        raise ClusterError(f"cluster_events: must be a sequence of ClusterEvent, got {events!r}")
    for i, event in enumerate(events):
        if not isinstance(event, ClusterEvent):
            raise ClusterError(f"cluster_events[{i}]: must be a ClusterEvent, got {event!r}")
    return tuple(events)


def _check_autoscaler(autoscaler: object) -> Autoscaler | None:
    if autoscaler is not None and not callable(getattr(autoscaler, "run", None)):
        raise ClusterError(
            f"autoscaler: must have an async run(ctx) method, got {type(autoscaler).__name__}"
        )
    return cast("Autoscaler | None", autoscaler)


def _check_cold_start(value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
    ):
        raise ClusterError(f"cold_start_s: must be a finite number >= 0, got {value!r}")
    return float(value)


def setup(
    workload: Workload, options: RunOptions, *, caller: str
) -> tuple[RunParts, dict[str, Any]]:
    """Validate the options and make one replay's parts and configuration echo (see
    :meth:`Run.build`). With ``request_log``, records stream to it as requests settle
    (``slo`` decides their ``meets_slo``; give the same SLO to :func:`report_run`).

    Raises:
        TypeError: an option that is not a key of :class:`RunOptions`, or a required one
            missing, as a function with these keyword parameters would raise it.
        WorkloadValidationError: the workload or an option is invalid.
    """
    unknown = sorted(set(options) - _RUN_OPTIONS)
    if unknown:
        raise TypeError(f"{caller}() got an unexpected keyword argument {unknown[0]!r}")
    for required in ("topology", "policy"):
        if required not in options:
            raise TypeError(f"{caller}() missing required keyword argument: {required!r}")
    topology = options["topology"]
    policy = options["policy"]
    tokenizer = options.get("tokenizer")
    slo = options.get("slo")
    stepping = options.get("stepping", "macro")
    latency_ms = options.get("dispatch_latency_ms", 0.0)
    if (
        isinstance(latency_ms, bool)
        or not isinstance(latency_ms, int | float)
        or not math.isfinite(latency_ms)
        or latency_ms < 0
    ):
        raise WorkloadValidationError(
            f"dispatch_latency_ms: must be a finite number >= 0, got {latency_ms!r}"
        )
    max_virtual_time_s = options.get("max_virtual_time_s")
    request_log = options.get("request_log")
    config = options.get("config")
    load = options.get("load")
    cluster_events = _check_cluster_events(options.get("cluster_events", ()))
    cluster_tasks = tuple(options.get("cluster_tasks", ()))
    autoscaler = _check_autoscaler(options.get("autoscaler"))
    cold_start_s = _check_cold_start(options.get("cold_start_s", 0.0))
    faults = options.get("faults")
    if faults is not None and not isinstance(faults, Faults):
        raise FaultError(f"faults: must be a replay.Faults, got {faults!r}")
    if faults is not None and faults.is_empty:
        faults = None  # no fault at all: exactly the run without the option
    schedule_seed = options.get("schedule_seed")
    if schedule_seed is not None:
        _check_seed(schedule_seed, "schedule_seed")
    seed = _check_seed(options.get("seed", 0))
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
    replay = RunParts(
        prepared,
        topology,
        policy,
        seeds,
        tokenizer,
        None,
        options.get("keep_events", False),
        seed=seed,
        load=load,
        stepping=stepping,
        dispatch_latency_ns=round(latency_ms * 1_000_000),
        stream=stream,
        slo=None if slo is None or slo.is_empty else slo,
        series=options.get("series"),
        cluster_events=cluster_events,
        cluster_tasks=cluster_tasks,
        autoscaler=autoscaler,
        cold_start_ns=round(cold_start_s * 1_000_000_000),
        faults=faults,
        schedule_seed=schedule_seed,
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
    if cluster_events:
        echo["cluster"] = {"events": [event.as_dict() for event in cluster_events]}
    if autoscaler is not None:
        echo.setdefault("cluster", {})["autoscaler"] = autoscaler_name(autoscaler)
    if cold_start_s:
        echo.setdefault("cluster", {})["cold_start_s"] = cold_start_s
    if faults is not None:
        echo["faults"] = faults.as_dict()
    if schedule_seed is not None:
        echo["schedule_seed"] = schedule_seed
    if config:
        echo["config"] = dict(config)
    return replay, echo


def report_run(
    replay: RunParts,
    workload: Workload,
    echo: Mapping[str, Any],
    *,
    now_ns: int,
    events: int,
    wall_time_s: float,
    slo: SLO | None = None,
) -> ReplayResult:
    """The report of a finished replay's parts (see :func:`run`)."""
    replay.settle()
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
    return result
