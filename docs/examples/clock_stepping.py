"""Drive a virtual loop from outside: step, run to an instant, inspect, resume."""

from __future__ import annotations

import simclock
import simclock.testing
from simclock import WakeupKind

MS = 1_000_000


async def engine() -> None:
    for _ in range(3):
        await simclock.sleep_ns(10 * MS, waiter="engine-0", kind=WakeupKind.ENGINE_DEADLINE)


async def policy() -> None:
    await simclock.sleep_until_ns(15 * MS, waiter="policy", kind=WakeupKind.POLICY_WAKEUP)


with simclock.testing.virtual_loop() as loop:
    engine_task = loop.create_task(engine(), name="engine")
    loop.create_task(policy(), name="policy")

    print(loop.step())  # one callback: the engine's first step
    loop.run_until_ns(12 * MS)  # everything before 12 ms, then the clock reads 12 ms
    snapshot = loop.snapshot()
    print(f"now {snapshot.now_ns // MS} ms, {snapshot.ready} ready")
    for timer in snapshot.pending_timers:
        print(f"  {timer.when_ns // MS} ms  {timer.waiter} ({timer.kind.value})")
    for task in snapshot.tasks:
        print(f"  task {task.name}: {task.waits_on}")

    loop.run_until(lambda: engine_task.done())  # resume until a condition holds
    print(loop.stats())
