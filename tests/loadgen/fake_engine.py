"""A fake engine for driver tests: each request completes after a fixed service time."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import attrs

import simclock
from loadgen import Driver, DriverReport, LoadMode, Request, Workload


def fixed_service_ms(request: Request) -> float:
    """Prefill 50 ms, then 10 ms per further output token (the spec's fixed timing)."""
    return 50.0 + 10.0 * max(0, request.output_length - 1)


@attrs.define(eq=False)
class FakeRun:
    """Runs a driver against an engine that completes each request after its service time."""

    workload: Workload
    mode: LoadMode = attrs.field(factory=LoadMode)
    service_ms: Callable[[Request], float] = fixed_service_ms
    reject: frozenset[str] = frozenset()
    quiescent: Callable[[], bool] | None = None
    released: dict[str, float] = attrs.field(factory=dict)
    completed: dict[str, float] = attrs.field(factory=dict)
    order: list[str] = attrs.field(factory=list)
    driver: Driver | None = None
    tasks: list[asyncio.Task[None]] = attrs.field(factory=list)

    def run(self, **options: object) -> DriverReport:
        return simclock.run(self._main(**options))

    async def _main(self, **options: object) -> DriverReport:
        driver = Driver(
            self.workload,
            self._submit,
            mode=self.mode,
            quiescent=self.quiescent,
            **options,  # type: ignore[arg-type]
        )
        self.driver = driver
        report = await driver.run()
        for task in self.tasks:
            task.cancel()
        return report

    def _submit(self, request: Request) -> None:
        now = simclock.now_ns() / 1e6
        self.released[request.id] = now
        self.order.append(request.id)
        task = asyncio.get_running_loop().create_task(self._serve(request))
        self.tasks.append(task)

    async def _serve(self, request: Request) -> None:
        done = round(simclock.now_ns() + self.service_ms(request) * 1e6)
        await simclock.sleep_until_ns(done, waiter="fake-engine")
        assert self.driver is not None
        status = "rejected" if request.id in self.reject else "completed"
        self.completed[request.id] = simclock.now_ns() / 1e6
        self.driver.on_terminal(request.id, status)
