"""The built-in autoscalers: :class:`HPA` (Kubernetes' Horizontal Pod Autoscaler rules on an
engine metric) and :class:`SLOPlanner` (prefill and decode pools scaled from observed TTFT and
ITL against targets, in the spirit of NVIDIA Dynamo's SLA planner).

Both use only :class:`replay.AutoscalerContext`, as an autoscaler of one's own would
(docs/reference/autoscaling.md states what each follows and what it simplifies).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from typing import Any, Literal, get_args

import attrs

from ._autoscale import AutoscalerContext, AutoscalerError

__all__ = ("AUTOSCALERS", "HPA", "HPA_METRICS", "HPAMetric", "Recommendation", "SLOPlanner")

HPAMetric = Literal["utilisation", "queue_depth", "running", "kv_usage"]
"""The engine metrics :class:`HPA` scales on (per-engine means over its window)."""

HPA_METRICS: tuple[str, ...] = get_args(HPAMetric)
"""Every :class:`HPA` metric."""

_POOLS = (None, "prefill", "decode")


def _positive(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise AutoscalerError(f"{attribute.name}: must be a finite number > 0, got {value!r}")


def _non_negative(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
    ):
        raise AutoscalerError(f"{attribute.name}: must be a finite number >= 0, got {value!r}")


def _count(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise AutoscalerError(f"{attribute.name}: must be an integer >= 0, got {value!r}")


def _metric(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value not in HPA_METRICS:
        raise AutoscalerError(f"metric: must be one of {', '.join(HPA_METRICS)}, got {value!r}")


def _pool(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value not in _POOLS:
        raise AutoscalerError(f"pool: must be prefill or decode (or none), got {value!r}")


@attrs.frozen
class Recommendation:
    """One evaluation of an autoscaler.

    Attributes:
        time_s: when, seconds.
        pool: the pool it scaled (None: aggregated engines).
        value: the observed value it compared with its target: the metric's mean
            (:class:`HPA`), the correction factor (:class:`SLOPlanner`); None if none.
        ready: the engines measured (serving).
        replicas: the engines starting or serving before the evaluation.
        desired: the replica count its rule recommends.
        target: the replica count it scaled to (after stabilisation and bounds).
    """

    time_s: float
    pool: str | None
    value: float | None
    ready: int
    replicas: int
    desired: int
    target: int


def scale_to(ctx: AutoscalerContext, target: int, *, pool: str | None) -> None:
    """Add or remove engines of ``pool`` until ``target`` are starting or active.

    Engines leave starting ones first, then active ones, the highest id first (as Kubernetes
    removes pods not yet ready, then the newest).
    """
    current = ctx.replicas(pool)
    for _ in range(target - current):
        ctx.add_engine(pool=pool)
    if target < current:
        leaving = [
            *reversed(ctx.engine_ids("starting", pool=pool)),
            *reversed(ctx.engine_ids("active", pool=pool)),
        ]
        for engine in leaving[: current - target]:
            ctx.remove(engine)


@attrs.define(eq=False)
class HPA:
    """Kubernetes' Horizontal Pod Autoscaler rules on an engine metric.

    Every ``period_s`` (first at ``period_s``), with ``ready`` the serving (active) engines
    of ``pool`` and ``value`` the mean of ``metric`` over them in the last ``window_s``:

    1. ``ratio = value / target``; within the tolerance (``|ratio - 1| <= tolerance``) the
       recommendation is the current replica count (starting + active), else
       ``desired = ceil(ready * ratio)``. No serving engine, or no value: no recommendation.
    2. Scale-down stabilisation: the target is the highest recommendation of the last
       ``stabilization_s`` (this one included); a scale-up applies at once.
    3. Bounds: the target is clamped to ``[min_replicas, max_replicas]``; engines are then
       added (each ``starting`` for the run's cold start) or removed (:func:`scale_to`).

    Attributes:
        metric: ``utilisation`` (share of time in passes), ``queue_depth`` (waiting requests
            per engine), ``running`` (running requests per engine) or ``kv_usage``.
        target: the metric's target value per engine.
        period_s: the evaluation period (Kubernetes' sync period, 15 s).
        window_s: the metric's window (default: ``period_s``).
        stabilization_s: the scale-down stabilisation window (Kubernetes' default 300 s).
        min_replicas: the fewest engines (>= 1 in Kubernetes; 0 allowed here).
        max_replicas: the most engines.
        tolerance: the ratio's dead band (Kubernetes' default 0.1).
        pool: the pool scaled in a P/D topology (``prefill`` or ``decode``); None for
            aggregated engines.
        history: every evaluation so far (:class:`Recommendation`).
    """

    metric: HPAMetric = attrs.field(default="utilisation", validator=_metric)
    target: float = attrs.field(default=0.7, validator=_positive)
    period_s: float = attrs.field(default=15.0, validator=_positive)
    window_s: float | None = attrs.field(default=None)
    stabilization_s: float = attrs.field(default=300.0, validator=_non_negative)
    min_replicas: int = attrs.field(default=1, validator=_count)
    max_replicas: int = attrs.field(default=10, validator=_count)
    tolerance: float = attrs.field(default=0.1, validator=_non_negative)
    pool: str | None = attrs.field(default=None, validator=_pool)
    name: str = attrs.field(default="hpa", kw_only=True)
    history: list[Recommendation] = attrs.field(factory=list, init=False)
    _recent: deque[tuple[int, int]] = attrs.field(factory=deque, init=False)

    def __attrs_post_init__(self) -> None:
        if self.window_s is not None:
            _positive(self, attrs.fields(HPA).window_s, self.window_s)
        if self.max_replicas < max(self.min_replicas, 1):
            raise AutoscalerError(
                f"max_replicas: must be >= min_replicas and >= 1, got {self.max_replicas} "
                f"(min_replicas {self.min_replicas})"
            )

    async def run(self, ctx: AutoscalerContext) -> None:
        """Evaluate every ``period_s`` for the whole run."""
        period_ns = round(self.period_s * 1e9)
        window_s = self.period_s if self.window_s is None else self.window_s
        stabilization_ns = round(self.stabilization_s * 1e9)
        at = period_ns
        while True:
            await ctx.sleep_until_ns(at)
            self.evaluate(ctx, window_s=window_s, stabilization_ns=stabilization_ns)
            at += period_ns

    def evaluate(self, ctx: AutoscalerContext, *, window_s: float, stabilization_ns: int) -> None:
        """One evaluation now (see the class docstring)."""
        now = ctx.now_ns
        metrics = ctx.metrics(window_s, pool=self.pool)
        replicas = ctx.replicas(self.pool)
        ready = len([m for m in metrics.engines if m.state == "active"])
        value = metrics.value(self.metric)
        if ready == 0 or value is None:
            return
        ratio = value / self.target
        desired = replicas if abs(ratio - 1.0) <= self.tolerance else math.ceil(ready * ratio)
        recent = self._recent
        recent.append((now, desired))
        while recent and recent[0][0] <= now - stabilization_ns:
            recent.popleft()
        # Kubernetes' stabilisation (no scale-up window): scale up to ``desired`` at once;
        # scale down only to the highest recommendation of the window.
        highest = max(d for _, d in recent)
        if desired > replicas:
            stabilised = desired
        elif replicas > highest:
            stabilised = highest
        else:
            stabilised = replicas
        target = min(max(stabilised, self.min_replicas), self.max_replicas)
        self.history.append(
            Recommendation(now / 1e9, self.pool, value, ready, replicas, desired, target)
        )
        if target != replicas:
            scale_to(ctx, target, pool=self.pool)


@attrs.define(eq=False)
class SLOPlanner:
    """Prefill and decode pools scaled from observed TTFT and ITL against targets, in the
    spirit of Dynamo's SLA planner.

    Every ``interval_s`` (first at ``interval_s``), from the requests that completed in the
    last ``interval_s``:

    1. The correction factors ``c_ttft = mean TTFT / ttft_ms`` and ``c_itl = mean ITL /
       itl_ms`` (Dynamo's ``actual / expected``, with the target as the expectation).
    2. The prefill pool's desired count is ``ceil(n_prefill * c_ttft)`` when ``c_ttft > 1``
       (the SLO is missed), ``n_prefill - 1`` when ``c_ttft < scale_down_below``, else
       unchanged; the decode pool likewise from ``c_itl``. In an aggregated topology the
       one pool takes the larger of the two.
    3. Each count is clamped to ``[min_replicas, max_replicas]`` and to at most
       ``max_step`` more than now; engines are added (``starting`` for the cold start) or
       removed (:func:`scale_to`).
    4. While an engine it added is still starting, it makes no decision (Dynamo blocks
       its adjustments while workers are being changed).

    No completed request in the interval: no decision.

    Attributes:
        ttft_ms: the TTFT target.
        itl_ms: the ITL target (mean inter-token latency).
        interval_s: the adjustment interval (Dynamo's ``adjustment_interval``).
        min_replicas: the fewest engines per pool.
        max_replicas: the most engines per pool.
        max_step: the most engines added to a pool at one decision.
        scale_down_below: the correction factor under which a pool loses one engine.
        history: every decision so far (:class:`Recommendation`, one per pool).
    """

    ttft_ms: float = attrs.field(default=1000.0, validator=_positive)
    itl_ms: float = attrs.field(default=50.0, validator=_positive)
    interval_s: float = attrs.field(default=60.0, validator=_positive)
    min_replicas: int = attrs.field(default=1, validator=_count)
    max_replicas: int = attrs.field(default=10, validator=_count)
    max_step: int = attrs.field(default=4, validator=_count)
    scale_down_below: float = attrs.field(default=0.5, validator=_non_negative)
    name: str = attrs.field(default="slo_planner", kw_only=True)
    history: list[Recommendation] = attrs.field(factory=list, init=False)

    def __attrs_post_init__(self) -> None:
        if self.max_replicas < max(self.min_replicas, 1):
            raise AutoscalerError(
                f"max_replicas: must be >= min_replicas and >= 1, got {self.max_replicas} "
                f"(min_replicas {self.min_replicas})"
            )
        if self.scale_down_below >= 1:
            raise AutoscalerError(f"scale_down_below: must be < 1, got {self.scale_down_below!r}")

    async def run(self, ctx: AutoscalerContext) -> None:
        """Decide every ``interval_s`` for the whole run."""
        period_ns = round(self.interval_s * 1e9)
        at = period_ns
        while True:
            await ctx.sleep_until_ns(at)
            self.decide(ctx)
            at += period_ns

    def decide(self, ctx: AutoscalerContext) -> None:
        """One decision now (see the class docstring)."""
        if ctx.engine_ids("starting"):
            return
        observed = ctx.slo(self.interval_s)
        if observed.finished == 0:
            return
        factors: dict[str, float | None] = {
            "prefill": None if observed.ttft_ms is None else observed.ttft_ms / self.ttft_ms,
            "decode": None if observed.itl_ms is None else observed.itl_ms / self.itl_ms,
        }
        pools = ctx.pools
        for pool in pools:
            if pool is None:
                known = [f for f in factors.values() if f is not None]
                factor = max(known) if known else None
            else:
                factor = factors[pool]
            replicas = ctx.replicas(pool)
            ready = len(ctx.engine_ids("active", pool=pool))
            desired = self._desired(replicas, factor)
            target = min(max(desired, self.min_replicas), self.max_replicas)
            target = min(target, replicas + self.max_step)
            self.history.append(
                Recommendation(ctx.now_s, pool, factor, ready, replicas, desired, target)
            )
            if target != replicas:
                scale_to(ctx, target, pool=pool)

    def _desired(self, replicas: int, factor: float | None) -> int:
        if factor is None:
            return replicas
        if factor > 1.0:
            return math.ceil(max(replicas, 1) * factor)
        if factor < self.scale_down_below:
            return replicas - 1
        return replicas


AUTOSCALERS: Mapping[str, type[HPA] | type[SLOPlanner]] = {
    "hpa": HPA,
    "slo_planner": SLOPlanner,
}
"""Autoscaler name -> class taking the autoscaler's keyword options."""
