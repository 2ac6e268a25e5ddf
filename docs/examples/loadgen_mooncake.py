"""Read a small Mooncake trace with a session, then release it on the virtual clock.

The engine here is a stand-in: each request completes 50 ms after it is released, plus
10 ms per output token after the first (REFERENCE-workloads §8 a).
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import loadgen
import simclock

TRACE = """\
{"session_id":"s1","timestamp":1000,"input_length":600,"output_length":3,"hash_ids":[1,2]}
{"session_id":"s1","delay":500,"input_length":900,"output_length":2,"hash_ids":[1,2]}
{"timestamp":1200,"input_length":300,"output_length":4,"hash_ids":[7]}
"""


def replay(workload: loadgen.Workload, mode: loadgen.LoadMode) -> dict[str, float]:
    """Release ``workload`` against the stand-in engine; return release times in ms."""
    released: dict[str, float] = {}
    completed: list[int] = []

    async def main() -> None:
        tasks: list[asyncio.Task[None]] = []

        async def serve(request: loadgen.Request) -> None:
            service_ms = 50 + 10 * max(0, request.output_length - 1)
            await simclock.sleep_ns(service_ms * 1_000_000, waiter="engine")
            driver.on_terminal(request.id, "completed")

        def submit(request: loadgen.Request) -> None:
            released[request.id] = simclock.now_ns() / 1e6
            tasks.append(asyncio.get_running_loop().create_task(serve(request)))

        driver = loadgen.Driver(workload, submit, mode=mode)
        report = await driver.run()
        completed.append(report.counts()["completed"])

    simclock.run(main())
    released["completed"] = completed[0]
    return released


with tempfile.TemporaryDirectory() as folder:
    path = Path(folder) / "ex.jsonl"
    path.write_text(TRACE, encoding="utf-8")
    workload = loadgen.read_trace(path)

print(workload.format_note)
for request in workload.requests:
    print(
        f"{request.id}  conversation={request.identity.conversation_id}"
        f"  turn={request.identity.turn_index}  {request.arrival}"
    )
print("timestamps     ", replay(workload, loadgen.LoadMode()))
print("speedup 2      ", replay(workload, loadgen.LoadMode(speedup=2)))
print("concurrency 1  ", replay(workload, loadgen.LoadMode(concurrency=1)))
stats = loadgen.workload_stats(workload)
print(f"prefix hit ratio {stats.prefix_hit_ratio:.2%}, span {stats.span_ms} ms")
