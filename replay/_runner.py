"""The runner: one replay of a workload through a topology under a policy, on a fresh loop.

Wiring, all on one virtual clock::

    release driver ──submit──► (tokenizer stage) ──► PolicyRuntime ──dispatch──► engines
          ▲                                                                        │
          └──── on_started / on_terminal ◄──── journal (lifecycle events) ◄────────┘
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
import math
import time
from collections.abc import Callable, Mapping
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
from loadgen import Dep, Request, Workload
from policies import Policy, PolicyRuntime, policy_name

from ._exceptions import ReplayFailedError, WorkloadValidationError
from ._metrics import SLO
from ._prepare import PreparedWorkload, prepare
from ._report import EngineUsage, ReplayResult, RunMeta, finalize
from ._topology import Topology

__all__ = ("SEED_STREAMS", "RunJournal", "run")

SEED_STREAMS = ("policy", "driver", "topology")
"""The child seed streams of a run, in spawn order: ``SeedSequence(seed).spawn(3)``."""

_TERMINAL_KINDS = frozenset({EventKind.FINISHED, EventKind.REJECTED, EventKind.FAILED})

StopReason = Literal["done", "failed", "cutoff", "quiescent"]


@attrs.define(eq=False)
class RunJournal(Journal):
    """The run's journal: a :class:`engines.Journal` that also counts events by kind and tells
    the runner of terminal events, without subscribing (so engines keep their fast path of
    folding per-token events straight into traces when events are not kept).

    Attributes:
        on_terminal: called with every FINISHED, REJECTED and FAILED event after it is folded.
    """

    on_terminal: Callable[[LifecycleEvent], None] | None = attrs.field(default=None, kw_only=True)
    _counts: dict[str, int] = attrs.field(factory=dict, init=False)

    def record(self, event: LifecycleEvent) -> None:
        """Record ``event`` (see :meth:`engines.Journal.record`), count it, and report it to
        :attr:`on_terminal` when it is terminal."""
        super().record(event)
        name = event.kind.value
        self._counts[name] = self._counts.get(name, 0) + 1
        if event.kind in _TERMINAL_KINDS and self.on_terminal is not None:
            self.on_terminal(event)

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


class Releaser(Protocol):
    """The release driver as the runner sees it (the seam to ``loadgen``'s driver)."""

    @property
    def finished(self) -> bool:
        """Whether every request was released or can never be."""
        ...

    def start(self) -> None:
        """Start releasing (inside the running loop)."""
        ...

    def on_terminal(self, request_id: str, status: str) -> None:
        """A released request reached a terminal state."""
        ...

    def stop(self) -> None:
        """Release nothing more."""
        ...


@attrs.define(eq=False)
class _TimestampReleaser:
    """Releases requests by their arrival rules (REFERENCE-workloads §1.1, speedup 1).

    Roots at ``not_before_ms``; a dependent when every dependency has completed (or started)
    plus its delay, and no earlier than its ``not_before_ms``. A dependent whose dependency
    ends other than ``completed`` is never released. Requests due at the same instant are
    released in workload order.
    """

    requests: tuple[Request, ...]
    submit: Callable[[Request], None]
    _positions: dict[str, int] = attrs.field(factory=dict, init=False)
    _waiting_on: dict[str, int] = attrs.field(factory=dict, init=False)
    _dependents: dict[str, list[tuple[int, Dep]]] = attrs.field(factory=dict, init=False)
    _due_ns: dict[int, int] = attrs.field(factory=dict, init=False)
    _unresolved: int = attrs.field(default=0, init=False)
    _batch: list[int] = attrs.field(factory=list, init=False)
    _tasks: list[asyncio.Task[None]] = attrs.field(factory=list, init=False)
    _stopped: bool = attrs.field(default=False, init=False)

    def __attrs_post_init__(self) -> None:
        for position, request in enumerate(self.requests):
            self._positions[request.id] = position
            for dep in request.arrival.after:
                self._dependents.setdefault(dep.request_id, []).append((position, dep))
            if request.arrival.after:
                self._waiting_on[request.id] = len(request.arrival.after)
        self._unresolved = len(self.requests)

    @property
    def finished(self) -> bool:
        return self._unresolved == 0

    def start(self) -> None:
        roots = sorted(
            (_ms_to_ns(r.arrival_ms), position)
            for position, r in enumerate(self.requests)
            if not r.arrival.after
        )
        if roots:
            task = asyncio.get_running_loop().create_task(self._release_roots(roots), name="driver")
            self._tasks.append(task)

    async def _release_roots(self, roots: list[tuple[int, int]]) -> None:
        for when_ns, position in roots:
            if when_ns > simclock.now_ns():
                await simclock.sleep_until_ns(when_ns, waiter="replay:driver")
            self._due(position)

    def _due(self, position: int) -> None:
        if not self._batch:
            asyncio.get_running_loop().call_soon(self._flush)
        self._batch.append(position)

    def _flush(self) -> None:
        batch = sorted(self._batch)
        self._batch.clear()
        for position in batch:
            if self._stopped:
                return
            request = self.requests[position]
            self._unresolved -= 1
            self._event(request.id, "start", simclock.now_ns())
            self.submit(request)

    def on_terminal(self, request_id: str, status: str) -> None:
        if status == "completed":
            self._event(request_id, "completion", simclock.now_ns())
        else:
            self._skip(request_id)

    def _event(self, request_id: str, on: str, at_ns: int) -> None:
        for position, dep in self._dependents.get(request_id, ()):
            if dep.on != on:
                continue
            request = self.requests[position]
            due = at_ns + _ms_to_ns(dep.delay_ms)
            self._due_ns[position] = max(self._due_ns.get(position, 0), due)
            left = self._waiting_on[request.id] - 1
            self._waiting_on[request.id] = left
            if left == 0:
                when = self._due_ns.pop(position)
                if request.arrival.not_before_ms is not None:
                    when = max(when, _ms_to_ns(request.arrival.not_before_ms))
                self._later(when, position)

    def _skip(self, request_id: str) -> None:
        stack = [request_id]
        while stack:
            rid = stack.pop()
            for position, _ in self._dependents.get(rid, ()):
                dependent = self.requests[position].id
                if self._waiting_on.get(dependent, 0) > 0:
                    self._waiting_on[dependent] = -1
                    self._unresolved -= 1
                    stack.append(dependent)

    def _later(self, when_ns: int, position: int) -> None:
        if when_ns <= simclock.now_ns():
            self._due(position)
            return

        async def wait() -> None:
            await simclock.sleep_until_ns(when_ns, waiter="replay:driver")
            self._due(position)

        task = asyncio.get_running_loop().create_task(wait(), name="driver:dependent")
        self._tasks.append(task)

    def stop(self) -> None:
        self._stopped = True
        for task in self._tasks:
            task.cancel()


def _ms_to_ns(ms: float) -> int:
    return round(ms * 1_000_000)


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
    journal: RunJournal = attrs.field(init=False)
    engines: tuple[Engine, ...] = attrs.field(init=False)
    runtime: PolicyRuntime = attrs.field(init=False)
    releaser: Releaser = attrs.field(init=False)
    stop_reason: StopReason | None = attrs.field(default=None, init=False)
    engine_failure: BaseException | None = attrs.field(default=None, init=False)
    _pool: _TokenizerPool | None = attrs.field(default=None, init=False)
    _terminal: set[str] = attrs.field(factory=set, init=False)
    _released: int = attrs.field(default=0, init=False)
    _done: asyncio.Future[None] | None = attrs.field(default=None, init=False)
    _engine_tasks: list[asyncio.Task[None]] = attrs.field(factory=list, init=False)
    _side_tasks: list[asyncio.Task[None]] = attrs.field(factory=list, init=False)

    def build(self) -> None:
        self.journal = RunJournal(keep_events=self.keep_events, on_terminal=self._on_terminal)
        keyer = BlockKeyer()
        self.engines = tuple(self.topology.build(keyer=keyer, journal=self.journal))
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
        self.releaser = _TimestampReleaser(self.prepared.requests, submit=self._release)
        if self.tokenizer is not None and self.tokenizer.enabled:
            self._pool = self.tokenizer.pool()

    async def main(self) -> None:
        loop = asyncio.get_running_loop()
        self._done = loop.create_future()
        for engine in self.engines:
            task = loop.create_task(engine.run(), name=f"engine[{engine.index}]")
            task.add_done_callback(self._engine_done)
            self._engine_tasks.append(task)
        self.runtime.start()
        self.releaser.start()
        if self.cutoff_ns is not None:
            self._side_tasks.append(loop.create_task(self._cutoff(self.cutoff_ns), name="cutoff"))
        self._check_done()
        await self._done
        await self._shutdown()

    # -- release path -------------------------------------------------------------------------

    def _release(self, request: Request) -> None:
        now = simclock.now_ns()
        self._released += 1
        self.journal.record(
            LifecycleEvent(
                now,
                EventKind.ARRIVED,
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
        if rid in self._terminal:
            return
        if event.kind is EventKind.REJECTED and self.runtime.status(rid) in ("held", "offered"):
            return  # the policy may still place it elsewhere
        self._terminal.add(rid)
        trace = self.journal.traces[rid]
        self.runtime.request_terminal(trace)
        self.releaser.on_terminal(rid, trace.terminal_status or "failed")
        self._check_done()

    def _check_done(self) -> None:
        if self.releaser.finished and len(self._terminal) == self._released:
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
            if rid not in self._terminal
            and rid not in held
            and self.journal.traces[rid].arrival_ns is not None
        ]
        if stuck:
            return False
        self._finish("quiescent")
        return True

    # -- shutdown -----------------------------------------------------------------------------

    async def _shutdown(self) -> None:
        self.releaser.stop()
        for task in self._side_tasks:
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
            # Engines that track their busy time expose ``busy_ns``; others report 0.
            EngineUsage(
                index=engine.index, busy_ns=getattr(engine, "busy_ns", 0), passes=engine.passes
            )
            for engine in self.engines
        )


def _run_loop(replay: _Run) -> tuple[int, int]:
    """Run ``replay.main`` on a fresh virtual loop; return (virtual end ns, events processed)."""
    loop = simclock.new_event_loop()
    try:
        replay.build()
        main = loop.create_task(replay.main(), name="replay")
        try:
            loop.run_until_complete(main)
        except simclock.DeadlockError:
            if not replay.quiesce():
                raise
            loop.run_until_complete(main)
        stats = loop.stats()
        return stats.now_ns, stats.events
    finally:
        loop.close()


def run(
    workload: Workload,
    *,
    topology: Topology,
    policy: Policy,
    seed: int = 0,
    slo: SLO | None = None,
    tokenizer: TokenizerStageLike | None = None,
    max_virtual_time_s: float | None = None,
    keep_events: bool = False,
    config: Mapping[str, object] | None = None,
) -> ReplayResult:
    """Replay ``workload`` through ``topology``'s engines under ``policy``; return the report.

    Everything runs on a fresh :class:`simclock.VirtualEventLoop`. The seed is split with
    ``numpy.random.SeedSequence(seed).spawn(3)`` into the streams named by
    :data:`SEED_STREAMS` (policy, driver, topology), so the same inputs and seed give the same
    result, byte for byte.

    Args:
        workload: the requests to replay (checked by :func:`replay.prepare`).
        topology: builds the engines (e.g. :class:`replay.Aggregated`).
        policy: places the requests (a fresh policy object per run: policies keep state).
        seed: the run seed (int >= 0).
        slo: service-level objectives for goodput.
        tokenizer: an optional frontend tokenization stage (REFERENCE-engine §7).
        max_virtual_time_s: stop releasing after this virtual time; requests in flight end
            ``incomplete`` and later ones ``never_issued``.
        keep_events: keep every lifecycle event in the journal (slower; for timelines).
        config: extra configuration to echo in the report (e.g. the CLI's resolved config).

    Returns:
        The :class:`replay.ReplayResult`.

    Raises:
        WorkloadValidationError: the workload or an option is invalid.
        ReplayFailedError: a step failed (commit, abort, policy hook, policy coroutine, engine);
            its ``result`` holds the report of the run, naming the failure, and its
            ``__cause__`` is the failure.
    """
    seed = _check_seed(seed)
    cutoff_ns: int | None = None
    if max_virtual_time_s is not None:
        if not math.isfinite(max_virtual_time_s) or max_virtual_time_s <= 0:
            raise WorkloadValidationError(
                f"max_virtual_time_s: must be finite and > 0, got {max_virtual_time_s!r}"
            )
        cutoff_ns = round(max_virtual_time_s * 1_000_000_000)
    prepared = prepare(workload, engine_block_size=topology.block_size)
    seeds = tuple(np.random.SeedSequence(seed).spawn(len(SEED_STREAMS)))
    replay = _Run(prepared, topology, policy, seeds, tokenizer, cutoff_ns, keep_events)
    wall_start = time.perf_counter()
    now_ns, events = _run_loop(replay)
    wall_s = time.perf_counter() - wall_start

    failure = replay.runtime.failure or replay.engine_failure
    echo: dict[str, Any] = {
        "seed": seed,
        "policy": policy_name(policy),
        "topology": dict(topology.describe()),
        "tokenizer": None if tokenizer is None else attrs.asdict(cast(Any, tokenizer)),
        "max_virtual_time_s": max_virtual_time_s,
        "workload": {
            "source": workload.source,
            "format": workload.format,
            "requests": len(workload.requests),
        },
    }
    if config:
        echo["config"] = dict(config)
    meta = RunMeta(
        seed=seed,
        event_counts=replay.journal.event_counts(),
        config=echo,
        virtual_duration_ms=now_ns / 1_000_000,
        wall_time_s=wall_s,
        events_processed=events,
        engines=replay.engine_usage(),
    )
    result = finalize(replay.journal, workload=workload, meta=meta, slo=slo)
    if failure is not None:
        raise ReplayFailedError(
            f"replay failed: {type(failure).__name__}: {failure}", result=result
        ) from failure
    return result
