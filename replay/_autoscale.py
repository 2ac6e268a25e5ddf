"""Autoscalers: coroutines that watch a run's cluster on its virtual clock and change it.

An :class:`Autoscaler` is an object with an ``async run(ctx)`` method, run as a task of the
replay (like a policy, on the same clock), with an :class:`AutoscalerContext`:

1. Metrics over sliding windows. The context samples every engine that serves (``active``
   or ``draining``) every ``sample_period_s`` of virtual time (1 s by default), at the
   instants ``0, p, 2p, ...``, while the autoscaler sleeps through :meth:`~AutoscalerContext.
   sleep_until_ns` (or ``sleep_s``); a sample due at the instant the autoscaler wakes is
   taken before it runs. :meth:`~AutoscalerContext.metrics` folds the samples of the window
   ``(now - window_s, now]`` per engine and per pool (:class:`EngineMetrics`,
   :class:`PoolMetrics`). Samples older than ``history_s`` are dropped.
2. The pending queue: the requests released but not placed (held by the policy),
   :meth:`~AutoscalerContext.pending`.
3. SLO attainment so far: every finished request is noted at its terminal instant;
   :meth:`~AutoscalerContext.slo` folds those of a window into TTFT, ITL and attainment
   against the run's SLO (:class:`SLOWindow`).
4. Actions: :meth:`~AutoscalerContext.add_engine`, :meth:`~AutoscalerContext.drain` and
   :meth:`~AutoscalerContext.remove` are the cluster's (:class:`replay.Cluster`); an added
   engine is ``starting`` for the run's cold start (``cold_start_s``) before it serves.

Nothing here reads the wall clock or iterates a set: the same run gives the same decisions.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol, runtime_checkable

import attrs

import simclock
from engines import Engine, LifecycleEvent

from ._cluster import Cluster, ClusterState, EngineSpec
from ._exceptions import ReplayError
from ._metrics import SLO

__all__ = (
    "DEFAULT_HISTORY_S",
    "DEFAULT_SAMPLE_PERIOD_S",
    "Autoscaler",
    "AutoscalerContext",
    "AutoscalerError",
    "EngineMetrics",
    "PoolMetrics",
    "SLOWindow",
    "autoscaler_name",
    "autoscaler_task",
)

DEFAULT_SAMPLE_PERIOD_S = 1.0
"""How often the context samples the engines, in virtual seconds."""
DEFAULT_HISTORY_S = 3600.0
"""How far back samples and finished requests are kept, in virtual seconds."""

_NS_PER_S = 1_000_000_000
_NS_PER_MS = 1_000_000
_SERVING: tuple[ClusterState, ...] = ("active", "draining")


class AutoscalerError(ReplayError, ValueError):
    """An autoscaler is misconfigured (a bad option) or asked for something impossible."""


@runtime_checkable
class Autoscaler(Protocol):
    """A coroutine that scales a run's cluster (see the module docstring).

    ``run`` is awaited as a task of the replay from virtual time 0; it sleeps with
    ``ctx.sleep_until_ns`` or ``ctx.sleep_s`` (so the context samples the engines meanwhile),
    reads ``ctx.metrics``, ``ctx.pending`` and ``ctx.slo``, and calls ``ctx.add_engine``,
    ``ctx.drain`` and ``ctx.remove``. It is cancelled when the replay ends; an exception in
    it fails the replay. An optional ``name`` attribute names it in ``config.json``.
    """

    async def run(self, ctx: AutoscalerContext) -> None:
        """Scale the cluster for the whole run."""
        ...


def autoscaler_name(autoscaler: object) -> str:
    """Its ``name`` attribute when it is a non-empty string, else its class name."""
    name = getattr(autoscaler, "name", None)
    return name if isinstance(name, str) and name else type(autoscaler).__name__


@attrs.frozen
class EngineMetrics:
    """One engine's figures over a window (only the samples taken while it served).

    Attributes:
        engine: its id.
        pool: ``"prefill"`` or ``"decode"`` in a P/D topology; None for aggregated engines.
        state: its state now.
        samples: how many samples the window holds.
        utilisation: the share of the window's served time spent in passes (from its busy
            time at the window's first and last samples); None with fewer than two samples.
        queue_depth: mean waiting requests over the samples.
        running: mean running requests over the samples.
        kv_usage: mean share of its KV blocks held by requests over the samples.
    """

    engine: int
    pool: str | None
    state: ClusterState
    samples: int
    utilisation: float | None
    queue_depth: float
    running: float
    kv_usage: float


@attrs.frozen
class PoolMetrics:
    """A pool's figures over a window: its serving engines' figures and their means.

    Attributes:
        pool: the pool (None: every engine of an aggregated topology).
        window_s: the window, seconds.
        engines: each engine sampled in the window, in id order.
        utilisation: mean utilisation over the engines that have one (None if none).
        queue_depth: mean of the engines' mean waiting requests (0 without engines).
        running: mean of the engines' mean running requests.
        kv_usage: mean of the engines' mean KV usage.
    """

    pool: str | None
    window_s: float
    engines: tuple[EngineMetrics, ...]
    utilisation: float | None
    queue_depth: float
    running: float
    kv_usage: float

    def value(self, metric: str) -> float | None:
        """The figure named ``metric`` (``utilisation``, ``queue_depth``, ``running`` or
        ``kv_usage``)."""
        value: float | None = getattr(self, metric)
        return value


@attrs.frozen
class SLOWindow:
    """The requests that finished (completed) in a window, against the run's SLO.

    Attributes:
        window_s: the window, seconds.
        finished: how many completed in it.
        ttft_ms: their mean time to first token (None if none).
        itl_ms: their mean inter-token latency, token-weighted: every gap of every request
            with two tokens or more counts once (None if none has two tokens).
        attainment: the share meeting every bound of the run's SLO (None without an SLO or
            without finished requests).
    """

    window_s: float
    finished: int
    ttft_ms: float | None
    itl_ms: float | None
    attainment: float | None


@attrs.frozen
class _Sample:
    t_ns: int
    waiting: int
    running: int
    kv_usage: float
    busy_ns: int


@attrs.frozen
class _Finished:
    t_ns: int
    ttft_ns: int
    gaps_ns: int  # last token - first token
    gaps: int  # tokens - 1
    good: bool | None


def _busy_until_now(engine: Engine, now_ns: int) -> int:
    """The engine's pass time up to ``now_ns`` (its busy time counts a pass in flight
    whole)."""
    busy = engine.busy_ns
    in_flight = engine.view.pass_in_flight
    if in_flight is not None and in_flight.end_ns > now_ns:
        busy -= in_flight.end_ns - max(in_flight.start_ns, now_ns)
    return busy


class _Runtime(Protocol):
    def held_request_ids(self) -> list[str]: ...


@attrs.define(eq=False)
class AutoscalerContext:
    """What an autoscaler sees and does (see the module docstring).

    Args:
        cluster: the run's cluster.
        runtime: the run's runtime (for the requests its policy holds).
        slo: the run's SLO, or None.
        sample_period_ns: how often the engines are sampled.
        history_ns: how far back samples and finished requests are kept.
    """

    cluster: Cluster
    _runtime: _Runtime
    slo_target: SLO | None = attrs.field(default=None, kw_only=True)
    sample_period_ns: int = attrs.field(default=_NS_PER_S, kw_only=True)
    history_ns: int = attrs.field(default=round(DEFAULT_HISTORY_S * _NS_PER_S), kw_only=True)
    _samples: dict[int, deque[_Sample]] = attrs.field(factory=dict, init=False)
    _finished: deque[_Finished] = attrs.field(factory=deque, init=False)
    _next_sample_ns: int = attrs.field(default=0, init=False)

    # -- time ----------------------------------------------------------------------------

    @property
    def now_ns(self) -> int:
        """The virtual time, ns."""
        return simclock.now_ns()

    @property
    def now_s(self) -> float:
        """The virtual time, seconds."""
        return simclock.now_ns() / _NS_PER_S

    @property
    def cold_start_s(self) -> float:
        """How long an added engine is ``starting`` before it serves, seconds."""
        return self.cluster.cold_start_ns / _NS_PER_S

    async def sleep_until_ns(self, when_ns: int) -> None:
        """Sleep until ``when_ns``, sampling the engines at every sample instant on the way
        (and at ``when_ns`` itself when it is one)."""
        while self._next_sample_ns <= when_ns:
            if self._next_sample_ns > simclock.now_ns():
                await simclock.sleep_until_ns(self._next_sample_ns, waiter="autoscaler")
            self._sample()
        if when_ns > simclock.now_ns():
            await simclock.sleep_until_ns(when_ns, waiter="autoscaler")

    async def sleep_s(self, delay_s: float) -> None:
        """Sleep ``delay_s`` virtual seconds (see :meth:`sleep_until_ns`)."""
        await self.sleep_until_ns(simclock.now_ns() + round(delay_s * _NS_PER_S))

    # -- the cluster ---------------------------------------------------------------------

    @property
    def pools(self) -> tuple[str | None, ...]:
        """The pools engines can be added to: ``("prefill", "decode")`` in a P/D topology,
        ``(None,)`` otherwise."""
        pools = {self.cluster.interval(i).pool for i in self.cluster.ids()}
        return ("prefill", "decode") if pools & {"prefill", "decode"} else (None,)

    def engine_ids(self, *states: ClusterState, pool: str | None = None) -> tuple[int, ...]:
        """The ids of the engines in any of ``states`` (every state when none is given),
        of ``pool`` in a P/D topology (every engine when None), in id order."""
        return tuple(
            i
            for i in self.cluster.ids(*states)
            if pool is None or self.cluster.interval(i).pool == pool
        )

    def replicas(self, pool: str | None = None) -> int:
        """Engines that are starting or active (the ones not leaving), of ``pool``."""
        return len(self.engine_ids("starting", "active", pool=pool))

    def add_engine(self, spec: EngineSpec | None = None, *, pool: str | None = None) -> int:
        """:meth:`replay.Cluster.add_engine`: add an engine now; it serves after the cold
        start. Returns its id."""
        return self.cluster.add_engine(spec, pool=pool)

    def drain(self, engine: int) -> None:
        """:meth:`replay.Cluster.drain`."""
        self.cluster.drain(engine)

    def remove(self, engine: int) -> None:
        """:meth:`replay.Cluster.remove`: now if idle (or starting), else once idle."""
        self.cluster.remove(engine)

    def pending(self) -> tuple[str, ...]:
        """The requests released and not placed (held by the policy), in its order."""
        return tuple(self._runtime.held_request_ids())

    # -- metrics -------------------------------------------------------------------------

    def metrics(self, window_s: float, *, pool: str | None = None) -> PoolMetrics:
        """The serving engines' figures over ``(now - window_s, now]`` (of ``pool`` in a
        P/D topology; of every engine when None), per engine and as means.

        Raises:
            AutoscalerError: ``window_s`` is not a finite number > 0.
        """
        window_ns = _window_ns(window_s)
        now = simclock.now_ns()
        if self._next_sample_ns <= now:
            self._sample()  # a sample instant the autoscaler did not sleep through
        start = now - window_ns
        out: list[EngineMetrics] = []
        for engine in self.engine_ids(*_SERVING, pool=pool):
            samples = [s for s in self._samples.get(engine, ()) if s.t_ns > start]
            if not samples:
                continue
            n = len(samples)
            span = samples[-1].t_ns - samples[0].t_ns
            utilisation = None if span <= 0 else (samples[-1].busy_ns - samples[0].busy_ns) / span
            out.append(
                EngineMetrics(
                    engine=engine,
                    pool=self.cluster.interval(engine).pool,
                    state=self.cluster.state(engine),
                    samples=n,
                    utilisation=utilisation,
                    queue_depth=sum(s.waiting for s in samples) / n,
                    running=sum(s.running for s in samples) / n,
                    kv_usage=sum(s.kv_usage for s in samples) / n,
                )
            )
        utilisations = [m.utilisation for m in out if m.utilisation is not None]
        return PoolMetrics(
            pool=pool,
            window_s=window_s,
            engines=tuple(out),
            utilisation=sum(utilisations) / len(utilisations) if utilisations else None,
            queue_depth=_mean([m.queue_depth for m in out]),
            running=_mean([m.running for m in out]),
            kv_usage=_mean([m.kv_usage for m in out]),
        )

    def slo(self, window_s: float) -> SLOWindow:
        """The requests completed in ``(now - window_s, now]``, against the run's SLO.

        Raises:
            AutoscalerError: ``window_s`` is not a finite number > 0.
        """
        start = simclock.now_ns() - _window_ns(window_s)
        found = [f for f in self._finished if f.t_ns > start]
        gaps = sum(f.gaps for f in found)
        goods = [f.good for f in found if f.good is not None]
        return SLOWindow(
            window_s=window_s,
            finished=len(found),
            ttft_ms=(sum(f.ttft_ns for f in found) / len(found) / _NS_PER_MS) if found else None,
            itl_ms=(sum(f.gaps_ns for f in found) / gaps / _NS_PER_MS) if gaps else None,
            attainment=(sum(goods) / len(goods)) if goods else None,
        )

    # -- recording -----------------------------------------------------------------------

    def _sample(self) -> None:
        """Sample every serving engine now, and schedule the next sample instant."""
        now = simclock.now_ns()
        horizon = now - self.history_ns
        for engine_id in self.cluster.ids(*_SERVING):
            engine = self.cluster.engine(engine_id)
            view = engine.view
            total = view.kv_blocks_total
            samples = self._samples.setdefault(engine_id, deque())
            samples.append(
                _Sample(
                    now,
                    view.waiting_count,
                    view.running_count,
                    view.kv_blocks_used / total if total else 0.0,
                    _busy_until_now(engine, now),
                )
            )
            while samples and samples[0].t_ns <= horizon:
                samples.popleft()
        period = self.sample_period_ns
        self._next_sample_ns = (now // period + 1) * period

    def on_terminal(self, event: LifecycleEvent, traces: Mapping[str, object]) -> None:
        """Note a request that completed (its TTFT and token gaps) at its terminal instant."""
        trace = traces.get(event.request_id)
        status = getattr(trace, "terminal_status", None)
        arrival = getattr(trace, "arrival_ns", None)
        times = getattr(trace, "token_times_ns", None)
        if status != "completed" or arrival is None or not times:
            return
        n = len(times)
        first, last = times[0], times[-1]
        good = None
        if self.slo_target is not None:
            tpot = (last - first) / (n - 1) / _NS_PER_MS if n >= 2 else None
            good = self.slo_target.met(
                ttft_ms=(first - arrival) / _NS_PER_MS,
                tpot_ms=tpot,
                e2e_ms=(last - arrival) / _NS_PER_MS,
            )
        finished = self._finished
        finished.append(_Finished(event.time_ns, first - arrival, last - first, n - 1, good))
        horizon = event.time_ns - self.history_ns
        while finished and finished[0].t_ns <= horizon:
            finished.popleft()


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _window_ns(window_s: float) -> int:
    if (
        isinstance(window_s, bool)
        or not isinstance(window_s, int | float)
        or not math.isfinite(window_s)
        or window_s <= 0
    ):
        raise AutoscalerError(f"window_s: must be a finite number > 0, got {window_s!r}")
    return round(window_s * _NS_PER_S)


class _Journal(Protocol):
    on_terminal: Callable[[LifecycleEvent], None] | None

    @property
    def traces(self) -> Mapping[str, object]: ...


def autoscaler_task(
    autoscaler: Autoscaler,
    *,
    runtime: _Runtime,
    journal: _Journal,
    slo: SLO | None,
    sample_period_s: float = DEFAULT_SAMPLE_PERIOD_S,
) -> Callable[[Cluster], Awaitable[None]]:
    """The cluster task that runs ``autoscaler`` with its context (the ``autoscaler`` run
    option): it also notes every completed request, after the run's own terminal path."""

    async def task(cluster: Cluster) -> None:
        ctx = AutoscalerContext(
            cluster,
            runtime,
            slo_target=slo,
            sample_period_ns=round(sample_period_s * _NS_PER_S),
        )
        before = journal.on_terminal
        traces = journal.traces

        def on_terminal(event: LifecycleEvent) -> None:
            if before is not None:
                before(event)
            ctx.on_terminal(event, traces)

        journal.on_terminal = on_terminal
        await autoscaler.run(ctx)

    return task
