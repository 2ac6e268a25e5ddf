"""Statistics of any workload on its nominal schedule (REFERENCE-workloads §7)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt

from ._exceptions import WorkloadConfigError
from ._request import Request
from ._workload import Tolerated, Workload

__all__ = ("LengthStats", "WorkloadStats", "nominal_release_ms", "workload_stats")

# A 64-bit polynomial hash of id prefixes (deterministic, wrapping uint64 arithmetic).
_BASE = np.uint64(0x9E3779B97F4A7C15)
_BASE_INVERSE = np.uint64(pow(0x9E3779B97F4A7C15, -1, 2**64))


@attrs.frozen
class LengthStats:
    """Percentiles (numpy's default, linear), mean and max of a length."""

    p50: float
    p90: float
    p99: float
    mean: float
    max: int

    @classmethod
    def of(cls, values: npt.NDArray[np.int64]) -> LengthStats:
        """Summarise ``values`` (all zeros when empty)."""
        if values.size == 0:
            return cls(0.0, 0.0, 0.0, 0.0, 0)
        p50, p90, p99 = (float(v) for v in np.percentile(values, [50, 90, 99]))
        return cls(p50, p90, p99, float(values.mean()), int(values.max()))


@attrs.frozen
class WorkloadStats:
    """What ``simclock inspect`` prints for a workload (§7).

    Attributes:
        requests: number of requests.
        sessions: sessions (a standalone request counts as a one-turn session).
        conversations: distinct conversation ids.
        plays: agentic plays.
        subagents: Weka subagent groups.
        subagents_relative: groups whose clock resolved relative.
        subagents_absolute: groups whose clock resolved absolute.
        async_launched: groups with status ``async_launched``.
        span_ms: latest minus earliest nominal release.
        rate_per_s: requests per second of span (0 when the span is 0).
        inter_arrival_cv: population std / mean of the gaps between sorted releases.
        input: prompt lengths.
        output: output lengths.
        prefix_hit_ratio: unbounded-cache prefix hit tokens / prompt tokens.
        requests_with_hit: share of requests with at least one block hit.
        tolerated: what the reader accepted but did not use.
    """

    requests: int
    sessions: int
    conversations: int
    plays: int
    subagents: int
    subagents_relative: int
    subagents_absolute: int
    async_launched: int
    span_ms: float
    rate_per_s: float
    inter_arrival_cv: float
    input: LengthStats
    output: LengthStats
    prefix_hit_ratio: float
    requests_with_hit: float
    tolerated: Tolerated

    def to_dict(self) -> dict[str, Any]:
        """Return the statistics as plain JSON-ready values."""
        return attrs.asdict(self)


def nominal_release_ms(requests: Sequence[Request]) -> npt.NDArray[np.float64]:
    """Release time of every request when each completes the instant it is released.

    Every play starts at origin 0 and speedup is 1 (§7). Dependencies may point
    forward in the sequence; they are resolved in dependency order.

    Raises:
        WorkloadConfigError: a dependency names a request that is not in ``requests``,
            or the dependencies form a cycle.
    """
    index = {r.id: i for i, r in enumerate(requests)}
    release = np.zeros(len(requests), dtype=np.float64)
    pending = np.zeros(len(requests), dtype=np.int64)
    waiters: list[list[int]] = [[] for _ in requests]
    for i, request in enumerate(requests):
        for dep in request.arrival.after:
            j = index.get(dep.request_id)
            if j is None:
                raise WorkloadConfigError(
                    f"requests: {request.id!r} depends on unknown request {dep.request_id!r}"
                )
            waiters[j].append(i)
            pending[i] += 1
    ready = [i for i in range(len(requests)) if pending[i] == 0]
    done = 0
    while ready:
        i = ready.pop()
        done += 1
        request = requests[i]
        when = request.arrival.not_before_ms
        value = -math.inf if when is None else when
        for dep in request.arrival.after:
            value = max(value, release[index[dep.request_id]] + dep.delay_ms)
        release[i] = 0.0 if value == -math.inf else value
        for w in waiters[i]:
            pending[w] -= 1
            if pending[w] == 0:
                ready.append(w)
    if done != len(requests):
        raise WorkloadConfigError("requests: the dependencies form a cycle")
    return release


def _prefix_hits(
    requests: Sequence[Request], order: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Return per request the hit blocks and hit tokens of an unbounded prefix cache.

    Content ids are run-unique across scopes, so one table of id prefixes serves every
    scope. A prefix is named by a 64-bit polynomial hash; a request's hit ``k`` is the
    largest ``k`` whose prefix an earlier request had, found by bisection (the table of
    prefixes is prefix-closed).
    """
    longest = max((r.hash_ids.size for r in requests), default=0)
    powers = np.full(max(longest, 1), _BASE, dtype=np.uint64)
    powers[0] = 1
    powers = np.cumprod(powers)  # B**j, wrapping
    inverse = np.full(max(longest, 1), _BASE_INVERSE, dtype=np.uint64)
    inverse[0] = 1
    inverse = np.cumprod(inverse)  # B**-j modulo 2**64
    seen: set[int] = set()
    blocks = np.zeros(len(requests), dtype=np.int64)
    tokens = np.zeros(len(requests), dtype=np.int64)
    for i in order.tolist():
        request = requests[i]
        ids = request.hash_ids
        n = int(ids.size)
        if n == 0:
            continue
        u = ids.astype(np.uint64) + np.uint64(1)
        prefix = np.cumsum(u * inverse[:n]) * powers[:n]
        lo, hi = 0, n  # invariant: the first lo prefixes were seen; the hit k is in [lo, hi]
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if int(prefix[mid - 1]) in seen:
                lo = mid
            else:
                hi = mid - 1
        blocks[i] = lo
        tokens[i] = min(lo * request.block_size, request.input_length)
        if lo < n:
            seen.update(prefix[lo:].tolist())
    return blocks, tokens


def workload_stats(workload: Workload) -> WorkloadStats:
    """Compute the §7 statistics of a workload on its nominal schedule.

    Args:
        workload: any workload (a reader's or a generator's).

    Returns:
        Counts, span, rate, inter-arrival CV, length percentiles and the unbounded-cache
        prefix hit ratio (in nominal order, ties by file order).
    """
    requests = workload.requests
    release = nominal_release_ms(requests)
    order = np.lexsort((np.arange(len(requests)), release))
    sorted_release = release[order]
    span = float(sorted_release[-1] - sorted_release[0]) if len(requests) else 0.0
    gaps = np.diff(sorted_release)
    mean_gap = float(gaps.mean()) if gaps.size else 0.0
    cv = float(gaps.std()) / mean_gap if mean_gap > 0 else 0.0
    inputs = np.fromiter((r.input_length for r in requests), dtype=np.int64, count=len(requests))
    outputs = np.fromiter((r.output_length for r in requests), dtype=np.int64, count=len(requests))
    _, hit_tokens = _prefix_hits(requests, order)
    total = int(inputs.sum())
    conversations = {r.identity.conversation_id for r in requests} - {None}
    standalone = sum(1 for r in requests if r.identity.conversation_id is None)
    groups = workload.subagents
    return WorkloadStats(
        requests=len(requests),
        sessions=len(conversations) + standalone,
        conversations=len(conversations),
        plays=len(workload.plays),
        subagents=len(groups),
        subagents_relative=sum(1 for g in groups if g.basis == "relative"),
        subagents_absolute=sum(1 for g in groups if g.basis == "absolute"),
        async_launched=sum(1 for g in groups if g.status == "async_launched"),
        span_ms=span,
        rate_per_s=len(requests) / (span / 1000.0) if span > 0 else 0.0,
        inter_arrival_cv=cv,
        input=LengthStats.of(inputs),
        output=LengthStats.of(outputs),
        prefix_hit_ratio=int(hit_tokens.sum()) / total if total else 0.0,
        requests_with_hit=float((hit_tokens > 0).mean()) if len(requests) else 0.0,
        tolerated=workload.tolerated,
    )
