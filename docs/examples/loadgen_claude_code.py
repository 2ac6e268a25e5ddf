"""A Claude Code session with a subagent (Weka format): edges, lineage, lanes and a snapshot.

The play is REFERENCE-workloads §8 (d): main calls at 0, 10, 20, 30, 40 s; a subagent
spawned at 12 s whose calls run at 0, 15 and 23 s on its own clock.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

import loadgen
import simclock


def call(t: float, tokens: int) -> dict[str, object]:
    return {
        "t": t,
        "type": "n",
        "model": "m",
        "in": tokens,
        "out": 2,
        "hash_ids": list(range(1, tokens // 64 + 1)),
        "api_time": 1.0,
    }


play = {
    "id": "P",
    "block_size": 64,
    "hash_id_scope": "local",
    "models": ["m"],
    "requests": [
        call(0, 128),
        call(10, 192),
        {
            "t": 12,
            "type": "subagent",
            "agent_id": "agent_001",
            "status": "completed",
            "requests": [call(0, 128), call(15, 192), call(23, 256)],
        },
        call(20, 256),
        call(30, 320),
        call(40, 384),
    ],
}

with tempfile.TemporaryDirectory() as folder:
    path = Path(folder) / "ex.json"
    path.write_text(json.dumps(play), encoding="utf-8")
    workload = loadgen.read_trace(path)

print(workload.format_note)
group = workload.subagents[0]
print(f"subagent {group.agent_id}: {group.basis} clock, parent {group.parent_conversation_id}")
for request in workload.requests:
    edges = ", ".join(
        f"{d.on} of {d.request_id} + {d.delay_ms:g} ms" for d in request.arrival.after
    )
    print(f"{request.id:20} floor {request.arrival.not_before_ms:>7g} ms  after [{edges}]")
lineage = workload.requests[2].identity.lineage
print("lineage of agent_001:", loadgen.lineage_to_json(lineage))

# One lane, a seeded snapshot (seed 42) and a warm-up; a stand-in engine serves each
# request in 50 ms and is always quiescent.
mode = loadgen.LoadMode(lanes=1, snapshots=True, snapshot_seed=42, warmup=True)
released: dict[str, float] = {}


async def main() -> loadgen.DriverReport:
    tasks: list[asyncio.Task[None]] = []

    async def serve(request: loadgen.Request) -> None:
        await simclock.sleep_ns(50_000_000, waiter="engine")
        driver.on_terminal(request.id, "completed")

    def submit(request: loadgen.Request) -> None:
        released[request.id] = simclock.now_ns() / 1e6
        tasks.append(asyncio.get_running_loop().create_task(serve(request)))

    driver = loadgen.Driver(workload, submit, mode=mode, quiescent=lambda: True)
    return await driver.run()


report = simclock.run(main())
print("history (never released):", ", ".join(report.history))
print("barrier B =", report.profile_start_ms, "ms")
for rid, at in released.items():
    if "/warmup/" not in rid:
        print(f"  {at:9.2f} ms  {rid}")
outcome = report.plays[0]
print(f"{outcome.instance_id}: {outcome.outcome}, trajectory {outcome.trajectory_ms:.2f} ms")
