"""A first run on the virtual clock: an hour of sleeps, a queue, and the time it reads."""

from __future__ import annotations

import asyncio

import simclock


async def producer(queue: asyncio.Queue[str]) -> None:
    for name in ("breakfast", "lunch", "dinner"):
        await asyncio.sleep(5 * 3600)  # five hours of virtual time
        await queue.put(name)
    await queue.put("done")


async def main() -> None:
    queue: asyncio.Queue[str] = asyncio.Queue()
    task = asyncio.create_task(producer(queue))
    while (item := await queue.get()) != "done":
        print(f"{simclock.now_ns() / 1e9 / 3600:>4.1f} h  {item}")
    await task
    await simclock.sleep_ns(1, waiter="main")
    print(f"final virtual time: {simclock.now_ns()} ns")


simclock.run(main())
