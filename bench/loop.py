"""Benchmark the virtual-time event loop against plain asyncio, a heapq floor and SimPy.

Three workloads, each run on every runner in one process invocation:

- ``timers``: 1,000 tasks each do 200 seeded random sleeps (1 µs .. 1 s, whole µs);
- ``ping-pong``: two tasks pass 200,000 messages through two queues, 1 ms per hop;
- ``fan-in``: 10,000 tasks each sleep once (seeded, 1 µs .. 1 s) then feed one consumer.

Runners:

- ``simclock``: the workload as plain asyncio code (``asyncio.sleep``, ``asyncio.Queue``) on
  :class:`simclock.VirtualEventLoop`;
- ``simclock-ns``: the same with :func:`simclock.sleep_ns` instead of ``asyncio.sleep``;
- ``asyncio``: stock asyncio with every sleep made zero-length: asyncio's own dispatch cost,
  with no timers at all (the virtual time is summed by hand);
- ``heapq``: a minimal heapq + generator event loop, the pure-Python floor;
- ``simpy``: SimPy, when it is installed.

Every runner must reach the same final virtual time (checked). The table shows events per
second (one event = one sleep for ``timers``, one message for ``ping-pong`` and ``fan-in``),
the ratio to asyncio and to the heapq floor, as the median of ``--repeat`` runs.

Usage::

    python bench/loop.py [--repeat 3] [--scale 1.0] [--profile simclock:timers]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import cProfile
import functools
import heapq
import pstats
import statistics
import sys
import time
from collections.abc import Callable, Coroutine, Generator
from typing import Any

import numpy as np

import simclock

NS = 1_000_000_000
SEED = 20260101

Result = tuple[int, int]  # (events, final virtual time in ns)


# --------------------------------------------------------------------------- workloads


def timer_delays(scale: float) -> list[list[int]]:
    tasks = max(1, int(1000 * scale))
    rng = np.random.default_rng(SEED)
    table = rng.integers(1, 1_000_001, size=(tasks, 200)) * 1000
    return [[int(d) for d in row] for row in table]


def fanin_delays(scale: float) -> list[int]:
    tasks = max(1, int(10_000 * scale))
    rng = np.random.default_rng(SEED + 1)
    return [int(d) * 1000 for d in rng.integers(1, 1_000_001, size=tasks)]


def pingpong_messages(scale: float) -> int:
    return max(2, int(200_000 * scale))


HOP_NS = 1_000_000


# --------------------------------------------------------------------------- asyncio code


async def timers_async(delays: list[list[int]], zero: bool, ns_api: bool) -> Result:
    finals: list[int] = []

    async def worker(row: list[int]) -> None:
        total = 0
        for d in row:
            total += d
            if zero:
                await asyncio.sleep(0)
            elif ns_api:
                await simclock.sleep_ns(d, waiter="worker")
            else:
                await asyncio.sleep(d / NS)
        finals.append(total)

    await asyncio.gather(*(worker(row) for row in delays))
    final = max(finals) if zero else simclock.now_ns()
    return sum(len(r) for r in delays), final


async def pingpong_async(messages: int, zero: bool, ns_api: bool) -> Result:
    to_b: asyncio.Queue[int] = asyncio.Queue()
    to_a: asyncio.Queue[int] = asyncio.Queue()

    async def hop() -> None:
        if zero:
            await asyncio.sleep(0)
        elif ns_api:
            await simclock.sleep_ns(HOP_NS, waiter="hop")
        else:
            await asyncio.sleep(HOP_NS / NS)

    async def player(inbox: asyncio.Queue[int], outbox: asyncio.Queue[int], serve: bool) -> None:
        if serve:
            await hop()
            outbox.put_nowait(1)
        while True:
            n = await inbox.get()
            if n >= messages:
                return
            await hop()
            outbox.put_nowait(n + 1)
            if n + 1 >= messages:
                return

    await asyncio.gather(player(to_a, to_b, True), player(to_b, to_a, False))
    final = messages * HOP_NS if zero else simclock.now_ns()
    return messages, final


async def fanin_async(delays: list[int], zero: bool, ns_api: bool) -> Result:
    queue: asyncio.Queue[int] = asyncio.Queue()

    async def producer(d: int) -> None:
        if zero:
            await asyncio.sleep(0)
        elif ns_api:
            await simclock.sleep_ns(d, waiter="producer")
        else:
            await asyncio.sleep(d / NS)
        queue.put_nowait(d)

    tasks = [asyncio.create_task(producer(d)) for d in delays]
    latest = 0
    for _ in delays:
        latest = max(latest, await queue.get())
    await asyncio.gather(*tasks)
    final = latest if zero else simclock.now_ns()
    return len(delays), final


# --------------------------------------------------------------------------- heapq floor


class FloorLoop:
    """The smallest useful discrete-event loop: generators yield commands to a heapq."""

    def __init__(self) -> None:
        self.now = 0
        self.seq = 0
        self.heap: list[tuple[int, int, Generator[Any, Any, None]]] = []
        self.ready: collections.deque[tuple[Generator[Any, Any, None], Any]] = collections.deque()

    def spawn(self, gen: Generator[Any, Any, None]) -> None:
        self.ready.append((gen, None))

    def run(self) -> None:
        ready = self.ready
        heap = self.heap
        popleft = ready.popleft
        append = ready.append
        while True:
            while ready:
                gen, value = popleft()
                try:
                    cmd = gen.send(value)
                except StopIteration:
                    continue
                op = cmd[0]
                if op == "sleep":
                    self.seq += 1
                    heapq.heappush(heap, (self.now + cmd[1], self.seq, gen))
                elif op == "get":
                    q = cmd[1]
                    if q.items:
                        append((gen, q.items.popleft()))
                    else:
                        q.getters.append(gen)
                else:  # put
                    q = cmd[1]
                    if q.getters:
                        append((q.getters.popleft(), cmd[2]))
                    else:
                        q.items.append(cmd[2])
                    append((gen, None))
            if not heap:
                return
            when, _, gen = heapq.heappop(heap)
            self.now = when
            append((gen, None))


class FloorQueue:
    def __init__(self) -> None:
        self.items: collections.deque[Any] = collections.deque()
        self.getters: collections.deque[Generator[Any, Any, None]] = collections.deque()


def timers_floor(delays: list[list[int]]) -> Result:
    loop = FloorLoop()

    def worker(row: list[int]) -> Generator[Any, Any, None]:
        for d in row:
            yield ("sleep", d)

    for row in delays:
        loop.spawn(worker(row))
    loop.run()
    return sum(len(r) for r in delays), loop.now


def pingpong_floor(messages: int) -> Result:
    loop = FloorLoop()
    to_a, to_b = FloorQueue(), FloorQueue()

    def player(inbox: FloorQueue, outbox: FloorQueue, serve: bool) -> Generator[Any, Any, None]:
        if serve:
            yield ("sleep", HOP_NS)
            yield ("put", outbox, 1)
        while True:
            n = yield ("get", inbox)
            if n >= messages:
                return
            yield ("sleep", HOP_NS)
            yield ("put", outbox, n + 1)
            if n + 1 >= messages:
                return

    loop.spawn(player(to_a, to_b, True))
    loop.spawn(player(to_b, to_a, False))
    loop.run()
    return messages, loop.now


def fanin_floor(delays: list[int]) -> Result:
    loop = FloorLoop()
    queue = FloorQueue()

    def producer(d: int) -> Generator[Any, Any, None]:
        yield ("sleep", d)
        yield ("put", queue, d)

    def consumer() -> Generator[Any, Any, None]:
        for _ in delays:
            yield ("get", queue)

    for d in delays:
        loop.spawn(producer(d))
    loop.spawn(consumer())
    loop.run()
    return len(delays), loop.now


# --------------------------------------------------------------------------- SimPy


def simpy_runners() -> dict[str, Callable[[Any], Result]] | None:
    try:
        import simpy
    except ImportError:
        return None

    def timers(delays: list[list[int]]) -> Result:
        env = simpy.Environment()

        def worker(row: list[int]) -> Generator[Any, Any, None]:
            for d in row:
                yield env.timeout(d)

        for row in delays:
            env.process(worker(row))
        env.run()
        return sum(len(r) for r in delays), int(env.now)

    def pingpong(messages: int) -> Result:
        env = simpy.Environment()
        to_a, to_b = simpy.Store(env), simpy.Store(env)

        def player(inbox: Any, outbox: Any, serve: bool) -> Generator[Any, Any, None]:
            if serve:
                yield env.timeout(HOP_NS)
                yield outbox.put(1)
            while True:
                n = yield inbox.get()
                if n >= messages:
                    return
                yield env.timeout(HOP_NS)
                yield outbox.put(n + 1)
                if n + 1 >= messages:
                    return

        env.process(player(to_a, to_b, True))
        env.process(player(to_b, to_a, False))
        env.run()
        return messages, int(env.now)

    def fanin(delays: list[int]) -> Result:
        env = simpy.Environment()
        store = simpy.Store(env)

        def producer(d: int) -> Generator[Any, Any, None]:
            yield env.timeout(d)
            yield store.put(d)

        def consumer() -> Generator[Any, Any, None]:
            for _ in delays:
                yield store.get()

        for d in delays:
            env.process(producer(d))
        env.process(consumer())
        env.run()
        return len(delays), int(env.now)

    return {"timers": timers, "ping-pong": pingpong, "fan-in": fanin}


# --------------------------------------------------------------------------- driver


def run_async(
    runner: Callable[[Any], Result],
    make: Callable[[bool, bool], Coroutine[Any, Any, Result]],
    zero: bool,
    ns_api: bool,
) -> Result:
    return runner(make(zero, ns_api))


def build(scale: float) -> dict[str, dict[str, Callable[[], Result]]]:
    tdelays = timer_delays(scale)
    fdelays = fanin_delays(scale)
    messages = pingpong_messages(scale)
    asyncs: dict[str, Callable[[bool, bool], Coroutine[Any, Any, Result]]] = {
        "timers": lambda zero, ns: timers_async(tdelays, zero, ns),
        "ping-pong": lambda zero, ns: pingpong_async(messages, zero, ns),
        "fan-in": lambda zero, ns: fanin_async(fdelays, zero, ns),
    }
    floors = {
        "timers": lambda: timers_floor(tdelays),
        "ping-pong": lambda: pingpong_floor(messages),
        "fan-in": lambda: fanin_floor(fdelays),
    }
    args = {"timers": tdelays, "ping-pong": messages, "fan-in": fdelays}
    sp = simpy_runners()
    table: dict[str, dict[str, Callable[[], Result]]] = {}
    for name, make in asyncs.items():
        runners: dict[str, Callable[[], Result]] = {
            "simclock": functools.partial(run_async, simclock.run, make, False, False),
            "simclock-ns": functools.partial(run_async, simclock.run, make, False, True),
            "asyncio": functools.partial(run_async, asyncio.run, make, True, False),
            "heapq": floors[name],
        }
        if sp is not None:
            runners["simpy"] = functools.partial(sp[name], args[name])
        table[name] = runners
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per cell (median shown)")
    parser.add_argument("--scale", type=float, default=1.0, help="workload size factor")
    parser.add_argument(
        "--profile", metavar="RUNNER:WORKLOAD", help="profile one cell with cProfile and exit"
    )
    options = parser.parse_args(argv)
    table = build(options.scale)
    if options.profile:
        runner, workload = options.profile.split(":")
        profiler = cProfile.Profile()
        profiler.runcall(table[workload][runner])
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
        return 0

    print(
        f"{'workload':<10} {'runner':<12} {'events/s':>12} {'vs asyncio':>11} "
        f"{'vs heapq':>9} {'final virtual time':>20}"
    )
    ok = True
    for workload, runners in table.items():
        rates: dict[str, float] = {}
        finals: dict[str, int] = {}
        for name, fn in runners.items():
            walls = []
            for _ in range(options.repeat):
                start = time.process_time()
                events, final = fn()
                walls.append(time.process_time() - start)
            rates[name] = events / statistics.median(walls)
            finals[name] = final
        for name in runners:
            print(
                f"{workload:<10} {name:<12} {rates[name]:>12,.0f} "
                f"{rates[name] / rates['asyncio']:>11.2f} {rates[name] / rates['heapq']:>9.2f} "
                f"{finals[name] / NS:>18.6f} s"
            )
        if len(set(finals.values())) != 1:
            ok = False
            print(f"  final virtual times differ: {finals}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
