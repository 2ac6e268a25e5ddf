"""Test helpers: requests, and a synchronous driver for :class:`engines._core.EngineCore`.

The driver follows the same-instant phase order of REFERENCE-engine §3.1 with explicit
times: (1) commit passes ending now, (2) arrivals in order, (3) start a pass on every idle
engine with work, in index order.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

from engines import BlockKeyer, EngineConfig, EventKind, Journal, LifecycleEvent, TimingModel
from engines._core import EngineCore, Pass
from loadgen import ArrivalRule, Request

MS = 1_000_000


def req(
    rid: str,
    prompt: int,
    output: int,
    *,
    hash_ids: Sequence[int] | None = None,
    arrival_ms: float = 0.0,
    trace_block: int = 512,
) -> Request:
    """A request whose content ids default to ids unique to ``rid``."""
    if hash_ids is None:
        base = sum(ord(c) * 131**i for i, c in enumerate(rid)) * 1000
        hash_ids = [base + i for i in range(math.ceil(prompt / trace_block))]
    return Request(
        id=rid,
        input_length=prompt,
        output_length=output,
        block_size=trace_block,
        hash_ids=hash_ids,
        arrival=ArrivalRule(not_before_ms=arrival_ms),
    )


def core(
    config: EngineConfig,
    timing: TimingModel,
    *,
    index: int = 0,
    keyer: BlockKeyer | None = None,
    journal: Journal | None = None,
) -> EngineCore:
    """A fresh engine core."""
    return EngineCore(index, config, timing, keyer or BlockKeyer(), journal or Journal())


def arrive(c: EngineCore, request: Request, now_ns: int) -> bool:
    """Engine arrival: reject (recorded) or enqueue (QUEUED recorded); True if accepted."""
    refused = c.rejection(request)
    if refused is not None:
        c.journal.record(
            LifecycleEvent(
                now_ns, EventKind.REJECTED, request.id, c.index, (("reason", refused[0]),)
            )
        )
        return False
    s = c.new_seq(request)
    c.enqueue(s)
    c.journal.record(LifecycleEvent(now_ns, EventKind.QUEUED, request.id, c.index))
    return True


def simulate(
    c: EngineCore,
    requests: Sequence[Request],
    *,
    check: bool = False,
    until_ns: int | None = None,
) -> int:
    """Run one engine over ``requests`` (arrival times from ``arrival_ms``) until drained.

    Records ARRIVED for each request. Returns the final virtual time in ns.
    """
    arrivals = sorted(
        ((round(r.arrival_ms * MS), i, r) for i, r in enumerate(requests)), key=lambda x: x[:2]
    )
    heap = list(arrivals)
    heapq.heapify(heap)
    current: Pass | None = None
    now = 0
    while heap or current is not None or c.has_work():
        candidates = []
        if heap:
            candidates.append(heap[0][0])
        if current is not None:
            candidates.append(current.end_ns)
        if not candidates:
            raise AssertionError("engine has work but nothing can change its state")
        now = min(candidates)
        if until_ns is not None and now > until_ns:
            break
        if current is not None and current.end_ns == now:
            c.commit(current)
            current = None
            if check:
                c.kv.check()
        while heap and heap[0][0] == now:
            _, _, r = heapq.heappop(heap)
            c.journal.record(
                LifecycleEvent(
                    now,
                    EventKind.ARRIVED,
                    r.id,
                    None,
                    (("input_length", r.input_length), ("output_length", r.output_length)),
                )
            )
            arrive(c, r, now)
        if current is None and c.has_work():
            if c.reservations:
                c.process_reservations(now)
            current = c.schedule(now)
            if check:
                c.kv.check()
            if current is None and not heap:
                raise AssertionError("engine has work but nothing can change its state")
    return now


def token_ms(c: EngineCore, rid: str) -> list[float]:
    """The token times of ``rid`` in ms."""
    return [t / MS for t in c.journal.traces[rid].token_times_ns]
