"""The runner's parts: one replay of a workload through a topology under a policy.

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
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, Protocol

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
from loadgen import Driver, DriverReport, LoadMode, Request
from policies import Policy, PolicyRuntime

from ._autoscale import Autoscaler, autoscaler_task
from ._cluster import Cluster, ClusterEvent, EngineSpec, check_events
from ._exceptions import WorkloadValidationError
from ._faults import FaultError, Faults, FaultStep, fault_plan, run_faults
from ._metrics import SLO
from ._prepare import PreparedWorkload
from ._records import build_record
from ._report import EngineUsage
from ._series import SeriesRecorder
from ._stream import RecordStream
from ._topology import Runtime, Topology
from ._watch import NO_PROGRESS_S, NO_PROGRESS_WAKEUPS, ProgressWatch

__all__ = (
    "SEED_STREAMS",
    "STEPPINGS",
    "ClusterTask",
    "RunJournal",
    "RunParts",
    "Stepping",
    "TokenizerStageLike",
)

ClusterTask = Callable[[Cluster], Awaitable[object]]
"""A coroutine function a run calls with its :class:`replay.Cluster` and runs as a supervised
task on its clock (the ``cluster_tasks`` run option): an exception fails the run; it is
cancelled when the run ends."""

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


@attrs.define(eq=False)
class RunParts:
    """One replay's components and bookkeeping (built and used inside the loop); a
    :class:`replay.Run` drives them."""

    prepared: PreparedWorkload
    topology: Topology
    policy: Policy
    seeds: tuple[np.random.SeedSequence, ...]
    tokenizer: TokenizerStageLike | None
    cutoff_ns: int | None
    keep_events: bool
    seed: int = attrs.field(default=0, kw_only=True)
    stepping: Stepping = attrs.field(default="macro", kw_only=True)
    dispatch_latency_ns: int = attrs.field(default=0, kw_only=True)
    load: LoadMode = attrs.field(factory=LoadMode, kw_only=True)
    stream: RecordStream | None = attrs.field(default=None, kw_only=True)
    slo: SLO | None = attrs.field(default=None, kw_only=True)
    series: SeriesRecorder | None = attrs.field(default=None, kw_only=True)
    cluster_events: Sequence[ClusterEvent] = attrs.field(default=(), kw_only=True)
    cluster_tasks: Sequence[ClusterTask] = attrs.field(default=(), kw_only=True)
    autoscaler: Autoscaler | None = attrs.field(default=None, kw_only=True)
    cold_start_ns: int = attrs.field(default=0, kw_only=True)
    faults: Faults | None = attrs.field(default=None, kw_only=True)
    schedule_seed: int | None = attrs.field(default=None, kw_only=True)
    journal: RunJournal = attrs.field(init=False)
    cluster: Cluster = attrs.field(init=False)
    runtime: Runtime = attrs.field(init=False)
    driver: Driver = attrs.field(init=False)
    driver_report: DriverReport | None = attrs.field(default=None, init=False)
    stop_reason: StopReason | None = attrs.field(default=None, init=False)
    engine_failure: BaseException | None = attrs.field(default=None, init=False)
    driver_failure: BaseException | None = attrs.field(default=None, init=False)
    cluster_failure: BaseException | None = attrs.field(default=None, init=False)
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
    _fault_plan: tuple[FaultStep, ...] = attrs.field(default=(), init=False)

    def __attrs_post_init__(self) -> None:
        self._terminal_at = bytearray(len(self.prepared.requests))
        if self.cutoff_ns is not None and self.load.max_virtual_time_s is None:
            self.load = attrs.evolve(self.load, max_virtual_time_s=self.cutoff_ns / 1e9)

    @property
    def engines(self) -> tuple[Engine, ...]:
        """Every engine of the run, removed ones too, in id order."""
        return self.cluster.engines

    def build(self) -> None:
        self.journal = RunJournal(keep_events=self.keep_events, on_terminal=self._on_terminal)
        keyer = BlockKeyer()
        engines = tuple(self.topology.build(keyer=keyer, journal=self.journal))
        for engine in engines:
            engine.macro_stepping = self.stepping == "macro"
        self.cluster_events = check_events(self.cluster_events, len(engines))
        if self.faults is not None:
            self._fault_plan = fault_plan(self.faults, len(engines), self.cluster_events)

        def build_engine(engine_id: int, spec: EngineSpec) -> Engine:
            engine = Engine(engine_id, spec.config, spec.timing, keyer=keyer, journal=self.journal)
            engine.macro_stepping = self.stepping == "macro"
            return engine

        self.cluster = Cluster(
            engines,
            build_engine,
            self._start_engine,
            self.topology,
            cold_start_ns=self.cold_start_ns,
        )
        policy_rng = np.random.default_rng(self.seeds[SEED_STREAMS.index("policy")])
        # The topology supplies the runtime: a PolicyRuntime for aggregated engines, one
        # runtime per pool plus the prefill->decode handoff for replay.Disaggregated.
        self.runtime = self.topology.make_runtime(
            self.policy,
            engines,
            journal=self.journal,
            keyer=keyer,
            rng=policy_rng,
            on_poison=self._on_poison,
        )
        if self.faults is not None and self.faults.has_transfer_failures:
            self._transfer_failures(self.faults)
        if self.dispatch_latency_ns:
            # every policy runtime of the run (one, or one per pool) takes the latency
            pools = getattr(self.runtime, "pool_runtimes", None)
            runtimes = (self.runtime,) if pools is None else pools
            for runtime in runtimes:
                if not isinstance(runtime, PolicyRuntime):
                    raise WorkloadValidationError(
                        "dispatch_latency_ms: this topology's runtime takes no dispatch latency"
                    )
                runtime.dispatch_latency_ns = self.dispatch_latency_ns
        staleness = None if self.faults is None else self.faults.staleness
        if staleness is not None:
            # what every policy runtime of the run sees of its engines lags
            pools = getattr(self.runtime, "pool_runtimes", None)
            for runtime in (self.runtime,) if pools is None else pools:
                if not isinstance(runtime, PolicyRuntime):
                    raise WorkloadValidationError(
                        "faults: this topology's runtime takes no stale information"
                    )
                runtime.staleness = staleness
        # A run whose clock moves without progress fails instead of running for ever.
        watch = ProgressWatch(
            progress=lambda: (self._released, self._terminals),
            unsettled=self._unsettled_ids,
            engines_idle=self._engines_idle,
            last_progress_ns=lambda: self._progress_ns,
        )
        self.runtime.wakeup_watch = watch.check
        # Whatever else keeps the clock moving (a policy task on bare asyncio.sleep) is seen
        # by the loop's clock watch. Not when the runtime runs timed work of its own (P/D: a
        # KV transfer in flight leaves every engine's queues empty while the run progresses).
        self._clock_watch = None if self.runtime.runs_timed_work else watch.check_clock
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
        if self.series is not None:
            self.series.attach(self.journal, [engine.view for engine in self.engines])

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
        self.cluster.attach(self.runtime, loop)
        for engine in self.cluster.engines:
            self._start_engine(engine)
        self.runtime.start()
        driver = loop.create_task(self.driver.run(), name="driver")
        driver.add_done_callback(self._driver_done)
        self._side_tasks.append(driver)
        tasks = [(f"cluster:task{i}", fn) for i, fn in enumerate(self.cluster_tasks)]
        if self.cluster_events:
            tasks.insert(0, ("cluster:events", self._cluster_schedule))
        if self.autoscaler is not None:
            scale = autoscaler_task(
                self.autoscaler, runtime=self.runtime, journal=self.journal, slo=self.slo
            )
            tasks.append(("cluster:autoscaler", scale))
        if self._fault_plan:
            tasks.insert(0, ("faults", self._faults))
        for name, task_fn in tasks:
            side = loop.create_task(_awaited(task_fn(self.cluster)), name=name)
            side.add_done_callback(self._cluster_task_done)
            self._side_tasks.append(side)
        deadline = self.driver.deadline_ns
        if deadline is not None:
            self._side_tasks.append(loop.create_task(self._cutoff(deadline), name="cutoff"))
        await self._done
        await self._shutdown()

    def _start_engine(self, engine: Engine) -> None:
        """Start ``engine``'s coroutine (at the start of the run, or when it joins)."""
        task = asyncio.get_running_loop().create_task(engine.run(), name=f"engine[{engine.index}]")
        task.add_done_callback(self._engine_done)
        self._engine_tasks.append(task)

    async def _cluster_schedule(self, cluster: Cluster) -> None:
        """Apply the declared cluster events, each at its instant."""
        for event in self.cluster_events:
            if event.at_ns > simclock.now_ns():
                await simclock.sleep_until_ns(event.at_ns, waiter="cluster:events")
            if event.action == "add":
                cluster.add_engine(pool=event.pool)
            elif event.action == "drain" and event.engine is not None:
                cluster.drain(event.engine)
            elif event.engine is not None:
                cluster.remove(event.engine)

    def _transfer_failures(self, faults: Faults) -> None:
        """Make the P/D runtime's KV transfers fail as ``faults`` declares (the draws come
        from the run seed's child stream after :data:`SEED_STREAMS`)."""
        set_failures = getattr(self.runtime, "set_transfer_failures", None)
        if set_failures is None:
            raise FaultError(
                "faults: transfer_failures and transfer_failure_p need a disaggregated "
                "(prefill/decode) topology"
            )
        entropy = self.seeds[0].entropy
        stream = np.random.SeedSequence(entropy, spawn_key=(len(SEED_STREAMS),))
        set_failures(
            [round(f.at_s * 1_000_000_000) for f in faults.transfer_failures],
            faults.transfer_failure_p,
            np.random.default_rng(stream),
            requeue=faults.requeue_transfers,
        )

    async def _faults(self, cluster: Cluster) -> None:
        """Apply the declared faults, each at its instant."""
        requeue = self.faults is None or self.faults.on_crash == "requeue"
        await run_faults(cluster, self._fault_plan, requeue=requeue)

    def _cluster_task_done(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            if self.cluster_failure is None:
                self.cluster_failure = error
            self._finish("failed")

    def _engines_idle(self) -> bool:
        return all(
            e.view.waiting_count == 0 and e.view.running_count == 0 and e.view.pending_offers == 0
            for e in self.cluster.live
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
        for engine in self.cluster.live:
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
        if self._terminals == self._released and self.driver.finished:
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
        # the interval each engine served, when the cluster changed during the run
        intervals = self.cluster.intervals() if self.cluster.changed else [None] * len(self.engines)
        return tuple(
            EngineUsage(
                index=engine.index,
                busy_ns=engine.busy_ns,
                passes=engine.passes,
                batch_entries=engine.batch_entries,
                peak_running=engine.peak_running,
                peak_kv_blocks=engine.peak_kv_blocks,
                kv_blocks=engine.config.num_blocks,
                served=None if interval is None else (interval.joined_ns, interval.removed_ns),
                gpus=_gpus(engine),
                states=() if interval is None else interval.states(),
            )
            for engine, interval in zip(self.engines, intervals, strict=True)
        )


def _gpus(engine: Engine) -> int:
    """The GPUs an engine runs on: its timing model's tensor-parallel degree, else 1."""
    tensor_parallel = getattr(engine.timing, "tensor_parallel", 1)
    return tensor_parallel if isinstance(tensor_parallel, int) and tensor_parallel >= 1 else 1


async def _awaited(awaitable: Awaitable[object]) -> None:
    await awaitable
