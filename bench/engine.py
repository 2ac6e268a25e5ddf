"""Benchmark: one engine under a long random load, on the virtual clock.

Run ``python bench/engine.py [num_requests] [--profile]``. Prints passes/s, tokens/s and
requests/s of process CPU time (never asserted anywhere).
"""

from __future__ import annotations

import asyncio
import cProfile
import pstats
import sys
import time

import numpy as np

import simclock
from engines import BlockKeyer, Engine, EngineConfig, FixedTiming, Journal
from loadgen import ArrivalRule, Request


def workload(n: int, seed: int = 7) -> list[Request]:
    """Poisson arrivals, prompts sharing one of 20 prefixes, random lengths."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(40.0, n))
    out = []
    for i in range(n):
        prompt = int(rng.integers(200, 4000))
        blocks = -(-prompt // 512)
        group = int(rng.integers(0, 20))
        shared = int(rng.integers(0, blocks + 1))
        ids = [group * 1000 + k for k in range(shared)] + [
            10**6 + i * 100 + k for k in range(blocks - shared)
        ]
        out.append(
            Request(
                id=f"r{i}",
                input_length=prompt,
                output_length=int(rng.integers(50, 400)),
                block_size=512,
                hash_ids=ids,
                arrival=ArrivalRule(not_before_ms=float(arrivals[i])),
            )
        )
    return out


async def drive(engine: Engine, requests: list[Request]) -> None:
    """Release every request at its arrival time, then drain."""
    task = asyncio.get_running_loop().create_task(engine.run())
    for r in requests:
        when = round(r.arrival_ms * 1_000_000)
        if when > simclock.now_ns():
            await simclock.sleep_until_ns(when, waiter="driver")
        engine.submit(r)
    engine.close()
    await task


def main() -> None:
    """Run the benchmark and print the figures."""
    n = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 2000
    requests = workload(n)
    journal = Journal(keep_events=False, token_events=False)
    engine = Engine(
        0,
        EngineConfig(num_blocks=6000),
        FixedTiming(prefill_ms=50, decode_ms=10),
        keyer=BlockKeyer(),
        journal=journal,
    )
    start = time.perf_counter()
    cpu_start = time.process_time()
    if "--profile" in sys.argv:
        profiler = cProfile.Profile()
        profiler.enable()
        simclock.run(drive(engine, requests))
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(20)
    else:
        simclock.run(drive(engine, requests))
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu_start
    tokens = sum(len(t.token_times_ns) for t in journal.traces.values())
    print(
        f"{n} requests, {engine.passes} passes, {tokens} tokens in {wall:.2f} s "
        f"({cpu:.2f} s CPU): {engine.passes / cpu:,.0f} passes/s, {tokens / cpu:,.0f} tokens/s, "
        f"{n / cpu:,.0f} requests/s of CPU time"
    )


if __name__ == "__main__":
    main()
