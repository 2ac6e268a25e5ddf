"""Prefill and decode roles (REFERENCE-engine §6, example (d)), wired by hand.

A prefill-role engine finishes a request at the end of its prompt and holds its KV blocks;
a decode-role engine reserves blocks, waits for the transfer, and activates the request with
its prompt KV resident. The transfer here is 1024 tokens at 262,144 bytes per token over
50 GB/s (5.3687 ms).
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
    Tentative,
)
from loadgen import Request

MS = 1_000_000
KV_BYTES_PER_TOKEN = 2 * 64 * 8 * 128 * 2
BANDWIDTH_BYTES_PER_S = 50e9

keyer, journal = BlockKeyer(), Journal()
timing = FixedTiming(prefill_ms=50, decode_ms=10)
prefill = Engine(
    0, EngineConfig(num_blocks=1000, role="prefill"), timing, keyer=keyer, journal=journal
)
decode = Engine(
    1, EngineConfig(num_blocks=1000, role="decode"), timing, keyer=keyer, journal=journal
)
requests = {
    "a": Request(id="a", input_length=1000, output_length=10, block_size=512, hash_ids=[1, 2])
}
handoffs: list[asyncio.Task[None]] = []


async def hand_off(rid: str) -> None:
    tentative = decode.offer(requests[rid])
    assert isinstance(tentative, Tentative)
    decode.commit(tentative)
    reservation = await decode.reserved(rid)
    tokens = reservation.missing_blocks * reservation.block_size
    transfer_ns = round(tokens * KV_BYTES_PER_TOKEN / BANDWIDTH_BYTES_PER_S * 1e9)
    await simclock.sleep_until_ns(reservation.at_ns + transfer_ns, waiter="transfer")
    prefill.release_held(rid)
    decode.activate(rid, transfer_tokens=tokens, transfer_ms=transfer_ns / MS)


def on_event(event: LifecycleEvent) -> None:
    if event.kind is EventKind.PREFILL_DONE:
        handoffs.append(asyncio.get_running_loop().create_task(hand_off(event.request_id)))


journal.subscribe(on_event)


async def main() -> None:
    loop = asyncio.get_running_loop()
    runners = [loop.create_task(prefill.run()), loop.create_task(decode.run())]
    prefill.submit(requests["a"])
    while not handoffs:
        await simclock.sleep_ns(MS, waiter="main")
    await asyncio.gather(*handoffs)
    prefill.close()
    decode.close()
    await asyncio.gather(*runners)


simclock.run(main())
t = journal.traces["a"]
assert t.prefill_done_ns is not None and t.destination_reserved_ns is not None
assert t.transfer_done_ns is not None and t.last_token_ns is not None
assert t.first_token_ns is not None
print(f"prefill on engine {t.prefill_worker}, done at {t.prefill_done_ns / MS:g} ms")
print(
    f"decode on engine {t.decode_worker}: reserved at {t.destination_reserved_ns / MS:g} ms, "
    f"{t.transfer_tokens} tokens in {t.transfer_ms:.4f} ms"
)
print(f"activated at {t.transfer_done_ns / MS:.4f} ms")
print(f"TTFT {t.first_token_ns / MS:.4f} ms, E2E {t.last_token_ns / MS:.4f} ms")
print(
    f"tokens: {len(t.token_times_ns)}; KV blocks used: {prefill.view.kv_blocks_used}, "
    f"{decode.view.kv_blocks_used}"
)
