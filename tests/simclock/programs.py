"""Random programs of sleeps, queues, events and instant ends, and their event journals.

Used by the property tests, in this process and in subprocesses (``python -m
tests.simclock.programs SEED COUNT`` prints the journals of ``COUNT`` programs drawn from
``SEED`` as JSON).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

import simclock

Op = tuple[str, int]
Program = list[list[Op]]
Journal = list[tuple[int, str, int, str]]

OP_NAMES = ("sleep_ns", "asyncio_sleep", "put", "get", "set", "wait", "instant_end")


def random_program(rng: np.random.Generator) -> Program:
    """A program: per task, a list of ``(op, argument)`` pairs."""
    tasks = int(rng.integers(1, 6))
    return [
        [
            (OP_NAMES[int(rng.integers(len(OP_NAMES)))], int(rng.integers(0, 6)))
            for _ in range(int(rng.integers(1, 9)))
        ]
        for _ in range(tasks)
    ]


def make_main(program: Program, journal: Journal) -> Callable[[], Any]:
    """The program as a coroutine function that records every finished op in ``journal``."""

    async def main() -> None:
        queues = [asyncio.Queue[int]() for _ in range(2)]
        events = [asyncio.Event() for _ in range(2)]

        async def run_task(name: str, ops: list[Op]) -> None:
            for index, (op, arg) in enumerate(ops):
                result = "ok"
                if op == "sleep_ns":
                    await simclock.sleep_ns(arg * 1000, waiter=name)
                elif op == "asyncio_sleep":
                    await asyncio.sleep(arg * 0.001)
                elif op == "put":
                    queues[arg % 2].put_nowait(index)
                elif op == "get":
                    try:
                        result = str(await asyncio.wait_for(queues[arg % 2].get(), 0.004))
                    except TimeoutError:
                        result = "timeout"
                elif op == "set":
                    events[arg % 2].set()
                elif op == "wait":
                    try:
                        await asyncio.wait_for(events[arg % 2].wait(), 0.003)
                    except TimeoutError:
                        result = "timeout"
                else:
                    await simclock.instant_end(priority=arg, waiter=name)
                journal.append((simclock.now_ns(), name, index, result))

        async with asyncio.TaskGroup() as group:
            for i, ops in enumerate(program):
                group.create_task(run_task(f"t{i}", ops), name=f"t{i}")

    return main


def run_program(program: Program) -> Journal:
    """Run a program to completion with :func:`simclock.run`; return its journal."""
    journal: Journal = []
    simclock.run(make_main(program, journal)())
    return journal


def step_program(program: Program) -> tuple[Journal, list[tuple[int, int | None]]]:
    """Run a program one :meth:`~simclock.VirtualEventLoop.step` at a time.

    Returns:
        The journal, and per step the time after it and the earliest pending timer before it
        when nothing was ready (``None`` otherwise).
    """
    journal: Journal = []
    trace: list[tuple[int, int | None]] = []
    loop = simclock.new_event_loop()
    try:
        task = loop.create_task(make_main(program, journal)(), name="main")
        while not task.done():
            snapshot = loop.snapshot()
            idle = snapshot.ready == 0 and not snapshot.instant_end_waiters
            earliest = snapshot.pending_timers[0].when_ns if snapshot.pending_timers else None
            loop.step()
            trace.append((loop.time_ns(), earliest if idle else None))
        task.result()
    finally:
        loop.close()
    return journal, trace


def journals(seed: int, count: int) -> list[Journal]:
    rng = np.random.default_rng(seed)
    return [run_program(random_program(rng)) for _ in range(count)]


if __name__ == "__main__":
    print(json.dumps(journals(int(sys.argv[1]), int(sys.argv[2]))))
