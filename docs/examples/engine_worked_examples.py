"""REFERENCE-engine §9 worked examples (a), (b), (c) and (e) on one engine.

Fixed timing 50/10 ms, E = 64, trace block T = 512.
"""

from __future__ import annotations

import asyncio

import simclock
from engines import (
    BlockKeyer,
    Engine,
    EngineConfig,
    EventKind,
    FixedTiming,
    Journal,
    LifecycleEvent,
)
from loadgen import ArrivalRule, Request

MS = 1_000_000


def request(rid: str, prompt: int, output: int, ids: list[int], at_ms: float = 0.0) -> Request:
    return Request(
        id=rid,
        input_length=prompt,
        output_length=output,
        block_size=512,
        hash_ids=ids,
        arrival=ArrivalRule(not_before_ms=at_ms),
    )


async def release(engine: Engine, requests: list[Request]) -> None:
    """Submit each request at its arrival time, then let the engine drain."""
    task = asyncio.get_running_loop().create_task(engine.run())
    for r in requests:
        when = round(r.arrival_ms * MS)
        if when > simclock.now_ns():
            await simclock.sleep_until_ns(when, waiter="driver")
        engine.journal.record(LifecycleEvent(when, EventKind.ARRIVED, r.id))
        engine.submit(r)
    engine.close()
    await task


def run(requests: list[Request], **config: int) -> Journal:
    journal = Journal()
    engine = Engine(
        0,
        EngineConfig(num_blocks=config.pop("num_blocks", 10_000), **config),
        FixedTiming(prefill_ms=50, decode_ms=10),
        keyer=BlockKeyer(),
        journal=journal,
    )
    simclock.run(release(engine, requests))
    return journal


def show(journal: Journal, rid: str) -> str:
    t = journal.traces[rid]
    assert t.arrival_ns is not None and t.first_token_ns is not None
    assert t.last_token_ns is not None
    ttft = (t.first_token_ns - t.arrival_ns) / MS
    e2e = (t.last_token_ns - t.arrival_ns) / MS
    return f"{rid}: TTFT {ttft:g} ms, E2E {e2e:g} ms, reused {t.reused_input_tokens}"


# (a) an isolated request
j = run([request("a", 1000, 10, [1, 2])])
print("(a)", show(j, "a"))

# (b) the same with a budget of 512 tokens: the prompt takes two passes
j = run([request("a", 1000, 10, [1, 2])], max_num_batched_tokens=512)
print("(b)", show(j, "a"))

# (c) prefix reuse: B arrives at 1 ms and hits A's 15 full blocks
j = run([request("a", 1000, 10, [1, 2]), request("b", 1000, 10, [1, 2], 1)])
print("(c)", show(j, "a"), "|", show(j, "b"))

# (e) preemption with 20 blocks: B is preempted at 500 and readmitted at 2090
j = run([request("a", 600, 200, [1, 2]), request("b", 600, 200, [3, 4], 1)], num_blocks=20)
b = j.traces["b"]
print("(e)", show(j, "a"), "|", show(j, "b"))
print(
    "    B admissions:",
    [(x.at_ns / MS, x.reused_tokens) for x in b.admissions],
    "preemptions:",
    b.num_preemptions,
)
