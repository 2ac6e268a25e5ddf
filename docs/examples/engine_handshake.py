"""The engine side of the dispatch handshake, the read-only view and KV events."""

from __future__ import annotations

import asyncio

import simclock
from engines import (
    BlockKeyer,
    Engine,
    EngineConfig,
    FixedTiming,
    Journal,
    Rejection,
    Tentative,
)
from loadgen import Request

MS = 1_000_000


def request(rid: str, prompt: int, output: int, ids: list[int]) -> Request:
    return Request(id=rid, input_length=prompt, output_length=output, block_size=512, hash_ids=ids)


keyer = BlockKeyer()
engine = Engine(
    0,
    EngineConfig(num_blocks=64, context_length=4096),
    FixedTiming(prefill_ms=50, decode_ms=10),
    keyer=keyer,
    journal=Journal(),
)
engine.subscribe_kv(
    lambda e: print(f"  kv event at {e.time_ns / MS:g} ms: {e.kind} {len(e.block_keys)} keys")
)


async def main() -> None:
    runner = asyncio.get_running_loop().create_task(engine.run())
    view = engine.view

    answer = engine.offer(request("big", 5000, 10, list(range(10))))
    assert isinstance(answer, Rejection)
    print("offer big:", answer.reason, "-", answer.message)

    first = engine.offer(request("a", 1000, 4, [1, 2]))
    assert isinstance(first, Tentative)
    before = engine.snapshot()
    second = engine.offer(request("b", 1000, 4, [1, 2]))
    assert isinstance(second, Tentative)
    print("pending offers:", view.pending_offers)
    engine.abort(second, "placed elsewhere")
    print("after abort the engine is as before:", engine.snapshot() == before)
    engine.commit(first)
    print(
        "waiting:",
        view.waiting_count,
        "outstanding prefill tokens:",
        view.outstanding_prefill_tokens,
    )

    a_keys = keyer.block_keys(request("a", 1000, 4, [1, 2]), view.block_size)
    await simclock.sleep_until_ns(1 * MS, waiter="example")
    print(
        "at 1 ms: running",
        view.running_count,
        "KV blocks used",
        view.kv_blocks_used,
        "overlap",
        view.prefix_overlap(a_keys),
    )
    await simclock.sleep_until_ns(60 * MS, waiter="example")
    print("at 60 ms: overlap", view.prefix_overlap(a_keys), "blocks")
    engine.close()
    await runner
    print("done at", simclock.now_ns() / MS, "ms; KV blocks used", view.kv_blocks_used)


simclock.run(main())
