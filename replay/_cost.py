"""What a run's fleet cost: engine-seconds, GPU-seconds, requests and output tokens per
engine-hour, and the engine count over time.

An engine is paid for from the instant it joined the cluster (0 for the topology's engines;
an added engine's cold start included: a loading GPU is paid for) to the instant it was
removed, or the end of the run (``virtual_duration_ms``). Its GPUs are its timing model's
tensor-parallel degree (roofline's ``tensor_parallel``; 1 for the other timing models).

- ``engine_seconds``: the sum over engines of the time each was paid for;
- ``gpu_seconds``: the same, each engine's time times its GPUs;
- ``requests_per_engine_hour``: completed requests of the measured cohort per engine-hour
  (``completed / (engine_seconds / 3600)``); ``output_tokens_per_engine_hour`` likewise with
  their output tokens; ``*_per_gpu_hour`` the same per GPU-hour;
- ``engine_count``: when the cluster changed, a step series: one :class:`EngineCount` at 0
  and at every instant the count of an engine state changed (last change of an instant
  wins), each holding from its instant to the next.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from ._report import EngineUsage

__all__ = ("CostSummary", "EngineCount", "cost_summary")

_NS_PER_S = 1_000_000_000
_NS_PER_MS = 1_000_000
_S_PER_HOUR = 3600.0


@attrs.frozen
class EngineCount:
    """The cluster's engines by state from one instant on.

    Attributes:
        at_ms: the instant.
        engines: engines paid for (starting, active or draining).
        starting: engines loading (cold start).
        active: engines accepting placements.
        draining: engines finishing what they have before leaving.
    """

    at_ms: float
    engines: int
    starting: int
    active: int
    draining: int


@attrs.frozen
class CostSummary:
    """The run's fleet cost (see the module docstring).

    Attributes:
        engine_seconds: engine time paid for, seconds.
        gpu_seconds: GPU time paid for, seconds.
        requests_per_engine_hour: completed (measured) requests per engine-hour.
        output_tokens_per_engine_hour: their output tokens per engine-hour.
        requests_per_gpu_hour: completed (measured) requests per GPU-hour.
        output_tokens_per_gpu_hour: their output tokens per GPU-hour.
        engine_count: the engine count over time; empty when the cluster never changed.
    """

    engine_seconds: float
    gpu_seconds: float
    requests_per_engine_hour: float | None
    output_tokens_per_engine_hour: float | None
    requests_per_gpu_hour: float | None
    output_tokens_per_gpu_hour: float | None
    engine_count: tuple[EngineCount, ...] = ()

    def as_dict(self) -> dict[str, object]:
        """JSON-compatible values; ``engine_count`` only when the cluster changed."""
        out: dict[str, object] = {
            "engine_seconds": self.engine_seconds,
            "gpu_seconds": self.gpu_seconds,
            "requests_per_engine_hour": self.requests_per_engine_hour,
            "output_tokens_per_engine_hour": self.output_tokens_per_engine_hour,
            "requests_per_gpu_hour": self.requests_per_gpu_hour,
            "output_tokens_per_gpu_hour": self.output_tokens_per_gpu_hour,
        }
        if self.engine_count:
            out["engine_count"] = [attrs.asdict(c) for c in self.engine_count]
        return out


def _per_hour(amount: int, seconds: float) -> float | None:
    return None if seconds <= 0 else amount / (seconds / _S_PER_HOUR)


def cost_summary(
    usage: Sequence[EngineUsage], *, end_ns: int, completed: int, output_tokens: int
) -> CostSummary:
    """The cost of a run whose engines measured ``usage`` and which ended at ``end_ns``."""
    engine_ns = gpu_ns = 0
    for u in usage:
        joined, removed = (0, None) if u.served is None else u.served
        paid = max(0, (end_ns if removed is None else removed) - joined)
        engine_ns += paid
        gpu_ns += paid * u.gpus
    engine_s = engine_ns / _NS_PER_S
    gpu_s = gpu_ns / _NS_PER_S
    return CostSummary(
        engine_seconds=engine_s,
        gpu_seconds=gpu_s,
        requests_per_engine_hour=_per_hour(completed, engine_s),
        output_tokens_per_engine_hour=_per_hour(output_tokens, engine_s),
        requests_per_gpu_hour=_per_hour(completed, gpu_s),
        output_tokens_per_gpu_hour=_per_hour(output_tokens, gpu_s),
        engine_count=engine_count(usage),
    )


_STATES = ("starting", "active", "draining")


def engine_count(usage: Sequence[EngineUsage]) -> tuple[EngineCount, ...]:
    """The step series of engine states, from each engine's state changes."""
    changes: list[tuple[int, int, str | None]] = []  # (instant, engine, state from then)
    for u in usage:
        if not u.states:
            continue
        changes.extend((t, u.index, state) for t, state in u.states)
    if not changes:
        return ()
    changes.sort(key=lambda c: (c[0], c[1]))
    current: dict[int, str | None] = {}
    out: list[EngineCount] = []
    for t, engine, state in changes:
        current[engine] = state
        counts = {s: 0 for s in _STATES}
        for s in current.values():
            if s in counts:
                counts[s] += 1
        point = EngineCount(
            at_ms=t / _NS_PER_MS,
            engines=sum(counts.values()),
            starting=counts["starting"],
            active=counts["active"],
            draining=counts["draining"],
        )
        if out and out[-1].at_ms == point.at_ms:
            out[-1] = point
        elif not out or attrs.evolve(out[-1], at_ms=point.at_ms) != point:
            out.append(point)
    return tuple(out)
