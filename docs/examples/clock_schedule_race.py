"""A check-then-act race that first-in-first-out scheduling never shows, found by a seed.

Two workers open a session for the same user in a shared dict. Between the check (is there
a session?) and the act (store one) there is an await, so the other worker can slip in.
Under simclock's default order (ready callbacks first in, first out) worker-a always acts
before worker-b checks, so the bug never shows. With ``seed=N`` the loop permutes the
callbacks that are ready at the same instant; some seeds run worker-b's check first, and
both workers create a session. Replaying that seed fails the same way, every time.
"""

from __future__ import annotations

import asyncio

import simclock


async def worker(name: str, sessions: dict[str, str], created: list[str], *, warm_up: bool) -> None:
    await asyncio.sleep(1.0)  # both requests arrive at t = 1 s
    if warm_up:
        await asyncio.sleep(0)  # worker-b records a metric first (one await)
    if "alice" not in sessions:  # check ...
        await asyncio.sleep(0)  # ... an await, say an audit-log write ...
        sessions["alice"] = f"session of {name}"  # ... then act
        created.append(name)


async def open_sessions() -> list[str]:
    sessions: dict[str, str] = {}
    created: list[str] = []
    async with asyncio.TaskGroup() as group:
        group.create_task(worker("worker-a", sessions, created, warm_up=False))
        group.create_task(worker("worker-b", sessions, created, warm_up=True))
    return created


def sessions_created(seed: int | None) -> list[str]:
    """Which workers created a session, on a loop with this schedule seed (None: FIFO)."""
    return simclock.run(open_sessions(), seed=seed)


if __name__ == "__main__":
    print(f"FIFO order:   created by {sessions_created(None)}")
    failing = [seed for seed in range(20) if len(sessions_created(seed)) > 1]
    print(f"seeds 0..19:  {len(failing)} of 20 expose the race, first: seed {failing[0]}")
    for attempt in (1, 2):
        print(f"replay seed {failing[0]} ({attempt}): created by {sessions_created(failing[0])}")
