"""A queueing router written as an async policy.

Each engine gets at most ``limit`` requests in flight; the rest wait, in arrival order, in the
policy's own queue. A request is placed as soon as an engine has room, which the policy learns
from its ``on_finished`` hook. A request that an engine refuses is tried on the next engine, and
rejected by the policy if no engine takes it.
"""

from __future__ import annotations

import asyncio
from collections import deque

from engines import EngineConfig, FixedTiming, RequestTrace
from loadgen import ArrivalRule, Request, Workload
from policies import BasePolicy, Placement, PolicyContext, RequestStream
from replay import Aggregated, run


class CappedQueue(BasePolicy):
    """At most ``limit`` requests in flight per engine; the others wait in a FIFO queue."""

    name = "capped_queue"

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.queue: deque[Request] = deque()
        self.in_flight: dict[int, set[str]] = {}
        self.room = asyncio.Event()

    # -- hooks: synchronous notifications ---------------------------------------------------
    def on_committed(self, placement: Placement) -> None:
        self.in_flight.setdefault(placement.engine, set()).add(placement.request_id)

    def on_finished(self, trace: RequestTrace) -> None:
        for ids in self.in_flight.values():
            ids.discard(trace.request_id)
        self.room.set()  # wake the placing loop

    # -- the policy -------------------------------------------------------------------------
    async def run(self, requests: RequestStream, ctx: PolicyContext) -> None:
        ctx.spawn(self.place_when_room(ctx), name="placer")
        async for request in requests:
            self.queue.append(request)
            self.room.set()

    def free_engines(self, ctx: PolicyContext) -> list[int]:
        return [
            view.index
            for view in ctx.engines
            if len(self.in_flight.get(view.index, ())) < self.limit
        ]

    async def place_when_room(self, ctx: PolicyContext) -> None:
        while True:
            await self.room.wait()
            self.room.clear()
            while self.queue and self.free_engines(ctx):
                request = self.queue.popleft()
                await self.place(request, ctx)

    async def place(self, request: Request, ctx: PolicyContext) -> None:
        reasons = []
        for engine in self.free_engines(ctx):
            placement = await ctx.dispatch(request, engine)
            if placement.committed:
                return
            reasons.append(f"engine {engine}: {placement.reason}")
        ctx.reject(request, reason="; ".join(reasons))


def main() -> None:
    prompts = [512, 512, 512, 512, 512, 4096]
    requests = tuple(
        Request(
            id=f"r{i}",
            input_length=length,
            output_length=5,
            block_size=64,
            hash_ids=range(100 * i, 100 * i + length // 64),
            arrival=ArrivalRule(not_before_ms=float(i)),
        )
        for i, length in enumerate(prompts)
    )
    workload = Workload(requests=requests, source="example", format="python")
    topology = Aggregated(
        workers=2,
        engine=EngineConfig(num_blocks=64, context_length=2048),
        timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
    )
    result = run(workload, topology=topology, policy=CappedQueue(limit=2), seed=0)
    for r in result.requests:
        if r.status == "completed":
            print(
                f"{r.request_id}: arrived {r.arrival_ms:5.1f} ms, engine {r.engine} from "
                f"{r.engine_arrival_ms:5.1f} ms, done {r.terminal_ms:5.1f} ms"
            )
        else:
            print(f"{r.request_id}: {r.status} ({r.rejection_reason})")
    print(
        result.summary.status_counts["completed"],
        "completed,",
        result.summary.status_counts["rejected"],
        "rejected",
    )


if __name__ == "__main__":
    main()
