"""Build a workload by hand, inspect it, release it on the virtual clock, and draw from it.

The engine here is a stand-in: each request completes 50 ms after it is released, plus
10 ms per output token after the first. The loadgen reference (docs/reference/loadgen.md)
shows what this prints.
"""

from __future__ import annotations

import asyncio

import numpy as np

import loadgen
import simclock

# One conversation of two turns and two standalone requests; T = 4 tokens per content id.
first = loadgen.Request(
    "s/0",
    input_length=10,
    output_length=3,
    block_size=4,
    hash_ids=[0, 1, 2],
    identity=loadgen.Identity(conversation_id="s", turn_index=0),
)
second = loadgen.Request(
    "s/1",
    input_length=16,
    output_length=2,
    block_size=4,
    hash_ids=[0, 1, 3, 4],
    arrival=loadgen.ArrivalRule(
        not_before_ms=None, after=(loadgen.Dep("s/0", on="completion", delay_ms=200.0),)
    ),
    identity=loadgen.Identity(conversation_id="s", turn_index=1),
)
alone = loadgen.Request("x", 8, 1, 4, [5, 6], arrival=loadgen.ArrivalRule(not_before_ms=100.0))
late = loadgen.Request("y", 8, 1, 4, [7, 8], arrival=loadgen.ArrivalRule(not_before_ms=900.0))
workload = loadgen.Workload((first, second, alone, late), source="hand", format="hand")

stats = loadgen.workload_stats(workload)
print(
    f"stats: {stats.requests} requests, {stats.sessions} sessions, span {stats.span_ms} ms, "
    f"prefix hit ratio {stats.prefix_hit_ratio:.2%}"
)
print("nominal releases:", loadgen.nominal_release_ms(workload.requests).tolist())


def release(mode: loadgen.LoadMode) -> loadgen.DriverReport:
    """Release ``workload`` against the stand-in engine; return the driver's accounting."""

    async def main() -> loadgen.DriverReport:
        tasks: list[asyncio.Task[None]] = []

        async def serve(request: loadgen.Request) -> None:
            service_ms = 50 + 10 * max(0, request.output_length - 1)
            await simclock.sleep_ns(service_ms * 1_000_000, waiter="engine")
            driver.on_terminal(request.id, "completed")

        def submit(request: loadgen.Request) -> None:
            tasks.append(asyncio.get_running_loop().create_task(serve(request)))

        driver = loadgen.Driver(workload, submit, mode=mode)
        return await driver.run()

    return simclock.run(main())


report = release(loadgen.LoadMode(max_virtual_time_s=0.5))
for outcome in report.requests:
    print(
        f"  {outcome.request_id:4} {outcome.status:13} released {outcome.released_ns} ns"
        f"  terminal {outcome.terminal_ns} ns"
    )
print("counts:", report.counts())

rng = np.random.default_rng(7)
print("constant(4) gaps:", loadgen.parse_arrivals("constant(4)").gaps_ms(rng, 3).tolist())
print(
    "uniform(1, 6) draws:",
    [loadgen.parse_distribution("uniform(1, 6)", option="input").draw(rng) for _ in range(5)],
)
spec = loadgen.parse_synthetic("count=3 arrivals=constant(2) input=100 output=uniform(1,4)")
synthetic = loadgen.generate_synthetic(spec, seed=42)
print(
    "synthetic:",
    [(r.id, r.arrival_ms, r.input_length, r.output_length) for r in synthetic.requests],
)
try:
    loadgen.parse_distribution("exponential(3)", option="input")
except loadgen.WorkloadConfigError as error:
    print("WorkloadConfigError:", error)

lineage = loadgen.derive_lineage({"main": [], "tool": ["main"], "both": ["main", "tool"]})
for conversation, found in lineage.lineages.items():
    print(f"lineage of {conversation}: {loadgen.lineage_to_json(found)}")
print(f"snapshot u of seed 42, lane 0: {loadgen.snapshot_u(42, 0):.6f}")
