"""Test helper: a tiny async driver that releases requests to engines at their arrival times."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import simclock
from engines import Engine, EventKind, LifecycleEvent
from loadgen import Request

from .sim import MS


async def drive(
    engines: Sequence[Engine],
    requests: Sequence[Request],
    *,
    route: Callable[[Request], int] = lambda r: 0,
) -> None:
    """Start every engine, submit each request at ``arrival_ms`` (stable order), close, drain."""
    tasks = [asyncio.get_running_loop().create_task(e.run()) for e in engines]
    journal = engines[0].journal
    for r in sorted(requests, key=lambda r: r.arrival_ms):
        when = round(r.arrival_ms * MS)
        if when > simclock.now_ns():
            await simclock.sleep_until_ns(when, waiter="driver")
        journal.record(
            LifecycleEvent(
                when,
                EventKind.ARRIVED,
                r.id,
                None,
                (("input_length", r.input_length), ("output_length", r.output_length)),
            )
        )
        engines[route(r)].submit(r)
    for e in engines:
        e.close()
    await asyncio.gather(*tasks)


def run_engines(
    engines: Sequence[Engine],
    requests: Sequence[Request],
    *,
    route: Callable[[Request], int] = lambda r: 0,
) -> int:
    """Run :func:`drive` on a fresh virtual loop; return the final virtual time (ns)."""

    async def main() -> int:
        await drive(engines, requests, route=route)
        return simclock.now_ns()

    return simclock.run(main())
