"""test_sessions.py: explore same-instant schedules to find an order-dependent bug."""

from __future__ import annotations

import asyncio

import pytest


async def worker(name: str, sessions: dict[str, str], created: list[str], *, warm_up: bool) -> None:
    await asyncio.sleep(1.0)  # both requests arrive at t = 1 s
    if warm_up:
        await asyncio.sleep(0)  # worker-b records a metric first (one await)
    if "alice" not in sessions:  # check ...
        await asyncio.sleep(0)  # ... an await, say an audit-log write ...
        sessions["alice"] = f"session of {name}"  # ... then act
        created.append(name)


@pytest.mark.simclock(explore=5)
@pytest.mark.asyncio
async def test_one_session_per_user() -> None:
    sessions: dict[str, str] = {}
    created: list[str] = []
    async with asyncio.TaskGroup() as group:
        group.create_task(worker("worker-a", sessions, created, warm_up=False))
        group.create_task(worker("worker-b", sessions, created, warm_up=True))
    assert created == ["worker-a"]
