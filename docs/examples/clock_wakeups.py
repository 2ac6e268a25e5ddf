"""Validated wakeups, instant ends, and a deadlock that fails at once instead of hanging."""

from __future__ import annotations

import asyncio

import simclock
from simclock import WakeupKind

MS = 1_000_000


async def engine(index: int, log: list[str]) -> None:
    for _ in range(2):
        # Start a pass only once every arrival of this instant has landed.
        await simclock.instant_end(priority=index, waiter=f"engine-{index}")
        log.append(f"{simclock.now_ns() // MS:>3} ms  engine-{index} plans a pass")
        deadline = simclock.now_ns() + 30 * MS
        await simclock.sleep_until_ns(
            deadline, waiter=f"engine-{index}", kind=WakeupKind.ENGINE_DEADLINE
        )


async def arrivals(log: list[str]) -> None:
    for at_ms in (0, 30):
        await simclock.sleep_until_ns(at_ms * MS, waiter="arrivals")
        log.append(f"{simclock.now_ns() // MS:>3} ms  a request arrives")


async def main() -> None:
    log: list[str] = []
    await asyncio.gather(engine(1, log), engine(0, log), arrivals(log))
    print("\n".join(log))
    try:
        await simclock.sleep_until_ns(5 * MS, waiter="late policy")
    except simclock.StaleWakeupError as error:
        print(error)


simclock.run(main())


async def stuck() -> None:
    reply: asyncio.Queue[str] = asyncio.Queue()

    async def wait_for_reply() -> None:
        await reply.get()  # nobody ever answers

    await asyncio.create_task(wait_for_reply(), name="client")


try:
    simclock.run(stuck())
except simclock.DeadlockError as error:
    print(error.blocked[-1])
